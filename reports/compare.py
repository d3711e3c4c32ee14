"""Factor-aware comparisons: each factor's levels against the baseline's level, holding
every other factor fixed (reports/factors.py says which rows qualify), with how sure
each ratio is (reports/stats.py), in sentences.

Conventions, stated on the report:
- faster = real tokens/s of the whole system (all chips), median over runs. Where every
  run on both sides has an unsynced window (train.window_steps: steps run back to back
  with one device sync at the end, as a real fine-tune runs), its throughput: what a job
  gets, and the sentence says "over the unsynced window". Otherwise steady state
  (measured steps that compiled nothing, each synchronised). Where a run has no steady
  state (every measured step compiled), both sides use effective tokens/s (every
  measured step, compiles included) and the sentence says so.
- cheaper = $ per 1M real tokens at the price each record was billed at, same basis.
- with recompiles included: the effective ratio, given when either side recompiled
  after warm-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.figures.metrics import across_runs
from harness.records.result import RunRecord
from reports.factors import ACCELERATOR, BACKEND, OWNED_BY_ACCELERATOR, PRECISION, UNSET, comparable, level_text
from reports.stats import Ratio, noise_words, ratio_of_medians, ratio_sentence

WINDOW = ("window_tokens_per_s_real", "usd_per_1m_tokens_real_window")
STEADY = ("tokens_per_s_real", "usd_per_1m_tokens_real")
EFFECTIVE = ("tokens_per_s_real_effective", "usd_per_1m_tokens_real_effective")
BASIS_KEYS = {"window": WINDOW, "steady": STEADY, "effective": EFFECTIVE}
# How each basis is said after a speed ratio ("" for steady: said only beside a
# with-recompiles ratio) and after a cost ratio.
SPEED_WORDS = {"window": "over the unsynced window", "effective": "with compiles included"}
COST_WORDS = {"window": "unsynced window", "steady": "steady state", "effective": "every measured step"}


def _metric(record: RunRecord, key: str) -> float | None:
    """A train record's figure (a TrainMetrics field), None where it has no metrics."""
    return None if record.metrics is None else getattr(record.metrics, key)


def _cost(record: RunRecord, key: str) -> float | None:
    """A train record's cost figure (a TrainCost field), None where it is unpriced."""
    return None if record.cost is None else getattr(record.cost, key)


def lacks_steady_state(records: list[RunRecord]) -> int:
    """How many of these runs have no steady-state throughput."""
    return sum(_metric(r, STEADY[0]) is None for r in records)


@dataclass
class Comparison:
    factor: str
    subject: Any  # Row: the level compared
    reference: Any  # Row: the baseline's level
    subject_level: str
    reference_level: str
    context: str  # the factors held fixed, as text
    basis: str  # "steady" | "effective"
    speed: Ratio | None  # > 1: subject faster
    cost: Ratio | None  # > 1: subject cheaper per 1M real tokens
    with_recompiles: Ratio | None  # effective speed ratio, when either side recompiled
    recompiles: str
    note: str

    @property
    def title(self) -> str:
        return f"{self.subject_level} vs {self.reference_level}" + (f" ({self.context})" if self.context else "")

    def speed_words(self) -> str | None:
        if self.speed is None:
            return None
        what = SPEED_WORDS.get(self.basis) or ("in steady state" if self.with_recompiles is not None else "")
        return ratio_sentence(self.speed, "faster", "slower", what, "speed" + (f" {what}" if what else ""))

    def cost_words(self) -> str | None:
        if self.cost is None:
            return None
        basis = COST_WORDS[self.basis]
        return ratio_sentence(
            self.cost, "cheaper", "dearer", f"per 1M real tokens ({basis})", f"cost per 1M real tokens ({basis})"
        )

    def noise(self) -> str | None:
        """Said once when a ratio has no interval (fewer than 2 runs on a side)."""
        ratios = [r for r in (self.speed, self.cost, self.with_recompiles) if r is not None]
        return next((noise_words(r.runs) for r in ratios if not r.has_interval), None)

    @property
    def sentence(self) -> str:
        parts = [self.speed_words(), self.cost_words()]
        if self.with_recompiles is not None:
            parts.append(
                ratio_sentence(
                    self.with_recompiles,
                    "faster",
                    "slower",
                    "with recompiles included",
                    "speed with recompiles included",
                )
            )
        parts += [self.recompiles, self.note, self.noise()]
        return f"{self.title}: " + "; ".join(p for p in parts if p)


def recompile_words(a, b) -> str:
    """`6 vs 0 recompiles`, or `recompiles n/a (eager)` where a backend compiles nothing."""

    def side(row) -> str:
        return "n/a (eager)" if row.eager else f"{row.median(lambda r: _metric(r, 'num_recompiles')):.3g}"

    if a.eager and b.eager:
        return "recompiles n/a (eager: the backends compile nothing)"
    return f"recompiles after warm-up {side(a)} vs {side(b)}"


def _basis(records: list[RunRecord], missing: list) -> str:
    """The unsynced window where every run has one (and its $, where priced: a record
    written before that $ existed has none), else steady state, else effective."""
    if all(_metric(r, WINDOW[0]) is not None and (r.cost is None or _cost(r, WINDOW[1])) for r in records):
        return "window"
    return "effective" if missing else "steady"


def compare_rows(a, b, factor: str, a_level: str, b_level: str, context: str) -> Comparison:
    """Row a against row b (the reference)."""
    missing = [(row, n) for row in (a, b) for n in [lacks_steady_state(row.records)] if n]
    basis = _basis(a.records + b.records, missing)
    speed_key, cost_key = BASIS_KEYS[basis]
    speed = ratio_of_medians([_metric(r, speed_key) for r in a.records], [_metric(r, speed_key) for r in b.records])
    cost = ratio_of_medians([_cost(r, cost_key) for r in b.records], [_cost(r, cost_key) for r in a.records])
    recompiled = any((_metric(r, "num_recompiles") or 0) > 0 for r in a.records + b.records)
    with_recompiles = None
    if not missing and recompiled:
        with_recompiles = ratio_of_medians(
            [_metric(r, EFFECTIVE[0]) for r in a.records], [_metric(r, EFFECTIVE[0]) for r in b.records]
        )
    levels = {id(a): a_level, id(b): b_level}
    note = "; ".join(
        f"no steady state in {levels[id(row)]} ({n} of {len(row.records)} runs: every measured step "
        "compiled), so effective figures on both sides"
        for row, n in missing
    )
    return Comparison(
        factor, a, b, a_level, b_level, context, basis, speed, cost, with_recompiles, recompile_words(a, b), note
    )


def factor_comparisons(
    rows: list, baseline, factor: str, factor_names: list[str], difference_keys: list[str]
) -> tuple[list[Comparison], str | None]:
    """Every level of `factor` against the baseline's level, in every context (the other
    factors' levels) where both were run. Second value: why nothing was compared, if so."""
    by_accelerator: dict[str, set[str]] = {}
    for row in rows:
        by_accelerator.setdefault(row.attrs[ACCELERATOR], set()).add(row.attrs[BACKEND])
    reference = baseline.attrs[factor]
    out = []
    for b in (r for r in rows if r.attrs[factor] == reference):
        for a in (r for r in rows if r.attrs[factor] != reference):
            if comparable(a, b, factor, by_accelerator):
                out.append(_oriented(a, b, factor, factor_names, difference_keys))
    return out, (None if out else _why_not(rows, factor))


def _oriented(a, b, factor: str, factor_names: list[str], difference_keys: list[str]) -> Comparison:
    carried = factor == ACCELERATOR and a.attrs[BACKEND] != b.attrs[BACKEND]
    held = [f for f in factor_names if f != factor and not (carried and f == BACKEND)]

    def level(row) -> str:
        text = level_text(factor, row.attrs[factor])
        return f"{text} · {row.attrs[BACKEND]}" if carried else text

    if factor != PRECISION and PRECISION not in held and PRECISION in a.attrs:
        held.append(PRECISION)  # always said: a ratio at fp32 is not one at bf16
    context = " · ".join(
        [level_text(f, a.attrs[f]) for f in held]
        + [f"{k}={a.attrs.get(k, UNSET)}" for k in difference_keys if a.attrs.get(k) == b.attrs.get(k)]
    )
    return compare_rows(a, b, factor, level(a), level(b), context)


def _why_not(rows: list, factor: str) -> str:
    """`backend: xla-fsdpv2, jax-tunix not compared: no two rows differ in it alone (the
    closest pair also differs in parallel.tensor)`."""
    extra = None
    for a in rows:
        for b in rows:
            if a.attrs[factor] != b.attrs[factor]:
                also = [k for k in {**a.attrs, **b.attrs} if k != factor and a.attrs.get(k) != b.attrs.get(k)]
                extra = also if extra is None or len(also) < len(extra) else extra
    levels = ", ".join(dict.fromkeys(level_text(factor, r.attrs[factor]) for r in rows))
    name = factor.rsplit(".", 1)[-1]
    if factor == BACKEND and extra and set(extra) <= {ACCELERATOR, *OWNED_BY_ACCELERATOR}:
        return f"{name}: {levels}: each ran on its own accelerator, so it is compared with the accelerator"
    return (
        f"{name}: {levels} not compared: no two rows differ in it alone (the closest pair also differs in "
        f"{', '.join(extra or [])})"
    )


def requested(a, b) -> Comparison:
    """`--compare`: one row against the baseline, whatever else differs (named)."""
    differ = [k for k in {**a.attrs, **b.attrs} if a.attrs.get(k) != b.attrs.get(k)]
    return compare_rows(a, b, "requested", a.label, b.label, "differ in " + ", ".join(differ))


# --------------------------------------------------------------------------- headline
def oriented(c: Comparison) -> tuple[Any, Any, str, str, Ratio | None, Ratio | None]:
    """The faster side first: (first row, second row, their levels, speed, cost)."""
    if c.speed is not None and c.speed.value < 1:
        return (
            c.reference,
            c.subject,
            c.reference_level,
            c.subject_level,
            c.speed.inverted(),
            c.cost.inverted() if c.cost else None,
        )
    return c.subject, c.reference, c.subject_level, c.reference_level, c.speed, c.cost


def w3_sentence(c: Comparison, extra) -> str:
    """`v5p-8 vs 2x h100-sxm (padding=static · bf16): 1.61x faster (...) and 2.12x
    cheaper per 1M real tokens (...); train + serve ...; TTFT ...`: the faster side
    first. `extra(first_row, second_row)` adds the workload and TTFT clauses."""
    first, second, first_level, second_level, speed, cost = oriented(c)
    what = SPEED_WORDS.get(c.basis, "")
    parts = []
    if speed is not None:
        parts.append(ratio_sentence(speed, "faster", "slower", what, "speed" + (f" {what}" if what else "")))
    if cost is not None:
        parts.append(ratio_sentence(cost, "cheaper", "dearer", "per 1M real tokens", "cost per 1M real tokens"))
    text = (
        f"{first_level} vs {second_level}"
        + (f" ({c.context})" if c.context else "")
        + ": "
        + (" and ".join(parts) or "no figures")
    )
    return text + "".join(f"; {e}" for e in [*extra(first, second), c.noise()] if e)


def factor_headline(comparisons: list[Comparison]) -> list[str]:
    """One line per (factor, level): `padding=dynamic vs padding=static: on v5p-8 ·
    xla-fsdpv2: 2.97x slower (...); on 2x h100-sxm · gpu-fsdp: 1.12x slower (...)`."""
    lines: dict[tuple[str, str, str], list[str]] = {}
    for c in comparisons:
        words = c.speed_words() or c.cost_words() or "no figures"
        if c.with_recompiles is not None:
            words += ", " + ratio_sentence(
                c.with_recompiles, "faster", "slower", "with recompiles included", "speed with recompiles included"
            )
        if c.noise():
            words += f" ({c.noise()})"
        lines.setdefault((c.factor, c.subject_level, c.reference_level), []).append(
            (f"on {c.context}: " if c.context else "") + words
        )
    return [f"{s} vs {r}: " + "; ".join(parts) for (_, s, r), parts in lines.items()]


def ttft_words(a_rows: list, b_rows: list, a_name: str, b_name: str) -> str | None:
    """`TTFT 235 vs 475 ms` from the one serving configuration on each side."""
    if not a_rows or not b_rows:
        return None
    if len(a_rows) > 1 or len(b_rows) > 1:
        return f"TTFT: several serving configurations on {a_name if len(a_rows) > 1 else b_name}, see Serving"
    ttft = [
        across_runs(r.metrics.ttft_s.median if r.metrics.ttft_s else None for r in rows[0].records)
        for rows in (a_rows, b_rows)
    ]
    if None in ttft:
        return None
    from harness.serving.engines import caveat, with_caveat

    local = caveat([r for rows in (a_rows, b_rows) for r in rows[0].records])
    return with_caveat(f"TTFT {ttft[0] * 1e3:.0f} vs {ttft[1] * 1e3:.0f} ms", local)
