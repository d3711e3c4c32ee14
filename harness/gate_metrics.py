"""The figures `bench gate` can hold a budget on: each with its direction, unit, the task
whose records have it, and how to read it (and its raw samples) from a record. Each task
defines its own (harness/tasks/*.py); `known()` gathers them. A module of its own, so
that a scenario's `budgets:` are checked against the same names at `bench validate`
without importing the gate."""

from __future__ import annotations

from dataclasses import dataclass, replace
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
    # The task whose records have this figure (set by `known()` from the task that
    # defines it): a budget is not applied to another task's records (a
    # train-and-serve scenario's TTFT budget says nothing of training).
    task: str = ""


def known() -> dict[str, GateMetric]:
    """Every registered task's gate metrics, by name."""
    from harness import tasks

    return {
        name: replace(metric, task=task.name) for task in tasks.loaded() for name, metric in task.gate_metrics.items()
    }
