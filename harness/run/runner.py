"""`bench run`: resolve a scenario into runs and execute each in its own worker process.

Each run gets a fresh worker (the backend's configured interpreter), a time limit and a
hard kill after it. Whatever happens to the worker, a record is written: its facts, or a
failure with the reason, exit status and log tail. Runs that already have a successful
record with the same run key are skipped (resume), unless forced; a multi-host job
(parallel.hosts > 1) never is (`done_already`).
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.basics.errors import BenchError, SpecError
from harness.figures.cost import load_catalog, price_for
from harness.plan import hosts, launchers
from harness.plan import plan as plans
from harness.records.locations import check_writable, is_url
from harness.records.record import accelerator_from, build_record, run_key
from harness.records.store import RunRecord, is_results_dir, load_records, record_filename, write_record
from harness.run import choice, registry
from harness.run.worker import EVENT_FILE_ENV
from harness.scenario import task_registry as tasks
from harness.scenario.loader import ResolvedRun, read_document, resolve_runs, validate
from harness.scenario.spec import MAX_SECONDS, Scenario, tasks_of

KILL_GRACE_S = 10.0
LOG_TAIL_LINES = 40


@dataclass
class RunRequest:
    scenario_path: str
    backend: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    results_dir: Path | str = Path("results")  # a local directory or an fsspec URL (harness.records.locations)
    profile: str = "auto"  # auto: the profile named after the device kind, if any
    interpreters: dict[str, str] = field(default_factory=dict)
    force: bool = False
    timeout_s: float | None = None
    prices_file: str | None = None
    command: list[str] = field(default_factory=list)
    dry_run: bool = False  # resolve and print every run's plan; run nothing
    # The backend's probe when the caller already has it (bench suite probes each backend once).
    probed: Any = None


@dataclass
class SweepResult:
    records: list[RunRecord]
    skipped: list[ResolvedRun]
    plans: list[tuple[ResolvedRun, "plans.Plan | None"]] = field(default_factory=list)
    # Runs skipped as already done: {"path", "run_key", "task", "variant", "repeat"} each.
    skipped_records: list[dict[str, Any]] = field(default_factory=list)
    # Records that could not be written to the results directory, and where they went.
    rescued: list[dict[str, str]] = field(default_factory=list)
    # This host's part in multi-host jobs whose record host 0 writes (hosts.secondary_part).
    secondary: list[dict[str, Any]] = field(default_factory=list)
    # Matrix cells this backend cannot execute (variant, the refusal's one line); the
    # other cells ran. A sweep whose every cell is refused is refused whole (exit 2).
    refused: list[tuple[str, str]] = field(default_factory=list)
    backend: str | None = None  # the backend the sweep ran (or planned) on

    @property
    def failed(self) -> list[RunRecord | dict[str, Any]]:
        """Failed records, and this host's failed parts of jobs another host records."""
        return [r for r in self.records if not r.ok] + [p for p in self.secondary if p["status"] != "ok"]


def pick_profile(requested: str, profiles: dict[str, Any], device_kind: str) -> str | None:
    if requested == "none":
        return None
    if requested == "auto":
        return device_kind if device_kind in profiles else None
    return requested


def run_sweep(request: RunRequest, progress) -> SweepResult:
    """Every run of the scenario on one backend; records written as they finish."""
    chosen, runs, resolved, refused, catalog = _plan_sweep(request)
    if request.dry_run:
        return SweepResult([], [], resolved, refused=refused, backend=chosen.name)
    accelerator = accelerator_from(None, chosen.probe)["catalog_key"]
    check_budget_prices(runs, accelerator, catalog, request.scenario_path)
    done = {} if request.force else successful_records(request.results_dir)
    sweep = _Sweep(request, chosen, catalog, progress, SweepResult([], [], refused=refused))
    jobs = [(run, plan, tasks.get(name)) for run, plan in resolved for name in tasks_of(run.scenario)]
    for number, (run, plan, task) in enumerate(jobs, 1):
        backend = task.backend_label(run, chosen.name)
        key = run_key(run.scenario_hash, backend, accelerator, run.repeat)
        keys = task.record_keys(run, key)  # a serve sweep: one per point
        if done_already(task.name, plan, keys, done):
            sweep.result.skipped.append(run)
            sweep.result.skipped_records.append(
                {
                    "path": done[keys[0]],
                    "run_key": keys[0],
                    "task": task.name,
                    "variant": run.variant,
                    "repeat": run.repeat,
                }
            )
            progress.skipped(run, number, len(jobs))
            continue
        progress.start(run, number, len(jobs), chosen, task.name)
        _run_job(sweep, run, plan, task, backend, key)
    return sweep.result


def _plan_sweep(request: RunRequest):
    """The backend, the runs and every run's plan, before any work: a scenario this
    backend cannot execute exactly is refused now (exit 2, one line), not an hour into a
    sweep. Returns (chosen backend, runs, (run, plan) pairs, refused cells, price catalog)."""
    base = validate(read_document(request.scenario_path), request.scenario_path)
    catalog = preflight(request, base)  # seconds, before any backend is probed
    chosen = (
        request.probed
        if request.probed is not None
        else choice.choose_backend(request.backend or base.backend, request.interpreters)
    )
    profile = pick_profile(request.profile, base.profiles, chosen.probe.device_kind)
    runs = resolve_runs(request.scenario_path, request.overrides, profile)
    for run in runs:
        registry.validate_backend_options(run.scenario, request.scenario_path)
    try:
        resolved, refused = plan_cells(runs, chosen, request.scenario_path)
    except SpecError as exc:
        raise axis_refusal_with_the_way(exc, chosen.name, named=bool(request.backend or base.backend)) from None
    for _, plan in resolved:  # a multi-host job's environment, checked before any work
        hosts.role(plan.hosts if plan is not None else 1)
    return chosen, runs, resolved, refused, catalog


def axis_refusal_with_the_way(exc: SpecError, backend: str, named: bool) -> SpecError:
    """A refusal of a parallel axis the backend lacks (`parallel.fsdp: 4 ...: this
    backend has no fsdp parallelism`), completed with the backend that refused (named,
    or picked as the best available here) and the two ways to run the file here: on one
    device, or on a backend that has the axis. Any other refusal is returned as it was."""
    axis = exc.field.removeprefix("parallel.")
    if not exc.field.startswith("parallel.") or f"no {axis} parallelism" not in exc.message:
        return exc
    how = "named" if named else "the best available here; the scenario names none"
    others = [n for n, info in registry.all_backends().items() if n != backend and axis in info.capabilities.axes]
    way = "--set parallel.devices=1 (one device: every axis 1)"
    if others:
        way += f", or a backend with a {axis} axis: --backend {' / '.join(others)}"
    return SpecError(exc.source, exc.field, f"{exc.message}; backend {backend} ({how}); to run it here: {way}")


@dataclass
class _Sweep:
    """What every job of one sweep shares; `result` collects what the jobs leave."""

    request: RunRequest
    chosen: Any
    catalog: dict[str, Any]
    progress: Any
    result: SweepResult


def _run_job(sweep: _Sweep, run: ResolvedRun, plan, task, backend: str, key: str) -> None:
    """One task of one run in its worker, then its record(s) written."""
    request, chosen = sweep.request, sweep.chosen
    started = time.time()
    timeout_s = request.timeout_s if request.timeout_s is not None else run.scenario.run_timeout_s
    staging = trace_staging(request.results_dir, run.scenario, task.name)
    task_plan = plan if task.needs_plan else None
    outcome = execute_run(run, chosen, timeout_s, sweep.progress.event, task.name, plan=task_plan, trace_dir=staging)
    part = task.secondary_part(task_plan, outcome)
    if part is not None:  # host 0 writes the job's one record
        sweep.result.secondary.append({**part, "variant": run.variant, "repeat": run.repeat})
        return
    finished = time.time()
    # A serve sweep's worker measured every point: one record per point.
    for run, key, outcome in task.split(run, key, outcome):
        record = build_record(
            run,
            backend,
            chosen.python,
            chosen.probe,
            outcome,
            key=key,
            started=started,
            finished=finished,
            catalog=sweep.catalog,
            command=request.command,
            task=task.name,
            plan=task_plan,
        )
        _keep_record(sweep, record, staging)


def _keep_record(sweep: _Sweep, record: RunRecord, staging: Path | None) -> None:
    """The record saved (with its trace files), shown, and added to the sweep's result."""
    results_dir = sweep.request.results_dir
    if staging is not None:  # the trace files go next to the record, named by it
        from harness.run.trace import attach

        record = attach(record, staging, results_dir, record_filename(record))
    path, problem = save_record(results_dir, record)
    record = record.model_copy(update={"path": str(path)})
    if problem is not None:
        sweep.result.rescued.append({"path": str(path), "results_dir": str(results_dir), "problem": problem})
    sweep.progress.finish(record)
    sweep.result.records.append(record)


def done_already(task: str, plan, keys: list[str], done: dict[str, Any]) -> bool:
    """Whether a run is skipped as already done: every record it would write is in
    `done` (the results directory's successful records), and its task does not say to
    run it always (a multi-host training job: TrainTask.always_rerun says why)."""
    if tasks.get(task).always_rerun(plan if tasks.get(task).needs_plan else None):
        return False
    return all(k in done for k in keys)


# --------------------------------------------------------------------------- pre-flight
def preflight(request: RunRequest, base: Scenario) -> dict[str, Any]:
    """Everything that can be checked before any work (before probing a backend, even):
    the time limit, the prices file, --python, the backend name, every run's scenario
    and backend options, and that the results directory can be written. A SpecError
    naming the flag or field, in seconds, instead of a failure an hour into a sweep.
    Returns the price catalog."""
    source = request.scenario_path
    if request.timeout_s is not None and not (
        math.isfinite(request.timeout_s) and 0 < request.timeout_s <= MAX_SECONDS
    ):
        raise SpecError(
            "--timeout",
            "",
            f"a per-run time limit is a number of seconds > 0 and at most "
            f"{MAX_SECONDS:.0f} (a week), got {request.timeout_s:g}",
        )
    catalog = load_catalog(request.prices_file)
    requested = request.backend or base.backend
    if requested:
        registry.get(requested)  # an unknown name, with the known ones
    registry.check_interpreters(request.interpreters, [requested] if requested else list(registry.all_backends()))
    # Every matrix cell with the --set overrides (and a named profile): their fields and
    # backend options. The device-kind profile (`auto`) is applied, and checked, after
    # the probe; `bench validate` checks every profile.
    named = request.profile if request.profile not in ("auto", "none") else None
    for run in resolve_runs(source, request.overrides, named):
        registry.validate_backend_options(run.scenario, source)
        check_host_role(run.scenario.parallel.hosts, requested)
    if not request.dry_run:
        check_results_dir(request.results_dir)
    return catalog


def check_host_role(job_hosts: int, backend: str | None) -> None:
    """This host's place in a multi-host job (BENCH_HOST_RANK, BENCH_COORDINATOR), checked
    before the probe: a host told a rank outside the job, or a torchrun backend not told
    its rendezvous, is refused in a second, not after the probe and the plan. The plan's
    own check (`_plan_sweep`) stays: a device-kind profile may change parallel.hosts."""
    me = hosts.role(job_hosts)
    if backend and registry.get(backend).launcher == "torchrun":
        hosts.require_explicit(me, backend)


def check_results_dir(results_dir: Path, flag: str = "--results-dir") -> None:
    """The results directory (or the nearest existing folder above it, where it would be
    created) is a directory this process can write: tried with a real file, since
    permission bits do not tell (root, read-only mounts). Creates nothing that stays.
    `flag`: the option that named it (`bench report -o` checks its file's folder)."""
    if is_url(results_dir):
        return check_writable(str(results_dir), f"{flag} {results_dir}")
    target = Path(results_dir)
    where = f"{flag} {target}"
    existing = target
    while not existing.exists():
        if existing.is_symlink():
            raise SpecError(where, "", f"{existing} is a broken symbolic link")
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == target else f"cannot be created: {existing} is a file"
        raise SpecError(where, "", f"{what}, not a directory; give a directory (it is created if missing)")
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".tmp-bench-preflight-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise SpecError(where, "", f"cannot write in {existing}: {exc.strerror or exc}") from None


def check_budget_prices(runs: list[ResolvedRun], accelerator: str, catalog: dict[str, Any], source: str) -> None:
    """A budget on a $ figure needs a price for the device the run measures; without one
    the record has no cost and the gate could never check it: refused before any work."""
    for run in runs:
        scenario = run.scenario
        for task in map(tasks.get, tasks_of(scenario)):
            key = task.accelerator_key(scenario, accelerator)
            for i, budget in enumerate(scenario.budgets):
                if budget.metric in task.priced_metrics and price_for(key, scenario.cost, catalog) is None:
                    raise SpecError(
                        _where(source, run),
                        f"budgets.{i}.metric",
                        f"{budget.metric} needs a price for {key!r} ({scenario.cost.pricing}), and neither "
                        f"the price catalog nor cost.prices has one: add cost.prices.{key} or --prices FILE",
                    )


def successful_records(results_dir: Path) -> dict[str, str]:
    """run_key -> path of the successful records already in the store (for resume)."""
    if not is_results_dir(results_dir):
        return {}
    return {r.run_key: r.path for r in load_records([results_dir]).records if r.ok}


# --------------------------------------------------------------------------- saving
def rescue_dirs() -> list[Path]:
    """Where a record goes when its results directory cannot take it: the current
    directory, else the system's temporary directory."""
    return [Path.cwd() / "bench-rescued-records", Path(tempfile.gettempdir()) / "bench-rescued-records"]


def save_record(results_dir: Path, record: RunRecord) -> tuple[Path, str | None]:
    """Write the record; if the results directory fails it (full disk, removed, made
    read-only during the run), write it somewhere safe instead: an hour's run is never
    lost to a write. Returns the path and, when rescued, what went wrong."""
    try:
        return write_record(results_dir, record), None
    except OSError as exc:
        problem = f"{type(exc).__name__}: {exc.strerror or exc}"
    except Exception as exc:
        # a bucket's client raises its own errors (gcsfs, s3fs): the record is rescued all the same
        if not is_url(results_dir):
            raise
        problem = f"{type(exc).__name__}: {exc}"
    tried = []
    for place in rescue_dirs():
        try:
            return write_record(place, record), problem
        except OSError as exc:
            tried.append(f"{place} ({exc.strerror or exc})")
    raise BenchError(f"could not write the record to {results_dir} ({problem}), nor to {', '.join(tried)}")


def plan_cells(runs: list[ResolvedRun], chosen, source: str):
    """Each run's plan, and the matrix cells this backend refuses (e.g. packed rows on a
    backend without per-example attention): a refused cell is left out with its one
    line, the others run; when no cell can run, the first refusal is the answer."""
    resolved, refused, errors = [], [], []
    for run in runs:
        try:
            resolved.append((run, plan_of(run, chosen, source)))
        except SpecError as exc:
            if not run.cell:
                raise
            errors.append(exc)
            refused.append((run.variant, str(exc)))
    if errors and not resolved:
        raise errors[0]
    return resolved, refused


def plan_of(run: ResolvedRun, chosen, source: str) -> "plans.Plan | None":
    """The run's execution plan on the chosen backend and its devices (None when the run
    trains nothing); a SpecError naming the field when the backend cannot execute it."""
    if not any(tasks.get(name).needs_plan for name in tasks_of(run.scenario)):
        return None
    info = registry.get(chosen.name)
    probe = chosen.probe
    return plans.resolve(
        run.scenario,
        probe.device_kind,
        probe.device_count,
        info.capabilities,
        _where(source, run),
        device_memory_bytes=device_memory(run.scenario, probe),
    )


def device_memory(scenario, probe) -> int | None:
    """One device's memory for `micro_batch: auto`: the accelerator's, from the probe; on
    a CPU, the host's available memory shared by the virtual devices this host runs."""
    if probe.device_kind != "cpu":
        return probe.memory_bytes
    from harness.records.provenance import host_available_memory

    available = host_available_memory()
    parallel = scenario.parallel
    per_host = 1 if parallel.devices == "all" else max(1, parallel.devices // parallel.hosts)
    return available // per_host if available else None


def _where(source: str, run: ResolvedRun) -> str:
    parts = [f"{k}={v}" for k, v in {**run.cell, **run.overrides}.items()]
    return f"{source} [{', '.join(parts)}]" if parts else source


# --------------------------------------------------------------------------- one worker
def trace_staging(results_dir: Path, scenario: Scenario, task: str) -> Path | None:
    """Where a traced run's worker writes its trace: a directory in the results directory
    (renamed after the record once it has a name), or None when nothing is traced."""
    if not tasks.get(task).traced(scenario):
        return None
    if is_url(results_dir):
        raise SpecError(
            f"--results-dir {results_dir}",
            "trace",
            "a traced run's trace files are kept beside its record in a local results directory: "
            "give a local --results-dir for --trace (copy the folder to the bucket after)",
        )
    Path(results_dir).mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=results_dir, prefix=".tmp-trace-"))


def execute_run(
    run: ResolvedRun,
    chosen,
    timeout_s: float | None,
    on_event: Callable[[dict], None],
    task: str = "train",
    plan=None,
    trace_dir: Path | None = None,
) -> dict:
    """Run one worker to completion, timeout or death; {"facts": ...} or {"failure": ...}."""
    info = registry.get(chosen.name)
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        job_path, facts_path, log_path, events_path = (
            Path(tmp) / n for n in ("job.json", "facts.json", "worker.log", "events.jsonl")
        )
        launcher = launchers.get(tasks.get(task).launcher(info))
        job = {
            "backend": chosen.name,
            "task": task,
            # How the worker finds plug-in tasks: this one, and those whose sections the scenario has.
            "task_targets": {name: tasks.target(name) for name in tasks.names()},
            "scenario": run.scenario.model_dump(mode="json"),
            "plan": plan.model_dump(mode="json") if plan is not None else None,
            "facts_path": str(facts_path),
            "trace_dir": str(trace_dir) if trace_dir is not None else None,
            "launcher": launcher.name,  # how the worker learns its rank and where it writes
            **tasks.get(task).job_fields(run),
        }
        job_path.write_text(json.dumps(job))
        launched = time.perf_counter()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [chosen.python, *launcher.command(plan), "-m", "harness.run.worker", "run", str(job_path)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=registry.worker_env({**info.env, EVENT_FILE_ENV: str(events_path)}),
                start_new_session=True,  # its own process group: a kill reaches its children
            )
        stop = threading.Event()
        reached = Progress(launched)
        follower = threading.Thread(
            target=_follow_events, args=(events_path, reached.watching(on_event), stop), daemon=True
        )
        follower.start()
        try:
            timed_out = _wait(proc, timeout_s)
        except BaseException:  # Ctrl-C: stop the worker; the run in flight is lost
            _kill_group(proc)
            raise
        finally:
            stop.set()
            follower.join(timeout=5)
        outcome = _outcome(proc.returncode, timed_out, timeout_s, facts_path, log_path, launcher, reached)
        if "facts" in outcome:
            # The whole run as billed: interpreter start, launcher (torchrun) and
            # imports included, which the worker's own clock cannot see.
            outcome["facts"]["process_s"] = time.perf_counter() - launched
        return outcome


class Progress:
    """How far the worker got, from its events: a run killed at its time limit says in
    which phase and after how many steps, so a too-tight budget shows what to raise."""

    def __init__(self, launched: float) -> None:
        self.launched = launched
        self.phase: str | None = None
        self.phase_at_s = 0.0
        self.steps = 0
        self.last_step_at_s = 0.0
        self.unit = "step"

    def watching(self, on_event: Callable[[dict], None]) -> Callable[[dict], None]:
        def seen(event: dict) -> None:
            self.note(event, time.perf_counter() - self.launched)
            on_event(event)

        return seen

    def note(self, event: dict, at_s: float) -> None:
        if event.get("event") == "phase":
            self.phase, self.phase_at_s = str(event.get("name")), at_s
        elif event.get("event") in ("step", "request"):
            self.unit = "request" if event["event"] == "request" else "step"
            self.steps += 1
            self.last_step_at_s = at_s

    def said(self) -> str:
        """Where the worker was when killed, in seconds since its launch."""
        done = f"{self.steps} {self.unit}(s) done, the last ending {self.last_step_at_s:.1f} s after launch"
        if self.phase is None:
            return done if self.steps else "before the worker reported any progress (start, imports, backend load)"
        where = f"in phase '{self.phase}', entered {self.phase_at_s:.1f} s after launch"
        if self.phase != "steps":
            return where
        return f"{where}, " + (done if self.steps else "during the first step (its compile included)")


def _follow_events(path: Path, on_event: Callable[[dict], None], stop: threading.Event) -> None:
    """Tail the worker's event file until told to stop, then drain it."""
    position = 0
    while True:
        finished = stop.is_set()
        try:
            with open(path, "rb") as stream:
                stream.seek(position)
                for line in stream:
                    if not line.endswith(b"\n"):
                        break  # a line still being written
                    position += len(line)
                    try:
                        on_event(json.loads(line))
                    except ValueError:
                        continue
        except FileNotFoundError:
            pass
        if finished:
            return
        stop.wait(0.1)


def _wait(proc: subprocess.Popen, timeout_s: float | None) -> bool:
    try:
        proc.wait(timeout=timeout_s)
        return False
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return True


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the worker's process group, then SIGKILL after a grace period."""
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def _outcome(
    code: int,
    timed_out: bool,
    timeout_s: float | None,
    facts_path: Path,
    log_path: Path,
    launcher: launchers.Single = launchers.LAUNCHERS["single"],
    reached: Progress | None = None,
) -> dict:
    """The worker's facts, or its failure: its own, one its ranks reported (the
    launcher says where they write), else how it exited."""
    tail = _tail(log_path)
    if timed_out:
        return {
            "failure": {
                "kind": "timeout",
                "reason": f"exceeded the run time limit of {timeout_s:g} s; killed"
                + (f" {reached.said()}" if reached is not None else ""),
                "exit_code": code,
                "log_tail": tail,
            }
        }
    facts = _read_facts(facts_path)
    if facts is not None and "failure" not in facts and code == 0:
        return {"facts": facts}
    rank_failures = [_read_facts(p) for p in launcher.rank_facts(facts_path)]
    reported = [f["failure"] for f in [facts, *rank_failures] if f and "failure" in f]
    failure = dict(reported[0]) if reported else {}
    if not failure:
        failure = {
            "kind": "killed" if code < 0 else "crash",
            "reason": _exit_reason(code, wrote_facts=facts is not None),
        }
    failure.update(exit_code=code, log_tail=tail)
    return {"failure": failure}


def _read_facts(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _exit_reason(code: int, wrote_facts: bool) -> str:
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        hint = " (out of memory, or killed from outside)" if -code == signal.SIGKILL else ""
        return f"worker killed by signal {name}{hint}"
    if wrote_facts:
        # e.g. one rank of a torchrun launch crashed after rank 0 had reported
        return f"the run wrote its facts, but a worker process then exited with status {code} (see log_tail)"
    return f"worker exited with status {code} without writing its facts"


def _tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-LOG_TAIL_LINES:])
