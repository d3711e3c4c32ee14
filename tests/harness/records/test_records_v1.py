"""Records written by an earlier bench still load, show, report and gate: real schema-1
records (tests/fixtures/records_v1, written by d4792b5) through today's readers."""

from __future__ import annotations

import shutil

from harness.records.store import load_records

from conftest import ROOT, bench

V1 = ROOT / "tests" / "fixtures" / "records_v1"


def test_v1_records_load_without_warnings():
    loaded = load_records([V1])
    assert not loaded.warnings
    assert sorted(r.task for r in loaded.records) == ["serve", "train"]
    assert all(r.status == "ok" for r in loaded.records)


def test_v1_records_show_report_and_gate(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(V1, results, ignore=shutil.ignore_patterns("*.yaml", "*.md"))
    shown = bench("show", str(results))
    assert shown.returncode == 0, shown.stderr
    assert "tiny-v1" in shown.stdout
    report = bench("report", str(results), "-o", str(tmp_path / "r.md"))
    assert report.returncode == 0, report.stderr
    assert "tiny-v1" in (tmp_path / "r.md").read_text()
    budgets = tmp_path / "b.yaml"
    budgets.write_text("budgets:\n  - {metric: step_time_s, max: 100.0}\n")
    gate = bench("gate", str(results), "--budgets", str(budgets))
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "step_time_s" in gate.stdout
