"""The worker process: runs exactly one backend run (or one probe) and exits.

One process per run keeps runtime state (SPMD mode, device-count flags, distributed
init, USE_TORCH_XLA) from leaking between runs, and turns a crash or an out-of-memory
kill into a failed record instead of a lost sweep. The parent follows progress events
in a file (`BENCH_EVENT_FILE`) and reads the run's raw facts from a JSON file; the
worker's stdout and stderr are the log whose tail a failed record keeps. Under a
multi-process launcher (torchrun) every rank runs this; rank 0 reports.

    python -m harness.run.worker probe NAME
    python -m harness.run.worker run JOB.json
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

EVENT_FILE_ENV = "BENCH_EVENT_FILE"


class EventSink:
    """Progress events, one JSON line each, appended to a file the parent follows (a
    file, not a pipe: launchers such as torchrun close inherited descriptors)."""

    def __init__(self, path: str | None) -> None:
        self.origin = time.perf_counter()
        self._out = open(path, "a", buffering=1) if path else None

    def emit(self, kind: str, **fields: Any) -> None:
        if self._out is not None:
            try:
                self._out.write(json.dumps({"event": kind, **fields}) + "\n")
            except (OSError, ValueError):
                self._out = None  # nowhere to report progress; keep running

    def phase(self, name: str) -> None:
        self.emit("phase", name=name)

    def step(self, sample, total_steps: int) -> None:
        self.emit("step", total=total_steps, **asdict(sample))


# --------------------------------------------------------------------------- probe
def probe(name: str) -> dict[str, Any]:
    from harness.run.backend import Probe
    from harness.run.registry import get

    info = get(name)
    missing = [m for m in info.requires if importlib.util.find_spec(m) is None]
    if missing:
        return Probe(False, f"{', '.join(missing)} not installed ({info.install})").to_json()
    try:
        return info.load().probe().to_json()
    except Exception as exc:  # a broken install must read as unavailable, with why
        return Probe(False, f"{type(exc).__name__}: {exc}".splitlines()[0]).to_json()


# --------------------------------------------------------------------------- run
def _watch_parent() -> None:
    """Exit if the parent dies (SIGKILL included): no orphan keeps burning the chip."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                launched = sys.modules.get("harness.serving.launch")
                if launched is not None:  # a server this worker started: stop it too
                    launched.stop_all()
                os._exit(70)

    threading.Thread(target=watch, daemon=True, name="bench-parent-watch").start()


def execute(job: dict[str, Any], events: EventSink, held: list) -> dict[str, Any]:
    """Run the job's task (harness.tasks); return the raw facts (no statistics: the
    parent's job). What the task builds and must tear down (a backend) is appended to
    `held`: the caller tears it down after the facts (or the failure) are on disk."""
    from harness.records.provenance import load_average, machine_state
    from harness.scenario import task_registry as tasks
    from harness.scenario.spec import Scenario

    load_before = load_average()
    # The parent registered the tasks; a plug-in's registration reaches this process by
    # name (every task: the scenario's sections are validated by their tasks' models).
    for name, target in job["task_targets"].items():
        tasks.register(name, target)
    task = tasks.get(job["task"])
    task.prepare_worker(job)
    scenario = Scenario.model_validate(job["scenario"])
    facts = task.execute(job, scenario, events, held)
    facts["machine"] = machine_state(load_before)
    return facts


def failure_from(exc: BaseException) -> dict[str, Any]:
    from harness.records.failure_text import explained

    name = type(exc).__name__
    oom = "OutOfMemory" in name or "out of memory" in str(exc).lower() or isinstance(exc, MemoryError)
    return {
        "kind": "oom" if oom else "error",
        "reason": explained(f"{name}: {exc}"),  # the cause on its first line, the text cut in the middle
        "traceback": traceback.format_exc()[-4000:],
    }


def write_json_atomic(path: Path, payload: dict[str, Any]) -> None:
    """Facts for the runner, through the store's one atomic writer, NaN kept."""
    from harness.basics.files import write_json_atomic as atomic

    atomic(path, payload, keep_non_finite=True)


def run_job(job_path: str) -> int:
    _watch_parent()
    from harness.plan import launchers

    job = json.loads(Path(job_path).read_text())
    # A job file without a launcher is a single process's (the runner always names one).
    launcher = launchers.get(job.get("launcher", "single"))
    me = launcher.rank()
    events = EventSink(os.environ.get(EVENT_FILE_ENV) if me == 0 else None)
    out = launcher.facts_path(Path(job["facts_path"]), me)
    held: list = []
    try:
        facts = execute(job, events, held)
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the record
        write_json_atomic(out, {"failure": failure_from(exc)})
        traceback.print_exc()
        code = 1
    else:
        if me == 0:
            write_json_atomic(out, facts)
        code = 0
    finally:
        tear_down(held)
    return code


def tear_down(held: list) -> None:
    """`teardown()` of the backend, after a failed run too (process groups, distributed
    runtimes). After its facts are on disk: a teardown that fails or blocks (a peer that
    already died) cannot lose them; its error goes to the log, the run's outcome stands."""
    for backend in held:
        try:
            backend.teardown()
        except BaseException:  # noqa: BLE001 - the facts are written; say why, keep the outcome
            print("bench worker: teardown failed (the run's record is unaffected):", file=sys.stderr)
            traceback.print_exc()


def exit_now(code: int) -> None:
    """End the worker without the interpreter's teardown. Its facts are already on disk;
    what is left is native runtimes' destructors, and those can abort a finished run:
    gloo's worker threads, still holding tensors after `destroy_process_group`, abort
    with "terminate called without an active exception" at interpreter exit
    (pytorch/pytorch#179291), and torchrun then reports the whole run as failed."""
    import logging

    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "probe":
        print(json.dumps(probe(argv[1])))
        return 0
    if len(argv) == 2 and argv[0] == "run":
        exit_now(run_job(argv[1]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
