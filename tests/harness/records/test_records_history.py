"""Every record shape a landed bench wrote loads, shows, reports and gates: real records
(tests/fixtures/records_history/<commit>/, train and serve, each written by that commit;
README.md there says how) through today's readers and `bench migrate`."""

from __future__ import annotations

import io
import json
import shutil
import statistics

import pandas as pd
import pytest

from harness.cli import main
from harness.records.store import SCHEMA_VERSION, load_records

from conftest import ROOT, bench

HISTORY = ROOT / "tests" / "fixtures" / "records_history"
COMMITS = sorted(p.name for p in HISTORY.iterdir() if p.is_dir())
FIRST = "6f4a76e"  # the first landed version (2026-11-25)


def _docs(commit: str) -> dict[str, dict]:
    """The stored JSON of one commit's records, by task (the first shape has no `task`)."""
    docs = [json.loads(p.read_text()) for p in sorted((HISTORY / commit).glob("*.json"))]
    return {d.get("task") or "train": d for d in docs}


def test_the_history_holds_train_and_serve_records_of_at_least_three_commits():
    assert FIRST in COMMITS and len(COMMITS) >= 3
    for commit in COMMITS:
        docs = _docs(commit)
        assert sorted(docs) == ["serve", "train"], commit
        assert all(d["provenance"]["commit"].startswith(commit) for d in docs.values()), commit


@pytest.mark.parametrize("commit", COMMITS)
def test_every_commits_records_load_without_warnings(commit):
    loaded = load_records([HISTORY / commit])
    assert not loaded.warnings, loaded.warnings
    assert sorted(r.task for r in loaded.records) == ["serve", "train"]
    assert all(r.ok and r.schema_version == SCHEMA_VERSION for r in loaded.records)


def test_show_report_and_gate_read_every_commits_records(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(HISTORY, results, ignore=shutil.ignore_patterns("*.yaml", "*.md"))
    shown = bench("show", str(results))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("status: ok") == 2 * len(COMMITS)
    assert "absent (not measured by bench 6f4a76e (schema 1))" in " ".join(shown.stdout.split())
    report = bench("report", str(results), "-o", str(tmp_path / "r.csv"))
    assert report.returncode == 0, report.stderr
    rows = pd.read_csv(tmp_path / "r.csv", dtype=str)
    assert sorted(c[:7] for c in rows["commit"]) == sorted(COMMITS * 2)
    budgets = tmp_path / "b.yaml"
    budgets.write_text("budgets:\n  - {metric: step_time_s, max: 100.0}\n  - {metric: ttft_s, max: 100.0}\n")
    gate = bench("gate", str(results), "--budgets", str(budgets), "--format", "md")
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "step\\_time\\_s" in gate.stdout and "ttft\\_s" in gate.stdout


def test_the_gate_judges_every_commits_run():
    """One group (same configuration) holds every commit's run: an absolute budget holds
    each of them, so the figure checked is the worst of the five runs' figures."""
    from harness.gate.gate import AbsoluteBudget, absolute_checks, group_records

    records = load_records([HISTORY]).records
    budgets = [AbsoluteBudget(metric="step_time_s", max=100.0), AbsoluteBudget(metric="ttft_s", max=100.0)]
    checks = {c.metric: c for c in absolute_checks(group_records(records), budgets)}
    for metric, figure in (("step_time_s", "metrics.step_time_s.median"), ("ttft_s", "metrics.ttft_s.median")):
        per_run = [r.figure(figure) for r in records if r.figure(figure) is not None]
        assert len(per_run) == len(COMMITS)
        assert checks[metric].measured == pytest.approx(max(per_run))
        assert checks[metric].verdict == "pass"


# --------------------------------------------------------------------------- the first shape
def _from_raw_facts(doc: dict) -> dict:
    """The record with its figures recomputed from its raw facts by today's metrics and
    cost code, at the price it was billed at; FLOPs without per-row tokens: none."""
    from harness.figures import cost, metrics

    price = cost.Price(**doc["cost"]["price"])
    chips = doc["accelerator"]["count"]
    if doc.get("task", "train") == "train":
        figures = metrics.training_metrics(doc["raw"], doc["accelerator"], None)
        billed = cost.training_cost(figures, chips, price)
    else:
        figures = metrics.serving_metrics(doc["raw"], doc["scenario"]["resolved"]["serve"]["slo"])
        figures["output_tok_s_per_chip"] = figures["output_throughput_tok_s"] / chips
        billed = cost.serving_cost(figures, chips, price)
    return {**doc, "task": doc.get("task", "train"), "schema_version": 2, "metrics": figures, "cost": billed}


def _report_csv(records) -> pd.DataFrame:
    from reports.model import build
    from reports.render import csv

    return pd.read_csv(io.StringIO(csv(build(records, None, ()))), dtype=str, keep_default_na=False)


def test_the_first_versions_report_equals_one_made_from_its_raw_facts():
    from harness.records.result import as_record

    migrated = _report_csv(load_records([HISTORY / FIRST]).records)
    docs = _docs(FIRST)
    recomputed = _report_csv([as_record(_from_raw_facts(d)) for d in docs.values()])
    figures = [c for c in recomputed.columns if c not in ("run_id",)]
    assert migrated[figures].to_csv(index=False) == recomputed[figures].to_csv(index=False)
    # And by hand, from the raw facts: the steady step time, tokens/s, TTFT and E2EL.
    train, serve = (migrated[migrated["backend"] == b].iloc[0] for b in ("torch", "serve-local"))
    steps = [s for s in docs["train"]["raw"]["loop"]["steps"] if s["phase"] == "measure" and s["num_compiles"] == 0]
    assert float(train["step_time_s.median"]) == pytest.approx(statistics.median(s["time_s"] for s in steps))
    tokens_per_s = sum(s["tokens_real"] for s in steps) / sum(s["time_s"] for s in steps)
    assert float(train["tokens_per_s_real"]) == pytest.approx(tokens_per_s)
    requests = [r for r in docs["serve"]["raw"]["requests"] if not r["warmup"] and r["error"] is None]
    ttft = statistics.median(r["chunk_s"][0] - r["sent_s"] for r in requests)
    e2el = statistics.median(r["chunk_s"][-1] - r["sent_s"] for r in requests)  # to the last content chunk
    assert float(serve["ttft_s.median"]) == pytest.approx(ttft)
    assert float(serve["e2el_s.median"]) == pytest.approx(e2el)


def test_what_the_first_version_did_not_measure_is_absent_and_says_so():
    (train,) = [r for r in load_records([HISTORY / FIRST]).records if r.task == "train"]
    why = "not measured by bench 6f4a76e (schema 1)"
    for figure in ("metrics.mfu", "metrics.model_flops_per_token", "metrics.compile_cache"):
        assert train.absent[figure] == why and train.figure(figure) is None
    stored = _docs(FIRST)["train"]["metrics"]
    assert stored["model_tflops_per_s"] is not None  # stored under an older FLOPs convention
    assert train.metrics.model_tflops_per_s is None and "metrics.model_tflops_per_s" in train.absent
    assert train.metrics.recompile_steps == 0  # derived from the raw steps' compile counts


# --------------------------------------------------------------------------- bench migrate
def test_bench_migrate_rewrites_older_records_and_keeps_the_originals(tmp_path, capsys):
    results = tmp_path / "results"
    shutil.copytree(HISTORY, results, ignore=shutil.ignore_patterns("*.yaml", "*.md"))
    before = {p.relative_to(results): p.read_bytes() for p in results.rglob("*.json")}
    old = {p for p, text in before.items() if json.loads(text)["schema_version"] < SCHEMA_VERSION}
    loaded_before = {r.run_id: r.to_json() for r in load_records([results]).records}
    assert main(["migrate", str(results)]) == 0
    assert f"{len(old)} records migrated to schema {SCHEMA_VERSION}" in capsys.readouterr().out
    for path, text in before.items():
        doc = json.loads((results / path).read_text())
        assert doc["schema_version"] == SCHEMA_VERSION
        kept = results / ".orig" / path
        assert kept.read_bytes() == text if path in old else not kept.exists()
    after = load_records([results])  # the originals under .orig/ are not read again
    assert not after.warnings and {r.run_id: r.to_json() for r in after.records} == loaded_before
    assert main(["migrate", str(results)]) == 0
    assert f"0 records migrated to schema {SCHEMA_VERSION}, {len(before)} already" in capsys.readouterr().out


def test_a_record_that_cannot_be_migrated_is_left_as_it_was_and_named(tmp_path, capsys):
    doc = _docs(FIRST)["train"]
    del doc["raw"]["loop"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    text = bad.read_text()
    assert main(["migrate", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "raw facts" in err and "'loop'" in err
    assert bad.read_text() == text and not (tmp_path / ".orig").exists()


def test_export_writes_every_commits_training_run_and_its_serve_figures(tmp_path):
    """A train record is one benchmark (its measured steps); a serve record one per
    figure (TTFT, TPOT) whose samples are its completed requests' values, recomputed
    here from the raw timestamps (vLLM's definitions)."""
    from harness.records.export import to_pytest_benchmark

    records = load_records([HISTORY]).records
    document = to_pytest_benchmark(records)
    trains = [r for r in records if r.task == "train"]
    serves = [r for r in records if r.task == "serve"]
    assert len(trains) == len(COMMITS) and serves
    assert len(document["benchmarks"]) == len(trains) + 2 * len(serves)
    for bench_entry, record in zip(document["benchmarks"], trains):
        measured = [s["time_s"] for s in record.raw["loop"]["steps"] if s["phase"] == "measure"]
        assert bench_entry["stats"]["median"] == statistics.median(measured)
    for record in serves:
        done = [r for r in record.raw["requests"] if not r["warmup"] and r["error"] is None]
        ttft = [r["chunk_s"][0] - r["sent_s"] for r in done]
        (entry,) = [
            b
            for b in document["benchmarks"]
            if b["extra_info"]["run_id"] == record.run_id and b["params"]["figure"] == "ttft_s"
        ]
        assert entry["stats"]["data"] == ttft and entry["stats"]["rounds"] == len(done)
    done = bench("export", str(HISTORY), "-o", str(tmp_path / "b.json"))
    assert done.returncode == 0, done.stderr
    assert f"wrote {len(document['benchmarks'])} benchmarks" in " ".join(done.stderr.split())
