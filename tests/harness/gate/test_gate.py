"""`bench gate`: absolute and relative budgets, direction-aware, silent on noise."""

from __future__ import annotations

import json
import random

import pytest

from harness.basics.errors import SpecError
from harness.gate.gate import BudgetsFile, failing, load_budgets, markdown, no_data_reason, require_checks, run_gate

from conftest import TINY, bench, records_in, write_scenario
from records import failed_record, make_record


def noisy(median: float, n: int = 12, spread: float = 0.08, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [median * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def verdicts(checks):
    return [(c.metric, c.verdict) for c in checks]


def test_absolute_limits_are_direction_aware():
    records = [make_record([0.5] * 6)]
    budgets = BudgetsFile.model_validate(
        {
            "budgets": [
                {"metric": "step_time_s", "max": 0.4},
                {"metric": "tokens_per_s_real", "min": 1000},
                {"metric": "num_recompiles", "max": 0},
                {"metric": "step_time_s", "max": 1.0, "backend": "other"},
            ]
        }
    )
    checks = run_gate(records, None, budgets, "b.yaml")
    assert verdicts(checks[:1]) == [("step_time_s", "failed")]  # backend: other matches no record
    checks = checks[1:]
    assert verdicts(checks) == [
        ("step_time_s", "regression"),
        ("tokens_per_s_real", "pass"),
        ("num_recompiles", "pass"),
    ]
    assert "step_time_s 0.5 s exceeds the limit max 0.4 s" in checks[0].detail


def test_relative_regression_needs_threshold_and_significance():
    baseline = [make_record(noisy(1.0, seed=1))]
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": "+10%", "tokens_per_s_real": "-10%"}})
    slower = [make_record(noisy(1.3, seed=2))]
    assert verdicts(run_gate(slower, baseline, budgets, "b")) == [
        ("step_time_s", "regression"),
        ("tokens_per_s_real", "regression"),
    ]
    same = [make_record(noisy(1.0, seed=3))]
    assert {v for _, v in verdicts(run_gate(same, baseline, budgets, "b"))} == {"pass"}
    faster = [make_record(noisy(0.7, seed=4))]
    assert {v for _, v in verdicts(run_gate(faster, baseline, budgets, "b"))} == {"pass"}


def test_beyond_threshold_but_indistinguishable_is_noise_not_regression():
    baseline = [make_record([1.0, 0.6, 1.4, 0.7, 1.3, 1.0])]
    current = [make_record([1.15, 0.8, 1.5, 0.75, 1.4, 1.2])]  # median +15%, wildly overlapping
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": "+10%"}})
    (check,) = run_gate(current, baseline, budgets, "b")
    assert check.verdict == "noise" and "Mann-Whitney" in check.detail


def test_failed_runs_fail_the_gate_and_scenario_budgets_apply():
    records = [
        failed_record(name="a"),
        make_record([0.5] * 4, name="b", budgets=[{"metric": "step_time_s", "max": 0.1}]),
    ]
    checks = run_gate(records, None, BudgetsFile(), "b")
    assert [(c.group.split()[0], c.verdict) for c in checks] == [("a", "failed"), ("b", "regression")]


@pytest.mark.parametrize(
    "text, field",
    [
        ("relative: {step_time_s: lots}\n", "relative"),
        ("relative: {step_tme_s: +5%}\n", "relative"),
        ("budgets: [{metric: step_time_s, max: 1}]\nextra: 1\n", "extra"),
        ("budgets: [{metric: nope, max: 1}]\n", "budgets.0.metric"),
        ("alpha: 2\n", "alpha"),
        ("budgets: [\n", ""),
    ],
)
def test_a_malformed_budgets_file_exits_2_naming_file_and_field(tmp_path, text, field):
    path = tmp_path / "budgets.yaml"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_budgets(path)
    assert str(err.value).startswith(str(path)) and field in str(err.value)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "x.json").write_text(json.dumps(make_record([1.0, 1.0])))
    done = bench("gate", str(tmp_path / "r"), "--budgets", str(path))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_real_slowdown_fails_the_gate_naming_metric_limit_and_value(tmp_path):
    """A sleep injected into every step (test-only hook) against an unslowed baseline.
    Not `serial`: the sleep is twice the baseline's own median step, so load on either run
    only widens the gap (a loaded baseline lengthens the sleep; a loaded slowed run its
    steps); it would take a baseline step of 3x its median to read as noise."""
    path = str(write_scenario(tmp_path, TINY))
    # Five measured steps a run (one warm-up): fully apart, 5 against 5 is p = 0.004 in the
    # noise test (alpha 0.05), still under 0.05 with two steps overlapping; one backend probed.
    steps = ["--set", "train.steps=6", "--set", "train.warmup_steps=1", "--set", "train.window_steps=0"]
    common = ["--backend", "torch", "--no-progress", *steps]
    base_dir, slow_dir = tmp_path / "base", tmp_path / "slow"
    assert bench("run", path, "--results-dir", str(base_dir), *common).returncode == 0
    median = records_in(base_dir)[0]["metrics"]["step_time_s"]["median"]
    # 3x slower: far past the +10% budget and past what a busy 2-core machine does to
    # single runs' steps (+50% once read as noise while another test run shared the CPU).
    fault = [{"at": "step", "step": 0, "action": "sleep", "seconds": 2.0 * median}]
    assert (
        bench("run", path, "--results-dir", str(slow_dir), *common, env={"BENCH_FAULTS": json.dumps(fault)}).returncode
        == 0
    )
    budgets = tmp_path / "budgets.yaml"
    budgets.write_text("relative:\n  step_time_s: +10%\n")
    summary = tmp_path / "summary.md"
    done = bench(
        "gate", str(slow_dir), "--baseline", str(base_dir), "--budgets", str(budgets), "--markdown", str(summary)
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "step_time_s" in done.stderr and "limit" in done.stderr and "vs baseline" in done.stderr
    assert "**FAIL**" in summary.read_text()
    # A folder against itself compares nothing: the baseline leaves out the current runs' ids.
    same = bench("gate", str(base_dir), "--baseline", str(base_dir), "--budgets", str(budgets))
    assert same.returncode == 1 and "share no comparable runs" in same.stderr, same.stdout + same.stderr


def _runs(medians, seed):
    """One record per run; each run tight inside, runs apart from one another."""
    return [make_record(noisy(m, n=8, spread=0.02, seed=seed + i), repeat=i) for i, m in enumerate(medians)]


def test_with_repeats_the_noise_test_uses_between_run_variation():
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": "+10%"}})
    baseline = _runs([0.20, 0.23, 0.25, 0.21, 0.24], seed=0)
    # Same code, runs spread ~25% as measured on this machine: the median of medians
    # moved +13%, but the runs overlap, so it is noise (steps alone would say otherwise).
    same = _runs([0.27, 0.26, 0.22, 0.25, 0.20], seed=10)
    (check,) = run_gate(same, baseline, budgets, "b")
    assert check.verdict in ("pass", "noise") and "5 vs 5 runs" in check.detail
    slower = _runs([m * 1.3 for m in (0.20, 0.23, 0.25, 0.21, 0.24)], seed=20)
    (check,) = run_gate(slower, baseline, budgets, "b")
    assert check.verdict == "regression" and "5 vs 5 runs" in check.detail


def test_no_data_fails_the_gate_unless_allowed():
    """Current and baseline from different scenarios: every relative check has no data.
    A CI gate so misconfigured must fail, not pass silently, unless explicitly allowed."""
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": "+5%"}})
    checks = run_gate([make_record([0.5] * 4, name="a")], [make_record([0.5] * 4, name="b")], budgets, "b")
    assert verdicts(checks) == [("step_time_s", "no-data")]
    assert failing(checks) == checks and failing(checks, allow_no_data=True) == []
    assert no_data_reason(checks) == (
        "1 of 1 checks have no data or cannot tell: the current and baseline results share no comparable runs "
        "(same task, scenario, variant, backend and options, accelerator and chips, overrides and profile)"
    )
    assert "**FAIL**" in markdown(checks) and "NO-DATA" in markdown(checks)
    assert "**PASS**" in markdown(checks, allow_no_data=True)


def test_budgets_apply_only_to_the_task_that_has_the_metric():
    """A train-and-serve scenario's step-time budget is not a missing figure of its
    serve record, nor its TTFT budget one of the train record."""
    train = make_record([0.5] * 4, budgets=[{"metric": "step_time_s", "max": 1.0}, {"metric": "ttft_s", "max": 1.0}])
    checks = run_gate([train], None, BudgetsFile(), "b")
    assert verdicts(checks) == [("step_time_s", "pass")]


@pytest.mark.parametrize(
    "budgets, baseline, budgets_file, expected",
    [
        ({}, "base", None, "without --budgets there are no relative limits"),
        ({"budgets": [{"metric": "step_time_s", "max": 1}]}, "base", "b.yaml", "b.yaml has no `relative:` limits"),
        ({"relative": {"step_time_s": "+5%"}}, None, "b.yaml", "relative limits compare with a baseline"),
        ({}, None, None, "no checks: give --budgets FILE"),
    ],
)
def test_a_gate_that_would_check_nothing_says_exactly_why(budgets, baseline, budgets_file, expected):
    with pytest.raises(SpecError) as err:
        require_checks([], "results", budgets_file, baseline, BudgetsFile.model_validate(budgets))
    assert expected in str(err.value) and not str(err.value).startswith("bench")


# --------------------------------------------------------------------------- by hand
def _check(checks, metric):
    return next(c for c in checks if c.metric == metric)


def test_a_relative_limit_is_the_baseline_moved_by_the_threshold_in_the_worse_direction():
    """step time (lower is better): limit = base x 1.10; tokens/s (higher): base x 0.90.
    The p-value is scipy's one-sided Mann-Whitney U on the steps, worse direction."""
    from scipy.stats import mannwhitneyu

    base_times, times = [1.0, 1.02, 0.98, 1.01, 0.99], [1.3, 1.32, 1.28, 1.31, 1.29]
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": "+10%", "tokens_per_s_real": "-10%"}})
    checks = run_gate([make_record(times)], [make_record(base_times)], budgets, "b")
    step, tok = _check(checks, "step_time_s"), _check(checks, "tokens_per_s_real")
    assert (step.measured, step.limit) == pytest.approx((1.3, 1.0 * 1.1))
    p = mannwhitneyu(times, base_times, alternative="greater").pvalue
    assert step.detail == (
        f"step_time_s 1.3 s vs baseline 1 s (+30.0%); limit 1.1 s (+10%); Mann-Whitney p={p:.3g} on steps of 1 vs 1 "
        "runs; between-run noise unmeasured (use repeats >= 4)"
    )
    base_tok, tok_now = 1000 * 5 / sum(base_times), 1000 * 5 / sum(times)
    assert (tok.measured, tok.limit) == pytest.approx((tok_now, base_tok * 0.9))
    p = mannwhitneyu([1000 / t for t in times], [1000 / t for t in base_times], alternative="less").pvalue
    assert tok.detail == (
        f"tokens_per_s_real {tok_now:.4g} tok/s vs baseline {base_tok:.4g} tok/s ({(tok_now - base_tok) / base_tok:+.1%}); "
        f"limit {base_tok * 0.9:.4g} tok/s (-10%); Mann-Whitney p={p:.3g} on steps of 1 vs 1 runs; between-run "
        "noise unmeasured (use repeats >= 4)"
    )
    assert step.verdict == tok.verdict == "regression"


@pytest.mark.parametrize(
    "current, verdict",
    [
        ([1.1] * 5, "pass"),  # exactly at the limit: not beyond it
        ([1.11] * 5, "regression"),
        ([0.5] * 5, "pass"),  # faster is never a regression
    ],
)
def test_a_relative_check_fails_only_beyond_its_limit(current, verdict):
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": "+10%"}})
    (check,) = run_gate([make_record(current)], [make_record([1.0] * 5)], budgets, "b")
    assert check.verdict == verdict


@pytest.mark.parametrize("direction, alternative", [("lower", "greater"), ("higher", "less")])
def test_the_noise_test_is_scipys_one_sided_mann_whitney_in_the_worse_direction(direction, alternative):
    from scipy.stats import mannwhitneyu

    from harness.gate.gate import _worse_p_value

    a, b = [3.0, 4.0, 5.0, 6.0], [1.0, 2.0, 3.5, 4.5]
    assert _worse_p_value(a, b, direction) == pytest.approx(mannwhitneyu(a, b, alternative=alternative).pvalue)
    assert _worse_p_value(a[:3], b[:3], direction) is not None
    assert _worse_p_value(a[:2], b, direction) is None and _worse_p_value(a, b[:2], direction) is None


def test_alpha_decides_between_noise_and_regression():
    base, current = [1.0, 1.5, 0.8, 1.2], [1.3, 1.9, 1.1, 1.6]  # median +30%, p ~0.1
    lax = BudgetsFile.model_validate({"relative": {"step_time_s": "+10%"}, "alpha": 0.2})
    strict = BudgetsFile.model_validate({"relative": {"step_time_s": "+10%"}, "alpha": 0.05})
    assert run_gate([make_record(current)], [make_record(base)], lax, "b")[0].verdict == "regression"
    assert run_gate([make_record(current)], [make_record(base)], strict, "b")[0].verdict == "noise"


def test_with_two_steps_a_side_no_test_can_tell_and_a_change_beyond_the_limit_fails():
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": "+10%"}})
    (check,) = run_gate([make_record([1.5, 1.5])], [make_record([1.0, 1.0])], budgets, "b")
    assert check.verdict == "cannot-tell" and check.beyond and failing([check], allow_no_data=True) == [check]
    assert "with 2 vs 2 samples (steps of 1 vs 1 runs" in check.detail
    assert "smallest p is 0.167, not below alpha 0.05; needs at least 4 samples a side" in check.detail


def test_a_metric_without_raw_samples_and_few_runs_cannot_tell():
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s.p90": "+5%"}})
    (check,) = run_gate([make_record([2.0] * 4)], [make_record([1.0] * 4)], budgets, "b")
    assert check.verdict == "cannot-tell" and check.failed
    assert "with 1 vs 1 samples (1 vs 1 runs (no per-step samples))" in check.detail


def test_noise_samples_are_per_run_figures_from_four_runs_a_side():
    from harness.gate.gate import noise_samples
    from harness.records.result import as_records
    from harness.scenario.gate_metrics import known

    current = as_records([make_record([m] * 3, repeat=i) for i, m in enumerate((1.0, 2.0, 3.0, 4.0))])
    baseline = as_records([make_record([m] * 3, repeat=i) for i, m in enumerate((0.5, 1.5, 2.5))])
    metric = known()["step_time_s"]
    assert noise_samples(metric, current, current) == ([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0], "4 vs 4 runs")
    pooled, base, basis = noise_samples(metric, current, baseline)
    assert pooled == [1.0] * 3 + [2.0] * 3 + [3.0] * 3 + [4.0] * 3 and base == [0.5] * 3 + [1.5] * 3 + [2.5] * 3
    assert basis.startswith("steps of 4 vs 3 runs")


def test_the_groups_figure_is_the_median_over_runs():
    from harness.gate.gate import figure
    from harness.records.result import as_records
    from harness.scenario.gate_metrics import known

    runs = as_records([make_record([m] * 3, repeat=i) for i, m in enumerate((1.0, 5.0, 2.0, 4.0))])
    assert figure(known()["step_time_s"], runs) == 3.0  # median of 1, 2, 4, 5


@pytest.mark.parametrize(
    "budget, value, verdict, detail",
    [
        ({"max": 0.5}, 0.5, "pass", "within the limit"),
        ({"max": 0.49}, 0.5, "regression", "step_time_s 0.5 s exceeds the limit max 0.49 s"),
        ({"min": 0.5}, 0.5, "pass", "within the limit"),
        ({"min": 0.51}, 0.5, "regression", "step_time_s 0.5 s is below the limit min 0.51 s"),
        ({"min": 0.4, "max": 0.6}, 0.5, "pass", "within the limit"),
    ],
)
def test_absolute_limits_at_and_past_their_edge(budget, value, verdict, detail):
    (check,) = run_gate(
        [make_record([value] * 4)],
        None,
        BudgetsFile.model_validate({"budgets": [{"metric": "step_time_s", **budget}]}),
        "b",
    )
    assert (check.verdict, check.detail, check.measured, check.kind) == (verdict, detail, value, "absolute")
    assert check.metric == "step_time_s"
    assert check.limit == budget.get("max", budget.get("min"))
    assert check.group == "tiny [default] torch@cpu"


def test_an_absolute_budget_narrowed_to_a_scenario_backend_or_accelerator():
    records = [make_record([0.5] * 3, name="a"), make_record([0.5] * 3, name="b", backend="gpu-fsdp")]
    budgets = BudgetsFile.model_validate(
        {
            "budgets": [
                {"metric": "step_time_s", "max": 1, "scenario": "a"},
                {"metric": "step_time_s", "max": 1, "backend": "gpu-fsdp"},
                {"metric": "step_time_s", "max": 1, "accelerator": "cpu", "scenario": "b"},
                {"metric": "step_time_s", "max": 1, "accelerator": "h100-sxm"},
            ]
        }
    )
    checks = run_gate(records, None, budgets, "b")
    assert [c.group for c in checks] == [
        "budget accelerator: h100-sxm",  # matches no record: fails, naming what exists
        "a [default] torch@cpu",
        "b [default] gpu-fsdp@cpu",
        "b [default] gpu-fsdp@cpu",
    ]


def test_an_absent_figure_is_no_data_with_its_reason_and_a_missing_one_fails():
    from harness.gate.gate import Check
    from harness.records.result import as_record

    record = as_record(make_record([0.5] * 3))  # on a CPU: no MFU
    (check,) = run_gate([record], None, BudgetsFile.model_validate({"budgets": [{"metric": "mfu", "min": 0.3}]}), "b")
    no_peak = f"run {record.run_id}: metric absent: cpu has no peak FLOP/s in the catalog, so no MFU"
    assert check == Check("tiny [default] torch@cpu", "mfu", "figure", None, None, "no-data", no_peak)
    budgets = BudgetsFile.model_validate({"relative": {"mfu": "-5%"}})
    checks = run_gate([record], [make_record([0.5] * 3)], budgets, "b")
    assert [(c.kind, c.verdict) for c in checks] == [("figure", "no-data"), ("figure", "no-data")]
    # A figure missing with no reason stated (every measured step compiled: no steady
    # state) is a failure of its own, naming the run and the field ...
    budgets = BudgetsFile.model_validate({"relative": {"tokens_per_s_real": "-5%", "num_recompiles": "+5%"}})
    compiling = as_record(make_record([0.5] * 3, compiles=[1, 1, 1, 1]))
    checks = run_gate([compiling], [record], budgets, "b")
    assert _check(checks, "tokens_per_s_real") == Check(
        "tiny [default] torch@cpu",
        "tokens_per_s_real",
        "figure",
        None,
        None,
        "failed",
        f"run {compiling.run_id}: metrics.tokens_per_s_real is missing",
    )
    # ... and a count over a baseline of 0 (no recompiles) compares absolutely: 3 > 0 fails.
    assert _check(checks, "num_recompiles") == Check(
        "tiny [default] torch@cpu",
        "num_recompiles",
        "relative",
        3,
        0.0,
        "regression",
        "num_recompiles 3 vs baseline 0 (a count: compared absolutely)",
    )


def test_a_failed_run_check_names_each_reason_once():
    records = [failed_record(name="x"), failed_record(name="x", repeat=1), make_record([0.5] * 3, name="y")]
    checks = run_gate(records, None, BudgetsFile(), "b")
    assert [(c.group, c.metric, c.kind, c.verdict, c.detail) for c in checks] == [
        ("x [default] torch@cpu", "run", "run", "failed", "no successful run: RuntimeError: boom")
    ]
    assert checks[0].failed
    mixed = [failed_record(name="x"), make_record([0.5] * 3, name="x", repeat=1)]
    (check,) = run_gate(mixed, None, BudgetsFile(), "b")  # one failed repeat fails the gate
    assert check.failed and check.detail == "1 of 2 runs failed (allow_failed_runs: 0): RuntimeError: boom"
    allowed = BudgetsFile.model_validate({"allow_failed_runs": 1})
    (check,) = run_gate(mixed, None, allowed, "b")
    assert check.verdict == "pass" and "within allow_failed_runs: 1" in check.detail


def test_scenario_budgets_are_deduplicated_and_a_bad_one_names_the_scenario():
    from harness.gate.gate import scenario_budgets
    from harness.records.result import as_records

    limit = [{"metric": "step_time_s", "max": 1.0}]
    records = as_records([make_record([0.5] * 3, budgets=limit, repeat=i) for i in range(3)])
    (budget,) = scenario_budgets(records, "results")
    assert (budget.scenario, budget.metric, budget.max) == ("tiny", "step_time_s", 1.0)
    bad = as_records([make_record([0.5] * 3, budgets=[{"metric": "step_time_s"}])])
    with pytest.raises(SpecError) as err:
        scenario_budgets(bad, "results")
    assert str(err.value).startswith("results (scenario tiny budgets)")


@pytest.mark.parametrize("limit, threshold", [("+5%", 0.05), ("-12.5%", 0.125), (" 7 % ", 0.07), ("0%", 0.0)])
def test_relative_thresholds_read_as_fractions(limit, threshold):
    from harness.gate.gate import relative_threshold

    assert relative_threshold(limit) == pytest.approx(threshold)
    BudgetsFile.model_validate({"relative": {"step_time_s": limit}})


def test_no_data_reason_lists_three_checks_and_counts_the_rest():
    from harness.gate.gate import Check

    missing = [Check(f"g{i}", "m", "absolute", None, None, "no-data", "metric absent") for i in range(5)]
    ok = Check("g", "m", "absolute", 1.0, 2.0, "pass", "within the limit")
    assert no_data_reason([ok]) is None
    assert no_data_reason([ok, *missing]) == (
        "5 of 6 checks have no data or cannot tell: g0 m: metric absent; g1 m: metric absent; g2 m: metric absent; and 2 more"
    )
    assert no_data_reason(missing[:4]).endswith("g2 m: metric absent; and 1 more")
    assert no_data_reason(missing[:3]) == (
        "3 of 3 checks have no data or cannot tell: g0 m: metric absent; g1 m: metric absent; g2 m: metric absent"
    )


def test_markdown_lists_every_check_with_failures_in_capitals():
    from harness.gate.gate import Check

    checks = [
        Check("tiny [default] torch@cpu", "step_time_s", "absolute", 0.5, 0.4, "regression", "exceeds"),
        Check("tiny [default] torch@cpu", "mfu", "absolute", None, None, "no-data", "metric absent"),
        Check("tiny [default] torch@cpu", "num_compiles", "absolute", 2.0, 3.0, "pass", "within the limit"),
    ]
    assert markdown(checks).splitlines() == [
        "| run | metric | check | measured | limit | verdict | detail |",
        "|---|---|---|---|---|---|---|",
        "| tiny \\[default\\] torch@cpu | step\\_time\\_s | absolute | 0.5 | 0.4 | REGRESSION | exceeds |",
        "| tiny \\[default\\] torch@cpu | mfu | absolute | - | - | NO-DATA | metric absent |",
        "| tiny \\[default\\] torch@cpu | num\\_compiles | absolute | 2 | 3 | pass | within the limit |",
        "",
        "**FAIL**: 3 checks, 2 failed",
    ]
    assert markdown(checks[2:]).endswith("**PASS**: 1 check, 0 failed\n")
    assert markdown(checks[1:], allow_no_data=True).splitlines()[2].endswith("| no-data | metric absent |")


def test_require_checks_passes_a_gate_that_checks_something():
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": "+5%"}})
    checks = run_gate([make_record([0.5] * 3)], [make_record([0.5] * 3)], budgets, "b")
    assert require_checks(checks, "results", "b.yaml", "base", budgets) is None
    with pytest.raises(SpecError) as err:
        require_checks([], "results", "b.yaml", None, BudgetsFile())
    assert str(err.value) == (
        "b.yaml: no checks: its budgets match no run in results, and those records declare no budgets of their own"
    )
    assert err.value.field == ""


@pytest.mark.parametrize(
    "budgets, results, budgets_file, baseline, message",
    [
        (
            {},
            "r",
            None,
            "base",
            "--baseline base: nothing is compared with the baseline: without --budgets there are no relative limits; "
            "give --budgets FILE, e.g. `relative: {step_time_s: +5%}`",
        ),
        (
            {"budgets": [{"metric": "step_time_s", "max": 1}]},
            "r",
            "b.yaml",
            "base",
            "--baseline base: nothing is compared with the baseline: b.yaml has no `relative:` limits; add some, "
            "e.g. `relative: {step_time_s: +5%}`",
        ),
        (
            {"relative": {"step_time_s": "+5%"}},
            "r",
            "b.yaml",
            None,
            "b.yaml: relative: relative limits compare with a baseline: give --baseline DIR (or drop them)",
        ),
        (
            {"relative": {"step_time_s": "+5%"}},
            "r",
            None,
            None,
            "--budgets: relative: relative limits compare with a baseline: give --baseline DIR (or drop them)",
        ),
        (
            {},
            "r",
            None,
            None,
            "r: no checks: give --budgets FILE (budgets or relative limits) with --baseline DIR, or run scenarios "
            "that declare budgets",
        ),
    ],
)
def test_a_gate_that_would_check_nothing_says_so_in_one_exact_line(budgets, results, budgets_file, baseline, message):
    with pytest.raises(SpecError) as err:
        require_checks([], results, budgets_file, baseline, BudgetsFile.model_validate(budgets))
    assert str(err.value) == message
    assert err.value.field == ("relative" if ": relative: " in message else "")


def test_each_relative_verdict_is_a_whole_check():
    from harness.gate.gate import Check

    group = "tiny [default] torch@cpu"
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": "+10%", "tokens_per_s_real": "-50%"}})
    base = [make_record([1.0, 1.1, 0.9, 1.0, 1.05])]
    passing = run_gate([make_record([1.0, 1.02, 0.98, 1.0, 1.01])], base, budgets, "b")
    assert [(c.group, c.metric, c.kind, c.verdict) for c in passing] == [
        (group, "step_time_s", "relative", "pass"),
        (group, "tokens_per_s_real", "relative", "pass"),
    ]
    assert (passing[0].measured, passing[0].limit) == (1.0, pytest.approx(1.1))
    slower = run_gate([make_record([1.3, 1.35, 1.25, 1.3, 1.32])], base, budgets, "b")
    assert [(c.group, c.metric, c.kind, c.verdict, c.measured) for c in slower] == [
        (group, "step_time_s", "relative", "regression", 1.3),
        (group, "tokens_per_s_real", "relative", "pass", pytest.approx(5000 / 6.52)),
    ]
    assert slower[0].limit == pytest.approx(1.1)
    noisy_base, noisy_now = (
        [make_record([1.0, 0.6, 1.4, 0.7, 1.3, 1.0])],
        [make_record([1.15, 0.8, 1.5, 0.75, 1.4, 1.2])],
    )
    (noise,) = run_gate(noisy_now, noisy_base, BudgetsFile.model_validate({"relative": {"step_time_s": "+10%"}}), "b")
    assert (noise.group, noise.metric, noise.kind, noise.measured, noise.limit) == (
        group,
        "step_time_s",
        "relative",
        pytest.approx(1.175),
        pytest.approx(1.1),
    )
    assert noise.verdict == "noise" and "; not distinguishable from noise, Mann-Whitney p=" in noise.detail
    assert isinstance(noise, Check)


def test_a_test_that_cannot_reach_alpha_cannot_tell():
    """3 steps a side, every current step slower: the one-sided exact p is at best 1/20 =
    alpha, so no slowdown of any size could be told from noise: cannot-tell, failing."""
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": "+10%"}, "alpha": 0.05})
    (check,) = run_gate([make_record([2.0, 2.1, 2.2])], [make_record([1.0, 1.1, 1.2])], budgets, "b")
    assert (
        check.verdict == "cannot-tell" and check.failed and "smallest p is 0.05, not below alpha 0.05" in check.detail
    )
    (check,) = run_gate([make_record([2.0, 2.1, 2.2, 2.3])], [make_record([1.0, 1.1, 1.2, 1.3])], budgets, "b")
    assert check.verdict == "regression" and "Mann-Whitney p=0.0143 " in check.detail  # 1/70


def test_a_p_value_at_alpha_is_noise():
    """4 steps a side, one current step below the baseline's largest: p = 2/70, noise at
    alpha 0.02 (a regression at 0.05)."""
    current, base = [make_record([1.25, 2.1, 2.2, 2.3])], [make_record([1.0, 1.1, 1.2, 1.3])]
    strict = BudgetsFile.model_validate({"relative": {"step_time_s": "+10%"}, "alpha": 0.02})
    (check,) = run_gate(current, base, strict, "b")
    assert check.verdict == "noise" and "Mann-Whitney p=0.0286 " in check.detail


def test_every_budget_and_every_group_is_checked():
    """A budget for another scenario or task does not stop the ones after it; a group
    without a baseline does not stop the next group's checks."""
    records = [make_record([0.5] * 3, name="a"), make_record([0.5] * 3, name="b")]
    budgets = BudgetsFile.model_validate(
        {
            "budgets": [
                {"metric": "step_time_s", "max": 1, "scenario": "other"},
                {"metric": "ttft_s", "max": 1},
                {"metric": "step_time_s", "max": 1},
            ],
            "relative": {"ttft_s": "+5%", "step_time_s": "+5%", "tokens_per_s_real": "-5%"},
        }
    )
    checks = run_gate([failed_record(name="c"), *records], [make_record([0.5] * 3, name="b")], budgets, "b")
    assert [(c.group.split()[0], c.metric, c.kind, c.verdict) for c in checks] == [
        ("c", "run", "run", "failed"),
        # a budget or limit that applies to no record fails, after the failed runs
        ("budget", "step_time_s", "absolute", "failed"),
        ("budget", "ttft_s", "absolute", "failed"),
        ("relative", "ttft_s", "relative", "failed"),
        ("a", "step_time_s", "absolute", "pass"),
        ("b", "step_time_s", "absolute", "pass"),
        ("a", "step_time_s", "relative", "no-data"),
        ("a", "tokens_per_s_real", "relative", "no-data"),
        ("b", "step_time_s", "relative", "cannot-tell"),  # 3 steps a side: no test can reach p < 0.05
        ("b", "tokens_per_s_real", "relative", "cannot-tell"),
    ]
    assert checks[6].group == "a [default] torch@cpu" and checks[8].group == "b [default] torch@cpu"


def test_a_failed_groups_reasons_are_kept_whole_and_joined():
    long = failed_record(name="x")
    long["failure"]["reason"] = "E" * 130 + " the end"
    other = failed_record(name="x", repeat=1)
    (check,) = run_gate([long, other], None, BudgetsFile(), "b")
    assert check.detail == "no successful run: " + "E" * 130 + " the end; RuntimeError: boom"
    assert "E" * 130 + " the end" in markdown([check])


def test_records_without_budgets_declare_none_and_a_bad_one_names_its_source():
    from harness.gate.gate import scenario_budgets
    from harness.records.result import as_records

    plain = make_record([0.5] * 3)
    del plain["scenario"]["resolved"]["budgets"]
    assert scenario_budgets(as_records([plain]), "results") == []
    bad = make_record([0.5] * 3, budgets=[{"metric": "step_time_s"}])
    with pytest.raises(SpecError) as err:
        run_gate([bad], None, BudgetsFile(), "results-dir")
    assert err.value.source == "results-dir (scenario tiny budgets)"


def test_fmt_writes_4_significant_digits_and_the_unit():
    from harness.gate.gate import _fmt

    assert (_fmt(None, "s"), _fmt(0.123456, "s"), _fmt(12345.0, ""), _fmt(2.0, "tok/s")) == (
        "-",
        "0.1235 s",
        "1.234e+04",
        "2 tok/s",
    )


def test_a_budgets_file_is_read_or_refused_naming_file_and_field(tmp_path):
    assert load_budgets(None) == BudgetsFile()
    path = tmp_path / "budgets.yaml"
    path.write_text("relative: {step_time_s: +5%}\nalpha: 0.1\n")
    assert load_budgets(path) == BudgetsFile(relative={"step_time_s": "+5%"}, alpha=0.1)
    path.write_text("alpha: 2\n")
    with pytest.raises(SpecError) as err:
        load_budgets(path)
    assert (err.value.source, err.value.field) == (str(path), "alpha")


# --------------------------------------------------------------------------- issue 38: a gate that fails on its own mistakes
def _store(directory, records):
    directory.mkdir(parents=True, exist_ok=True)
    for i, record in enumerate(records):
        (directory / f"r{i}.json").write_text(json.dumps(record))
    return directory


def _gate(capsys, *argv):
    from harness.cli import main

    code = main(["gate", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_typod_scenario_filter_fails_the_gate_naming_it_and_the_scenarios_that_exist(tmp_path, capsys):
    """The issue's file: `gemma-270m` for `gemma270m` used to drop the failing budget and PASS."""
    results = _store(
        tmp_path / "results", [make_record([8.8] * 4, name="gemma270m"), make_record([1.0] * 4, name="qwen")]
    )
    typo = tmp_path / "typo.yaml"
    typo.write_text(
        "budgets:\n  - {metric: step_time_s, max: 5, scenario: gemma-270m}\n  - {metric: num_recompiles, max: 0}\n"
    )
    code, out, err = _gate(capsys, results, "--budgets", typo, "--format", "md")
    assert code == 1
    assert (
        "budget step\\_time\\_s (scenario: gemma-270m) matches no record: the records have scenarios: gemma270m, qwen;"
        in out
    )
    assert "backends: torch; accelerators: cpu" in out and "**FAIL**: 3 checks, 1 failed" in out
    assert "FAILED budget scenario: gemma-270m:" in err
    # corrected, the budget applies and fails on its figure (8.8 s > 5)
    typo.write_text("budgets:\n  - {metric: step_time_s, max: 5, scenario: gemma270m}\n")
    code, out, _ = _gate(capsys, results, "--budgets", typo, "--format", "md")
    assert code == 1 and "| 8.8 | 5 | REGRESSION |" in out


def test_a_relative_limit_on_a_serve_metric_over_train_records_fails_naming_the_tasks(tmp_path, capsys):
    results = _store(tmp_path / "results", [make_record([0.5] * 4)])
    base = _store(tmp_path / "base", [make_record([0.5] * 4)])
    budgets = tmp_path / "b.yaml"
    budgets.write_text("relative:\n  ttft_s: +5%\n  step_time_s: +5%\n")
    code, out, _ = _gate(capsys, results, "--baseline", base, "--budgets", budgets, "--format", "md")
    assert code == 1
    assert "relative limit on ttft\\_s, a serve figure, matches no record: they are train runs only" in out
    # a budget on a serve figure whose filter matches only train records says that too
    budgets.write_text("budgets:\n  - {metric: ttft_s, max: 1, scenario: tiny}\n")
    code, out, _ = _gate(capsys, results, "--budgets", budgets, "--format", "md")
    assert (
        code == 1
        and "ttft\\_s is a serve figure and the records that match (scenario: tiny) are train runs only" in out
    )


def test_every_terminal_row_shows_measured_value_limit_and_verdict(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    results = _store(tmp_path / "results", [make_record([0.5] * 4)])
    budgets = tmp_path / "b.yaml"
    budgets.write_text("budgets:\n  - {metric: step_time_s, max: 2}\n  - {metric: num_recompiles, max: 0}\n")
    code, out, _ = _gate(capsys, results, "--budgets", budgets)
    assert code == 0
    header = next(line for line in out.splitlines() if "verdict" in line)
    assert [c.strip() for c in header.strip("┃ ").split("┃")][:6] == [
        "run",
        "metric",
        "check",
        "measured",
        "limit",
        "verdict",
    ]
    rows = [[c.strip() for c in line.strip("│ ").split("│")] for line in out.splitlines() if "torch@cpu" in line]
    assert [row[1:6] for row in rows] == [
        ["step_time_s", "absolute", "0.5", "2", "pass"],
        ["num_recompiles", "absolute", "0", "0", "pass"],
    ]
