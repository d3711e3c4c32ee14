"""`bench gate`: fail CI on a real regression, never on noise, and never pass by mistake.

Checks are declarative: absolute limits (`max`/`min` on a metric, filtered by scenario,
backend and accelerator; with units: `max: 500 ms`) and relative limits against a
baseline results directory (`step_time_s: +5%`). Every metric knows its direction. The
rules (docs/reports-and-gates.md, "What fails the gate"):

- Runs are compared only within one configuration (`Configuration`: task, scenario and
  cell, backend and its options, accelerator and chips, --set overrides and profile).
- Every figure a check reads is a finite, non-negative number; anything else is its own
  FAILED row naming the record and the field. An absolute budget holds every run: the
  worst run's figure is checked, not the median's.
- Every failed run fails its configuration, unless the budgets file allows some
  (`allow_failed_runs`). A serve run is held to `error_rate: {max: 0}` by default.
- A relative check fails when the change is beyond its threshold and distinguishable
  from noise (one-sided Mann-Whitney U, as asv does). Where the samples at hand could
  never reach the test's alpha, the row is `cannot-tell` and says how many it needs:
  beyond the threshold it fails whatever the flags, within it it fails like no-data.
- A count (recompiles, compiles, errors) with a zero baseline compares absolutely.
- A file that looks like a record but cannot be read fails (harness.commands.gate).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.basics.errors import SpecError
from harness.figures.metrics import across_runs
from harness.records.result import RunRecord, as_records
from harness.scenario.gate_metrics import GateMetric, known
from harness.scenario.spec import Budget

MIN_SAMPLES_FOR_TEST = 3
# With 4 runs a side, a one-sided Mann-Whitney U can reach p = 1/70; with 3, only 1/20.
MIN_RUNS_FOR_TEST = 4
# A bare limit this many times away from every measured value of its metric is likely
# written in another unit (`ttft_s: {max: 500}` meant as ms).
UNIT_MISTAKE_FACTOR = 100.0
NOISE_GUIDANCE = (
    "runs of the same code differ by ~25% on a shared machine: gate on repeats >= 4 a side "
    "(docs/reports-and-gates.md, Gates)"
)
# Verdicts: pass, noise (beyond the limit, not told from noise: passes), regression,
# failed, no-data and cannot-tell (fail unless allowed), warning (fails under --strict).
FAILING = ("regression", "failed")


# --------------------------------------------------------------------------- budgets file
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class AbsoluteBudget(Budget):
    """A scenario's budget (one model, one validation), which a budgets file may also
    narrow to one scenario."""

    scenario: str | None = None


_PERCENT = re.compile(r"^\s*[+-]?(\d+(\.\d+)?)\s*%\s*$")


class BudgetsFile(_Strict):
    budgets: tuple[AbsoluteBudget, ...] = ()
    # metric -> allowed change in its worse direction, e.g. "+5%" (sign optional).
    relative: dict[str, str] = Field(default_factory=dict)
    alpha: float = Field(0.05, gt=0, lt=1)
    # Failed runs a configuration may have before the gate fails (default: none).
    allow_failed_runs: int = Field(0, ge=0)

    @field_validator("relative")
    @classmethod
    def _relative(cls, value: dict[str, str]) -> dict[str, str]:
        for metric, limit in value.items():
            if metric not in known():
                raise ValueError(f"{metric}: unknown metric (known: {', '.join(known())})")
            if not isinstance(limit, str) or not _PERCENT.match(limit):
                raise ValueError(f"{metric}: expected a percentage such as +5%, got {limit!r}")
        return value


def relative_threshold(limit: str) -> float:
    return float(_PERCENT.match(limit).group(1)) / 100.0


def load_budgets(path: str | Path | None) -> BudgetsFile:
    if path is None:
        return BudgetsFile()
    from harness.basics.yaml_io import first_error, read_document

    try:
        return BudgetsFile.model_validate(read_document(path))
    except ValidationError as exc:
        raise first_error(exc, str(path)) from None


# --------------------------------------------------------------------------- configurations
def _canonical(value) -> str:
    return json.dumps(value or {}, sort_keys=True, separators=(",", ":"), default=str)


@dataclass(frozen=True)
class Configuration:
    """What makes runs comparable: records that differ in any of these are never compared."""

    task: str
    scenario: str
    variant: str
    backend: str
    options: str  # backend options, canonical JSON
    accelerator: str
    chips: int
    overrides: str  # --set overrides, canonical JSON
    profile: str  # the named profile applied ("" for none)

    @property
    def label(self) -> str:
        """`tiny [default] torch@cpu`, with whatever else sets it apart: the task where it is
        not training, options, chips where more than one, overrides, the profile."""
        options = "" if self.options == "{}" else f" {self.options}"
        tagged = "" if self.task == "train" else f" ({self.task})"
        chips = "" if self.chips == 1 else f" x{self.chips}"
        overrides = "" if self.overrides == "{}" else f" --set {self.overrides}"
        profile = f" profile {self.profile}" if self.profile else ""
        return f"{self.scenario} [{self.variant}]{tagged} {self.backend}{options}@{self.accelerator}{chips}{overrides}{profile}"

    def differences(self, other: "Configuration") -> list[str]:
        """`backend options: {...} here, {...} there`, for each field that differs."""
        names = {"options": "backend options", "chips": "chip count", "overrides": "--set overrides"}
        out = []
        for name in self.__dataclass_fields__:
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine != theirs:
                out.append(f"{names.get(name, name)}: {mine or 'none'} here, {theirs or 'none'} there")
        return out


def configuration(record: RunRecord) -> Configuration:
    s, b, a = record.scenario, record.backend, record.accelerator
    return Configuration(
        record.task,
        s.name,
        s.variant,
        b.name,
        _canonical(b.options),
        a.catalog_key,
        a.count,
        _canonical(s.overrides),
        (s.profile or {}).get("name") or "",
    )


def group_key(record: RunRecord) -> Configuration:
    return configuration(record)


def label(key: Configuration) -> str:
    return key.label


def group_records(records: list[RunRecord]) -> dict[Configuration, list[RunRecord]]:
    groups: dict[Configuration, list[RunRecord]] = {}
    for record in records:
        groups.setdefault(configuration(record), []).append(record)
    return groups


# --------------------------------------------------------------------------- checks
@dataclass
class Check:
    group: str
    metric: str
    kind: str  # absolute | relative | history | reference | run | figure | record | units
    measured: float | None
    limit: float | None
    verdict: str  # pass | noise | regression | failed | no-data | cannot-tell | warning
    detail: str
    limit_written: str = ""  # the limit as the budget wrote it, where it had a unit
    beyond: bool = field(default=False)  # cannot-tell: the figure is beyond its limit

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING or (self.verdict == "cannot-tell" and self.beyond)


def figure(metric: GateMetric, records: list[RunRecord]) -> float | None:
    """The group's figure: one figure for repeated runs (metrics.md), of each run's own."""
    return across_runs(metric.value(r) for r in records)


def record_name(record: RunRecord) -> str:
    return record.path or f"run {record.run_id}"


def bad_figure(value) -> str | None:
    """Why a figure cannot be compared (None where it can): every gate figure is a count,
    a time, a rate, memory, money or a fraction, so finite and never negative."""
    if value is None:
        return "missing"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"not a number ({value!r})"
    if not math.isfinite(value):
        return f"not a finite number ({value})"
    if value < 0:
        return f"negative ({value:g})"
    return None


def usable(metric: GateMetric, records: list[RunRecord]) -> list[RunRecord]:
    """The runs whose figure can be compared (the others have rows of their own)."""
    return [r for r in records if bad_figure(metric.value(r)) is None]


def figure_checks(group: Configuration, name: str, metric: GateMetric, records: list[RunRecord]) -> list[Check]:
    """A FAILED row for each run whose figure is NaN, infinite, negative or missing. A
    figure absent for a reason the record states (MFU on a CPU, a migrated record) is
    no-data: the check cannot be made, said so."""
    checks = []
    for record in records:
        value = metric.value(record)
        why = bad_figure(value)
        if why is None:
            continue
        stated = why_absent(metric, name, [record]) if value is None else ""
        if stated != "metric absent" and value is None:
            checks.append(Check(group.label, name, "figure", None, None, "no-data", f"{record_name(record)}: {stated}"))
            continue
        detail = f"{record_name(record)}: {metric.figure} is {why}"
        checks.append(Check(group.label, name, "figure", None, None, "failed", detail))
    return checks


def noise_samples(metric: GateMetric, current, baseline) -> tuple[list[float], list[float], str]:
    """What the noise test compares. Runs of the same code differ from one another more
    than steps within a run do (measured here: run medians spread ~25% on a 2-core
    machine), so with enough repeats the samples are per-run figures; otherwise the
    steps of the runs, which cannot see between-run noise (and the detail says so)."""
    per_run = lambda rs: [v for v in (metric.value(r) for r in rs) if v is not None]  # noqa: E731
    if len(current) >= MIN_RUNS_FOR_TEST and len(baseline) >= MIN_RUNS_FOR_TEST:
        return per_run(current), per_run(baseline), f"{len(current)} vs {len(baseline)} runs"
    if metric.samples is None:
        return per_run(current), per_run(baseline), f"{len(current)} vs {len(baseline)} runs (no per-step samples)"
    pooled = lambda rs: [x for r in rs for x in metric.samples(r)]  # noqa: E731
    return (
        pooled(current),
        pooled(baseline),
        f"steps of {len(current)} vs {len(baseline)} runs; between-run noise unmeasured (use repeats >= {MIN_RUNS_FOR_TEST})",
    )


def smallest_p_value(n: int, m: int) -> float:
    """The smallest p a one-sided exact Mann-Whitney U can give with n and m samples:
    every current sample beyond every baseline one, 1 / C(n + m, n)."""
    return 1.0 / math.comb(n + m, n) if n and m else 1.0


def samples_needed(alpha: float) -> int:
    """The fewest samples a side (equal sides) at which the test can reach p < alpha."""
    k = 1
    while smallest_p_value(k, k) >= alpha:
        k += 1
    return k


def _fmt(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.4g}{(' ' + unit) if unit else ''}"


def _applies(budget: AbsoluteBudget, key: Configuration) -> bool:
    return all(
        wanted is None or wanted == have
        for wanted, have in (
            (budget.scenario, key.scenario),
            (budget.backend, key.backend),
            (budget.accelerator, key.accelerator),
        )
    )


def absolute_checks(groups, budgets: list[AbsoluteBudget]) -> list[Check]:
    """Each budget against each configuration of its metric's task it applies to: its
    runs' figures checked one by one (bad ones get rows of their own), the worst shown."""
    checks = []
    for key, records in groups.items():
        for b in budgets:
            metric = known()[b.metric]
            if metric.task != key.task or not _applies(b, key):
                continue
            checks += figure_checks(key, b.metric, metric, records)
            good = usable(metric, records)
            if good:
                checks.append(_absolute(key.label, b, metric, [metric.value(r) for r in good]))
            elif not any(c.group == key.label and c.metric == b.metric and c.kind == "figure" for c in checks):
                checks.append(_absolute(key.label, b, metric, [], why_absent(metric, b.metric, records)))
    return checks


def _filter_words(budget: AbsoluteBudget) -> str:
    named = [
        f"{field}: {value}" for field in ("scenario", "backend", "accelerator") if (value := getattr(budget, field))
    ]
    return ", ".join(named) or "no filter"


def _what_exists(groups) -> str:
    """The scenario names, backends and accelerators the records have, for a filter that matched none."""
    names = sorted({key.scenario for key in groups})
    backends = sorted({key.backend for key in groups})
    accelerators = sorted({key.accelerator for key in groups})
    return f"the records have scenarios: {', '.join(names)}; backends: {', '.join(backends)}; accelerators: {', '.join(accelerators)}"


def unmatched_checks(groups, budgets: list[AbsoluteBudget], relative: dict[str, str]) -> list[Check]:
    """A budget or relative limit that applies to no record fails the gate, naming its
    filter and what exists: a typo in a filter must not turn a check off. `groups` are
    every record's (failed runs included: their own check already fails)."""
    checks = []
    for b in budgets:
        metric = known()[b.metric]
        matched = [key for key in groups if _applies(b, key)]
        if any(key.task == metric.task for key in matched):
            continue
        limit = b.max if b.max is not None else b.min
        if matched:
            tasks = ", ".join(sorted({key.task for key in matched}))
            why = f"{b.metric} is a {metric.task} figure and the records that match ({_filter_words(b)}) are {tasks} runs only"
        else:
            why = f"budget {b.metric} ({_filter_words(b)}) matches no record: {_what_exists(groups)}"
        checks.append(Check(f"budget {_filter_words(b)}", b.metric, "absolute", None, limit, "failed", why))
    tasks = sorted({key.task for key in groups})
    for name in relative:
        metric = known()[name]
        if metric.task not in tasks:
            why = f"relative limit on {name}, a {metric.task} figure, matches no record: they are {', '.join(tasks)} runs only; {_what_exists(groups)}"
            checks.append(Check("relative limits", name, "relative", None, None, "failed", why))
    return checks


def why_absent(metric: GateMetric, name: str, records: list[RunRecord]) -> str:
    """Why a group has no figure: the record says (a migrated record's `absent`, MFU
    withheld), or the device has no peak FLOP/s to divide by (MFU on a CPU)."""
    from harness.figures.accelerators import peak_flops

    for record in records:
        stated = record.absent.get(metric.figure) or getattr(record.metrics, f"{name}_invalid", None)
        if stated:
            return f"metric absent: {stated}"
    if name in ("mfu", "hfu") and all(peak_flops(r.accelerator.catalog_key) is None for r in records):
        return f"metric absent: {records[0].accelerator.catalog_key} has no peak FLOP/s in the catalog, so no {name.upper()}"
    return "metric absent"


def _limit_text(budget: AbsoluteBudget, side: str) -> str:
    return budget.written.get(side, "")


def _absolute(
    group: str, budget: AbsoluteBudget, metric: GateMetric, values: list[float], absent: str = "metric absent"
) -> Check:
    """The budget against every run's figure: `max` against the largest, `min` against the
    smallest (an absolute limit holds each run, not their median)."""
    if not values:
        return Check(group, budget.metric, "absolute", None, budget.max or budget.min, "no-data", absent)
    runs = "" if len(values) == 1 else f" (the worst of {len(values)} runs)"
    unit = metric.unit
    if budget.max is not None and max(values) > budget.max:
        worst = max(values)
        detail = f"{budget.metric} {_fmt(worst, unit)}{runs} exceeds the limit max {_fmt(budget.max, unit)}"
        return Check(
            group, budget.metric, "absolute", worst, budget.max, "regression", detail, _limit_text(budget, "max")
        )
    if budget.min is not None and min(values) < budget.min:
        worst = min(values)
        detail = f"{budget.metric} {_fmt(worst, unit)}{runs} is below the limit min {_fmt(budget.min, unit)}"
        return Check(
            group, budget.metric, "absolute", worst, budget.min, "regression", detail, _limit_text(budget, "min")
        )
    side = "max" if budget.max is not None else "min"
    shown = max(values) if side == "max" else min(values)
    return Check(
        group,
        budget.metric,
        "absolute",
        shown,
        getattr(budget, side),
        "pass",
        f"within the limit{runs}",
        _limit_text(budget, side),
    )


# --------------------------------------------------------------------------- relative
def relative_checks(groups, baseline_groups, relative: dict[str, str], alpha: float) -> list[Check]:
    checks = []
    for key, records in groups.items():
        base = baseline_groups.get(key)
        for name, limit in relative.items():
            metric = known()[name]
            if metric.task != key.task:
                continue
            if base is None:
                checks.append(
                    Check(key.label, name, "relative", None, None, "no-data", _no_baseline(key, baseline_groups))
                )
                continue
            bad = figure_checks(key, name, metric, records) + figure_checks(key, name, metric, base)
            checks += bad
            current, baseline = usable(metric, records), usable(metric, base)
            if not current or not baseline:
                if not bad:
                    checks.append(Check(key.label, name, "relative", None, None, "no-data", "metric absent"))
                continue
            checks.append(_relative(key.label, name, metric, relative_threshold(limit), current, baseline, alpha))
    return checks


def _no_baseline(key: Configuration, baseline_groups) -> str:
    """No baseline run of this configuration: the nearest one's differences, named."""
    same_scenario = [other for other in baseline_groups if other.scenario == key.scenario and other.task == key.task]
    if not same_scenario:
        return "no baseline run of this configuration (none of this scenario and task)"
    nearest = min(same_scenario, key=lambda other: len(key.differences(other)))
    return f"no baseline run of this configuration; the nearest differs in {'; '.join(key.differences(nearest))}"


def _relative(group: str, name: str, metric: GateMetric, threshold: float, current, baseline, alpha: float) -> Check:
    value, base = figure(metric, current), figure(metric, baseline)
    if base == 0:
        return _against_zero(group, name, metric, value)
    worse = 1 if metric.direction == "lower" else -1
    limit = base * (1 + worse * threshold)
    change = (value - base) / base
    beyond = (value - limit) * worse > 0
    samples, base_samples, basis = noise_samples(metric, current, baseline)
    where = (
        f"{name} {_fmt(value, metric.unit)} vs baseline {_fmt(base, metric.unit)} ({change:+.1%}); "
        f"limit {_fmt(limit, metric.unit)} ({'+' if worse > 0 else '-'}{threshold:.0%})"
    )
    smallest = smallest_p_value(len(samples), len(base_samples))
    if smallest >= alpha:
        return _cannot_tell(group, name, value, limit, where, basis, len(samples), len(base_samples), alpha, beyond)
    p_value = _worse_p_value(samples, base_samples, metric.direction)
    noise = f"Mann-Whitney p={p_value:.3g} on {basis}"
    if not beyond:
        return Check(group, name, "relative", value, limit, "pass", f"{where}; {noise}")
    if p_value >= alpha:
        return Check(
            group, name, "relative", value, limit, "noise", f"{where}; not distinguishable from noise, {noise}"
        )
    return Check(group, name, "relative", value, limit, "regression", f"{where}; {noise}")


def _cannot_tell(group, name, value, limit, where, basis, n, m, alpha, beyond) -> Check:
    """With n vs m samples no outcome reaches p < alpha: the check cannot detect a change."""
    need = samples_needed(alpha)
    detail = (
        f"{where}; cannot tell a change from noise: with {n} vs {m} samples ({basis}) the one-sided "
        f"Mann-Whitney test's smallest p is {smallest_p_value(n, m):.3g}, not below alpha {alpha:g}; needs at least "
        f"{need} samples a side (repeats: {need}, or {need} measured steps a run); {NOISE_GUIDANCE}"
    )
    if beyond:
        detail = f"beyond the limit and {detail}"
    return Check(group, name, "relative", value, limit, "cannot-tell", detail, beyond=beyond)


def _against_zero(group: str, name: str, metric: GateMetric, value: float) -> Check:
    """A zero baseline: a count compares absolutely (any increase fails); a percentage
    of zero means nothing for any other figure, which is said, and fails as no-data."""
    if not metric.count:
        return Check(group, name, "relative", value, None, "no-data", f"the baseline's {name} is 0: no relative limit")
    where = f"{name} {_fmt(value, metric.unit)} vs baseline 0 (a count: compared absolutely)"
    worse = value > 0 if metric.direction == "lower" else False
    return Check(group, name, "relative", value, 0.0, "regression" if worse else "pass", where)


def _worse_p_value(current: list[float], baseline: list[float], direction: str) -> float | None:
    """One-sided Mann-Whitney U: is `current` stochastically worse than `baseline`?"""
    if len(current) < MIN_SAMPLES_FOR_TEST or len(baseline) < MIN_SAMPLES_FOR_TEST:
        return None
    from scipy.stats import mannwhitneyu

    alternative = "greater" if direction == "lower" else "less"
    return float(mannwhitneyu(current, baseline, alternative=alternative).pvalue)


# --------------------------------------------------------------------------- runs, defaults
def failed_run_checks(groups, allowed: int = 0) -> list[Check]:
    """Every failed run fails its configuration (beyond `allowed` of them), each reason
    kept whole: one failing repeat of four is a failure, not a footnote."""
    checks = []
    for key, records in groups.items():
        failed = [r for r in records if not r.ok]
        if not failed:
            continue
        reasons = "; ".join(sorted({r.failure.reason for r in failed}))
        counted = f"{len(failed)} of {len(records)} runs failed"
        if not any(r.ok for r in records):
            checks.append(Check(key.label, "run", "run", None, None, "failed", f"no successful run: {reasons}"))
        elif len(failed) > allowed:
            why = f"{counted} (allow_failed_runs: {allowed}): {reasons}"
            checks.append(Check(key.label, "run", "run", float(len(failed)), float(allowed), "failed", why))
        else:
            why = f"{counted}, within allow_failed_runs: {allowed}: {reasons}"
            checks.append(Check(key.label, "run", "run", float(len(failed)), float(allowed), "pass", why))
    return checks


def scenario_budgets(records: list[RunRecord], source: str) -> list[AbsoluteBudget]:
    """Budgets declared in the scenarios themselves (`budgets:`), scoped to that scenario."""
    found = []
    for record in records:
        name = record.scenario.name
        for b in record.scenario.resolved.get("budgets", []):
            try:
                found.append(AbsoluteBudget(scenario=name, **b))
            except ValidationError as exc:
                from harness.basics.yaml_io import first_error

                raise first_error(exc, f"{source} (scenario {name} budgets)") from None
    unique = {b.model_dump_json(): b for b in found}
    return list(unique.values())


def default_budgets(groups, budgets: list[AbsoluteBudget]) -> list[AbsoluteBudget]:
    """`error_rate: {max: serve.max_error_rate}` (0 unless the scenario says) for each
    serve configuration no budget on error_rate applies to: failed requests are failures."""
    out = []
    for key, records in groups.items():
        if key.task != "serve" or any(b.metric == "error_rate" and _applies(b, key) for b in budgets):
            continue
        allowed = ((records[0].scenario.resolved.get("serve") or {}).get("max_error_rate")) or 0.0
        out.append(
            AbsoluteBudget(
                metric="error_rate",
                max=allowed,
                scenario=key.scenario,
                backend=key.backend,
                accelerator=key.accelerator,
            )
        )
    return list({b.model_dump_json(): b for b in out}.values())


def unit_warnings(groups, budgets: list[AbsoluteBudget]) -> list[Check]:
    """A bare limit more than UNIT_MISTAKE_FACTOR away from every measured value of its
    metric (500 for a TTFT of 0.9 s): likely another unit. A warning row (fails under --strict)."""
    checks = []
    for b in budgets:
        metric = known()[b.metric]
        values = [
            v
            for key, records in groups.items()
            if key.task == metric.task and _applies(b, key)
            for v in (metric.value(r) for r in records)
            if bad_figure(v) is None and v > 0
        ]
        for side in ("max", "min"):
            limit = getattr(b, side)
            if limit is None or limit <= 0 or side in b.written or not values:
                continue
            if all(max(v / limit, limit / v) > UNIT_MISTAKE_FACTOR for v in values):
                unit = metric.unit or "a plain fraction"
                why = (
                    f"{side} {limit:g} is over {UNIT_MISTAKE_FACTOR:g}x away from every measured {b.metric} "
                    f"({_fmt(min(values), metric.unit)} to {_fmt(max(values), metric.unit)}): a bare limit is in "
                    f"the metric's unit ({unit}); write the unit if another was meant (e.g. {limit:g} ms)"
                )
                checks.append(Check(f"budget {_filter_words(b)}", b.metric, "units", None, limit, "warning", why))
    return checks


def unreadable_checks(unreadable: list[tuple[str, str]], where: str = "results") -> list[Check]:
    """A file that looks like a record and cannot be read or validated: its own FAILED row."""
    return [
        Check(path, "record", "record", None, None, "failed", f"{where}: unreadable record: {why}")
        for path, why in unreadable
    ]


# --------------------------------------------------------------------------- the gate
def run_gate(records, baseline_records, budgets: BudgetsFile, source: str) -> list[Check]:
    """Every check on `records` (RunRecords, or stored records' JSON: read as RunRecords
    here), against `baseline_records` where given (the current runs' ids left out)."""
    records = as_records(records)
    ok = [r for r in records if r.ok]
    groups = group_records(ok)
    every_group = group_records(records)
    checks = failed_run_checks(every_group, budgets.allow_failed_runs)
    checks += unmatched_checks(
        every_group, list(budgets.budgets), budgets.relative if baseline_records is not None else {}
    )
    declared = [*budgets.budgets, *scenario_budgets(ok, source)]
    applied = [*declared, *default_budgets(every_group, declared)]
    checks += absolute_checks(groups, applied)
    checks += unit_warnings(groups, declared)
    if baseline_records is not None:
        current_ids = {r.run_id for r in records}
        base = [r for r in as_records(baseline_records) if r.ok and r.run_id not in current_ids]
        checks += relative_checks(groups, group_records(base), budgets.relative, budgets.alpha)
    return _with_local_caveat(checks, groups)


def _with_local_caveat(checks: list[Check], groups) -> list[Check]:
    """A local-engine $ is a reference engine's, not a production server's: said in the
    detail of every check on one (harness.serving.engines.caveat)."""
    from harness.serving.engines import caveat

    priced = {name for name, metric in known().items() if name.startswith("usd_") and metric.task == "serve"}
    labels = {key.label: caveat(records) for key, records in groups.items()}
    for c in checks:
        if c.metric in priced and labels.get(c.group):
            c.detail = f"{c.detail} ({labels[c.group]})"
    return checks


def failing(checks: list[Check], allow_no_data: bool = False, strict: bool = False) -> list[Check]:
    """The checks that fail the gate: regressions, failed runs, figures and records;
    checks with no data or that cannot tell (unless the user explicitly allows it: a gate
    that compares nothing must not pass); unit warnings under --strict."""
    relaxed = ("no-data", "cannot-tell")
    return [
        c
        for c in checks
        if c.failed or (c.verdict in relaxed and not allow_no_data) or (c.verdict == "warning" and strict)
    ]


def no_data_reason(checks: list[Check]) -> str | None:
    """One line on why checks had no data, or None when every check had some."""
    missing = [c for c in checks if c.verdict in ("no-data", "cannot-tell")]
    if not missing:
        return None
    relative = [c for c in checks if c.kind == "relative"]
    if relative and all(c.detail.startswith("no baseline run") for c in relative):
        why = (
            "the current and baseline results share no comparable runs (same task, scenario, variant, backend "
            "and options, accelerator and chips, overrides and profile)"
        )
    else:
        shown = "; ".join(f"{c.group} {c.metric}: {c.detail}" for c in missing[:3])
        why = shown + (f"; and {len(missing) - 3} more" if len(missing) > 3 else "")
    return f"{len(missing)} of {len(checks)} checks have no data or cannot tell: {why}"


def value_and_limit(check: Check) -> tuple[str, str]:
    """The measured figure and the limit as the Markdown and the terminal table print
    them; a limit written with a unit shows as written beside its value."""
    limit = _fmt(check.limit, "")
    if check.limit_written:
        limit = f"{check.limit_written} ({limit})"
    return _fmt(check.measured, ""), limit


def markdown(checks: list[Check], allow_no_data: bool = False, strict: bool = False) -> str:
    from harness.basics.textsafe import md_cell

    failed = failing(checks, allow_no_data, strict)
    lines = ["| run | metric | check | measured | limit | verdict | detail |", "|---|---|---|---|---|---|---|"]
    for c in checks:
        cells = (
            c.group,
            c.metric,
            c.kind,
            *value_and_limit(c),
            c.verdict.upper() if c in failed else c.verdict,
            c.detail,
        )
        lines.append("| " + " | ".join(md_cell(x) for x in cells) + " |")
    lines.append("")
    lines.append(
        f"**{'FAIL' if failed else 'PASS'}**: {len(checks)} check{'' if len(checks) == 1 else 's'}, {len(failed)} failed"
    )
    return "\n".join(lines) + "\n"


def as_json(checks: list[Check], allow_no_data: bool = False, strict: bool = False) -> dict:
    """The gate's outcome as JSON: every check, whole, and the verdict."""
    failed = failing(checks, allow_no_data, strict)
    rows = [
        {
            "run": c.group,
            "metric": c.metric,
            "check": c.kind,
            "measured": c.measured,
            "limit": c.limit,
            "limit_written": c.limit_written or None,
            "verdict": c.verdict,
            "fails": c in failed,
            "detail": c.detail,
        }
        for c in checks
    ]
    return {"passed": not failed, "checks": rows, "failed": len(failed)}


def require_checks(
    checks: list[Check], results: str, budgets_file: str | None, baseline: str | None, budgets: BudgetsFile
) -> None:
    """Refuse a gate that checks nothing, saying what is missing."""
    if baseline is not None and not budgets.relative:
        missing = (
            f"{budgets_file} has no `relative:` limits; add some"
            if budgets_file
            else "without --budgets there are no relative limits; give --budgets FILE"
        )
        raise SpecError(
            f"--baseline {baseline}",
            "",
            f"nothing is compared with the baseline: {missing}, e.g. `relative: {{step_time_s: +5%}}`",
        )
    if budgets.relative and baseline is None:
        raise SpecError(
            budgets_file or "--budgets",
            "relative",
            "relative limits compare with a baseline: give --baseline DIR (or drop them)",
        )
    if not checks:
        if budgets_file:
            raise SpecError(
                budgets_file,
                "",
                f"no checks: its budgets match no run in {results}, and those records declare no budgets of their own",
            )
        raise SpecError(
            results,
            "",
            "no checks: give --budgets FILE (budgets or relative limits) with --baseline "
            "DIR, or run scenarios that declare budgets",
        )
