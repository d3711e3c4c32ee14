"""The figures `bench gate` can hold a budget on: each with its direction, unit, the task
whose records have it, and how to read it (and its raw samples) from a record. A module
of its own, importing nothing of bench, so that a scenario's `budgets:` are checked
against the same names at `bench validate` without importing the gate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal


def _measured(record: dict[str, Any]) -> list[dict[str, Any]]:
    steps = ((record.get("raw") or {}).get("loop") or {}).get("steps", [])  # serve records have none
    return [s for s in steps if s["phase"] == "measure"]


def _metric(record: dict[str, Any], *path: str) -> Any:
    node: Any = record
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    return node


@dataclass(frozen=True)
class GateMetric:
    direction: Literal["lower", "higher"]
    unit: str
    value: Callable[[dict[str, Any]], float | None]  # one record's figure
    samples: Callable[[dict[str, Any]], list[float]] | None = None  # raw samples, if any
    # The task whose records have this figure: a budget is not applied to the other
    # task's records (a train-and-serve scenario's TTFT budget says nothing of training).
    task: Literal["train", "serve"] = "train"


GATE_METRICS: dict[str, GateMetric] = {
    "step_time_s": GateMetric(
        "lower",
        "s",
        lambda r: _metric(r, "metrics", "step_time_s", "median"),
        lambda r: [s["time_s"] for s in _measured(r)],
    ),
    "step_time_s.p90": GateMetric("lower", "s", lambda r: _metric(r, "metrics", "step_time_s", "p90")),
    "tokens_per_s_real": GateMetric(
        "higher",
        "tok/s",
        lambda r: _metric(r, "metrics", "tokens_per_s_real"),
        lambda r: [s["tokens_real"] / s["time_s"] for s in _measured(r)],
    ),
    "tokens_per_s_padded": GateMetric(
        "higher",
        "tok/s",
        lambda r: _metric(r, "metrics", "tokens_per_s_padded"),
        lambda r: [s["tokens_padded"] / s["time_s"] for s in _measured(r)],
    ),
    "num_recompiles": GateMetric("lower", "", lambda r: _metric(r, "metrics", "num_recompiles")),
    "num_compiles": GateMetric("lower", "", lambda r: _metric(r, "metrics", "num_compiles")),
    "compile_time_s": GateMetric("lower", "s", lambda r: _metric(r, "metrics", "compile_time_s")),
    "peak_memory_gib": GateMetric("lower", "GiB", lambda r: _metric(r, "metrics", "peak_memory_gib")),
    "mfu": GateMetric("higher", "", lambda r: _metric(r, "metrics", "mfu")),
    "usd_run": GateMetric("lower", "$", lambda r: _metric(r, "cost", "usd_run")),
    "usd_per_1m_tokens_real": GateMetric("lower", "$", lambda r: _metric(r, "cost", "usd_per_1m_tokens_real")),
    # serving
    "ttft_s": GateMetric("lower", "s", lambda r: _metric(r, "metrics", "ttft_s", "median"), task="serve"),
    "ttft_s.p99": GateMetric("lower", "s", lambda r: _metric(r, "metrics", "ttft_s", "p99"), task="serve"),
    "tpot_s": GateMetric("lower", "s", lambda r: _metric(r, "metrics", "tpot_s", "median"), task="serve"),
    "itl_s.p99": GateMetric("lower", "s", lambda r: _metric(r, "metrics", "itl_s", "p99"), task="serve"),
    "output_throughput_tok_s": GateMetric(
        "higher", "tok/s", lambda r: _metric(r, "metrics", "output_throughput_tok_s"), task="serve"
    ),
    "usd_per_1m_output_tokens": GateMetric(
        "lower", "$", lambda r: _metric(r, "cost", "usd_per_1m_output_tokens"), task="serve"
    ),
}
