"""Sweeps that survive: failures become records, the rest of the sweep goes on,
interrupted sweeps resume, and workers can run under another interpreter."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from echo_cli import ECHO_SCENARIO, echo_env

from conftest import ROOT, bench, records_in, write_scenario

pytestmark = pytest.mark.slow

# These tests are about the runner's mechanics (failures as records, resume, signals,
# interpreters), not a backend's figures: their runs are the echo task's on the echo-cpu
# backend (tests/echo_cli.py), whose probe and worker import no framework.
ECHO = ["--backend", "echo-cpu", "--no-progress"]


def _kill_when_pid_file_appears(pid_file: Path, stop_after_s: float = 300) -> threading.Thread:
    def watch():
        deadline = time.time() + stop_after_s
        while time.time() < deadline:
            if pid_file.exists() and pid_file.read_text().strip():
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
                return
            time.sleep(0.2)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _pid_from(pid_file: Path, within_s: float = 120) -> int:
    deadline = time.time() + within_s
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.time() < deadline:
        time.sleep(0.1)
    return int(pid_file.read_text())


def _gone(pid: int, within_s: float = 30) -> bool:
    """Whether process `pid` ended (or is a zombie nobody reaped yet) within the time."""
    deadline = time.time() + within_s
    while time.time() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return True
        time.sleep(0.1)
    return False


def test_one_raises_one_times_out_one_is_killed_and_the_sweep_goes_on(tmp_path, results):
    # The matrix varies the time limit and the faults pick their runs by it: the run that
    # hangs waits 3 s for its limit, while the others have a minute on a busy machine.
    pid_file = tmp_path / "victim.pid"
    faults = [
        {"match": {"run_timeout_s": 61}, "at": "step", "step": 1, "action": "raise"},
        {"match": {"run_timeout_s": 3}, "at": "setup", "action": "hang"},
        {"match": {"run_timeout_s": 62}, "at": "setup", "action": "hang", "pid_file": str(pid_file)},
    ]
    path = write_scenario(tmp_path, ECHO_SCENARIO + "matrix:\n  run_timeout_s: [60, 61, 3, 62]\n")
    killer = _kill_when_pid_file_appears(pid_file)
    env = {**echo_env(tmp_path / "plugin"), "BENCH_FAULTS": json.dumps(faults)}
    done = bench("run", str(path), "--results-dir", str(results), *ECHO, env=env)
    killer.join(timeout=1)
    assert done.returncode == 1
    by_limit = {r["scenario"]["resolved"]["run_timeout_s"]: r for r in records_in(results)}
    assert sorted(by_limit) == [3, 60, 61, 62]
    assert by_limit[60]["status"] == "ok" and by_limit[60]["metrics"] == {"num_words": 9, "echoed": "tiny Gemma 3"}
    crashed, timed_out, killed = by_limit[61]["failure"], by_limit[3]["failure"], by_limit[62]["failure"]
    assert crashed["kind"] == "error" and "injected fault" in crashed["reason"] and crashed["exit_code"] == 1
    assert "RuntimeError" in crashed["log_tail"]
    assert timed_out["kind"] == "timeout" and "3 s" in timed_out["reason"]
    assert "before the worker reported any progress" in timed_out["reason"]  # it hung before its phase
    assert killed["kind"] == "killed" and "SIGKILL" in killed["reason"] and killed["exit_code"] == -9
    assert len({crashed["reason"], timed_out["reason"], killed["reason"]}) == 3


def test_a_worker_that_would_abort_in_interpreter_teardown_keeps_its_finished_run(tmp_path, results):
    """Native runtimes can abort at exit after the facts are written (gloo's threads do,
    pytorch#179291); the worker ends without that teardown, so the run stays ok."""
    fault = [{"at": "setup", "action": "abort_at_exit"}]
    path = write_scenario(tmp_path, ECHO_SCENARIO)
    env = {**echo_env(tmp_path / "plugin"), "BENCH_FAULTS": json.dumps(fault)}
    done = bench("run", str(path), "--results-dir", str(results), *ECHO, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    [record] = records_in(results)
    assert record["status"] == "ok" and record["metrics"]["num_words"] == 9


def test_facts_followed_by_a_crashed_process_are_a_failure_that_says_so(tmp_path):
    from harness.run.runner import _outcome

    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"loop": {}}))
    failure = _outcome(1, False, None, facts, tmp_path / "log.txt")["failure"]
    assert failure["kind"] == "crash" and failure["exit_code"] == 1
    assert "wrote its facts" in failure["reason"]
    facts.unlink()
    assert "without writing its facts" in _outcome(1, False, None, facts, tmp_path / "log.txt")["failure"]["reason"]


def test_resume_skips_successful_runs_and_force_reruns(tmp_path, results):
    path = str(write_scenario(tmp_path, ECHO_SCENARIO))
    env = echo_env(tmp_path / "plugin")
    assert bench("run", path, "--results-dir", str(results), *ECHO, env=env).returncode == 0
    again = bench("run", path, "--results-dir", str(results), *ECHO, env=env)
    assert again.returncode == 0 and "skipped" in again.stderr + again.stdout
    assert len(records_in(results)) == 1
    assert bench("run", path, "--results-dir", str(results), *ECHO, "--force", env=env).returncode == 0
    assert len(records_in(results)) == 2


def test_sigkill_of_the_parent_loses_only_the_run_in_flight(tmp_path, results):
    path = str(write_scenario(tmp_path, ECHO_SCENARIO + "matrix:\n  echo.words: [1, 2, 3]\n"))
    args = [sys.executable, "-m", "harness.cli", "run", path, "--results-dir", str(results), *ECHO]
    env = {**os.environ, **echo_env(tmp_path / "plugin")}
    # The second run hangs (in the first sweep only) and says when it is in flight.
    pid_file = tmp_path / "second.pid"
    fault = [{"match": {"echo.words": 2}, "at": "setup", "action": "hang", "pid_file": str(pid_file)}]
    faulty = {**env, "BENCH_FAULTS": json.dumps(fault)}
    parent = subprocess.Popen(args, cwd=ROOT, env=faulty, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = _pid_from(pid_file)  # the second run is now in flight
    parent.kill()
    parent.wait()
    assert _gone(worker), "the orphaned worker did not notice its parent's death"
    assert [p.name.startswith(".tmp-") for p in results.iterdir()] == [False]
    (first,) = records_in(results)
    done = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    records = records_in(results)
    assert len(records) == 3 and len({r["run_key"] for r in records}) == 3
    assert [r["run_id"] for r in records].count(first["run_id"]) == 1
    assert not any(p.name.startswith(".tmp-") for p in results.iterdir())


def test_worker_runs_under_a_configured_interpreter_into_the_same_results(tmp_path, results):
    marker = tmp_path / "used.txt"
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> "{marker}"\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    path = str(write_scenario(tmp_path, ECHO_SCENARIO))
    env = echo_env(tmp_path / "plugin")
    assert bench("run", path, "--results-dir", str(results), *ECHO, env=env).returncode == 0
    done = bench(
        "run",
        path,
        "--results-dir",
        str(results),
        *ECHO,
        "--set",
        "echo.words=1",
        "--python",
        f"echo-cpu={wrapper}",
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "harness.run.worker run" in marker.read_text()
    pythons = sorted(r["backend"]["python"] for r in records_in(results))
    assert pythons == sorted([sys.executable, str(wrapper)])
    via_env = bench(
        "run",
        path,
        "--results-dir",
        str(results),
        *ECHO,
        "--set",
        "echo.words=2",
        env={**env, "BENCH_PYTHON_ECHO_CPU": str(wrapper)},
    )
    assert via_env.returncode == 0 and marker.read_text().count("harness.run.worker run") >= 2


@pytest.mark.parametrize("outcome", ["ok", "raises"])
def test_the_backend_is_torn_down_after_its_facts_are_written_whatever_happened(tmp_path, monkeypatch, outcome):
    """teardown() runs after a failed run too, after the facts are on disk; a teardown
    that itself fails is logged and changes neither the facts nor the exit code."""
    from harness.run import worker

    order: list[str] = []
    facts_path = tmp_path / "facts.json"

    class Held:
        def teardown(self):
            order.append("teardown" if facts_path.exists() else "teardown before the facts")
            raise RuntimeError("teardown broke")

    def execute(job, events, held):
        held.append(Held())
        if outcome == "raises":
            raise ValueError("the run broke")
        return {"loop": "done"}

    monkeypatch.setattr(worker, "execute", execute)
    monkeypatch.setattr(worker, "_watch_parent", lambda: None)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"facts_path": str(facts_path)}))
    code = worker.run_job(str(job))
    facts = json.loads(facts_path.read_text())
    assert order == ["teardown"]
    if outcome == "ok":
        assert (code, facts) == (0, {"loop": "done"})
    else:
        assert code == 1 and "the run broke" in facts["failure"]["reason"]


def test_a_timed_out_run_says_how_far_its_worker_got():
    """The failure of a run cut at its limit names the phase and the steps done, each
    with its time since launch, so a budget too tight says which term to raise."""
    from harness.run.runner import Progress

    progress = Progress(launched=0.0)
    progress.note({"event": "phase", "name": "setup"}, 1.0)
    assert progress.said() == "in phase 'setup', entered 1.0 s after launch"
    progress.note({"event": "phase", "name": "steps"}, 34.5)
    assert progress.said().endswith("entered 34.5 s after launch, during the first step (its compile included)")
    progress.note({"event": "step", "index": 0}, 80.25)
    progress.note({"event": "step", "index": 1}, 81.0)
    assert progress.said().endswith("2 step(s) done, the last ending 81.0 s after launch")
    serving = Progress(launched=0.0)
    serving.note({"event": "request", "index": 0}, 12.0)
    assert serving.said() == "1 request(s) done, the last ending 12.0 s after launch"
