"""Tasks are plug-ins: a task defined outside the core (tests/echo_task.py), registered
with one line, owns its scenario section (`echo:`), and runs through the runner's
machinery (a real worker process) to a record, a summary row, a gate budget and a
report, without a change to any core file."""

from __future__ import annotations

import sys

import pytest
from rich.console import Console

from harness import tasks
from harness.basics.errors import SpecError
from harness.run.backend import Probe
from harness.run.registry import ProbeResult
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
    from harness.gate.gate import AbsoluteBudget, absolute_checks, group_records
    from harness.run.runner import RunRequest, run_sweep
    from harness.terminal.display import summary_table
    from reports.model import build

    scenario = write_scenario(tmp_path, TINY + "tasks: [echo]\necho: {words: 3}\n")
    probed = ProbeResult(
        "torch", sys.executable, Probe(True, device_kind="cpu", device_name="test cpu", device_count=1)
    )
    request = RunRequest(str(scenario), backend="torch", results_dir=tmp_path / "results", probed=probed)
    result = run_sweep(request, Quiet())
    (record,) = result.records
    assert record.status == "ok", record.failure
    assert record.task == "echo" and record.backend.name == "torch" and record.plan is None
    # "tiny Gemma 3 LoRA fine-tune on synthetic function-calling chats": the worker read echo.words
    assert record.metrics == {"num_words": 9, "echoed": "tiny Gemma 3"}
    assert record.scenario.resolved["echo"] == {"words": 3}
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


def test_a_third_task_owns_its_scenario_section(tmp_path, echo):
    from harness.scenario.loader import resolve_runs, validate

    doc = {"name": "e", "tasks": ["echo"], "echo": {"words": 5}}
    scenario = validate(doc, "e.yaml")
    assert scenario.echo.words == 5 and type(scenario.echo).__name__ == "EchoSpec"
    assert scenario.model_dump()["echo"] == {"words": 5}
    assert validate({"name": "e", "tasks": ["echo"], "echo": {}}, "e.yaml").echo.words == 3  # its default
    for section, field, message in [
        ({"words": 0}, "echo.words", "greater than 0"),
        ({"words": "many"}, "echo.words", "valid integer"),
        ({"words": True}, "echo.words", "boolean"),
        ({"lines": 2}, "echo.lines", "unknown key"),
    ]:
        with pytest.raises(SpecError) as refused:
            validate({**doc, "echo": section}, "e.yaml")
        assert refused.value.field == field and message in str(refused.value), str(refused.value)
    with pytest.raises(SpecError, match="tasks: echo needs a echo section"):
        validate({"name": "e", "tasks": ["echo"]}, "e.yaml")
    # --set and matrix keys reach into it, and are validated by its model
    path = write_scenario(tmp_path, "name: e\ntasks: [echo]\necho: {words: 1}\nmatrix: {echo.words: [2, 4]}\n")
    assert [run.scenario.echo.words for run in resolve_runs(path)] == [2, 4]
    assert [run.scenario.echo.words for run in resolve_runs(path, {"echo.words": 7})] == [7]
    with pytest.raises(SpecError) as refused:
        resolve_runs(path, {"echo.words": 101})
    assert refused.value.field == "echo.words"
    # Registering it changes no other scenario: it is absent from their dumps and hashes.
    train_only = validate({"name": "t"}, "t.yaml")
    assert "echo" not in train_only.model_dump() and train_only.echo is None


def test_a_section_nothing_registers_is_an_unknown_key():
    from harness.scenario.loader import validate

    with pytest.raises(SpecError) as refused:
        validate({"name": "e", "echo": {"words": 3}}, "e.yaml")
    assert refused.value.field == "echo" and "unknown key" in str(refused.value)


def test_a_registered_section_leaves_other_scenarios_hashes_alone(monkeypatch):
    from harness.scenario.loader import scenario_hash, validate

    before = scenario_hash(validate({"name": "t", "serve": {"engine": "local"}}, "t.yaml"))
    monkeypatch.setattr(tasks.TASKS, "_targets", dict(tasks.TASKS._targets))
    monkeypatch.setattr(tasks.TASKS, "_loaded", dict(tasks.TASKS._loaded))
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    tasks.register("echo", "echo_task:TASK")
    assert scenario_hash(validate({"name": "t", "serve": {"engine": "local"}}, "t.yaml")) == before


@pytest.fixture
def fake_engine(monkeypatch):
    monkeypatch.setattr(engines.ENGINES, "_targets", dict(engines.ENGINES._targets))
    monkeypatch.setattr(engines.ENGINES, "_loaded", dict(engines.ENGINES._loaded))
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests"))
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    engines.ENGINES.register("fake", "fake_engine:ENGINE")  # the one registration line


def test_a_registered_engine_serves_through_the_serve_task(tmp_path, fake_engine):
    from harness.run.runner import RunRequest, run_sweep

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
