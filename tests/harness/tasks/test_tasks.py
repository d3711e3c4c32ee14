"""Tasks are plug-ins: a task defined outside the core (tests/echo_task.py), registered
with one line, runs through the runner's machinery (a real worker process) to a record,
a summary row, a gate budget and a report, without a change to any core file."""

from __future__ import annotations

import sys

import pytest
from rich.console import Console

from harness import tasks
from harness.backend import Probe
from harness.registry import ProbeResult
from harness.serving import engines

from conftest import ROOT, TINY, write_scenario


@pytest.fixture
def echo(monkeypatch):
    monkeypatch.setattr(tasks.TASKS, "_targets", dict(tasks.TASKS._targets))
    monkeypatch.setattr(tasks.TASKS, "_loaded", dict(tasks.TASKS._loaded))
    # The worker imports the plug-in by name: its folder must be importable there too.
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests"))
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    tasks.register("echo", "echo_task:TASK")  # the one registration line


class Quiet:
    def skipped(self, *args): ...
    def start(self, *args): ...
    def event(self, event): ...
    def finish(self, record): ...


def test_a_third_task_runs_end_to_end_through_the_runner(tmp_path, echo):
    from harness.display import summary_table
    from harness.gate import AbsoluteBudget, absolute_checks, group_records
    from harness.runner import RunRequest, run_sweep
    from reports.model import build

    scenario = write_scenario(tmp_path, TINY + "tasks: [echo]\n")
    probed = ProbeResult(
        "torch", sys.executable, Probe(True, device_kind="cpu", device_name="test cpu", device_count=1)
    )
    request = RunRequest(str(scenario), backend="torch", results_dir=tmp_path / "results", probed=probed)
    result = run_sweep(request, Quiet())
    (record,) = result.records
    assert record.status == "ok", record.failure
    assert record.task == "echo" and record.backend.name == "torch" and record.plan is None
    assert record.metrics == {"num_words": 9}  # "tiny Gemma 3 LoRA fine-tune on synthetic function-calling chats"
    console = Console(width=200, record=True)
    console.print(summary_table([record]))
    assert "tiny default r0 echo" in console.export_text()
    budgets = [AbsoluteBudget(metric="num_words", min=3), AbsoluteBudget(metric="step_time_s", max=1)]
    (check,) = absolute_checks(group_records([record]), budgets)  # the train budget is not applied
    assert (check.metric, check.verdict, check.measured) == ("num_words", "pass", 9)
    report = build([record])
    assert report.failed == [] and report.runs == [record]
    (table,) = report.tables
    assert table.task == "echo" and table.headers == ["runs", "words"] and table.rows[0].cells == ["1", "9"]
    from reports.render import html, markdown

    assert "## Task echo" in markdown(report) and "<h2>Task echo</h2>" in html(report)


@pytest.fixture
def fake_engine(monkeypatch):
    monkeypatch.setattr(engines.ENGINES, "_targets", dict(engines.ENGINES._targets))
    monkeypatch.setattr(engines.ENGINES, "_loaded", dict(engines.ENGINES._loaded))
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests"))
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    engines.register("fake", "fake_engine:ENGINE")  # the one registration line


def test_a_registered_engine_serves_through_the_serve_task(tmp_path, fake_engine):
    from harness.runner import RunRequest, run_sweep

    block = "serve: {engine: fake, output_tokens: 5, num_requests: 3, warmup_requests: 1}\n"
    scenario = write_scenario(tmp_path, TINY + "tasks: [serve]\n" + block)
    probed = ProbeResult(
        "torch", sys.executable, Probe(True, device_kind="cpu", device_name="test cpu", device_count=1)
    )
    request = RunRequest(str(scenario), backend="torch", results_dir=tmp_path / "results", probed=probed)
    (record,) = run_sweep(request, Quiet()).records
    assert record.status == "ok", record.failure
    assert record.backend.name == "serve-fake" and record.raw["engine"] == "fake"
    assert record.accelerator.name == "fake"
    metrics = record.metrics
    assert metrics.num_completed == 3 and metrics.num_errors == 0
    assert metrics.ttft_s.median == pytest.approx(0.25) and metrics.tpot_s.median == pytest.approx(0.125)
