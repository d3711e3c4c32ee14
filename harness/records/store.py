"""The results store: one versioned, self-describing JSON record per run.

Records are written atomically (a temp file in the same directory, fsync, rename), so
an interrupted run never leaves a partial record. Readers skip unreadable records and
records of a future schema with a warning, and migrate older schemas explicitly.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from harness.basics.files import finite_for_json, write_json_atomic, write_text_atomic
from harness.records import locations
from harness.records.locations import is_url
from harness.records.result import MIGRATIONS, SCHEMA, SCHEMA_VERSION, RunRecord, as_record

__all__ = [
    "MIGRATIONS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "RunRecord",
    "load_record",
    "load_records",
    "write_record",
    "write_json_atomic",
    "write_text_atomic",
]


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(text)).strip("-")[:60] or "x"


def record_filename(record: RunRecord) -> str:
    stamp = record.provenance.finished_at.replace(":", "").replace("-", "")[:15]
    scenario = record.scenario
    parts = [stamp, scenario.name, record.backend.name, scenario.variant, f"r{scenario.repeat}", record.run_id[:8]]
    return "-".join(slug(p) for p in parts) + ".json"


def write_record(results_dir: Path | str, record: RunRecord | dict[str, Any]) -> Path | str:
    """Store a record (a dict is validated as one first: nothing untyped is stored), in a
    local directory or at an fsspec URL (harness.records.locations: atomic where the store allows)."""
    record = as_record(record)
    if is_url(results_dir):
        text = json.dumps(finite_for_json(record.to_json()), indent=1, allow_nan=False)
        return locations.write_text(locations.join(str(results_dir), record_filename(record)), text)
    return write_json_atomic(Path(results_dir) / record_filename(record), record.to_json())


@dataclass
class LoadResult:
    records: list[RunRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Files that look like records (a .json the store reads) but could not be read or
    # validated: (path, why). `bench gate` fails on each unless told to skip them.
    unreadable: list[tuple[str, str]] = field(default_factory=list)


PROJECTION_SUFFIX = ".projection.json"  # harness.projection.projection.SUFFIX
# Serving projections (harness.projection.serving.SUFFIX), also beside the records.
PROJECTION_SUFFIXES = (PROJECTION_SUFFIX, ".serve-projection.json")


def record_files(paths: Iterable[str | Path]) -> list[Path | str]:
    """Record files under directories (recursively) and given files; temp files and
    hidden folders (`bench migrate`'s `.orig/`, caches) skipped under a directory. A URL
    (gs://, s3://, memory://) is listed through fsspec; its files come back as URLs."""
    found: list[Path | str] = []
    for p in paths:
        if is_url(p):
            found.extend(f for f in locations.files_under(str(p), ".json") if not f.endswith(PROJECTION_SUFFIXES))
            continue
        p = Path(p)
        candidates = sorted(c for c in p.rglob("*.json") if not _hidden(c.relative_to(p))) if p.is_dir() else [p]
        # Projections (harness/projection/projection.py) live beside the records and are never read as one.
        found.extend(
            c for c in candidates if not c.name.startswith(".tmp-") and not c.name.endswith(PROJECTION_SUFFIXES)
        )
    return found


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts[:-1])


def load_record(path: Path | str) -> RunRecord:
    """One record (a local path or a URL), migrated to the current schema
    (harness.records.result.MIGRATIONS) and typed; ValueError if it is not one."""
    try:
        doc = json.loads(locations.read_text(path) if is_url(path) else Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable ({type(exc).__name__})") from None
    return as_record(doc, str(path)).model_copy(update={"path": str(path)})


def load_records(paths: Iterable[str | Path]) -> LoadResult:
    """Every record under `paths` (directories, files, URLs). A run is one record however
    many locations hold a copy of it (a bucket and a local download): the first read of
    each run id is kept, in the order the paths are given."""
    result, seen = LoadResult(), set()
    for path in record_files(paths):
        try:
            record = load_record(path)
        except ValueError as exc:
            result.warnings.append(f"skipped {exc}")
            result.unreadable.append((str(path), str(exc).removeprefix(f"{path}: ")))
            continue
        if record.run_id not in seen:
            seen.add(record.run_id)
            result.records.append(record)
    return result


def is_results_dir(results_dir: Path | str) -> bool:
    """Whether a results directory (or URL) exists to be read."""
    return locations.is_dir(str(results_dir)) if is_url(results_dir) else Path(results_dir).is_dir()


def successful_run_keys(results_dir: Path | str) -> set[str]:
    """run_keys of the successful records already in the store (for resume)."""
    if not is_results_dir(results_dir):
        return set()
    return {r.run_key for r in load_records([results_dir]).records if r.ok}


@dataclass
class Migrated:
    """What `bench migrate` did under one directory: paths rewritten, already current,
    refused (path, why)."""

    originals: Path
    rewritten: list[Path] = field(default_factory=list)
    current: list[Path] = field(default_factory=list)
    refused: list[tuple[Path, str]] = field(default_factory=list)


def migrate_directory(root: Path) -> Migrated:
    """Rewrite every older record under `root` to the current schema, in place, after
    keeping its original bytes under `root/.orig/` (same relative path; readers skip
    hidden folders). Each write is atomic: a record is its old form or its new, never half."""
    root = Path(root)
    done = Migrated(root / ".orig")
    for path in record_files([root]):
        try:
            original_bytes = path.read_bytes()
            doc = json.loads(original_bytes)
            if isinstance(doc, dict) and doc.get("schema_version") == SCHEMA_VERSION:
                done.current.append(path)
                continue
            record = as_record(doc, str(path))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            done.refused.append((path, str(exc).removeprefix(f"{path}: ")))
            continue
        original = done.originals / path.relative_to(root)
        if not original.exists():  # a later migration never overwrites the first original
            write_text_atomic(original, original_bytes)
        write_json_atomic(path, record.to_json())
        done.rewritten.append(path)
    return done
