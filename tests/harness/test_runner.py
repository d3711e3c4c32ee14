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

from conftest import ROOT, TINY, bench, records_in, write_scenario

pytestmark = pytest.mark.slow

SHORT = ["--no-progress", "--set", "train.steps=3", "--set", "train.warmup_steps=1", "--set", "train.window_steps=0"]


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


def test_one_raises_one_times_out_one_is_killed_and_the_sweep_goes_on(tmp_path, results):
    pid_file = tmp_path / "victim.pid"
    faults = [
        {"match": {"train.seed": 1}, "at": "step", "step": 1, "action": "raise"},
        {"match": {"train.seed": 2}, "at": "setup", "action": "hang"},
        {"match": {"train.seed": 3}, "at": "setup", "action": "hang", "pid_file": str(pid_file)},
    ]
    path = write_scenario(
        tmp_path, TINY.replace("run_timeout_s: 300", "run_timeout_s: 30") + "matrix:\n  train.seed: [0, 1, 2, 3]\n"
    )
    killer = _kill_when_pid_file_appears(pid_file)
    done = bench("run", str(path), "--results-dir", str(results), *SHORT, env={"BENCH_FAULTS": json.dumps(faults)})
    killer.join(timeout=1)
    assert done.returncode == 1
    by_seed = {r["scenario"]["resolved"]["train"]["seed"]: r for r in records_in(results)}
    assert sorted(by_seed) == [0, 1, 2, 3]
    assert by_seed[0]["status"] == "ok" and by_seed[0]["metrics"]["step_time_s"]["n"] == 2
    crashed, timed_out, killed = by_seed[1]["failure"], by_seed[2]["failure"], by_seed[3]["failure"]
    assert crashed["kind"] == "error" and "injected fault" in crashed["reason"] and crashed["exit_code"] == 1
    assert "RuntimeError" in crashed["log_tail"]
    assert timed_out["kind"] == "timeout" and "30 s" in timed_out["reason"]
    assert killed["kind"] == "killed" and "SIGKILL" in killed["reason"] and killed["exit_code"] == -9
    assert len({crashed["reason"], timed_out["reason"], killed["reason"]}) == 3


def test_a_worker_that_would_abort_in_interpreter_teardown_keeps_its_finished_run(tmp_path, results):
    """Native runtimes can abort at exit after the facts are written (gloo's threads do,
    pytorch#179291); the worker ends without that teardown, so the run stays ok."""
    fault = [{"at": "setup", "action": "abort_at_exit"}]
    path = write_scenario(tmp_path, TINY)
    done = bench("run", str(path), "--results-dir", str(results), *SHORT, env={"BENCH_FAULTS": json.dumps(fault)})
    assert done.returncode == 0, done.stdout + done.stderr
    [record] = records_in(results)
    assert record["status"] == "ok" and record["metrics"]["step_time_s"]["n"] == 2


def test_facts_followed_by_a_crashed_process_are_a_failure_that_says_so(tmp_path):
    from harness.runner import _outcome

    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps({"loop": {}}))
    failure = _outcome(1, False, None, facts, tmp_path / "log.txt")["failure"]
    assert failure["kind"] == "crash" and failure["exit_code"] == 1
    assert "wrote its facts" in failure["reason"]
    facts.unlink()
    assert "without writing its facts" in _outcome(1, False, None, facts, tmp_path / "log.txt")["failure"]["reason"]


def test_resume_skips_successful_runs_and_force_reruns(tmp_path, results):
    path = str(write_scenario(tmp_path, TINY))
    assert bench("run", path, "--results-dir", str(results), *SHORT).returncode == 0
    again = bench("run", path, "--results-dir", str(results), *SHORT)
    assert again.returncode == 0 and "skipped" in again.stderr + again.stdout
    assert len(records_in(results)) == 1
    assert bench("run", path, "--results-dir", str(results), *SHORT, "--force").returncode == 0
    assert len(records_in(results)) == 2


def test_sigkill_of_the_parent_loses_only_the_run_in_flight(tmp_path, results):
    path = str(write_scenario(tmp_path, TINY + "matrix:\n  train.seed: [0, 1, 2]\n"))
    args = [sys.executable, "-m", "harness.cli", "run", path, "--results-dir", str(results), *SHORT]
    parent = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while len(list(results.glob("*.json"))) < 1 and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(2.0)  # the second run is now in flight
    parent.kill()
    parent.wait()
    time.sleep(2.0)  # the orphaned worker notices and exits
    assert [p.name.startswith(".tmp-") for p in results.iterdir()] == [False]
    (first,) = records_in(results)
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
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
    path = str(write_scenario(tmp_path, TINY))
    assert bench("run", path, "--results-dir", str(results), *SHORT).returncode == 0
    done = bench(
        "run", path, "--results-dir", str(results), *SHORT, "--set", "train.seed=1", "--python", f"torch={wrapper}"
    )
    assert done.returncode == 0, done.stderr
    assert "harness.worker run" in marker.read_text()
    pythons = sorted(r["backend"]["python"] for r in records_in(results))
    assert pythons == sorted([sys.executable, str(wrapper)])
    via_env = bench(
        "run",
        path,
        "--results-dir",
        str(results),
        *SHORT,
        "--set",
        "train.seed=2",
        env={"BENCH_PYTHON_TORCH": str(wrapper)},
    )
    assert via_env.returncode == 0 and marker.read_text().count("harness.worker run") >= 2


@pytest.mark.parametrize("outcome", ["ok", "raises"])
def test_the_backend_is_torn_down_after_its_facts_are_written_whatever_happened(tmp_path, monkeypatch, outcome):
    """teardown() runs after a failed run too, after the facts are on disk; a teardown
    that itself fails is logged and changes neither the facts nor the exit code."""
    from harness import worker

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
