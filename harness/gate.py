"""`bench gate`: fail CI on a real regression, never on noise.

Checks are declarative: absolute limits (`max`/`min` on a metric, filtered by scenario,
backend and accelerator) and relative limits against a baseline results directory
(`step_time_s: +5%`). Every metric knows its direction. A relative check fails only when
the change is beyond its threshold *and* distinguishable from noise on the raw samples
(one-sided Mann-Whitney U, as asv does); with too few samples for a test, the verdict
rests on the threshold alone and says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from harness.errors import SpecError
from harness.gate_metrics import GateMetric, known
from harness.metrics import across_runs
from harness.result import RunRecord, as_records
from harness.spec import Budget

MIN_SAMPLES_FOR_TEST = 3
# With 4 runs a side, a one-sided Mann-Whitney U can reach p = 1/70; with 3, only 1/20.
MIN_RUNS_FOR_TEST = 4


def _task(records: list[RunRecord]) -> str:
    return records[0].task


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
    from harness.yaml_io import first_error, read_document

    try:
        return BudgetsFile.model_validate(read_document(path))
    except ValidationError as exc:
        raise first_error(exc, str(path)) from None


# --------------------------------------------------------------------------- checks
@dataclass
class Check:
    group: str
    metric: str
    kind: str  # absolute | relative | run
    measured: float | None
    limit: float | None
    verdict: str  # pass | regression | noise | failed | no-data
    detail: str

    @property
    def failed(self) -> bool:
        return self.verdict in ("regression", "failed")


def group_key(record: RunRecord) -> tuple[str, str, str, str]:
    s = record.scenario
    return s.name, s.variant, record.backend.name, record.accelerator.catalog_key


def label(key: tuple[str, ...]) -> str:
    name, variant, backend, accelerator = key
    return f"{name} [{variant}] {backend}@{accelerator}"


def group_records(records: list[RunRecord]) -> dict[tuple, list[RunRecord]]:
    groups: dict[tuple, list[RunRecord]] = {}
    for record in records:
        groups.setdefault(group_key(record), []).append(record)
    return groups


def figure(metric: GateMetric, records: list[RunRecord]) -> float | None:
    """The group's figure: one figure for repeated runs (metrics.md), of each run's own."""
    return across_runs(metric.value(r) for r in records)


def noise_samples(metric: GateMetric, current, baseline) -> tuple[list[float], list[float], str]:
    """What the noise test compares. Runs of the same code differ from one another more
    than steps within a run do (measured here: run medians spread ~25% on a 2-core
    machine), so with enough repeats the samples are per-run figures; otherwise the
    steps of the runs, which cannot see between-run noise (and the detail says so)."""
    if len(current) >= MIN_RUNS_FOR_TEST and len(baseline) >= MIN_RUNS_FOR_TEST:
        per_run = lambda rs: [v for v in (metric.value(r) for r in rs) if v is not None]  # noqa: E731
        return per_run(current), per_run(baseline), f"{len(current)} vs {len(baseline)} runs"
    if metric.samples is None:
        return [], [], "too few runs"
    pooled = lambda rs: [x for r in rs for x in metric.samples(r)]  # noqa: E731
    return (
        pooled(current),
        pooled(baseline),
        f"steps of {len(current)} vs {len(baseline)} runs; between-run noise unmeasured (use repeats >= {MIN_RUNS_FOR_TEST})",
    )


def _fmt(value: float | None, unit: str) -> str:
    return "-" if value is None else f"{value:.4g}{(' ' + unit) if unit else ''}"


def absolute_checks(groups, budgets: list[AbsoluteBudget]) -> list[Check]:
    checks = []
    for key, records in groups.items():
        name, _, backend, accelerator = key
        for b in budgets:
            if (
                (b.scenario or name) != name
                or (b.backend or backend) != backend
                or (b.accelerator or accelerator) != accelerator
            ):
                continue
            metric = known()[b.metric]
            if metric.task != _task(records):
                continue
            value = figure(metric, records)
            absent = why_absent(metric, b.metric, records) if value is None else ""
            checks.append(_absolute(label(key), b, metric, value, absent))
    return checks


def _matches(budget: AbsoluteBudget, key: tuple[str, str, str, str]) -> bool:
    name, _, backend, accelerator = key
    return all(
        wanted is None or wanted == have
        for wanted, have in ((budget.scenario, name), (budget.backend, backend), (budget.accelerator, accelerator))
    )


def _filter_words(budget: AbsoluteBudget) -> str:
    named = [
        f"{field}: {value}" for field in ("scenario", "backend", "accelerator") if (value := getattr(budget, field))
    ]
    return ", ".join(named) or "no filter"


def _what_exists(groups) -> str:
    """The scenario names, backends and accelerators the records have, for a filter that matched none."""
    names, backends, accelerators = (sorted({key[i] for key in groups}) for i in (0, 2, 3))
    return f"the records have scenarios: {', '.join(names)}; backends: {', '.join(backends)}; accelerators: {', '.join(accelerators)}"


def unmatched_checks(groups, budgets: list[AbsoluteBudget], relative: dict[str, str]) -> list[Check]:
    """A budget or relative limit that applies to no record fails the gate, naming its
    filter and what exists: a typo in a filter must not turn a check off. `groups` are
    every record's (failed runs included: their own check already fails)."""
    checks = []
    for b in budgets:
        metric = known()[b.metric]
        matched = {key: records for key, records in groups.items() if _matches(b, key)}
        if any(_task(records) == metric.task for records in matched.values()):
            continue
        limit = b.max if b.max is not None else b.min
        if matched:
            tasks = ", ".join(sorted({_task(records) for records in matched.values()}))
            why = f"{b.metric} is a {metric.task} figure and the records that match ({_filter_words(b)}) are {tasks} runs only"
        else:
            why = f"budget {b.metric} ({_filter_words(b)}) matches no record: {_what_exists(groups)}"
        checks.append(Check(f"budget {_filter_words(b)}", b.metric, "absolute", None, limit, "failed", why))
    tasks = sorted({_task(records) for records in groups.values()})
    for name in relative:
        metric = known()[name]
        if metric.task not in tasks:
            why = f"relative limit on {name}, a {metric.task} figure, matches no record: they are {', '.join(tasks)} runs only; {_what_exists(groups)}"
            checks.append(Check("relative limits", name, "relative", None, None, "failed", why))
    return checks


def why_absent(metric: GateMetric, name: str, records: list[RunRecord]) -> str:
    """Why a group has no figure: the record says (a migrated record's `absent`, MFU
    withheld), or the device has no peak FLOP/s to divide by (MFU on a CPU)."""
    from harness.accelerators import peak_flops

    for record in records:
        stated = record.absent.get(metric.figure) or getattr(record.metrics, f"{name}_invalid", None)
        if stated:
            return f"metric absent: {stated}"
    if name in ("mfu", "hfu") and all(peak_flops(r.accelerator.catalog_key) is None for r in records):
        return f"metric absent: {records[0].accelerator.catalog_key} has no peak FLOP/s in the catalog, so no {name.upper()}"
    return "metric absent"


def _absolute(
    group: str, budget: AbsoluteBudget, metric: GateMetric, value: float | None, absent: str = "metric absent"
) -> Check:
    if value is None:
        return Check(group, budget.metric, "absolute", None, budget.max or budget.min, "no-data", absent)
    if budget.max is not None and value > budget.max:
        return Check(
            group,
            budget.metric,
            "absolute",
            value,
            budget.max,
            "regression",
            f"{budget.metric} {_fmt(value, metric.unit)} exceeds the limit max {_fmt(budget.max, metric.unit)}",
        )
    if budget.min is not None and value < budget.min:
        return Check(
            group,
            budget.metric,
            "absolute",
            value,
            budget.min,
            "regression",
            f"{budget.metric} {_fmt(value, metric.unit)} is below the limit min {_fmt(budget.min, metric.unit)}",
        )
    limit = budget.max if budget.max is not None else budget.min
    return Check(group, budget.metric, "absolute", value, limit, "pass", "within the limit")


def relative_checks(groups, baseline_groups, relative: dict[str, str], alpha: float) -> list[Check]:
    checks = []
    for key, records in groups.items():
        base = baseline_groups.get(key)
        for name, limit in relative.items():
            if known()[name].task != _task(records):
                continue
            if base is None:
                checks.append(Check(label(key), name, "relative", None, None, "no-data", "no baseline for this run"))
                continue
            checks.append(_relative(label(key), name, known()[name], relative_threshold(limit), records, base, alpha))
    return checks


def _relative(group: str, name: str, metric: GateMetric, threshold: float, current, baseline, alpha: float) -> Check:
    value, base = figure(metric, current), figure(metric, baseline)
    if value is None or base is None or base == 0:
        return Check(group, name, "relative", value, None, "no-data", "metric absent in current or baseline")
    worse = 1 if metric.direction == "lower" else -1
    limit = base * (1 + worse * threshold)
    change = (value - base) / base
    beyond = (value - limit) * worse > 0
    samples, base_samples, basis = noise_samples(metric, current, baseline)
    p_value = _worse_p_value(samples, base_samples, metric.direction)
    where = (
        f"{name} {_fmt(value, metric.unit)} vs baseline {_fmt(base, metric.unit)} ({change:+.1%}); "
        f"limit {_fmt(limit, metric.unit)} ({'+' if worse > 0 else '-'}{threshold:.0%})"
    )
    noise = (
        f"Mann-Whitney p={p_value:.3g} on {basis}"
        if p_value is not None
        else f"no noise test ({basis}; fewer than {MIN_SAMPLES_FOR_TEST} samples)"
    )
    if not beyond:
        return Check(group, name, "relative", value, limit, "pass", f"{where}; {noise}")
    if p_value is not None and p_value >= alpha:
        return Check(
            group, name, "relative", value, limit, "noise", f"{where}; not distinguishable from noise, {noise}"
        )
    return Check(group, name, "relative", value, limit, "regression", f"{where}; {noise}")


def _worse_p_value(current: list[float], baseline: list[float], direction: str) -> float | None:
    """One-sided Mann-Whitney U: is `current` stochastically worse than `baseline`?"""
    if len(current) < MIN_SAMPLES_FOR_TEST or len(baseline) < MIN_SAMPLES_FOR_TEST:
        return None
    from scipy.stats import mannwhitneyu

    alternative = "greater" if direction == "lower" else "less"
    return float(mannwhitneyu(current, baseline, alternative=alternative).pvalue)


def failed_run_checks(groups) -> list[Check]:
    checks = []
    for key, records in groups.items():
        if not any(r.ok for r in records):
            reasons = "; ".join(sorted({r.failure.reason[:120] for r in records}))
            checks.append(Check(label(key), "run", "run", None, None, "failed", f"no successful run: {reasons}"))
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
                from harness.yaml_io import first_error

                raise first_error(exc, f"{source} (scenario {name} budgets)") from None
    unique = {b.model_dump_json(): b for b in found}
    return list(unique.values())


def run_gate(records, baseline_records, budgets: BudgetsFile, source: str) -> list[Check]:
    """Every check on `records` (RunRecords, or stored records' JSON: read as RunRecords
    here), against `baseline_records` where given."""
    records = as_records(records)
    ok = [r for r in records if r.ok]
    groups = group_records(ok)
    every_group = group_records(records)
    checks = failed_run_checks(every_group)
    checks += unmatched_checks(
        every_group, list(budgets.budgets), budgets.relative if baseline_records is not None else {}
    )
    checks += absolute_checks(groups, [*budgets.budgets, *scenario_budgets(ok, source)])
    if baseline_records is not None:
        base_groups = group_records([r for r in as_records(baseline_records) if r.ok])
        checks += relative_checks(groups, base_groups, budgets.relative, budgets.alpha)
    return _with_local_caveat(checks, groups)


def _with_local_caveat(checks: list[Check], groups) -> list[Check]:
    """A local-engine $ is a reference engine's, not a production server's: said in the
    detail of every check on one (harness.serving.engines.caveat)."""
    from harness.serving.engines import caveat

    priced = {name for name, metric in known().items() if name.startswith("usd_") and metric.task == "serve"}
    labels = {label(key): caveat(records) for key, records in groups.items()}
    for c in checks:
        if c.metric in priced and labels.get(c.group):
            c.detail = f"{c.detail} ({labels[c.group]})"
    return checks


def failing(checks: list[Check], allow_no_data: bool = False) -> list[Check]:
    """The checks that fail the gate: regressions, failed runs, and (unless the user
    explicitly allows it) checks with no data: a gate that compares nothing must not pass."""
    return [c for c in checks if c.failed or (c.verdict == "no-data" and not allow_no_data)]


def no_data_reason(checks: list[Check]) -> str | None:
    """One line on why checks had no data, or None when every check had some."""
    missing = [c for c in checks if c.verdict == "no-data"]
    if not missing:
        return None
    relative = [c for c in checks if c.kind == "relative"]
    if relative and all(c.detail == "no baseline for this run" for c in relative):
        why = (
            "the current and baseline results share no comparable runs (same scenario, variant, backend "
            "and accelerator)"
        )
    else:
        shown = "; ".join(f"{c.group} {c.metric}: {c.detail}" for c in missing[:3])
        why = shown + (f"; and {len(missing) - 3} more" if len(missing) > 3 else "")
    return f"{len(missing)} of {len(checks)} checks have no data: {why}"


def value_and_limit(check: Check) -> tuple[str, str]:
    """The measured figure and the limit as the Markdown and the terminal table print them."""
    return _fmt(check.measured, ""), _fmt(check.limit, "")


def markdown(checks: list[Check], allow_no_data: bool = False) -> str:
    from harness.textsafe import md_cell

    failed = failing(checks, allow_no_data)
    lines = ["| run | metric | check | measured | limit | verdict | detail |", "|---|---|---|---|---|---|---|"]
    for c in checks:
        lines.append(
            "| "
            + " | ".join(
                md_cell(x)
                for x in (
                    c.group,
                    c.metric,
                    c.kind,
                    *value_and_limit(c),
                    c.verdict.upper() if c in failed else c.verdict,
                    c.detail,
                )
            )
            + " |"
        )
    lines.append("")
    lines.append(
        f"**{'FAIL' if failed else 'PASS'}**: {len(checks)} check{'' if len(checks) == 1 else 's'}, {len(failed)} failed"
    )
    return "\n".join(lines) + "\n"


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
