"""The third task (tests/echo_task.py) for `bench` subprocesses: a cheap stand-in for a
training run where a test checks the harness's mechanics (runner, resume, time limits,
signals, interpreters, report plumbing) and not a backend's figures. Its worker imports
no ML framework, so a run costs a Python start, not a torch import and a model build.

`echo_env` registers it the way an installed plug-in is registered: a `bench.tasks`
entry point in a dist-info folder on PYTHONPATH (importlib.metadata reads it, in the
`bench` process; the runner hands the task's target to its workers). The task here is
tests/echo_task.py's with harness.run.faults applied, so the fault tests need no framework
either: `at: setup` faults fire before it echoes, `at: step` faults around each echoed
word (the same Faults.wrap_step a step-driven backend calls); without BENCH_FAULTS it is
the echo task. The same folder declares the backend `echo-cpu` (`bench.backends`): its
probe answers "this CPU" without importing a framework, where torch's imports PyTorch
(seconds, in every `bench run`). It runs nothing itself: the echo task's worker works."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from echo_task import TASK as ECHO
from echo_task import EchoTask

from harness.run.backend import BackendInfo, BackendOptions, Probe

TESTS = Path(__file__).resolve().parent

# A scenario the echo task runs (on `--backend echo-cpu`); `echo.words` is the axis a test
# varies (as train.seed is for training runs). Nine words; echo.words of them echoed.
ECHO_SCENARIO = (
    "name: echo\n"
    "description: tiny Gemma 3 LoRA fine-tune on synthetic function-calling chats\n"
    "tasks: [echo]\n"
    "echo: {words: 3}\n"
    "run_timeout_s: 120\n"
)


class FaultyEchoTask(EchoTask):
    """The echo task with BENCH_FAULTS applied (harness.run.faults), for runner tests."""

    def execute(self, job: dict[str, Any], scenario, events, held: list) -> dict[str, Any]:
        from harness.run import faults

        injected = faults.for_run(scenario)
        if injected is None:
            return super().execute(job, scenario, events, held)
        injected.before_setup()
        echo_one = injected.wrap_step(lambda word: word)
        for word in (scenario.description or "").split()[: scenario.echo.words]:
            echo_one(word)
        return super().execute(job, scenario, events, held)


TASK = FaultyEchoTask(
    "echo", sections=ECHO.sections, report_columns=ECHO.report_columns, gate_metrics=ECHO.gate_metrics
)


class EchoBackend:
    """What a worker loads for `bench run --backend echo-cpu`: a probe, nothing to set up
    (the echo task never asks its backend for a step)."""

    @classmethod
    def probe(cls) -> Probe:
        return Probe(True, device_kind="cpu", device_name="echo cpu", device_count=1)


BACKEND_INFO = BackendInfo(
    name="echo-cpu",
    summary="the echo task's stand-in backend: this CPU, no framework (tests only)",
    requires=(),
    install="tests/echo_cli.py",
    options=BackendOptions,
    load=lambda: EchoBackend,
)


def echo_env(directory: Path) -> dict[str, str]:
    """Environment for `conftest.bench` that makes `tasks: [echo]` and `--backend echo-cpu`
    known in the `bench` process and its workers."""
    dist = Path(directory) / "bench_echo_task-0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: bench-echo-task\nVersion: 0\n")
    plugins = "[bench.tasks]\necho = echo_cli:TASK\n\n[bench.backends]\necho-cpu = echo_cli:BACKEND_INFO\n"
    (dist / "entry_points.txt").write_text(plugins)
    path = [str(directory), str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(path)}
