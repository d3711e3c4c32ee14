"""First-use edges, as a new user meets them: the terminal summary puts each task's runs
under its own headers, a second `bench run` of a finished scenario shows the records it
skipped, and `bench backends` answers from its probe cache while nothing changed."""

from __future__ import annotations

import io
import json
import subprocess
import sys

from rich.console import Console

from harness import tasks
from harness.cli import main
from harness.records.store import load_records
from harness.run import registry
from harness.run.runner import run_key
from harness.scenario.loader import resolve_runs
from harness.terminal.display import summary

from conftest import ROOT, bench
from records import make_record

HISTORY = ROOT / "tests" / "fixtures" / "records_history"


# --------------------------------------------------------------------------- summary
def _rendered(records, width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=False)
    console.print(summary(records, console))
    return out.getvalue()


def _train_and_serve():
    records = load_records([HISTORY / "47637bb"]).records
    return [r for r in records if r.task == "train"], [r for r in records if r.task == "serve"]


def test_a_serve_run_is_summarised_under_serving_headers_not_training_ones():
    train, serve = _train_and_serve()
    ttft = f"{serve[0].metrics.ttft_s.median:.4g}"
    for width in (250, 80):
        alone = _rendered(serve, width)
        assert "TTFT med (s)" in alone and ttft in alone
        assert "step med" not in alone and "MFU" not in alone  # its TTFT is no step time
        both = _rendered(train + serve, width)
        for column in (*tasks.get("train").summary_columns(), *tasks.get("serve").summary_columns()):
            assert column in both, (column, both)
    narrow = _rendered(train + serve, 80).splitlines()
    at = next(i for i, line in enumerate(narrow) if "serve-local" in line)
    assert narrow[at + 1].startswith(f"  TTFT med (s) {ttft}")  # the serve block's first pair


def test_a_plug_in_tasks_summary_shows_its_report_columns_by_default():
    from harness.tasks.base import Column, Task

    task = Task("echo", report_columns=[Column("metrics.num_words", "words", "d")])

    class Finished:
        def figure(self, figure_id):
            return {"metrics.num_words": 9}[figure_id]

    assert task.summary_columns() == ("words",) and task.summary_values(Finished()) == {"words": "9"}


def test_a_second_run_of_a_finished_scenario_shows_the_records_it_skipped(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (run,) = resolve_runs(ROOT / "scenarios" / "tiny.yaml")
    existing = make_record([0.5] * 3)
    existing["run_key"] = run_key(run.scenario_hash, "torch", "cpu", 0)
    (results / "done.json").write_text(json.dumps(existing))
    done = bench(
        "run", "scenarios/tiny.yaml", "--backend", "torch", "--results-dir", str(results), "--no-progress", timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "1 run skipped: already recorded (--force reruns them)" in done.stdout
    assert "step med (s)" in done.stdout and "0.5" in done.stdout and "2000" in done.stdout  # 1000 tokens / 0.5 s


# --------------------------------------------------------------------------- probe cache
def _fake_venv(tmp_path):
    root = tmp_path / "venv"
    (root / "bin").mkdir(parents=True)
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    site = root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    site.mkdir(parents=True)
    (root / "bin" / "python").symlink_to(sys.executable)
    return root / "bin" / "python", site


def test_backends_probes_again_only_what_changed(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    spawned: list[list[str]] = []
    answer = {"available": True, "reason": "", "device_kind": "cpu", "device_name": "fake", "device_count": 1}

    def fake_run(cmd, **kwargs):  # the probe's worker process, counted instead of started
        spawned.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(answer) + "\n", stderr="")

    monkeypatch.setattr(registry.subprocess, "run", fake_run)
    python, site = _fake_venv(tmp_path)
    args = ["backends", "--json", "--python", f"torch={python}"]
    every = len(registry.all_backends())
    assert main(args) == 0 and len(spawned) == every
    capsys.readouterr()
    assert main(args) == 0 and len(spawned) == every  # nothing changed: no probe started
    out = capsys.readouterr()
    assert f"{every} of {every} from the probe cache" in out.err
    assert {row["name"] for row in json.loads(out.out) if row["available"]} == set(registry.all_backends())
    (site / "peft-9.9.dist-info").mkdir()  # a package installed in torch's interpreter
    assert main(args) == 0 and spawned[every:] == [[str(python), "-m", "harness.run.worker", "probe", "torch"]]
    assert main([*args, "--fresh"]) == 0 and len(spawned) == 2 * every + 1


def test_a_probe_that_timed_out_is_not_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    spawned: list[list[str]] = []

    def slow_run(cmd, **kwargs):
        spawned.append(cmd)
        raise subprocess.TimeoutExpired(cmd, kwargs.get("timeout", 1))

    monkeypatch.setattr(registry.subprocess, "run", slow_run)
    every = len(registry.all_backends())
    assert main(["backends", "--json"]) == 0 and main(["backends", "--json"]) == 0
    assert len(spawned) == 2 * every  # a busy machine's time-out is asked again


def test_an_interpreter_whose_packages_cannot_be_found_is_always_probed(tmp_path, monkeypatch):
    """A launcher script (a pyenv shim) hides which site-packages it runs: never cached."""
    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path / "cache"))
    shim = tmp_path / "shims" / "python"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    shim.chmod(0o755)
    spawned: list[list[str]] = []
    answer = {"available": True, "reason": "", "device_kind": "cpu", "device_name": "fake", "device_count": 1}

    def fake_run(cmd, **kwargs):
        spawned.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout=json.dumps(answer) + "\n", stderr="")

    monkeypatch.setattr(registry.subprocess, "run", fake_run)
    args = ["backends", "--json", "--python", f"torch={shim}"]
    assert main(args) == 0 and main(args) == 0
    assert [cmd for cmd in spawned if cmd[0] == str(shim)] == [
        [str(shim), "-m", "harness.run.worker", "probe", "torch"]
    ] * 2
