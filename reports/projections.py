"""The report's projected figures, always labelled projected, never in measured rows.

- Projected on TPU: one row per stored projection (harness/projection/projection.py: a scenario's
  step compiled ahead of time for a TPU slice): fits, memory per device, the roofline
  bound on step time and tokens/s per chip, $/1M at list price, the compiles the whole
  fine-tune will pay. Where a measured record of the same configuration (scenario,
  variant, backend, accelerator and chips) exists, measured / projected tokens/s per chip:
  how far the real step stays from the compiler's bound.
- Projected fine-tune: per measured train run whose scenario prices a workload or
  compares padding policies, the whole fine-tune it stands for (harness/projection/fine_tune.py),
  and one line per scenario: "projected fine-tune: static X min, dynamic Y min".
"""

from __future__ import annotations

import functools
import statistics
from dataclasses import dataclass

GIB = 1024**3


@dataclass
class ProjectedRow:
    scenario: str
    variant: str
    backend: str
    slice: str
    chips: int
    fits: str
    memory_gib: float  # the largest shape's, per device
    step_bound_s: float | None  # the longest shape's
    tokens_per_s_per_chip_bound: float | None
    usd_per_1m_bound: float | None
    compiles: int | None  # the whole fine-tune's
    fine_tune_min: float | None
    measured_over_projected: float | None  # measured padded tokens/s per chip / padded bound
    real_tokens_per_s_per_chip_bound: float | None = None  # per real token (the fine-tune's real/padded)
    usd_per_1m_real_bound: float | None = None
    flops_flag: str | None = None  # the FLOPs check's flag on any shape (harness.projection.projection.flops_check)
    # The calibrated other end of each bound (harness.projection.calibration.calibrated_low): the real
    # tokens/s per chip bound x the lowest measured / bound of the method's class, and the
    # $/1M real tokens bound / it; None where no point is calibrated.
    real_tokens_per_s_per_chip_low: float | None = None
    usd_per_1m_real_high: float | None = None
    calibration: str = ""  # the ratio used and the points it came from, or why none


@dataclass
class FineTuneRow:
    scenario: str
    run: str
    steps: int
    compiles: int
    minutes: float
    usd: float | None
    basis: str


def _matches(record, projection) -> bool:
    return (
        record.scenario.name == projection.scenario["name"]
        and record.scenario.variant == projection.scenario["variant"]
        and record.backend.name == projection.backend
        and record.accelerator.catalog_key == projection.slice["catalog_key"]
        and record.accelerator.count == projection.slice["chips"]
    )


def calibrated_ends(projection, shape) -> tuple[float | None, float | None, str]:
    """(real tokens/s per chip, $/1M real tokens) at the lowest calibrated measured /
    bound of the projection's method class, and the note naming its points."""
    from harness.projection.calibration import calibrated_low, method_of

    low = calibrated_low(method_of(projection))
    if low is None:
        return None, None, "no measured / bound point is known: the bound alone"
    rate = shape.real_tokens_per_s_per_chip_bound
    usd = shape.usd_per_1m_real_tokens_bound
    return (
        rate * low.ratio if rate else None,
        usd / low.ratio if usd else None,
        f"bound x {low.ratio:.3g} ({low.note()})",
    )


def projected_rows(projections, records) -> list[ProjectedRow]:
    rows = []
    for p in projections:
        longest = max(p.shapes, key=lambda s: s.seq_len)
        measured = [r.metrics.tokens_per_s_padded_per_chip for r in records if r.ok and _matches(r, p) and r.metrics]
        measured = [m for m in measured if m]
        bound = longest.tokens_per_s_per_chip_bound
        rate_low, usd_high, calibration = calibrated_ends(p, longest)
        rows.append(
            ProjectedRow(
                scenario=p.scenario["name"],
                variant=p.scenario["variant"],
                backend=p.backend,
                slice=p.slice["name"],
                chips=p.slice["chips"],
                fits="yes" if p.fits else "no",
                memory_gib=max(s.memory_bytes_per_device for s in p.shapes) / GIB,
                step_bound_s=longest.step_time_bound_s,
                tokens_per_s_per_chip_bound=bound,
                usd_per_1m_bound=longest.usd_per_1m_tokens_bound,
                compiles=p.fine_tune.compiles if p.fine_tune else None,
                fine_tune_min=p.fine_tune.time_s / 60 if p.fine_tune else None,
                measured_over_projected=statistics.median(measured) / bound if measured and bound else None,
                real_tokens_per_s_per_chip_bound=longest.real_tokens_per_s_per_chip_bound,
                usd_per_1m_real_bound=longest.usd_per_1m_real_tokens_bound,
                flops_flag=next((f"length {s.seq_len}: {s.flops_flag}" for s in p.shapes if s.flops_flag), None),
                real_tokens_per_s_per_chip_low=rate_low,
                usd_per_1m_real_high=usd_high,
                calibration=calibration,
            )
        )
    return rows


# --------------------------------------------------------------------------- whole fine-tunes
def wants_fine_tune(record) -> bool:
    """A run whose scenario prices a workload or compares padding policies."""
    resolved = record.scenario.resolved
    return bool(resolved.get("workload")) or "sequence.padding" in record.scenario.cell


@functools.lru_cache(maxsize=64)
def _scenario(resolved_json: str):
    import json

    from harness.scenario.loader import validate

    return validate(json.loads(resolved_json), "record")


def fine_tune_of(record):
    """The whole fine-tune a measured train record stands for, at the price it was billed
    at; (None, why) when it cannot be projected (a record without its scenario's data
    or steps)."""
    import json

    from harness.basics.errors import BenchError
    from harness.projection.fine_tune import from_record

    price = record.cost.price.usd_per_chip_hour if record.cost is not None and record.cost.price else None
    try:
        scenario = _scenario(json.dumps(record.scenario.resolved, sort_keys=True))
        projected = from_record(record, scenario, price)
    except (BenchError, ValueError, OSError, KeyError, TypeError) as exc:
        return None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:160]}"
    return projected, None if projected else "no steady step to project from"


def fine_tune_rows(records, label_of) -> tuple[list[FineTuneRow], list[str], list[str]]:
    """(rows, one line per scenario comparing its padding policies, warnings)."""
    rows, warnings, by_policy = [], [], {}
    for record in records:
        if not (record.ok and wants_fine_tune(record)):
            continue
        projected, why = fine_tune_of(record)
        if projected is None:
            warnings.append(f"projected fine-tune of {record.scenario.name} [{record.scenario.variant}]: {why}")
            continue
        rows.append(
            FineTuneRow(
                record.scenario.name,
                label_of(record),
                projected.steps,
                projected.compiles,
                projected.time_s / 60,
                projected.usd,
                projected.basis,
            )
        )
        policy = record.scenario.cell.get("sequence.padding")
        if policy:
            key = (record.scenario.name, record.backend.name, record.accelerator.catalog_key)
            by_policy.setdefault(key, {}).setdefault(policy, []).append(projected.time_s / 60)
    lines = [
        f"{name} on {backend}, {accelerator}: projected fine-tune: "
        + ", ".join(f"{p} {statistics.median(m):.3g} min" for p, m in policies.items())
        for (name, backend, accelerator), policies in by_policy.items()
    ]
    return rows, lines, warnings
