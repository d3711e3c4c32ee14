"""Test-only fault injection, so tests can prove that failures are recorded, not lost.

Set `BENCH_FAULTS` to a JSON list of faults; each applies to the runs whose resolved
scenario matches `match` (dotted key -> value):

    [{"match": {"train.seed": 1}, "at": "step", "step": 2, "action": "raise"}]

actions: raise (an exception), exit (os._exit(3)), hang (sleep for ever; writes its pid
to `pid_file` if given), sleep
(`seconds` more per step: a controlled slowdown for the gate), oom (MemoryError),
abort_at_exit (SIGABRT during interpreter teardown, after the run: how a native runtime's
destructor, gloo's for one, can end a finished worker), drop_row (the backend is handed
the step's batch less the last row of its first micro-batch: a backend that silently
does less work than planned, which the plan check must catch).
Nothing happens when the variable is unset: the backend's step is not wrapped.
"""

from __future__ import annotations

import atexit
import json
import os
import time
from typing import Any

ENV = "BENCH_FAULTS"


def _lookup(document: dict[str, Any], dotted: str) -> Any:
    node: Any = document
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def faults_for(scenario) -> list[dict[str, Any]]:
    raw = os.environ.get(ENV)
    if not raw:
        return []
    document = scenario.model_dump(mode="json")
    return [f for f in json.loads(raw) if all(_lookup(document, k) == v for k, v in f.get("match", {}).items())]


def trigger(fault: dict[str, Any]) -> None:
    action = fault["action"]
    if action == "raise":
        raise RuntimeError(f"injected fault at {fault.get('at')} {fault.get('step', '')}".strip())
    if action == "oom":
        raise MemoryError("injected out-of-memory")
    if action == "exit":
        os._exit(3)
    if action == "hang":
        if fault.get("pid_file"):  # lets a test kill this worker from outside
            with open(fault["pid_file"], "w") as f:
                f.write(str(os.getpid()))
        while True:
            time.sleep(60)
    if action == "sleep":
        time.sleep(float(fault.get("seconds", 0.1)))
    if action == "abort_at_exit":
        atexit.register(os.abort)


class Faults:
    """The faults that match one run, handed to its backend's constructor: `before_setup`
    is called by the worker before `setup`, `wrap_step` by a step-driven backend around
    its `train_step` (harness.run.backend.StepBackend)."""

    def __init__(self, faults: list[dict[str, Any]]) -> None:
        self.faults = faults

    def before_setup(self) -> None:
        for fault in self.faults:
            if fault.get("at") == "setup":
                trigger(fault)

    def wrap_step(self, step):
        calls = {"step": 0}

        def faulty_step(batch):
            index = calls["step"]
            calls["step"] += 1
            for fault in self.faults:
                if (
                    fault.get("at") == "step"
                    and fault.get("step", index) <= index
                    and (fault["action"] == "sleep" or fault.get("step", index) == index)
                ):
                    if fault["action"] == "drop_row":
                        batch = without_last_row(batch)
                    else:
                        trigger(fault)
            return step(batch)

        return faulty_step


def for_run(scenario) -> Faults | None:
    """The faults that match this run; None (nothing wrapped, nothing called) when none do."""
    faults = faults_for(scenario)
    return Faults(faults) if faults else None


def without_last_row(batch):
    """The step's batch with the last row of its first micro-batch left out."""
    from dataclasses import replace

    first, *rest = batch.micro_batches
    rows = first.input_ids.shape[0]
    return replace(batch, micro_batches=(first.rows(0, rows - 1), *rest))
