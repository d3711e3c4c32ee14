"""Performance over time: one series per configuration, its change points, and the band
a new run is held to (`bench history`, `bench gate --history`).

A series is one configuration's figure over its runs, in the order they finished: the
same scenario and matrix cell, backend and backend options, accelerator and chip count
(`series_key`). Two methods, both stated where their results are printed:

- Change points (METHOD): PELT (`ruptures.Pelt`, least-squares cost, segments of at
  least MIN_SEGMENT runs) on the figure divided by its median, penalty
  PENALTY_FACTOR x sigma^2 x ln(n), sigma the noise estimated robustly from successive
  differences (1.4826 x median |x[i+1] - x[i]| / sqrt 2, so a step does not inflate
  it); each proposed change is kept only when the runs of the segment before and the
  segment after differ by a two-sided Mann-Whitney U at p < ALPHA (as `bench gate`
  tests a change against noise). Listed as "step_time_s +14% at commit abc1234 (p=...)".
- The band (BAND_RULE): the last N runs' mean +- the largest of a 99% prediction
  bound's half-width (Student t, one-sided: where one new run of the same code falls
  99 times in 100, t(0.99, n-1) x s x sqrt(1 + 1/n)), FLOOR (1.5%) of the mean, and the
  observed spread (the farthest of those runs from their mean). torchprime's gate uses
  the mean's 99.9% confidence interval in the first place; that interval narrows with
  n while one run's noise does not (with 10 runs of 3% noise it is +-1.5 sigma and fails
  6.7% of unchanged runs: docs/measurements/gate-and-history.md, issue 38), so the band here bounds a run,
  not the mean. A new run fails when its figure is beyond the band in the metric's worse
  direction.

Plain Python, numpy, scipy and ruptures: no ML framework.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from harness.gate.gate import AbsoluteBudget, Check, Configuration, configuration, figure
from harness.records.result import RunRecord
from harness.scenario.gate_metrics import GateMetric, known

# The figures `bench history` and `bench gate --history` follow when none is named.
DEFAULT_METRICS = {"train": ("step_time_s",), "serve": ("ttft_s", "output_throughput_tok_s")}
MIN_SEGMENT = 3  # runs on each side of a change point
# 0.4-1.6% false change points per flat 30-run series (docs/measurements/gate-and-history.md, issue 38)
PENALTY_FACTOR = 5.0
ALPHA = 0.01
METHOD = (
    "change points: PELT (ruptures, least-squares cost, segments of >= 3 runs) on the figure over its median, "
    "penalty 5 sigma^2 ln(n) with sigma from successive differences (1.4826 x median |diff| / sqrt 2); "
    "each kept only when the segments before and after differ by a two-sided Mann-Whitney U at p < 0.01"
)
WINDOW = 10  # runs in the band, by default
MIN_HISTORY = 5  # fewer runs of history: no band ("no-data")
CONFIDENCE = 0.99
FLOOR = 0.015
MAD_SCALE = 1.4826  # sigma = 1.4826 x MAD for normal noise
# The MAD of a few runs is a noisier sigma than their standard deviation: the bound is
# widened so that unchanged runs fail about as rarely as with the classic bound
# (benchmarks/probes/gate_band_rates.py measures the rates; docs/reports-and-gates.md states them).
MAD_WIDENING = 1.3
BAND_RULE = (
    "band: the median of the last N runs since the last accepted change point +- max(1.3 x the 99% one-sided "
    "prediction bound t(0.99, N-1) sigma sqrt(1 + 1/N) with sigma = 1.4826 x MAD, 1.5% of the median); a run "
    "beyond it in the worse direction fails; one outlier in the window moves neither"
)
CREEP_LIMIT = 0.10  # the total drift from the reference a configuration may build up
REFERENCE_RULE = (
    "reference: the median of a pinned run set (--reference DIR) or of the first 5 runs since the last "
    "accepted change point, moved by the creep limit (10% unless --creep-limit) and one run's noise (the band "
    "of those reference runs); a run beyond it in the worse direction fails, however slowly it got there"
)


# --------------------------------------------------------------------------- series
def series_key(record: RunRecord) -> Configuration:
    """What makes runs one configuration (harness.gate.gate.Configuration): the task, scenario
    and cell, backend and its options, accelerator and chips, overrides and profile."""
    return configuration(record)


def series_label(key: Configuration) -> str:
    return key.label


@dataclass(frozen=True)
class Point:
    run_id: str
    commit: str
    date: str  # the run's finished_at (ISO 8601, UTC)
    value: float


@dataclass
class Series:
    key: tuple
    metric: str
    gauge: GateMetric
    points: list[Point]
    budgets: list[tuple[str, float]] = field(default_factory=list)  # ("max" | "min", value)

    @property
    def label(self) -> str:
        return series_label(self.key)

    @property
    def values(self) -> list[float]:
        return [p.value for p in self.points]


def metrics_for(task: str, wanted: list[str] | None) -> list[str]:
    """The gate metrics a task's series follow: those named that the task has, else its defaults."""
    gauges = known()
    if wanted:
        return [m for m in wanted if gauges[m].task == task]
    return list(DEFAULT_METRICS.get(task, ()))


def check_metric_names(wanted: list[str] | None, source: str = "--metric") -> None:
    from harness.basics.errors import SpecError

    for name in wanted or ():
        if name not in known():
            raise SpecError(source, name, f"unknown metric (known: {', '.join(known())})")


def by_series(records: list[RunRecord]) -> dict[tuple, list[RunRecord]]:
    """Successful runs by configuration, each list in the order the runs finished."""
    groups: dict[tuple, list[RunRecord]] = {}
    for record in sorted((r for r in records if r.ok), key=lambda r: r.provenance.finished_at):
        groups.setdefault(series_key(record), []).append(record)
    return groups


def build_series(
    records: list[RunRecord], metrics: list[str] | None = None, budgets: list[AbsoluteBudget] = ()
) -> list[Series]:
    """One series per configuration and metric; the budgets that apply to it (the
    scenarios' own and `budgets`) kept to be drawn."""
    out = []
    for key, runs in by_series(records).items():
        for metric in metrics_for(runs[0].task, metrics):
            gauge = known()[metric]
            points = _points(gauge, runs)
            if points:
                out.append(Series(key, metric, gauge, points, _budget_lines(key, metric, runs, budgets)))
    return out


def _budget_lines(key: Configuration, metric: str, runs: list[RunRecord], budgets) -> list[tuple[str, float]]:
    name, backend, accelerator = key.scenario, key.backend, key.accelerator
    declared = [AbsoluteBudget(**b) for r in runs for b in r.scenario.resolved.get("budgets", [])]
    lines = set()
    for b in [*declared, *budgets]:
        if b.metric != metric or any(
            want is not None and want != have
            for want, have in ((b.scenario, name), (b.backend, backend), (b.accelerator, accelerator))
        ):
            continue
        lines.update((side, v) for side, v in (("max", b.max), ("min", b.min)) if v is not None)
    return sorted(lines)


# --------------------------------------------------------------------------- change points
@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first run after the change
    commit: str
    date: str
    before: float  # median of the segment before
    after: float  # median of the segment after
    p_value: float

    @property
    def change(self) -> float:
        return (self.after - self.before) / self.before

    def line(self, metric: str) -> str:
        return f"{metric} {self.change:+.0%} at commit {self.commit[:7]} (p={self.p_value:.2g})"


def noise_sigma(values) -> float:
    """The noise's standard deviation, from successive differences: a step adds one large
    difference, which the median ignores."""
    import numpy as np

    diffs = np.abs(np.diff(np.asarray(values, dtype=float)))
    return float(1.4826 * np.median(diffs) / math.sqrt(2)) if len(diffs) else 0.0


def change_indices(values: list[float], alpha: float = ALPHA, min_size: int = MIN_SEGMENT) -> list[tuple[int, float]]:
    """(index of the first run after a change, Mann-Whitney p) for each change kept (METHOD)."""
    import numpy as np
    import ruptures
    from scipy.stats import mannwhitneyu

    x = np.asarray(values, dtype=float)
    n = len(x)
    if n < 2 * min_size or np.median(x) == 0:
        return []
    y = x / np.median(x)
    sigma = noise_sigma(y)
    if sigma == 0:
        sigma = 1e-9  # identical runs: any move is a change
    penalty = PENALTY_FACTOR * sigma**2 * math.log(n)
    ends = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(y.reshape(-1, 1)).predict(pen=penalty)
    bounds = [0, *ends]
    kept = []
    for i in range(1, len(bounds) - 1):
        before, after = x[bounds[i - 1] : bounds[i]], x[bounds[i] : bounds[i + 1]]
        p = float(mannwhitneyu(before, after, alternative="two-sided").pvalue)
        if p < alpha:
            kept.append((bounds[i], p))
    return kept


def change_points(series: Series, alpha: float = ALPHA) -> list[ChangePoint]:
    import statistics

    values, found = series.values, []
    indices = change_indices(values, alpha)
    bounds = [0, *(i for i, _ in indices), len(values)]
    for k, (index, p) in enumerate(indices, 1):
        at = series.points[index]
        before = statistics.median(values[bounds[k - 1] : index])
        after = statistics.median(values[index : bounds[k + 1]])
        found.append(ChangePoint(index, at.commit, at.date, before, after, p))
    return found


# --------------------------------------------------------------------------- the band
@dataclass(frozen=True)
class Band:
    center: float  # the window's median
    sigma: float  # the noise, robustly: 1.4826 x the median absolute deviation
    prediction: float  # the one-sided prediction bound's half-width from that sigma
    floor: float  # FLOOR of the center
    n: int

    @property
    def half_width(self) -> float:
        return max(self.prediction, self.floor)

    @property
    def low(self) -> float:
        return self.center - self.half_width

    @property
    def high(self) -> float:
        return self.center + self.half_width


def band(values: list[float], confidence: float = CONFIDENCE, floor: float = FLOOR) -> Band:
    """BAND_RULE over `values` (at least two): median and MAD, so one outlier in the
    window moves neither the center nor the width."""
    import statistics

    from scipy.stats import t

    n, center = len(values), statistics.median(values)
    sigma = MAD_SCALE * statistics.median(abs(v - center) for v in values)
    prediction = MAD_WIDENING * float(t.ppf(confidence, n - 1)) * sigma * math.sqrt(1 + 1 / n)
    return Band(center, sigma, prediction, floor * abs(center), n)


def accepted_start(values: list[float], direction: str) -> int:
    """Where the window begins: after the last change point that made the figure better
    (an improvement is accepted as the new normal). A change for the worse is never
    accepted by itself: the reference check keeps failing until the user moves --since."""
    import statistics

    start = 0
    indices = [i for i, _ in change_indices(values)]
    bounds = [0, *indices, len(values)]
    for k, index in enumerate(indices, 1):
        before = statistics.median(values[bounds[k - 1] : index])
        after = statistics.median(values[index : bounds[k + 1]])
        if (after < before) == (direction == "lower"):
            start = index
    return start


def since_index(points: list[Point], since: str | None) -> int:
    """The first run at or after `since` (a commit's prefix, or an ISO date): the user's
    accepted starting point; 0 without one."""
    if not since:
        return 0
    for i, p in enumerate(points):
        if p.commit.startswith(since) or p.date >= since:
            return i
    return len(points)


def history_checks(
    current: list[RunRecord],
    history: list[RunRecord],
    window: int = WINDOW,
    metrics: list[str] | None = None,
    reference: list[RunRecord] | None = None,
    creep: float = CREEP_LIMIT,
    since: str | None = None,
) -> list[Check]:
    """Each current configuration's figure (the median over its runs, as the gate's)
    against the robust band of the last `window` runs of the same configuration in
    `history` since the last accepted change point (the current runs left out), and
    against a fixed reference (REFERENCE_RULE), so a slow creep fails once its total
    passes `creep`; fewer than MIN_HISTORY runs: no-data."""
    current_ids = {r.run_id for r in current}
    past = by_series([r for r in history if r.run_id not in current_ids])
    pinned = by_series([r for r in reference or [] if r.run_id not in current_ids])
    checks = []
    for key, runs in by_series(current).items():
        for metric in metrics_for(runs[0].task, metrics):
            gauge = known()[metric]
            value = figure(gauge, runs)
            points = _points(gauge, past.get(key, []))
            points = points[since_index(points, since) :]
            checks += _series_checks(
                key, metric, gauge, value, points, pinned.get(key), reference is not None, window, creep
            )
    return checks


def _points(gauge: GateMetric, runs: list[RunRecord]) -> list[Point]:
    return [
        Point(r.run_id, r.provenance.commit or "unknown", r.provenance.finished_at, v)
        for r in runs
        if (v := gauge.value(r)) is not None
    ]


def _series_checks(key, metric, gauge, value, points, pinned, pinned_given, window, creep) -> list[Check]:
    group = series_label(key)
    values = [p.value for p in points]
    segment = values[accepted_start(values, gauge.direction) :] if values else []
    if value is None or len(segment) < MIN_HISTORY:
        why = (
            "metric absent"
            if value is None
            else f"{len(segment)} runs of history since the last accepted change (needs {MIN_HISTORY})"
        )
        return [Check(group, metric, "history", value, None, "no-data", why)]
    b = band(segment[-window:])
    checks = [_band_check(group, metric, gauge, value, b)]
    if pinned_given:
        ref_values = [v for v in (gauge.value(r) for r in pinned or []) if v is not None]
        where = f"the pinned reference's {len(ref_values)} runs"
    else:
        ref_values = segment[:MIN_HISTORY]
        where = f"the first {MIN_HISTORY} runs since the last accepted change (from commit {points[len(values) - len(segment)].commit[:7]})"
    checks.append(_reference_check(group, metric, gauge, value, ref_values, where, creep))
    return checks


def _band_check(group, metric, gauge, value, b: Band) -> Check:
    from harness.gate.gate import _fmt

    worse = value > b.high if gauge.direction == "lower" else value < b.low
    limit = b.high if gauge.direction == "lower" else b.low
    u = gauge.unit
    detail = (
        f"{metric} {_fmt(value, u)} vs the last {b.n} runs' band {_fmt(b.low, u)} to {_fmt(b.high, u)} "
        f"(median {_fmt(b.center, u)} +- max(99% prediction from MAD {b.prediction:.3g}, 1.5% {b.floor:.3g}))"
    )
    return Check(group, metric, "history", value, limit, "regression" if worse else "pass", detail)


def _reference_check(group, metric, gauge, value, ref_values, where, creep: float) -> Check:
    """The figure against a fixed reference moved by `creep` and one run's noise (the
    reference runs' own band half-width: the recent window's would grow with the creep
    it should catch): a drift of 1% a run, which every window absorbs, fails here."""
    import statistics

    from harness.gate.gate import _fmt

    if not ref_values:
        return Check(group, metric, "reference", value, None, "no-data", f"no runs in {where}")
    ref = statistics.median(ref_values)
    noise = band(ref_values).half_width if len(ref_values) >= 2 else FLOOR * abs(ref)
    worse = 1 if gauge.direction == "lower" else -1
    limit = ref * (1 + worse * creep) + worse * noise
    beyond = (value - limit) * worse > 0
    change = (value - ref) / ref if ref else float("inf")
    detail = (
        f"{metric} {_fmt(value, gauge.unit)} vs reference {_fmt(ref, gauge.unit)} ({change:+.1%}), the median of "
        f"{where}; limit {_fmt(limit, gauge.unit)} ({'+' if worse > 0 else '-'}{creep:.0%} and one run's noise)"
    )
    return Check(group, metric, "reference", value, limit, "regression" if beyond else "pass", detail)
