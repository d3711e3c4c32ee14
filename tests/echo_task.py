"""A third task, defined outside bench's core, for tests/harness/tasks/test_tasks.py: it counts the
words of the scenario's description in the worker, echoes the first `echo.words` of them
and reports both. It owns its scenario section, `echo: {words: 3}`. Everything a task
plug-in provides that differs from the defaults (harness/tasks/base.py)."""

from __future__ import annotations

import time
from typing import Any

from pydantic import Field

from harness.scenario.gate_metrics import GateMetric
from harness.scenario.sections import Section
from harness.tasks.base import Column, Task, TaskSection


class EchoSpec(Section):
    """The `echo:` section: how many of the description's words to echo."""

    words: int = Field(3, gt=0, le=100)


class EchoTask(Task):
    def execute(self, job: dict[str, Any], scenario, events, held: list) -> dict[str, Any]:
        events.phase("echo")
        words = (scenario.description or "").split()
        return {
            "started_at": time.time(),
            "words": len(words),
            "echoed": " ".join(words[: scenario.echo.words]),
            "accelerator": {"kind": "cpu", "name": "echo", "count": 1},
            "versions": {},
        }

    def fill(self, record: dict[str, Any], run, plan, catalog: dict[str, Any]) -> dict[str, Any] | None:
        record["metrics"] = {"num_words": record["raw"]["words"], "echoed": record["raw"]["echoed"]}
        return None


TASK = EchoTask(
    "echo",
    sections=(TaskSection("echo", EchoSpec),),
    report_columns=[Column("metrics.num_words", "words", "d")],
    gate_metrics={"num_words": GateMetric("higher", "", "metrics.num_words")},
)
