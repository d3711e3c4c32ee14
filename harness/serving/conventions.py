"""bench's serving figures beside vLLM's own client's, from the same per-request
timestamps, so a published `vllm bench serve` figure can be set beside a bench record
knowing what separates them.

The two agree on what a token event is (a chunk with non-empty `choices`), on ITL (the
gaps between token events, empty ones included) and on TPOT ((E2EL - TTFT) / (output
tokens - 1): the start cancels). They differ where the clock starts and on duration:

| figure | bench | vLLM (endpoint_request_func.py, serve.py) |
|---|---|---|
| TTFT, E2EL | from the request's header write on its connection (`sent_s`) | from before the request is posted (`posted_s`): a connection's set-up inside |
| duration | first measured send to the last measured request's end | from the measured phase's start (`load_start_s`) to the last request's end |
| client wait | `queue_s`: due to written, the client's own lag | the wait for the concurrency semaphore (`posted_s - arrival_s`) |

Standard library only: the parent computes these from the record's raw requests.
"""

from __future__ import annotations

from typing import Any

from harness.figures.metrics import summary

# A difference between the conventions worth a sentence in the report (relative).
STATE_ABOVE = 0.05


def _stats(values: list[float]) -> dict[str, float | int] | None:
    return summary(values) if values else None


def vllm_figures(measured: list[dict[str, Any]]) -> dict[str, Any] | None:
    """vLLM's client's figures for the measured requests (the completed ones for the
    latencies, every sent one for the duration); None for a record without vLLM's clock
    (the local engine, a record older than these fields)."""
    done = [r for r in measured if r["error"] is None and r.get("posted_s") is not None and r["chunk_s"]]
    starts = [r["load_start_s"] for r in measured if r.get("load_start_s") is not None]
    if not done or not starts:
        return None
    ends = [r["end_s"] for r in measured if r.get("end_s") is not None]
    duration = max(ends) - min(starts) if ends else None
    output = sum(r["output_tokens"] or 0 for r in done)
    waits = [r["posted_s"] - r["arrival_s"] for r in measured if r.get("arrival_s") is not None and r.get("posted_s")]
    return {
        "ttft_s": _stats([r["chunk_s"][0] - r["posted_s"] for r in done]),
        "e2el_s": _stats([r["chunk_s"][-1] - r["posted_s"] for r in done]),
        "itl_s": _stats([b - a for r in done for a, b in zip(r["chunk_s"], r["chunk_s"][1:])]),
        "tpot_s": _stats(
            [(r["chunk_s"][-1] - r["chunk_s"][0]) / (r["output_tokens"] - 1) for r in done if r["output_tokens"] > 1]
        ),
        "duration_s": duration,
        "output_throughput_tok_s": output / duration if duration else None,
        "semaphore_wait_s": _stats(waits),
    }


# (figure, how bench's is read from the metrics, how vLLM's is, what separates them)
COMPARED = (
    ("TTFT median", ("ttft_s", "median"), "its clock starts before the connection, bench's at the header write"),
    ("E2EL median", ("e2el_s", "median"), "its clock starts before the connection, bench's at the header write"),
    ("duration", ("duration_s",), "its duration runs from the load's start, bench's from the first send"),
    ("output tok/s", ("output_throughput_tok_s",), "over its duration, from the load's start"),
)


def _read(figures: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = figures
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def differences(metrics: dict[str, Any], vllm: dict[str, Any] | None) -> list[str]:
    """A sentence for each figure where vLLM's convention differs from bench's by more
    than STATE_ABOVE of bench's: both values, the difference, and why."""
    if not vllm:
        return []
    out = []
    for name, path, why in COMPARED:
        ours, theirs = _read(metrics, path), _read(vllm, path)
        if ours is None or theirs is None or ours == 0:
            continue
        gap = (theirs - ours) / ours
        if abs(gap) > STATE_ABOVE:
            out.append(f"{name}: bench {ours:.4g}, vLLM's convention {theirs:.4g} ({gap:+.1%}): {why}")
    return out
