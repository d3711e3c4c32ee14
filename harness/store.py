"""The results store: one versioned, self-describing JSON record per run.

Records are written atomically (a temp file in the same directory, fsync, rename), so
an interrupted run never leaves a partial record. Readers skip unreadable records and
records of a future schema with a warning, and migrate older schemas explicitly.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from harness.result import MIGRATIONS, SCHEMA, SCHEMA_VERSION, RunRecord, as_record

__all__ = ["MIGRATIONS", "SCHEMA", "SCHEMA_VERSION", "RunRecord", "load_record", "load_records", "write_record"]


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: store them as null (the record says why elsewhere)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(text)).strip("-")[:60] or "x"


def record_filename(record: RunRecord) -> str:
    stamp = record.provenance.finished_at.replace(":", "").replace("-", "")[:15]
    scenario = record.scenario
    parts = [stamp, scenario.name, record.backend.name, scenario.variant, f"r{scenario.repeat}", record.run_id[:8]]
    return "-".join(slug(p) for p in parts) + ".json"


def write_json_atomic(path: Path, payload: dict[str, Any], *, keep_non_finite: bool = False) -> Path:
    """The one atomic JSON writer: a temporary file in the same folder, flushed to disk,
    then renamed over `path`, so a reader sees the old file or the new, never half.
    Records store NaN and infinity as null (strict JSON); `keep_non_finite` keeps them
    for a worker's facts, where a NaN loss is the fact that the run diverged."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload if keep_non_finite else _finite(payload), f, indent=1, allow_nan=keep_non_finite)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_record(results_dir: Path, record: RunRecord | dict[str, Any]) -> Path:
    """Store a record (a dict is validated as one first: nothing untyped is stored)."""
    record = as_record(record)
    return write_json_atomic(Path(results_dir) / record_filename(record), record.to_json())


@dataclass
class LoadResult:
    records: list[RunRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


PROJECTION_SUFFIX = ".projection.json"  # harness.projection.SUFFIX


def record_files(paths: Iterable[str | Path]) -> list[Path]:
    """Record files under directories (recursively) and given files; temp files skipped."""
    found: list[Path] = []
    for p in map(Path, paths):
        candidates = sorted(p.rglob("*.json")) if p.is_dir() else [p]
        # Projections (harness/projection.py) live beside the records and are never read as one.
        found.extend(c for c in candidates if not c.name.startswith(".tmp-") and not c.name.endswith(PROJECTION_SUFFIX))
    return found


def load_record(path: Path) -> RunRecord:
    """One record, migrated to the current schema (harness.result.MIGRATIONS) and
    typed; ValueError if it is not one."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable ({type(exc).__name__})") from None
    return as_record(doc, str(path)).model_copy(update={"path": str(path)})


def load_records(paths: Iterable[str | Path]) -> LoadResult:
    result = LoadResult()
    for path in record_files(paths):
        try:
            result.records.append(load_record(path))
        except ValueError as exc:
            result.warnings.append(f"skipped {exc}")
    return result


def successful_run_keys(results_dir: Path) -> set[str]:
    """run_keys of the successful records already in the store (for resume)."""
    if not Path(results_dir).is_dir():
        return set()
    return {r.run_key for r in load_records([results_dir]).records if r.ok}
