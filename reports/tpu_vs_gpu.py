"""TPU projected against GPU measured, on one page (issues 37 and 43).

No TPU is reachable, so the TPU half of a TPU-versus-GPU answer is a projection (a
deviceless compile's roofline bound, harness/projection/projection.py) and the GPU half a
measurement. This module pairs them and says so in one sentence per pair, as a range:

    "gemma270m [default]: tpu-v5p-8 (projected, compiler bound) vs 2x h100-sxm on torch
    (measured): between 1.2x and 3.1x faster, between 0.8x and 2.0x cheaper per 1M real
    tokens, whole fine-tune $1.20-$3.00 (projected, ...) vs $2.40. the high ends are the
    compiler bound's ...; the low ends are the bound x 0.39, the lowest measured / bound
    of the full points, ... (the points named)"

The bound is a lower bound on step time and cost, so every ratio built on it is the most
the TPU could gain ("at most"): the high end. The low end multiplies it by the lowest
calibrated measured / bound of the projection's method class (adapter or full,
harness.projection.calibration.calibrated_low), or of all points where that class has none, said
so. Pairing rule: the same scenario name and cell (variant); the resolved scenarios may
differ only in what is an execution choice or owned by the accelerator (PAIRING_ALLOWED:
devices and parallelism, the backend and its options, compile, the attention kernel, the
micro-batch, which tasks run); any other difference (data, sequence, LoRA, precision
policy, steps, ...) refuses the pair, naming the first field that differs.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

# Resolved-scenario keys (dotted prefixes) a TPU projection and a GPU measurement may differ in.
PAIRING_ALLOWED = (
    "parallel",
    "backend_options",
    "backend",
    "compile",
    "model.attention",
    "train.micro_batch",
    "tasks",
    "profiles",
    "run_timeout_s",
    "serve",
)


@dataclass
class Pairing:
    sentences: list[str] = field(default_factory=list)  # one per pair, labelled projected and measured
    refused: list[str] = field(default_factory=list)  # one per refused pair, naming the field
    workload_rows: list[dict[str, Any]] = field(default_factory=list)  # projected rows for the workload $ table
    ranges: list[dict[str, Any]] = field(default_factory=list)  # one per pair: its ranges' ends (the CSV's rows)


def flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    """A resolved scenario as {dotted key: leaf value} (lists are leaves)."""
    if not isinstance(doc, dict):
        return {prefix: doc}
    out: dict[str, Any] = {}
    for key, value in doc.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _allowed(key: str) -> bool:
    return any(key == p or key.startswith(p + ".") for p in PAIRING_ALLOWED)


def scenario_differences(projected: dict[str, Any], measured: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(allowed differences, refusing differences) between two resolved scenarios, as dotted keys, sorted."""
    a, b = flatten(projected), flatten(measured)
    differing = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return [k for k in differing if _allowed(k)], [k for k in differing if not _allowed(k)]


def pair(projections, records, calibration=None) -> Pairing:
    """Every TPU projection against every measured GPU train configuration of the same
    scenario and cell: the sentence, or the refusal naming the field."""
    out = Pairing()
    for projection in projections:
        if not projection.shapes:
            continue
        for group in _gpu_groups(projection, records):
            allowed, refusing = scenario_differences(
                projection.scenario.get("resolved", {}), group[0].scenario.resolved
            )
            label = _gpu_label(group[0])
            if refusing:
                out.refused.append(
                    f"{projection.scenario['name']} [{projection.scenario['variant']}]: {projection.slice['name']} "
                    f"(projected) not paired with {label} (measured): {refusing[0]} differs"
                    + (f" (and {len(refusing) - 1} more)" if len(refusing) > 1 else "")
                )
                continue
            sentence, row, figures = _sentence(projection, group, allowed, calibration)
            out.sentences.append(sentence)
            out.ranges.append(_csv_row(projection, label, figures))
            if row:
                out.workload_rows.append(row)
    return out


def _csv_row(projection, gpu_label: str, r: PairRange) -> dict[str, Any]:
    """A pair's ranges as CSV columns: each figure's low and high end, and the sources."""
    return {
        "row_kind": "tpu_vs_gpu",
        "scenario": projection.scenario["name"],
        "variant": projection.scenario["variant"],
        "projected": f"{projection.slice['name']} on {projection.backend}",
        "measured": gpu_label,
        "faster_low": r.faster_low,
        "faster_high": r.faster_high,
        "cheaper_low": r.cheaper_low,
        "cheaper_high": r.cheaper_high,
        "fine_tune_usd_low": r.fine_tune_usd_low,
        "fine_tune_usd_high": r.fine_tune_usd_high,
        "gpu_fine_tune_usd": r.gpu_fine_tune_usd,
        "calibration": r.calibrated.note() if r.calibrated else "none",
    }


def _gpu_groups(projection, records) -> list[list]:
    """Measured GPU train records of the projection's scenario and cell, grouped by
    backend and accelerator (repeats together)."""
    groups: dict[tuple, list] = {}
    for r in records:
        if not (r.ok and r.task == "train" and r.metrics and r.accelerator.kind == "cuda"):
            continue
        if r.scenario.name != projection.scenario["name"] or r.scenario.variant != projection.scenario["variant"]:
            continue
        key = (r.backend.name, r.accelerator.catalog_key, r.accelerator.count)
        groups.setdefault(key, []).append(r)
    return list(groups.values())


def _gpu_label(record) -> str:
    return f"{record.accelerator.count}x {record.accelerator.catalog_key} on {record.backend.name}"


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


@dataclass(frozen=True)
class PairRange:
    """A pair's figures as ranges, each end labelled by where it comes from. `high` ends
    are the bound's (a best case: the most the TPU could be faster or cheaper); `low`
    ends are the bound x the lowest calibrated measured / bound (harness.projection.calibration).
    faster = TPU real tokens/s (all chips) / GPU's; cheaper = GPU $ / TPU $ per 1M real
    tokens; fine-tune $ low = the bound's, high = every step at the calibrated rate."""

    faster_low: float | None
    faster_high: float | None
    cheaper_low: float | None
    cheaper_high: float | None
    fine_tune_usd_low: float | None
    fine_tune_usd_high: float | None
    gpu_fine_tune_usd: float | None
    calibrated: Any  # harness.projection.calibration.CalibratedLow, or None: no point calibrated at all


def pair_range(projection, group, calibration=None) -> PairRange:
    """The pair's figures: bound ends and calibrated ends (PairRange)."""
    from harness.projection.calibration import calibrated_fine_tune_usd, calibrated_low, method_of
    from reports.projections import fine_tune_of

    shape = max(projection.shapes, key=lambda s: s.seq_len)
    tpu_rate, tpu_usd = shape.real_tokens_per_s_per_chip_bound, shape.usd_per_1m_real_tokens_bound
    gpu_rate = _median(r.metrics.tokens_per_s_real for r in group)
    gpu_usd = _median(r.cost.usd_per_1m_tokens_real if r.cost else None for r in group)
    low = calibrated_low(method_of(projection), calibration)
    ratio = low.ratio if low else None
    faster = tpu_rate * projection.slice["chips"] / gpu_rate if tpu_rate and gpu_rate else None
    cheaper = gpu_usd / tpu_usd if tpu_usd and gpu_usd else None
    gpu_ft = fine_tune_of(group[0])[0]
    tpu_ft = projection.fine_tune
    return PairRange(
        faster_low=faster * ratio if faster and ratio else None,
        faster_high=faster,
        cheaper_low=cheaper * ratio if cheaper and ratio else None,
        cheaper_high=cheaper,
        fine_tune_usd_low=tpu_ft.usd if tpu_ft else None,
        fine_tune_usd_high=calibrated_fine_tune_usd(tpu_ft, ratio) if ratio else None,
        gpu_fine_tune_usd=gpu_ft.usd if gpu_ft else None,
        calibrated=low,
    )


def _between(low: float | None, high: float, what: str) -> str:
    """ "between A and B x what", or "at most B x what" where no calibrated end exists."""
    if low is None:
        return f"at most {high:.3g}x {what}"
    return f"between {low:.3g}x and {high:.3g}x {what}"


def range_text(r: PairRange) -> str:
    """The sentence's figures: speed, cost per 1M real tokens, the whole fine-tune."""
    parts = [
        _between(r.faster_low, r.faster_high, "faster")
        if r.faster_high
        else "speed not compared (no real-token bound or measured rate)",
        _between(r.cheaper_low, r.cheaper_high, "cheaper per 1M real tokens")
        if r.cheaper_high
        else "cost per 1M real tokens not compared (a price missing)",
    ]
    if r.fine_tune_usd_low is not None and r.gpu_fine_tune_usd is not None:
        tpu = f"${r.fine_tune_usd_low:.2f}" + (
            f"-${r.fine_tune_usd_high:.2f}" if r.fine_tune_usd_high is not None else " (a lower bound)"
        )
        parts.append(f"whole fine-tune {tpu} (projected, compile and setup apart) vs ${r.gpu_fine_tune_usd:.2f}")
    return ", ".join(parts)


def range_note(r: PairRange) -> str:
    """Where each end of the range comes from, naming the calibration points."""
    high = (
        "The high ends are the compiler bound's, a best case: the TPU is at most that much faster and cheaper "
        "(its $ is a lower bound on cost)"
    )
    if r.calibrated is None:
        return f"{high}; no calibrated lower end: no measured / bound point is known (docs/measurements/projections-and-calibration.md)"
    return f"{high}; the low ends are the bound x {r.calibrated.ratio:.3g} ({r.calibrated.note()})"


def _sentence(projection, group, allowed: list[str], calibration) -> tuple[str, dict[str, Any] | None, PairRange]:
    name = f"{projection.scenario['name']} [{projection.scenario['variant']}]"
    head = f"{name}: {projection.slice['name']} (projected, compiler bound) vs {_gpu_label(group[0])} (measured)"
    figures = pair_range(projection, group, calibration)
    sentence = (
        f"{head}: {range_text(figures)}. {range_note(figures)}. x faster = TPU / GPU real tokens/s, x cheaper = "
        "GPU $ / TPU $ per 1M real tokens (below 1: the GPU is ahead)"
    )
    if allowed:
        sentence += f" (they differ in execution choices only: {', '.join(allowed)})"
    shape = max(projection.shapes, key=lambda s: s.seq_len)
    row = None
    if shape.usd_per_1m_real_tokens_bound is not None:
        row = {
            "scenario": projection.scenario["name"],
            "run": f"{projection.slice['name']} on {projection.backend} (PROJECTED)",
            "usd_per_1m_real": shape.usd_per_1m_real_tokens_bound,
            "fine_tune_usd": figures.fine_tune_usd_low,
            "fine_tune_usd_high": figures.fine_tune_usd_high,
        }
    return sentence, row, figures


def markdown_lines(pairing: Pairing, cell=str) -> list[str]:
    """The section's Markdown: the sentences, then the refusals (each through `cell`, the report's escaping)."""
    if not (pairing.sentences or pairing.refused):
        return []
    out = ["## TPU (projected) vs GPU (measured)", ""]
    out += [f"- {cell(line)}" for line in pairing.sentences]
    out += [f"- not paired: {cell(line)}" for line in pairing.refused]
    return out + [""]


def add_to_report(report, projections, train) -> None:
    """The report's hook: the pairing, and each pair's projected workload row (marked)."""
    report.tpu_vs_gpu = pair(projections, train)
    report.workloads += projected_workload_rows(report.workloads, report.tpu_vs_gpu)


def projected_workload_rows(workloads, pairing: Pairing) -> list:
    """For each pair whose projection prices a whole fine-tune and whose scenario has a
    measured workload row: the same workload with the fine-tunes on the TPU (projected)
    and the serving as measured on that row's accelerator (TPU serving is not projected)."""
    from dataclasses import replace

    rows = []
    for projected in pairing.workload_rows:
        measured = next((w for w in workloads if w.scenario == projected["scenario"]), None)
        if measured is None or projected["fine_tune_usd"] is None:
            continue
        serve = measured.served_tokens_millions * measured.serve_usd_per_1m
        total = measured.fine_tunes * projected["fine_tune_usd"] + serve
        high = projected["fine_tune_usd_high"]
        total_high = measured.fine_tunes * high + serve if high is not None else None
        first = next(w for w in workloads if w.scenario == projected["scenario"])
        rows.append(
            replace(
                measured,
                run=projected["run"],
                accelerator=projected["run"].split(" on ")[0],
                train_usd=projected["fine_tune_usd"],
                train_usd_high=high,
                total_usd=total,
                total_usd_high=total_high,
                ratio_to_first=total / first.total_usd if first.total_usd else float("nan"),
                ratio_to_first_high=total_high / first.total_usd if first.total_usd and total_high else None,
                row=None,
                serve_basis=f"PROJECTED fine-tunes; serving as measured on {measured.run or measured.accelerator}",
                train_basis=(
                    "projected whole fine-tune on the TPU slice: the compiler bound's $ (a lower bound) to every step "
                    "at the lowest calibrated measured / bound"
                    + ("" if high is not None else " (none known)")
                    + "; compile and setup apart"
                ),
            )
        )
    return rows
