"""A third task, defined outside bench's core, for tests/harness/tasks/test_tasks.py: it counts the
words of the scenario's description in the worker and reports the count. Everything a
task plug-in provides that differs from the defaults (harness/tasks/base.py)."""

from __future__ import annotations

import time
from typing import Any

from harness.gate_metrics import GateMetric
from harness.tasks.base import Column, Task


class EchoTask(Task):
    def execute(self, job: dict[str, Any], scenario, events, held: list) -> dict[str, Any]:
        events.phase("echo")
        return {
            "started_at": time.time(),
            "words": len((scenario.description or "").split()),
            "accelerator": {"kind": "cpu", "name": "echo", "count": 1},
            "versions": {},
        }

    def fill(self, record: dict[str, Any], run, plan, catalog: dict[str, Any]) -> dict[str, Any] | None:
        record["metrics"] = {"num_words": record["raw"]["words"]}
        return None


TASK = EchoTask(
    "echo",
    report_columns=[Column("metrics.num_words", "words", "d")],
    gate_metrics={"num_words": GateMetric("higher", "", "metrics.num_words")},
)
