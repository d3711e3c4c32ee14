"""A sweep's points as records: the worker measures every point of a sweep in one run (one
server, one warm-up); the runner writes one record per point, each with its own run key
(so a finished sweep resumes as done), the point's value among the record's matrix-like
cell (so reports tell the points apart as a factor), and the sweep's one id."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any


def point_key(key: str, index: int) -> str:
    return hashlib.sha256(f"{key}|sweep point {index}".encode()).hexdigest()[:20]


def record_keys(run, key: str) -> list[str]:
    """The run keys a serve job writes: one per sweep point, else its own."""
    sweep = run.scenario.serve.sweep
    return [point_key(key, i) for i in range(len(sweep.values))] if sweep else [key]


def split(run, key: str, outcome: dict[str, Any]) -> list[tuple[Any, str, dict[str, Any]]]:
    """(run, key, outcome) per record: one per sweep point (a failed worker's failure,
    or a point not run, is each point's failure), else the job's own."""
    sweep_spec = run.scenario.serve.sweep
    if sweep_spec is None:
        return [(run, key, outcome)]
    facts = outcome.get("facts")
    sweep = (facts or {}).get("sweep")
    out = []
    for i, value in enumerate(sweep_spec.values):
        cell = {**run.cell, f"serve.load.{sweep_spec.axis}": value}
        point_run = dataclasses.replace(run, cell=cell)
        about = {
            "axis": sweep_spec.axis,
            "value": value,
            "index": i,
            "of": len(sweep_spec.values),
            "id": sweep["id"] if sweep else None,
        }
        if sweep is None:
            out.append((point_run, point_key(key, i), {**outcome, "sweep": about}))
            continue
        point = sweep["points"][i]
        if "not_run" in point:
            out.append(
                (
                    point_run,
                    point_key(key, i),
                    {"failure": {"kind": "not_run", "reason": point["not_run"]}, "sweep": about},
                )
            )
            continue
        point_facts = {k: v for k, v in facts.items() if k != "sweep"}
        point_facts.update(requests=facts["requests"] + point["requests"], load=point["load"])
        for name in ("prefix_cache_reset", "server_metrics"):  # the point's own, read around it
            point_facts[name] = point.get(name)
        out.append((point_run, point_key(key, i), {"facts": point_facts, "sweep": about}))
    return out
