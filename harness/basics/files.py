"""Atomic file writes: a reader sees the old file or the new one, never half. Every
record, cache entry and report is written through here."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any


def finite_for_json(value: Any) -> Any:
    """JSON has no NaN/inf: store them as null (the record says why elsewhere)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_for_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_for_json(v) for v in value]
    return value


def write_json_atomic(path: Path, payload: dict[str, Any], *, keep_non_finite: bool = False) -> Path:
    """The one atomic JSON writer (write_text_atomic). Records store NaN and infinity as
    null (strict JSON); `keep_non_finite` keeps them for a worker's facts, where a NaN
    loss is the fact that the run diverged."""
    data = payload if keep_non_finite else finite_for_json(payload)
    return write_text_atomic(path, json.dumps(data, indent=1, allow_nan=keep_non_finite))


def write_text_atomic(path: Path, text: str | bytes) -> Path:
    """A temporary file in the same folder, flushed to disk, then renamed over `path`, so
    a reader sees the old file or the new, never half (bytes are written as they are)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
