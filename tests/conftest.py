"""Shared helpers: run the real CLI in a subprocess, the way users and CI do."""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "scenarios"


# XLA's CPU compiler at LLVM optimisation level 0 for every run the tests start (JAX,
# torchax, torch_xla): compiling is most of a tiny model's run (a jax-tunix dynamic-padding
# cell: 106 s -> 63 s, the same losses to the last digit), and no test bounds how fast XLA's
# code runs. Each record states it: XLA_FLAGS is in its provenance.
TEST_XLA_FLAG = "--xla_backend_optimization_level=0"


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "serial: times something against the wall clock; runs while no other test does (see run_alone_if_serial)",
    )
    # One math thread in every process the tests start (bench's CLIs, workers, ranks) and
    # in this one: xdist runs two test files at a time on CI's 2 cores, and two OpenMP
    # threads a process then spin against the other worker's and against each other
    # (a tiny torch step measured 3x-6x slower with 2 threads than with 1 under that load;
    # tests/backends/test_serve_local.py saw 10x). Records state it (provenance environment).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    # One tokenizer cache for the session, never the user's.
    os.environ.setdefault("BENCH_CACHE_DIR", str(Path(config.rootpath) / ".pytest_cache" / "bench-cache"))
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_backend_optimization_level" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {TEST_XLA_FLAG}".strip()


# pytest-xdist runs test files two at a time (`-n 2` in pyproject's addopts: CI's 2
# cores are otherwise half idle while one process compiles). A test whose verdict rests on
# wall-clock time (a slowed run against its baseline, a request rate, a deadline) is
# marked `serial` and runs alone: it waits until the other worker's current test ends, and
# that worker starts nothing new until it is done. A readers-writer lock on two files the
# workers share: every test holds RUNNING shared, a serial one exclusive; TURNSTILE, held
# by a serial test while it waits, stops new tests from starving it.
def _lock_files() -> tuple[Path, Path] | None:
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        return None  # one process: every test already runs alone
    folder = Path(tempfile.gettempdir())
    return folder / f"bench-tests-{run}.turnstile", folder / f"bench-tests-{run}.running"


_held_alone: list = []  # the lock files while a run of serial tests keeps them (see below)


def shared_across_workers(name: str, compute):
    """compute()'s JSON-able answer once per test session, whichever xdist worker asks
    first; the other waits for it (a file lock) and reads it. For one expensive run two
    test files read: `--dist loadfile` gives each file's module fixtures to one worker,
    so a fixture alone would run twice. Not kept if compute() raises (the next asker
    tries again and says why)."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        return compute()  # one process: the callers' fixtures already run it once each
    folder = Path(tempfile.gettempdir()) / f"bench-tests-{run}.shared"
    folder.mkdir(exist_ok=True)
    answer = folder / f"{name}.json"
    with open(folder / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if answer.exists():
            return json.loads(answer.read_text())
        value = compute()
        part = answer.with_suffix(".part")
        part.write_text(json.dumps(value))
        part.rename(answer)
        return value


def jax_kernels_probe(backend: str) -> dict:
    """benchmarks/probes/jax_kernels_probe.py in the backend's interpreter: the attention
    and loss-kernel probes in one start, read by tests/backends/test_jax_attention.py and test_jax_loss_kernels.py."""
    from harness.run.registry import interpreter_for, worker_env

    def run() -> dict:
        done = subprocess.run(
            [interpreter_for(backend), str(ROOT / "benchmarks" / "probes" / "jax_kernels_probe.py"), backend],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**worker_env(), "PYTHONPATH": str(ROOT)},
            timeout=1200,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    return shared_across_workers(f"jax-kernels-probe-{backend}", run)


@contextlib.contextmanager
def run_alone_if_serial(serial: bool, keep_for_next: bool = False):
    """Hold RUNNING shared (a test) or exclusive (a serial test); `keep_for_next`: the
    next test is serial too, in the same file, so the exclusive hold passes straight to
    it rather than letting the other worker start one test (of minutes) in between."""
    files = _lock_files()
    if files is None:
        yield
        return
    if not _held_alone:
        turnstile, running = open(files[0], "a"), open(files[1], "a")
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(running, fcntl.LOCK_EX if serial else fcntl.LOCK_SH)
        if not serial:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        _held_alone.extend([turnstile, running])
    try:
        yield
    finally:
        if not (serial and keep_for_next):
            turnstile, running = _held_alone
            _held_alone.clear()
            fcntl.flock(running, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            running.close()
            turnstile.close()


def measured_file_seconds(tier: str) -> dict[str, float]:
    """Each test file's measured test time in this tier (tests/file_durations.json), by
    path relative to the repository."""
    try:
        return json.loads((Path(__file__).parent / "file_durations.json").read_text())[tier]
    except (OSError, ValueError, KeyError):
        return {}


def pytest_collection_modifyitems(config, items):
    """Files with real training or serving runs (`slow`) first, the longest first by their
    measured time in this tier (tests/file_durations.json; a file not measured yet counts
    as 0 s), so that the two workers end together on the quick files rather than one
    waiting on a late compile-heavy file (xdist hands out files in this order:
    `--no-loadscope-reorder`); each file's serial tests last, in their order, so its
    module fixtures (a server, a shared run) are mostly built while the other worker
    still works."""
    tier = "fast" if "not slow" in (config.getoption("markexpr") or "") else "slow"
    seconds = measured_file_seconds(tier)
    files: dict = {}
    for item in items:
        files.setdefault(item.path, [len(files), True])
        if item.get_closest_marker("slow"):
            files[item.path][1] = False

    def measured(item) -> float:
        return seconds.get(item.path.relative_to(ROOT).as_posix(), 0.0)

    items.sort(
        key=lambda item: (
            files[item.path][1],
            -measured(item),
            files[item.path][0],
            item.get_closest_marker("serial") is not None,
        )
    )


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    serial = item.get_closest_marker("serial") is not None
    next_serial_here = (
        nextitem is not None and nextitem.path == item.path and nextitem.get_closest_marker("serial") is not None
    )
    with run_alone_if_serial(serial, keep_for_next=serial and next_serial_here):
        yield


# Importing torchax registers its 'jax' device as torch's PrivateUse1 accelerator for the
# rest of the process: every later torch.compile in this worker then fails ("PyTorch is not
# linked with support for jax devices"), in whichever test xdist happens to run next. A test
# that imports it must do so in a child interpreter; this names the test that did not.
def pytest_runtest_teardown(item, nextitem):
    if "torchax" in sys.modules:
        del sys.modules["torchax"]  # report once, not in every later test
        pytest.fail(
            f"{item.nodeid} imported torchax in the pytest process: run it in a child "
            "interpreter (it registers the 'jax' device and breaks torch.compile in later tests)",
            pytrace=False,
        )


def bench(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`bench ARGS` as a subprocess of this interpreter; output captured as text."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=full_env,
        timeout=timeout,
    )


def records_in(directory: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(Path(directory).glob("*.json"))]


def failures_in(directory: Path) -> str:
    """The failed records' reasons and log tails: what an assertion message needs when
    a run that should pass did not (the CLI's table shows only 'crash')."""
    failed = [r["failure"] for r in records_in(directory) if r["status"] != "ok"]
    return "\n\n".join(f"{f['reason']}\n{f.get('log_tail', '')[-3000:]}" for f in failed)


def write_scenario(directory: Path, text: str, name: str = "s.yaml") -> Path:
    path = Path(directory) / name
    path.write_text(text)
    return path


TINY = (SCENARIOS / "tiny.yaml").read_text()


def stack_or_skip(backend: str, module: str, how: str) -> None:
    """A backend's framework must be importable here or in the interpreter that
    BENCH_PYTHON_<BACKEND> names; CI must have it (a skip there would hide a gap)."""
    env_key = "BENCH_PYTHON_" + backend.upper().replace("-", "_")
    if os.environ.get(env_key) or importlib.util.find_spec(module):
        return
    if os.environ.get("CI"):
        pytest.fail(f"CI must provide {module} for {backend}: {how}")
    pytest.skip(f"{module} is not installed here ({how}, or set {env_key} to a python that has it)")


@pytest.fixture
def results(tmp_path) -> Path:
    return tmp_path / "results"


@pytest.fixture(autouse=True)
def _fine_tune_batches_computed_afresh():
    """harness.projection.fine_tune remembers a fine-tune's batches per process (a report asks for
    them several times); each test starts without them, so a test (and a mutant under
    the mutation check, forked from a warm process) runs the code it checks."""
    from harness.projection import fine_tune

    fine_tune._WORK.clear()
