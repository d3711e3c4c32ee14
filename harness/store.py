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
from typing import Any, Callable, Iterable

SCHEMA = "bench.result"
SCHEMA_VERSION = 1
# schema version -> function upgrading a record of that version by one version.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


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


def record_filename(record: dict[str, Any]) -> str:
    stamp = record["provenance"]["finished_at"].replace(":", "").replace("-", "")[:15]
    scenario = record["scenario"]
    parts = [
        stamp,
        scenario["name"],
        record["backend"]["name"],
        scenario["variant"],
        f"r{scenario['repeat']}",
        record["run_id"][:8],
    ]
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


def write_record(results_dir: Path, record: dict[str, Any]) -> Path:
    return write_json_atomic(Path(results_dir) / record_filename(record), record)


@dataclass
class LoadResult:
    records: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def record_files(paths: Iterable[str | Path]) -> list[Path]:
    """Record files under directories (recursively) and given files; temp files skipped."""
    found: list[Path] = []
    for p in map(Path, paths):
        candidates = sorted(p.rglob("*.json")) if p.is_dir() else [p]
        found.extend(c for c in candidates if not c.name.startswith(".tmp-"))
    return found


def load_record(path: Path) -> dict[str, Any]:
    """One record, migrated to the current schema; ValueError if it is not one."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a bench result record")
    version = doc.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise ValueError(
            f"{path}: schema version {version!r} is newer than this bench ({SCHEMA_VERSION}); upgrade bench"
        )
    while version < SCHEMA_VERSION:
        doc = MIGRATIONS[version](doc)
        version = doc["schema_version"]
    doc["_path"] = str(path)
    return doc


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
    return {r["run_key"] for r in load_records([results_dir]).records if r.get("status") == "ok" and r.get("run_key")}
