"""`bench gate` cannot pass by mistake (issue 44): each way a new user's gate passed where
it must not, as records written like real runs and copies edited the way failures look."""

from __future__ import annotations

import json

import pytest

from harness.cli import main
from harness.gate.gate import BudgetsFile, failing, run_gate
from harness.records.result import as_record

from records import make_record, serve_record


def store(directory, records):
    directory.mkdir(parents=True, exist_ok=True)
    for record in records:
        (directory / f"{record['run_id']}.json").write_text(json.dumps(record))
    return directory


def gate(capsys, *argv) -> tuple[int, str, str]:
    code = main(["gate", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def budgets_file(tmp_path, text: str):
    path = tmp_path / "budgets.yaml"
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- figures
def test_a_nan_step_time_in_a_record_fails_the_gate_naming_the_file(tmp_path, capsys):
    """Before: `nan ... pass, within the limit`. A record is refused with a NaN figure, so
    an edited one is an unreadable record, which fails."""
    good = make_record([0.5] * 4)
    bad = make_record([0.5] * 4)
    bad["metrics"]["step_time_s"]["median"] = float("nan")
    folder = store(tmp_path / "now", [good, bad])
    budgets = budgets_file(tmp_path, "budgets: [{metric: step_time_s, max: 1}]\n")
    code, out, _ = gate(capsys, folder, "--budgets", budgets, "--format", "md")
    assert code == 1
    assert f"{bad['run_id']}.json" in out and "finite number" in out


def test_the_schema_refuses_nan_and_a_run_that_computes_one_is_stored_as_failed():
    from harness.records.record import typed

    record = make_record([0.5] * 4)
    record["metrics"]["mfu"] = float("inf")
    with pytest.raises(ValueError, match="mfu: Input should be a finite number"):
        as_record(record)
    stored = typed(record)
    assert stored.status == "failed" and "a figure is not a finite number (NaN or infinity)" in stored.failure.reason
    assert "mfu" in stored.failure.reason


def test_a_negative_step_time_is_its_own_failed_row_naming_the_run_and_the_field():
    record = as_record(make_record([-0.5] * 4))
    budgets = BudgetsFile.model_validate({"budgets": [{"metric": "step_time_s", "max": 1}]})
    checks = run_gate([record], None, budgets, "b")
    (row,) = [c for c in checks if c.kind == "figure"]
    assert (
        row.verdict == "failed" and row.detail == f"run {record.run_id}: metrics.step_time_s.median is negative (-0.5)"
    )
    assert failing(checks, allow_no_data=True)


# --------------------------------------------------------------------------- records
def test_an_unreadable_record_beside_a_good_one_fails_unless_skipped(tmp_path, capsys):
    """Before: a warning, then PASS on the rest."""
    folder = store(tmp_path / "now", [make_record([0.5] * 4)])
    (folder / "killed-mid-write.json").write_text('{"schema": "bench.result", "schema_vers')
    budgets = budgets_file(tmp_path, "budgets: [{metric: step_time_s, max: 1}]\n")
    code, out, _ = gate(capsys, folder, "--budgets", budgets, "--format", "json")
    verdict = json.loads(out)
    assert code == 1 and not verdict["passed"]
    (row,) = [c for c in verdict["checks"] if c["check"] == "record"]
    assert row["run"].endswith("killed-mid-write.json") and row["fails"] and "unreadable" in row["detail"]
    code, _, err = gate(capsys, folder, "--budgets", budgets, "--skip-unreadable")
    assert code == 0 and "killed-mid-write.json" in "".join(err.split())  # the warning, wrapped


def test_an_unreadable_baseline_record_fails_too(tmp_path, capsys):
    now = store(tmp_path / "now", [make_record([0.5] * 8)])
    base = store(tmp_path / "base", [make_record([0.5] * 8)])
    (base / "truncated.json").write_text("{")
    budgets = budgets_file(tmp_path, "relative: {step_time_s: +10%}\n")
    code, out, _ = gate(capsys, now, "--baseline", base, "--budgets", budgets, "--format", "md")
    assert code == 1 and "baseline: unreadable record" in out


def test_the_report_page_warns_of_an_unreadable_record(tmp_path, capsys):
    folder = store(tmp_path / "now", [make_record([0.5] * 4)])
    (folder / "bad.json").write_text("not json")
    page = tmp_path / "r.html"
    assert main(["report", str(folder), "-o", str(page)]) == 0
    text = page.read_text()
    assert "unreadable record left out of this report" in text and "bad.json" in text


# --------------------------------------------------------------------------- noise
def test_a_2x_slowdown_of_3_steps_against_3_fails_as_cannot_tell(tmp_path, capsys):
    """Before: passed as noise (the one-sided test's best p with 3 vs 3 is 1/20 = alpha)."""
    now = store(tmp_path / "now", [make_record([1.0, 1.01, 0.99])])
    base = store(tmp_path / "base", [make_record([0.5, 0.51, 0.49])])
    budgets = budgets_file(tmp_path, "relative: {step_time_s: +10%}\n")
    code, out, err = gate(capsys, now, "--baseline", base, "--budgets", budgets, "--allow-no-data", "--format", "md")
    assert code == 1 and "CANNOT-TELL" in out and "needs at least 4 samples a side" in out
    assert "gate on repeats &gt;= 4 a side" in out  # the docs' noise guidance, with the row


def test_within_the_limit_a_check_that_cannot_tell_fails_like_no_data():
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": "+10%"}})
    (check,) = run_gate([make_record([0.5] * 3)], [make_record([0.5] * 3)], budgets, "b")
    assert check.verdict == "cannot-tell" and not check.beyond
    assert failing([check]) == [check] and failing([check], allow_no_data=True) == []


@pytest.mark.parametrize("n, m, alpha, attainable", [(3, 3, 0.05, False), (4, 4, 0.05, True), (2, 20, 0.05, True)])
def test_the_smallest_attainable_p_is_one_over_the_arrangements(n, m, alpha, attainable):
    from scipy.stats import mannwhitneyu

    from harness.gate.gate import smallest_p_value

    current, baseline = [100.0 + i for i in range(n)], [float(i) for i in range(m)]  # fully apart
    exact = mannwhitneyu(current, baseline, alternative="greater", method="exact").pvalue
    assert smallest_p_value(n, m) == pytest.approx(exact)
    assert (smallest_p_value(n, m) < alpha) is attainable


# --------------------------------------------------------------------------- serving
def test_a_serve_run_whose_requests_mostly_failed_is_not_ok():
    """Before: `status: ok`, its TTFT computed over the few that succeeded."""
    from harness.tasks.serve import too_many_errors

    metrics = as_record(serve_record(10, failed=7)).metrics
    assert metrics.error_rate == pytest.approx(0.7)
    why = too_many_errors(metrics.model_dump(), 0.0)
    assert why.startswith("7 of 10 measured requests failed (error rate 70.0%, above serve.max_error_rate 0)")
    assert too_many_errors(metrics.model_dump(), 0.8) is None


def test_every_gate_on_a_serve_run_holds_error_rate_to_zero_by_default():
    budgets = BudgetsFile.model_validate({"budgets": [{"metric": "ttft_s", "max": 1}]})
    checks = run_gate([serve_record(10, failed=2)], None, budgets, "b")
    by_metric = {c.metric: c for c in checks}
    assert by_metric["ttft_s"].verdict == "pass"  # the requests that succeeded were fast
    assert by_metric["error_rate"].verdict == "regression" and by_metric["error_rate"].limit == 0
    allowed = run_gate([serve_record(10, failed=2, max_error_rate=0.25)], None, budgets, "b")
    assert {c.metric: c.verdict for c in allowed}["error_rate"] == "pass"


def test_one_failed_repeat_of_four_fails_the_gate():
    from records import failed_record

    runs = [make_record([0.5] * 4, repeat=i) for i in range(3)] + [failed_record(repeat=3)]
    budgets = BudgetsFile.model_validate({"budgets": [{"metric": "step_time_s", "max": 1}]})
    checks = run_gate(runs, None, budgets, "b")
    assert [c.verdict for c in checks if c.kind == "run"] == ["failed"] and failing(checks)


def test_recompiles_from_0_to_50_fail_even_with_allow_no_data(tmp_path, capsys):
    """Before: a zero baseline was no-data, and --allow-no-data passed it."""
    now = store(tmp_path / "now", [make_record([0.5] * 8, compiles=[1] + [0] * 2 + [50] + [0] * 5)])
    base = store(tmp_path / "base", [make_record([0.5] * 8)])
    budgets = budgets_file(tmp_path, "relative: {num_recompiles: +10%}\n")
    code, out, _ = gate(capsys, now, "--baseline", base, "--budgets", budgets, "--allow-no-data", "--format", "md")
    assert code == 1 and "vs baseline 0 (a count: compared absolutely)" in out and "REGRESSION" in out


# --------------------------------------------------------------------------- units
def test_budgets_take_units_and_a_bare_number_far_from_every_value_is_flagged(tmp_path, capsys):
    """Before: `ttft_s: {max: 500}` meant as ms passed a 0.9 s TTFT."""
    record = serve_record(10)
    record["metrics"]["ttft_s"]["median"] = 0.9
    folder = store(tmp_path / "now", [record])
    with_unit = budgets_file(tmp_path, "budgets: [{metric: ttft_s, max: 500 ms}]\n")
    code, out, _ = gate(capsys, folder, "--budgets", with_unit, "--format", "md")
    assert code == 1 and "500 ms (0.5)" in out and "REGRESSION" in out
    bare = budgets_file(tmp_path, "budgets: [{metric: ttft_s, max: 500}]\n")
    code, out, _ = gate(capsys, folder, "--budgets", bare, "--format", "md")
    assert code == 0 and "| units |" in out and "| warning |" in out and "e.g. 500 ms" in out
    code, out, _ = gate(capsys, folder, "--budgets", bare, "--format", "md", "--strict")
    assert code == 1 and "WARNING" in out


@pytest.mark.parametrize(
    "metric, text, value",
    [
        ("step_time_s", "250 ms", 0.25),
        ("peak_memory_gib", "512 MiB", 0.5),
        ("mfu", "35 %", 0.35),
        ("usd_run", "$2.5", 2.5),
        ("tokens_per_s_real", "1.5 kilotok/s", 1500.0),
    ],
)
def test_a_limit_with_a_unit_is_converted_to_the_metrics_unit_and_kept_as_written(metric, text, value):
    from harness.gate.gate import AbsoluteBudget

    budget = AbsoluteBudget(metric=metric, max=text)
    assert budget.max == pytest.approx(value) and budget.written == {"max": text}


@pytest.mark.parametrize("text", ["2 GiB", "fast", "3 s"])
def test_a_limit_in_the_wrong_kind_of_unit_is_refused_naming_the_field(tmp_path, text):
    from harness.basics.errors import SpecError
    from harness.gate.gate import load_budgets

    path = budgets_file(tmp_path, f"budgets: [{{metric: mfu, min: {text}}}]\n")
    with pytest.raises(SpecError) as err:
        load_budgets(path)
    assert err.value.field == "budgets.0.min" and text in str(err.value)


# --------------------------------------------------------------------------- groups
def test_train_and_serve_records_of_one_scenario_are_gated_apart():
    """Before: they shared a group whose task was the first record's."""
    budgets = BudgetsFile.model_validate({"budgets": [{"metric": "ttft_s", "max": 1}]})
    checks = run_gate([make_record([0.5] * 4), serve_record(10)], None, budgets, "b")
    ttft = [c for c in checks if c.metric == "ttft_s"]
    assert [c.verdict for c in ttft] == ["pass"] and "(serve)" in ttft[0].group


@pytest.mark.parametrize(
    "change, named",
    [
        ({"overrides": {"train.global_batch": 16}}, "--set overrides"),
        ({"chips": 2}, "chip count"),
        ({"options": {"compile": False}}, "backend options"),
    ],
)
def test_a_baseline_of_another_configuration_is_no_data_naming_the_difference(change, named):
    """Before: the key ignored --set overrides, chips and backend options, so a run at half
    the batch could hide a slowdown."""
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": "+10%"}})
    now = make_record([1.0] * 8, **change)
    (check,) = run_gate([now], [make_record([0.5] * 8)], budgets, "b")
    assert check.verdict == "no-data" and f"the nearest differs in {named}" in check.detail


def test_the_baseline_leaves_out_the_current_runs():
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": "+10%"}})
    now = make_record([1.0] * 8)
    (check,) = run_gate([now], [now, make_record([0.5] * 8)], budgets, "b")
    assert check.verdict == "regression" and "vs baseline 0.5 s" in check.detail
