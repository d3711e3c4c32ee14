"""The CLI's edges, the way a new user meets them: every mistake is refused with exit 2
and one line `bench: ...` naming the file or flag and the field (never a traceback),
before any work; a record that cannot be written where asked is saved somewhere safe;
a gate that compares nothing fails; nothing a user needs is cut from the summary."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from echo_cli import ECHO_SCENARIO, echo_env
from rich.console import Console

from harness import tasks
from harness.records.record import run_key
from harness.records.store import load_record
from harness.scenario.loader import resolve_runs
from harness.terminal.display import summary

from conftest import ROOT, TINY, bench, records_in, write_scenario
from records import failed_record, make_record

FAST = ["--no-progress", "--set", "train.steps=3", "--set", "train.warmup_steps=1", "--set", "train.window_steps=0"]


def refused(done: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, exactly one line on stderr starting `bench: `, no traceback; the line."""
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench: "), done.stderr
    assert "Traceback" not in done.stderr and "bench: bench" not in lines[0], lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def spy_python(tmp_path) -> tuple[Path, Path]:
    """An interpreter that notes every start in a file, then runs the real one: a probe
    or a worker leaves a line; a command refused before any work leaves none."""
    marker = tmp_path / "started.txt"
    wrapper = tmp_path / "spy-python"
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> "{marker}"\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, marker


# --------------------------------------------------------------------------- bench run
@pytest.mark.serial
@pytest.mark.parametrize("inside", ["", "sub/dir"])
def test_a_results_dir_that_is_a_file_is_refused_before_any_work(tmp_path, spy_python, inside):
    wrapper, marker = spy_python
    blocker = tmp_path / "results.txt"
    blocker.write_text("not a directory\n")
    target = blocker / inside if inside else blocker
    started = time.monotonic()
    done = bench(
        "run", "scenarios/tiny.yaml", "--results-dir", str(target), "--python", f"torch={wrapper}", *FAST, timeout=120
    )
    refused(done, "--results-dir", str(target), "not a directory")
    assert time.monotonic() - started < 15  # seconds: no probe, no run
    assert not marker.exists(), "a backend was probed or run before the refusal"
    assert blocker.read_text() == "not a directory\n"


def test_a_record_that_cannot_be_written_is_saved_somewhere_safe_and_says_where(tmp_path):
    """The results directory passes the pre-flight, then refuses the write at the end
    (as a full disk, or a directory made read-only during the run, would): the record
    goes to ./bench-rescued-records and one line says so. `--timeout 1` makes the run
    a quick timeout: its record matters as much as any. The run is the echo task's, hung
    by a fault, on the echo-cpu backend (tests/echo_cli.py): no framework is imported."""
    results = tmp_path / "results"
    path = write_scenario(tmp_path, ECHO_SCENARIO)
    hang = [{"at": "setup", "action": "hang"}]
    script = (
        "import sys\n"
        "import harness.run.runner as runner\n"
        "from harness.cli import main\n"
        "real = runner.write_record\n"
        "def refuse(results_dir, record):\n"
        "    if str(results_dir) == sys.argv[1]:\n"
        "        raise PermissionError(13, 'Permission denied', str(results_dir))\n"
        "    return real(results_dir, record)\n"
        "runner.write_record = refuse\n"
        "sys.exit(main(sys.argv[2:]))\n"
    )
    plugins = echo_env(tmp_path / "plugin")["PYTHONPATH"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{plugins}", "BENCH_FAULTS": json.dumps(hang)}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            script,
            str(results),
            "run",
            str(path),
            "--backend",
            "echo-cpu",
            "--results-dir",
            str(results),
            "--timeout",
            "1",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    line = lines[0]
    assert line.startswith("bench: could not write the record to") and str(results) in line and "Permission" in line
    saved = Path(line.rsplit("saved it to ", 1)[1])
    assert saved.parent == tmp_path / "bench-rescued-records"
    record = load_record(saved)
    assert record.status == "failed" and record.failure.kind == "timeout"
    assert not list(results.glob("*.json"))


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "1e9"])
def test_a_nonsense_timeout_is_refused_not_ignored(tmp_path, value):
    done = bench("run", "scenarios/tiny.yaml", "--results-dir", str(tmp_path / "r"), "--timeout", value, timeout=60)
    refused(done, "--timeout", "seconds")
    assert not (tmp_path / "r").exists()


def test_a_misspelt_python_backend_is_refused_not_ignored(tmp_path):
    for command in (["run", "scenarios/tiny.yaml", "--results-dir", str(tmp_path / "r")], ["backends"]):
        done = bench(*command, "--python", f"trch={sys.executable}", timeout=60)
        refused(done, "--python trch=", "unknown backend 'trch'", "torch")


def test_a_missing_interpreter_is_named_even_without_backend(tmp_path):
    done = bench(
        "run",
        "scenarios/tiny.yaml",
        "--results-dir",
        str(tmp_path / "r"),
        "--python",
        "torch=/nonexistent/python3",
        timeout=60,
    )
    refused(done, "--python torch=/nonexistent/python3", "cannot be run")
    via_env = bench(
        "run",
        "scenarios/tiny.yaml",
        "--results-dir",
        str(tmp_path / "r"),
        env={"BENCH_PYTHON_TORCH": "/nonexistent/python3"},
        timeout=60,
    )
    refused(via_env, "BENCH_PYTHON_TORCH=/nonexistent/python3")


def test_backend_options_are_checked_before_any_probe(tmp_path, spy_python):
    wrapper, marker = spy_python
    path = write_scenario(tmp_path, TINY + "backend_options:\n  torch: {devise: cuda}\n")
    done = bench(
        "run",
        str(path),
        "--results-dir",
        str(tmp_path / "r"),
        "--backend",
        "torch",
        "--python",
        f"torch={wrapper}",
        timeout=60,
    )
    refused(done, str(path), "backend_options.torch.devise", "unknown key")
    assert not marker.exists()


@pytest.mark.serial
def test_a_cost_budget_without_a_price_is_refused_before_any_run(tmp_path):
    # No spot price for a CPU host in the catalog: the budget on $/run could never be checked.
    path = write_scenario(tmp_path, TINY + "cost: {pricing: spot}\nbudgets:\n  - {metric: usd_run, max: 1.0}\n")
    started = time.monotonic()
    done = bench("run", str(path), "--results-dir", str(tmp_path / "r"), "--backend", "torch", *FAST, timeout=120)
    refused(done, "budgets.0.metric", "usd_run", "'cpu'", "cost.prices.cpu")
    assert not (tmp_path / "r").exists() and time.monotonic() - started < 60


def test_run_json_lists_runs_skipped_as_done_with_their_paths(tmp_path):
    """A successful record with the run's key is already there: nothing runs, and --json
    prints that record's path marked skipped (not `[]`)."""
    results = tmp_path / "results"
    results.mkdir()
    (run,) = resolve_runs(ROOT / "scenarios" / "tiny.yaml")
    existing = make_record([0.5] * 3)
    existing["run_key"] = run_key(run.scenario_hash, "torch", "cpu", 0)
    (results / "done.json").write_text(json.dumps(existing))
    done = bench(
        "run",
        "scenarios/tiny.yaml",
        "--backend",
        "torch",
        "--results-dir",
        str(results),
        "--json",
        "--no-progress",
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads(done.stdout)
    assert entry["skipped"] is True and entry["path"] == str(results / "done.json")
    assert entry["run_key"] == existing["run_key"] and entry["task"] == "train"
    assert len(records_in(results)) == 1


# --------------------------------------------------------------------------- summary
def _rendered(records, width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=False)
    console.print(summary(records, console))
    return out.getvalue()


def test_the_summary_keeps_every_value_whole_at_80_columns():
    times = [0.123456, 0.151, 0.1107, 0.1893, 0.1302]
    ok = make_record(times, name="a-rather-long-scenario-name", variant="padding=bucketed,seed=12")
    timed_out = failed_record(name="tiny")
    timed_out["failure"]["kind"] = "timeout"
    wide = _rendered([ok, timed_out], 250)
    narrow = _rendered([ok, timed_out], 80)
    assert "…" not in wide and "…" not in narrow
    assert all(len(line) <= 80 for line in narrow.splitlines())
    m, c = ok["metrics"], ok["cost"]
    for text in (wide, narrow):
        for column in tasks.get("train").summary_columns():
            assert column in text
        for value in (
            # Recomputed from the step times (numpy), not read back from the record shown.
            f"{np.median(times):.4g}",
            f"{np.percentile(times, 90):.4g}",
            f"{1000 * len(times) / sum(times):.4g}",  # make_record's 1000 real tokens a step
            f"{m['peak_memory_gib']:.3g}",
            f"{c['usd_run']:.2g}",
            "timeout",
            "a-rather-long-scenario-name",
            "padding=bucketed,seed=12",
        ):
            assert value in text, (value, text)


# A real run's summary in an 80-column log: tests/test_smoke.py (every backend's tiny run).


# --------------------------------------------------------------------------- validate, show
def test_validate_checks_every_file_and_counts_records(tmp_path):
    good = write_scenario(tmp_path, TINY, "a.yaml")
    bad = write_scenario(tmp_path, TINY.replace("steps: 8", "steps: 0"), "bad.yaml")
    serving = ROOT / "scenarios" / "gemma270m.yaml"
    done = bench("validate", str(good), str(bad), str(serving), timeout=60)
    refused(done, str(bad), "train.steps")
    assert f"{good}: ok (1 run, 1 record: 1 train)" in done.stdout
    assert f"{serving}: ok (1 run, 2 records: 1 train, 1 serve)" in done.stdout


def test_show_refuses_what_has_no_record(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    refused(bench("show", str(empty), timeout=60), str(empty), "no result records found")
    refused(bench("show", str(tmp_path / "nope.json"), timeout=60), "nope.json", "no such results file")


# --------------------------------------------------------------------------- gate
def _results(directory: Path, *records) -> Path:
    directory.mkdir()
    for i, record in enumerate(records):
        (directory / f"{i}.json").write_text(json.dumps(record))
    return directory


def test_a_gate_with_no_comparable_baseline_fails_unless_missing_data_is_allowed(tmp_path):
    current = _results(tmp_path / "current", make_record([0.5] * 4, name="tiny"))
    baseline = _results(tmp_path / "baseline", make_record([0.5] * 4, name="another"))
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text("relative: {step_time_s: +5%}\n")
    done = bench("gate", str(current), "--baseline", str(baseline), "--budgets", str(budgets), timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("bench: gate failed:") and "share no comparable runs" in line and "--allow-no-data" in line
    allowed = bench(
        "gate",
        str(current),
        "--baseline",
        str(baseline),
        "--budgets",
        str(budgets),
        "--allow-no-data",
        "--format",
        "md",
        timeout=60,
    )
    assert allowed.returncode == 0 and "**PASS**" in allowed.stdout, allowed.stderr
    # A folder against itself compares nothing: the baseline leaves out the current runs' ids.
    same = bench("gate", str(current), "--baseline", str(current), "--budgets", str(budgets), timeout=60)
    assert same.returncode == 1 and "share no comparable runs" in same.stderr, same.stderr


def test_a_baseline_without_relative_limits_says_there_is_nothing_to_compare(tmp_path):
    current = _results(tmp_path / "current", make_record([0.5] * 4))
    line = refused(
        bench("gate", str(current), "--baseline", str(current), timeout=60),
        f"--baseline {current}",
        "nothing is compared with the baseline",
        "relative",
    )
    assert "give --budgets ... or --baseline" not in line
    budgets = tmp_path / "absolute.yaml"
    budgets.write_text("budgets: [{metric: step_time_s, max: 10}]\n")
    refused(
        bench("gate", str(current), "--baseline", str(current), "--budgets", str(budgets), timeout=60),
        str(budgets),
        "no `relative:` limits",
    )
    refused(bench("gate", str(current), timeout=60), str(current), "no checks")


# --------------------------------------------------------------------------- cost
@pytest.mark.parametrize(
    "args, needles",
    [
        (["--speedup", "0", "--a", "v5p-8", "--b", "h100-sxm:2"], ["--speedup", "> 0"]),
        (["--speedup", "-1", "--a", "v5p-8", "--b", "h100-sxm:2"], ["--speedup", "> 0"]),
        (["--speedup", "nan", "--a", "v5p-8", "--b", "h100-sxm:2"], ["--speedup"]),
        (["--speedup", "1.6", "--a", "v5p-7", "--b", "h100-sxm:2"], ["--a v5p-7", "2 per chip"]),
        (
            ["--speedup", "1.6", "--a", "v5p-8", "--b", "h100:2"],
            ["--b h100:2", "unknown accelerator 'h100'", "h100-sxm"],
        ),
        (["--speedup", "1.6", "--a", "v5p-8", "--b", "h100-sxm:0"], ["--b h100-sxm:0", "chips"]),
    ],
)
def test_cost_refuses_nonsense_naming_the_flag(args, needles):
    refused(bench("cost", *args, timeout=60), *needles)
