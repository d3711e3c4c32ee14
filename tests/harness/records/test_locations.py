"""Issue 38: records at an fsspec URL. `bench run --results-dir memory://...` (a real run
of the echo task through the runner, tests/echo_task.py: the cheapest one), then `bench
report`, `show`, `gate` and `history` of that URL together with a local folder holding a
copy of one record: each run read once. Resume and rescue work on a URL."""

from __future__ import annotations

import json
import sys
import uuid

import fsspec
import pytest

from harness import tasks
from harness.cli import build_parser, main
from harness.records import locations
from harness.records.store import load_records
from harness.run.backend import Probe
from harness.run.registry import ProbeResult

from conftest import ROOT, TINY, write_scenario
from records import make_record


class Quiet:
    def skipped(self, *args): ...
    def start(self, *args): ...
    def event(self, event): ...
    def finish(self, record): ...


@pytest.fixture
def echo(monkeypatch):
    monkeypatch.setattr(tasks.TASKS, "_targets", dict(tasks.TASKS._targets))
    monkeypatch.setattr(tasks.TASKS, "_loaded", dict(tasks.TASKS._loaded))
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "tests"))
    monkeypatch.syspath_prepend(str(ROOT / "tests"))
    tasks.register("echo", "echo_task:TASK")


def _sweep(tmp_path, results_dir):
    """`bench run SCENARIO --results-dir URL`, in process: the CLI's request, a probe given."""
    from harness.commands.run import _request
    from harness.run.runner import run_sweep

    scenario = write_scenario(tmp_path, TINY + "tasks: [echo]\necho: {words: 2}\n")
    args = build_parser().parse_args(["run", str(scenario), "--backend", "torch", "--results-dir", results_dir])
    request = _request(args)
    assert request.results_dir == results_dir  # the URL as given, not a mangled local Path
    probe = Probe(True, device_kind="cpu", device_name="test cpu", device_count=1)
    request.probed = ProbeResult("torch", sys.executable, probe)
    return run_sweep(request, Quiet())


def test_a_run_at_a_url_is_read_back_once_with_a_local_copy_and_resumes_there(tmp_path, echo, capsys):
    url = f"memory://bench-{uuid.uuid4().hex}/results"
    result = _sweep(tmp_path, url)
    (record,) = result.records
    assert record.ok and record.path.startswith(url + "/") and record.path.endswith(".json")
    fs = fsspec.filesystem("memory")
    stored = fs.find(url.removeprefix("memory://"))
    assert [p.rsplit("/", 1)[-1] for p in stored] == [record.path.rsplit("/", 1)[-1]]  # no temporary left
    # a local folder holding a copy of the record, and one run of its own
    local = tmp_path / "local"
    local.mkdir()
    (local / "copy.json").write_text(locations.read_text(record.path))
    (local / "other.json").write_text(json.dumps(make_record([0.5] * 3)))
    loaded = load_records([url, local])
    assert sorted(r.task for r in loaded.records) == ["echo", "train"] and not loaded.warnings
    assert main(["report", url, str(local), "-o", str(tmp_path / "r.md")]) == 0
    assert "wrote md report of 2 records" in " ".join(capsys.readouterr().err.split())
    report = (tmp_path / "r.md").read_text()
    assert report.count(record.run_id[:8]) <= 1 and "## Task echo" in report
    assert main(["show", url]) == 0 and "tiny default r0" in capsys.readouterr().out
    budgets = tmp_path / "b.yaml"
    budgets.write_text("budgets:\n  - {metric: num_words, min: 1}\n")
    assert main(["gate", url, "--budgets", str(budgets), "--format", "md"]) == 0
    assert "**PASS**: 1 check, 0 failed" in capsys.readouterr().out
    assert main(["history", url, str(local), "--metric", "num_words"]) == 0
    assert "num_words over 1 runs, 1 commits: no change point" in capsys.readouterr().out
    # resume: the same sweep at the same URL skips the run it already has
    again = _sweep(tmp_path, url)
    assert again.records == [] and [s["path"] for s in again.skipped_records] == [record.path]
    from rich.console import Console

    from harness.commands.run import _print_skipped

    console = Console(width=200, record=True)
    _print_skipped(again.skipped_records, console)  # reads the skipped record back from its URL
    assert "already recorded" in console.export_text()


def test_a_url_that_refuses_the_write_has_its_record_rescued_locally(tmp_path, echo, monkeypatch):
    from harness.run import runner

    url = f"memory://bench-{uuid.uuid4().hex}/results"
    monkeypatch.setattr(runner, "rescue_dirs", lambda: [tmp_path / "rescued"])
    real_write = locations.write_text

    def refuse(target, text):
        if target.startswith(url):
            raise PermissionError(13, "bucket is read-only")
        return real_write(target, text)

    monkeypatch.setattr(locations, "write_text", refuse)
    monkeypatch.setattr(locations, "check_writable", lambda *a: None)
    monkeypatch.setattr(runner, "check_writable", lambda *a: None)
    result = _sweep(tmp_path, url)
    (rescued,) = result.rescued
    assert rescued["results_dir"] == url and "PermissionError" in rescued["problem"]
    assert [p.name for p in (tmp_path / "rescued").glob("*.json")] == [rescued["path"].rsplit("/", 1)[-1]]


def test_writes_are_atomic_a_rename_on_a_filesystem_one_put_on_an_object_store(monkeypatch):
    url = f"memory://bench-{uuid.uuid4().hex}/r/x.json"
    fs = fsspec.filesystem("memory")
    moves = []
    real_mv = type(fs).mv
    monkeypatch.setattr(type(fs), "mv", lambda self, a, b, **k: (moves.append((a, b)), real_mv(self, a, b, **k))[1])
    assert locations.write_text(url, "{}") == url and locations.read_text(url) == "{}"
    ((temporary, final),) = moves
    assert temporary.rsplit("/", 1)[-1].startswith(".tmp-") and final.lstrip("/") == url.removeprefix("memory://")
    assert locations.files_under(url.rsplit("/", 1)[0], ".json") == [url]


def test_a_store_without_its_driver_names_the_extra(monkeypatch):
    import fsspec.core

    def missing(url, **kw):
        raise ImportError("Install gcsfs to access Google Storage")

    monkeypatch.setattr(fsspec.core, "url_to_fs", missing)
    assert main(["report", "gs://a-bucket/results"]) == 2


def test_local_paths_are_unchanged():
    assert locations.location("results") == __import__("pathlib").Path("results")
    assert not locations.is_url("results/x.json") and locations.is_url("gs://b/r") and not locations.is_url("file:///r")
