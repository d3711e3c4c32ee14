"""Generated history for issue 38's tests: 30 runs over 30 commits, an hour apart, each a
training record whose median step time is the series' value; Gaussian noise of 3%, and a
15% step at run STEP_AT (1-based) when asked."""

from __future__ import annotations

import hashlib
import json

import numpy as np

from records import make_record

STEP_AT = 18  # the first run (1-based) 15% slower


def values(seed: int, step: bool, n: int = 30, noise: float = 0.03) -> list[float]:
    rng = np.random.default_rng(seed)
    out = 0.5 * (1 + rng.normal(0, noise, n))
    if step:
        out[STEP_AT - 1 :] *= 1.15
    return [float(v) for v in out]


def commit(i: int) -> str:
    return hashlib.sha1(f"commit {i}".encode()).hexdigest()


def run_records(series: list[float], **kwargs) -> list[dict]:
    """One training record per value (its three measured steps all that long: the run's
    median step time is the value), run i at commit i, an hour apart."""
    out = []
    for i, value in enumerate(series):
        record = make_record([value] * 3, **kwargs)
        record["provenance"]["commit"] = commit(i)
        record["provenance"]["finished_at"] = f"2026-11-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00"
        out.append(record)
    return out


def store(directory, records):
    directory.mkdir(parents=True, exist_ok=True)
    for record in records:
        (directory / f"{record['run_id']}.json").write_text(json.dumps(record))
    return directory
