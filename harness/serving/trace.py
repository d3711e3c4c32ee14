"""Request traces for replay (`serve.prompts: {source: trace, path: FILE}`): one JSON
object per line, the Mooncake trace format that serving benchmarks' users bring:

    {"timestamp": 0, "input_length": 512, "output_length": 64, "hash_ids": [0, 1]}

- `timestamp`: the request's arrival, in milliseconds (any origin: the replay starts at
  the first row's time; rows must not go back in time);
- `input_length`, `output_length`: the prompt's and the answer's length, in tokens;
- `hash_ids` (optional): the prompt's 512-token blocks (Mooncake's block size); rows
  sharing a block id share that block of text, so a prefix cache sees the trace's reuse.

BurstGPT's CSV maps to it column for column (Timestamp in s x 1000, Request tokens,
Response tokens). Any other key, or a value of the wrong kind, is refused with the file,
the line and the field. Standard library only: the spec reads the file to validate it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# Mooncake's trace: every hash id stands for this many prompt tokens.
BLOCK_TOKENS = 512
FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
# A trace longer than this is a typo or the wrong file for a single benchmark run.
MAX_ROWS = 1_000_000


@dataclass(frozen=True)
class TraceRow:
    arrival_s: float  # seconds after the trace's first request
    input_tokens: int
    output_tokens: int
    blocks: tuple[int, ...] = ()


def read_trace(path: str | Path) -> list[TraceRow]:
    """Every row of the trace, arrival times relative to the first row; refuses a bad file
    with one line naming it, the line number and the field."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read the trace: {exc}") from None
    rows, first, previous = [], None, None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        timestamp, row = _row(path, number, line)
        first = timestamp if first is None else first
        if previous is not None and timestamp < previous:
            raise ValueError(f"{path}:{number}: timestamp: {timestamp:g} ms is before the previous row's {previous:g}")
        previous = timestamp
        rows.append(TraceRow((timestamp - first) / 1e3, *row))
    if not rows:
        raise ValueError(f"{path}: the trace has no requests")
    if len(rows) > MAX_ROWS:
        raise ValueError(f"{path}: {len(rows)} rows; at most {MAX_ROWS} per run")
    return rows


def _row(path: Path, number: int, line: str) -> tuple[float, tuple[int, int, tuple[int, ...]]]:
    where = f"{path}:{number}"
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a JSON object with {', '.join(FIELDS[:3])}")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ValueError(f"{where}: {unknown[0]}: unknown field (known: {', '.join(FIELDS)})")
    for name in FIELDS[:3]:
        if name not in data:
            raise ValueError(f"{where}: {name}: missing")
    timestamp = data["timestamp"]
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)) or timestamp < 0:
        raise ValueError(f"{where}: timestamp: a time in milliseconds >= 0 (got {timestamp!r})")
    lengths = [_positive(where, name, data[name]) for name in ("input_length", "output_length")]
    blocks = data.get("hash_ids", [])
    if not isinstance(blocks, list) or any(isinstance(b, bool) or not isinstance(b, int) or b < 0 for b in blocks):
        raise ValueError(f"{where}: hash_ids: a list of block ids (integers >= 0)")
    needed = -(-lengths[0] // BLOCK_TOKENS)  # the blocks input_length spans
    if blocks and len(blocks) != needed:
        raise ValueError(
            f"{where}: hash_ids: {len(blocks)} blocks of {BLOCK_TOKENS} tokens for input_length "
            f"{lengths[0]} (which spans {needed})"
        )
    return float(timestamp), (lengths[0], lengths[1], tuple(blocks))


def _positive(where: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{where}: {name}: a number of tokens > 0 (got {value!r})")
    return value


def arrival_delays(rows: list[TraceRow], count: int) -> list[float]:
    """The first `count` rows' arrivals, in seconds after the measured phase starts."""
    return [row.arrival_s for row in rows[:count]]
