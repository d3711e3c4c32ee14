"""Issue 38: `bench history` (series per configuration, change points by a stated method)
and `bench gate --history` (a run held to the band of its configuration's last runs).
Every series here is generated: 30 runs over 30 commits, Gaussian noise of 3%."""

from __future__ import annotations

import re
import statistics

import pytest

from harness.cli import main
from harness.gate import history
from harness.records.result import as_record

from history_series import STEP_AT, commit, run_records, store, values


# --------------------------------------------------------------------------- change points
def test_a_15_percent_step_at_run_18_is_one_change_point_at_run_17_18_or_19():
    (series,) = history.build_series([as_record(r) for r in run_records(values(seed=7, step=True))])
    assert series.metric == "step_time_s" and len(series.points) == 30
    (change,) = history.change_points(series)
    assert change.index + 1 in (STEP_AT - 1, STEP_AT, STEP_AT + 1)  # 1-based run number
    assert change.commit == commit(change.index)
    # the change is the segments' medians, recomputed here from the generated values
    raw = values(seed=7, step=True)
    assert change.change == pytest.approx(
        statistics.median(raw[change.index :]) / statistics.median(raw[: change.index]) - 1
    )
    assert re.fullmatch(r"step_time_s \+1\d% at commit [0-9a-f]{7} \(p=[0-9.e-]+\)", change.line("step_time_s"))
    assert change.p_value < history.ALPHA


def test_twenty_flat_series_give_at_most_one_false_change_point_in_all():
    found = [len(history.change_indices(values(seed, step=False))) for seed in range(100, 120)]
    assert sum(found) <= 1, found


def test_the_noise_estimate_ignores_a_step():
    flat, stepped = values(3, step=False), values(3, step=True)
    assert history.noise_sigma(stepped) == pytest.approx(history.noise_sigma(flat), rel=0.25)


def test_series_are_one_per_configuration_and_budgets_are_their_lines():
    budgets = [{"metric": "step_time_s", "max": 0.6}]
    records = [
        *run_records(values(1, False)[:6], budgets=budgets),
        *run_records(values(2, False)[:6], backend="gpu-fsdp"),
        *run_records(values(3, False)[:6], chips=2, catalog_key="cpu"),
    ]
    series = history.build_series([as_record(r) for r in records])
    assert sorted(s.label for s in series) == [
        "tiny [default] gpu-fsdp@cpu",
        "tiny [default] torch@cpu",
        "tiny [default] torch@cpu x2",
    ]
    assert {s.label: s.budgets for s in series}["tiny [default] torch@cpu"] == [("max", 0.6)]


# --------------------------------------------------------------------------- the band
def test_the_band_is_the_median_plus_the_larger_of_a_mad_prediction_bound_and_the_floor():
    import statistics

    from scipy.stats import t

    runs = [1.0, 1.02, 0.98, 1.0, 1.01]
    b = history.band(runs)
    center = statistics.median(runs)
    sigma = 1.4826 * statistics.median(abs(x - center) for x in runs)  # MAD 0.01
    assert b.center == 1.0 and b.sigma == pytest.approx(0.014826)
    assert b.prediction == pytest.approx(1.3 * t.ppf(0.99, 4) * sigma * (1 + 1 / 5) ** 0.5)
    assert b.half_width == pytest.approx(max(b.prediction, 0.015)) and b.high == pytest.approx(center + b.prediction)
    tight = history.band([1.0] * 5)
    assert tight.half_width == pytest.approx(0.015)  # the floor: 1.5% of the median


def test_one_outlier_in_the_window_does_not_widen_the_band():
    """The mean-and-spread band reached out to any far run, so one bad run let the next ten
    through; the median and MAD do not move for it."""
    steady = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.99, 1.0]
    with_outlier = steady[:-1] + [3.0]
    assert history.band(with_outlier).high == pytest.approx(history.band(steady).high, rel=0.02)
    assert history.band(with_outlier).high < 1.1  # a run 15% slower still fails after it


def test_a_slow_creep_passes_every_window_but_fails_against_the_reference(tmp_path, capsys):
    """1% slower a run: each run sits inside the band of the ten before it, forever; the
    reference (the first runs since the last accepted change) catches the total."""
    import random

    rng = random.Random(5)
    creeping = [0.5 * 1.01**i * (1 + rng.uniform(-0.003, 0.003)) for i in range(25)]
    runs = run_records(creeping)
    store(tmp_path / "history", runs[:-1])
    store(tmp_path / "now", runs[-1:])
    code, out = _gate(capsys, tmp_path / "now", "--history", tmp_path / "history", "--format", "md")
    rows = {line.split("|")[3].strip(): line for line in out.splitlines() if "step\\_time\\_s" in line}
    assert "| pass |" in rows["history"], out  # the window moved with the creep
    assert "REGRESSION" in rows["reference"] and "vs reference" in rows["reference"], out
    assert code == 1
    code, out = _gate(capsys, tmp_path / "now", "--history", tmp_path / "history", "--creep-limit", "40%")
    assert code == 0, out


def test_an_improvement_is_accepted_and_a_slowdown_is_not():
    import random

    rng = random.Random(3)
    faster = [1.0 + rng.uniform(-0.01, 0.01) for _ in range(10)] + [0.7 + rng.uniform(-0.01, 0.01) for _ in range(10)]
    slower = [0.7 + rng.uniform(-0.01, 0.01) for _ in range(10)] + [1.0 + rng.uniform(-0.01, 0.01) for _ in range(10)]
    assert history.accepted_start(faster, "lower") == 10
    assert history.accepted_start(slower, "lower") == 0


def _gate(capsys, *argv):
    code = main(["gate", *map(str, argv)])
    return code, capsys.readouterr().out


def test_gate_history_fails_the_stepped_series_last_run_and_passes_a_flat_one(tmp_path, capsys):
    stepped = run_records(values(seed=7, step=True))
    store(tmp_path / "stepped-history", stepped[: STEP_AT - 1])  # the runs before the step
    store(tmp_path / "stepped-now", stepped[-1:])
    code, out = _gate(capsys, tmp_path / "stepped-now", "--history", tmp_path / "stepped-history", "--format", "md")
    assert code == 1 and "| history |" in out and "REGRESSION" in out and "vs the last 10 runs' band" in out
    flat = run_records(values(seed=8, step=False))
    store(tmp_path / "flat", flat)  # the current run in its own history is left out of the band
    store(tmp_path / "flat-now", flat[-1:])
    code, out = _gate(capsys, tmp_path / "flat-now", "--history", tmp_path / "flat", "--format", "md")
    assert code == 0 and "| pass |" in out


def test_too_little_history_is_no_data_and_fails_unless_allowed(tmp_path, capsys):
    records = run_records(values(seed=9, step=False)[:4])
    store(tmp_path / "history", records[:3])
    store(tmp_path / "now", records[3:])
    code, out = _gate(capsys, tmp_path / "now", "--history", tmp_path / "history", "--format", "md")
    assert code == 1 and "3 runs of history since the last accepted change (needs 5)" in out
    code, _ = _gate(capsys, tmp_path / "now", "--history", tmp_path / "history", "--allow-no-data")
    assert code == 0


# --------------------------------------------------------------------------- bench history
def test_bench_history_lists_the_change_and_writes_one_offline_page(tmp_path, capsys):
    results = store(tmp_path / "results", run_records(values(seed=7, step=True)))
    budgets = tmp_path / "b.yaml"
    budgets.write_text("budgets:\n  - {metric: step_time_s, max: 0.65}\n")
    page = tmp_path / "history.html"
    assert main(["history", str(results), "--budgets", str(budgets), "-o", str(page)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("method: change points: PELT (ruptures")
    assert re.search(
        r"tiny \[default\] torch@cpu: step_time_s over 30 runs, 30 commits: step_time_s \+1\d% at commit", out
    )
    text = page.read_text()
    assert "budget max 0.65 (s)" in text and "https://" not in text.split("</script>", 1)[1]
    assert main(["history", str(results), "--metric", "nope"]) == 2


def test_the_report_has_a_history_section_when_its_runs_span_commits(tmp_path):
    results = store(tmp_path / "results", run_records(values(seed=7, step=True)))
    assert main(["report", str(results), "-o", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "## History" in text and re.search(r"step\\_time\\_s \+1\d% at commit [0-9a-f]{7}", text)
