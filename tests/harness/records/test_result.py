"""The typed result record (harness/records/result.py): schema 2, frozen, explicit migrations
from schema 1, figures addressed by id."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from harness import tasks
from harness.records import result
from harness.records.result import SCHEMA_VERSION, RunRecord, as_record, migrate
from harness.records.store import load_record, load_records, write_record
from harness.tasks.serve import ServeMetrics
from harness.tasks.train import TrainCost, TrainMetrics

from conftest import ROOT
from records import failed_record, make_record

V1 = ROOT / "tests" / "fixtures" / "records_v1"
V1_FILES = sorted(V1.glob("*.json"))


def _v1(task: str) -> dict:
    doc = next(d for d in (json.loads(p.read_text()) for p in V1_FILES) if d["task"] == task)
    assert doc["schema_version"] == 1
    return doc


def test_schema_1_records_migrate_to_typed_schema_2():
    train, serve = (load_record(p) for p in V1_FILES)
    if train.task != "train":
        train, serve = serve, train
    assert SCHEMA_VERSION == 2
    assert (train.schema_version, serve.schema_version) == (2, 2)
    assert isinstance(train.metrics, TrainMetrics) and isinstance(train.cost, TrainCost)
    assert isinstance(serve.metrics, ServeMetrics)
    # The figures are the stored ones, unchanged by the migration.
    stored = _v1("train")
    assert train.metrics.step_time_s.median == stored["metrics"]["step_time_s"]["median"]
    assert train.cost.price.source == stored["cost"]["price"]["source"]
    # Schema 1 kept a served run's server only in its raw facts: schema 2 has the field.
    assert serve.server == _v1("serve")["raw"].get("server")
    assert train.path and train.path.endswith(".json")


def test_a_schema_1_record_without_a_task_was_a_training_run():
    doc = _v1("train")
    del doc["task"], doc["warnings"], doc["plan"]  # the earliest schema-1 records had none
    record = as_record(doc)
    assert record.task == "train" and record.warnings == [] and record.plan is None


def test_migration_does_not_change_its_input():
    doc = _v1("serve")
    before = json.dumps(doc, sort_keys=True)
    migrate(doc)
    assert json.dumps(doc, sort_keys=True) == before


def test_records_are_frozen():
    record = as_record(make_record([1.0, 1.1]))
    with pytest.raises(ValidationError):
        record.status = "failed"
    with pytest.raises(ValidationError):
        record.metrics.mfu = 0.5


def test_write_then_load_round_trips(tmp_path):
    record = as_record(make_record([1.0, 1.2, 1.1]))
    path = write_record(tmp_path, record)
    stored = json.loads(path.read_text())
    assert stored["schema"] == "bench.result" and stored["schema_version"] == 2
    assert "path" not in stored and "_path" not in stored
    loaded = load_record(path)
    assert loaded.model_copy(update={"path": None}) == record
    assert loaded.path == str(path)


def test_a_newer_or_unknown_schema_is_skipped_with_a_warning(tmp_path):
    doc = as_record(make_record([1.0])).to_json()
    (tmp_path / "future.json").write_text(json.dumps({**doc, "schema_version": 3}))
    (tmp_path / "zero.json").write_text(json.dumps({**doc, "schema_version": 0}))
    (tmp_path / "other.json").write_text(json.dumps({"schema": "something.else"}))
    loaded = load_records([tmp_path])
    assert loaded.records == []
    text = "\n".join(loaded.warnings)
    assert "newer than this bench" in text and "schema version 0" in text and "not a bench result record" in text


def test_a_figure_that_is_not_in_the_type_is_refused_naming_it():
    doc = make_record([1.0])
    doc["metrics"]["mfu_typo"] = 0.5
    with pytest.raises(ValueError, match="mfu_typo"):
        as_record(doc)


def test_a_failed_record_says_why():
    assert as_record(failed_record()).failure.reason == "RuntimeError: boom"
    doc = failed_record()
    doc["failure"] = None
    with pytest.raises(ValueError, match="failure"):
        as_record(doc)


def test_figure_by_id_reads_the_typed_fields():
    record = as_record(make_record([1.0, 2.0, 3.0]))
    assert record.figure("metrics.step_time_s.median") == record.metrics.step_time_s.median == 2.0
    assert record.figure("cost.usd_run") == record.cost.usd_run
    assert record.figure("scenario.name") == "tiny"
    assert record.figure("metrics.no_such_figure") is None
    assert as_record(failed_record()).figure("metrics.mfu") is None


def test_every_report_column_and_gate_metric_names_a_declared_figure():
    """A misspelt id would show "n/a" forever: each is checked against the types."""
    for name in ("train", "serve"):
        task = tasks.get(name)
        ids = [c.id for c in task.report_columns] + [m.figure for m in task.gate_metrics.values()]
        assert ids
        for metric_id in ids:
            assert result.declares(name, metric_id), f"{name}: {metric_id}"
    assert not result.declares("train", "metrics.step_time_s.p95")
    assert not result.declares("serve", "metrics.mfu")


def test_a_record_the_writer_builds_is_a_run_record():
    assert isinstance(as_record(make_record([1.0])), RunRecord)


def test_schema_1_records_report_as_they_did(tmp_path):
    """The report of the migrated records is the schema-1 readers' report, byte for byte
    (tests/fixtures/records_v1/report.md and .csv, made by main at 47637bb; report.md
    remade once, when the headline moved to the unsynced window: its two columns lead
    the table and the conventions say so; and once for #39: "At a glance" tables, the
    main table's key columns with the rest in a second table, each n/a with its cause;
    and once for #47: the serving table's four server columns, n/a [v] for these records,
    whose server had no vLLM /metrics; every figure the same); the CSV has six more columns, the figures
    added since: three serve figures derived from the records' raw requests
    (harness.records.migrations), the cached prompt tokens, which no schema-1 server reported
    (empty), and the window's $/1M real tokens; the golden's columns are unchanged."""
    import io

    import pandas as pd

    from reports.model import build
    from reports.render import csv, markdown

    report = build(load_records([V1]).records, None, ())
    assert markdown(report) == (V1 / "report.md").read_text()
    golden = pd.read_csv(V1 / "report.csv", dtype=str, keep_default_na=False)
    today = pd.read_csv(io.StringIO(csv(report)), dtype=str, keep_default_na=False)
    added = [c for c in today.columns if c not in golden.columns]
    assert added == [
        "usd_per_1m_tokens_real_window",
        "error_rate",  # #44: failed / measured requests, from the records' counts
        "slo_at_percentile",
        "output_tok_s_per_user",
        "output_tok_s_per_chip",
        "cached_prompt_tokens",
        "cached_prompt_fraction",
        # #40's serving columns: derived again from the old records' requests, or empty
        "percentiles",
        "thin_percentiles",
        "client_queue_s",
        "client_saturated",
        "achieved_rate_req_s",
        "server_metrics",
        # #47's: the server's own figures and vLLM's convention, which these records lack
        "server_figures",
        "vllm_convention",
        "convention_differences",
    ]
    assert set(today["cached_prompt_tokens"]) == set(today["cached_prompt_fraction"]) == {""}
    assert today[list(golden.columns)].to_csv(index=False) == golden.to_csv(index=False)
    serve = today[today["task"] == "serve"] if "task" in today.columns else today[today["backend"] == "serve-local"]
    assert serve["output_tok_s_per_chip"].tolist() == serve["output_throughput_tok_s"].tolist()  # one chip
    assert [float(x) for x in serve["error_rate"]] == [
        float(e) / float(n) for e, n in zip(serve["num_errors"], serve["num_requests"])
    ]


def test_every_training_figure_states_its_unit_by_its_name():
    """The figures' table (harness/tasks/train/figures.py) gives each field a unit; the
    name's suffix and the unit it states must agree (a seconds figure says s, ...)."""
    suffix_unit = {"_s": "s", "_gib": "GiB", "_per_token": "FLOP per real token"}
    for name, field in TrainMetrics.model_fields.items():
        assert field.description, name
        for suffix, unit in suffix_unit.items():
            if name.endswith(suffix) and not name.startswith("tokens_per_s") and "tflops" not in name:
                assert field.description.startswith(unit), (name, field.description)
        if "tokens_per_s" in name:
            assert "tokens/s" in field.description, name
    fractions = ("mfu", "hfu", "padding_efficiency")
    assert all(TrainMetrics.model_fields[n].description.startswith("fraction") for n in fractions)


def test_a_training_record_keeps_every_figure_the_metrics_compute(tmp_path):
    """Every figure harness.figures.metrics computes has a field, and every field is filled by it
    (an extra key would be refused; a missing one would stay absent)."""
    record = make_record([1.0, 1.1, 0.9])
    assert set(record["metrics"]) <= set(TrainMetrics.model_fields)
    loaded = as_record(record)
    assert loaded.metrics.model_dump(exclude_unset=True).keys() == record["metrics"].keys()
