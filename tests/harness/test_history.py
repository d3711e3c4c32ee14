"""Issue 38: `bench history` (series per configuration, change points by a stated method)
and `bench gate --history` (a run held to the band of its configuration's last runs).
Every series here is generated: 30 runs over 30 commits, Gaussian noise of 3%."""

from __future__ import annotations

import re
import statistics

import pytest

from harness import history
from harness.cli import main
from harness.result import as_record

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
        "tiny [default] gpu-fsdp @ cpu x1",
        "tiny [default] torch @ cpu x1",
        "tiny [default] torch @ cpu x2",
    ]
    assert {s.label: s.budgets for s in series}["tiny [default] torch @ cpu x1"] == [("max", 0.6)]


# --------------------------------------------------------------------------- the band
def test_the_band_is_the_mean_plus_the_largest_of_prediction_bound_floor_and_spread():
    from scipy.stats import t

    runs = [1.0, 1.01, 0.99, 1.0, 1.0]
    b = history.band(runs)
    mean = sum(runs) / 5
    sd = (sum((x - mean) ** 2 for x in runs) / 4) ** 0.5
    assert b.prediction == pytest.approx(t.ppf(0.99, 4) * sd * (1 + 1 / 5) ** 0.5)  # 3.75 x 0.0071 x 1.095 = 0.029
    assert b.half_width == pytest.approx(max(b.prediction, 0.015, 0.01)) and b.high == pytest.approx(
        mean + b.prediction
    )
    tight = history.band([1.0] * 5)
    assert tight.half_width == pytest.approx(0.015)  # the floor: 1.5% of the mean
    spread = history.band([1.0, 1.0, 1.0, 1.0, 1.3])  # one far run: the band reaches it
    assert spread.half_width >= 1.3 - spread.mean


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
    assert code == 1 and "3 runs of history (needs 5)" in out
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
        r"tiny \[default\] torch @ cpu x1: step_time_s over 30 runs, 30 commits: step_time_s \+1\d% at commit", out
    )
    text = page.read_text()
    assert "budget max 0.65 (s)" in text and "https://" not in text.split("</script>", 1)[1]
    assert main(["history", str(results), "--metric", "nope"]) == 2


def test_the_report_has_a_history_section_when_its_runs_span_commits(tmp_path):
    results = store(tmp_path / "results", run_records(values(seed=7, step=True)))
    assert main(["report", str(results), "-o", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "## History" in text and re.search(r"step\\_time\\_s \+1\d% at commit [0-9a-f]{7}", text)
