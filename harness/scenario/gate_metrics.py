"""The figures `bench gate` can hold a budget on: each with its direction, unit, the task
whose records have it, and how to read it (and its raw samples) from a record. Each task
defines its own (harness/tasks/<name>/); `known()` gathers them. A module of its own, so
that a scenario's `budgets:` are checked against the same names at `bench validate`
without importing the gate."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Literal


def measured_steps(record) -> list[dict[str, Any]]:
    """A training record's measured steps, from its raw facts (serve records have none)."""
    steps = ((record.raw or {}).get("loop") or {}).get("steps", [])
    return [s for s in steps if s["phase"] == "measure"]


@dataclass(frozen=True)
class GateMetric:
    direction: Literal["lower", "higher"]
    unit: str
    # The figure's id in a record (harness.records.result.RunRecord.figure): "metrics.mfu",
    # "metrics.step_time_s.median", "cost.usd_run". Never a report header.
    figure: str
    samples: Callable[[Any], list[float]] | None = None  # raw samples, if any
    # The task whose records have this figure (set by `known()` from the task that
    # defines it): a budget is not applied to another task's records (a
    # train-and-serve scenario's TTFT budget says nothing of training).
    task: str = ""
    # A count of events (recompiles, compiles, failed requests): a zero baseline is
    # compared absolutely (any increase beyond the limit fails), not as a percentage of 0.
    count: bool = False

    def value(self, record) -> float | None:
        """One record's figure."""
        return record.figure(self.figure)


def known() -> dict[str, GateMetric]:
    """Every registered task's gate metrics, by name."""
    from harness.scenario import task_registry as tasks

    return {
        name: replace(metric, task=task.name) for task in tasks.loaded() for name, metric in task.gate_metrics.items()
    }
