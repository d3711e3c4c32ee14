"""TPU projected against GPU measured, on one page (issue 37).

No TPU is reachable, so the TPU half of a TPU-versus-GPU answer is a projection (a
deviceless compile's roofline bound, harness/projection.py) and the GPU half a
measurement. This module pairs them and says so in one sentence per pair:

    "gemma270m [default]: tpu-v5p-8 (projected, compiler bound) vs 2x h100-sxm (measured):
    at most 3.1x faster, at least 2.0x cheaper per 1M real tokens; whole fine-tune $1.20
    vs $2.40; calibration: ..."

"At most" and "at least" because the bound is a lower bound on step time: the TPU can
only be slower and dearer than projected. Pairing rule: the same scenario name and cell
(variant); the resolved scenarios may differ only in what is an execution choice or
owned by the accelerator (PAIRING_ALLOWED: devices and parallelism, the backend and its
options, compile, the attention kernel, the micro-batch, which tasks run); any other
difference (data, sequence, LoRA, precision policy, steps, ...) refuses the pair, naming
the first field that differs.
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

NO_CALIBRATION = (
    "calibration: no measured / bound yet for {key} (docs/measurements.md, issue 37): the bound is optimistic by "
    "an unknown factor (tuned MaxText reaches 30-65% of the compute roofline)"
)


@dataclass
class Pairing:
    sentences: list[str] = field(default_factory=list)  # one per pair, labelled projected and measured
    refused: list[str] = field(default_factory=list)  # one per refused pair, naming the field
    workload_rows: list[dict[str, Any]] = field(default_factory=list)  # projected rows for the workload $ table


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
            sentence, row = _sentence(projection, group, allowed, calibration)
            out.sentences.append(sentence)
            if row:
                out.workload_rows.append(row)
    return out


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


def _sentence(projection, group, allowed: list[str], calibration) -> tuple[str, dict[str, Any] | None]:
    from reports.projections import fine_tune_of

    shape = max(projection.shapes, key=lambda s: s.seq_len)
    chips = projection.slice["chips"]
    tpu_rate = shape.real_tokens_per_s_per_chip_bound
    tpu_usd = shape.usd_per_1m_real_tokens_bound
    gpu_rate = _median(r.metrics.tokens_per_s_real for r in group)
    gpu_usd = _median(r.cost.usd_per_1m_tokens_real if r.cost else None for r in group)
    name = f"{projection.scenario['name']} [{projection.scenario['variant']}]"
    head = f"{name}: {projection.slice['name']} (projected, compiler bound) vs {_gpu_label(group[0])} (measured)"
    parts = []
    if tpu_rate and gpu_rate:
        parts.append(f"at most {tpu_rate * chips / gpu_rate:.3g}x faster")
    else:
        parts.append("speed not compared (no real-token bound or measured rate)")
    if tpu_usd and gpu_usd:
        parts.append(f"at least {gpu_usd / tpu_usd:.3g}x cheaper per 1M real tokens")
    else:
        parts.append("cost per 1M real tokens not compared (a price missing)")
    gpu_ft = fine_tune_of(group[0])[0]
    tpu_ft = projection.fine_tune
    if tpu_ft and tpu_ft.usd is not None and gpu_ft and gpu_ft.usd is not None:
        parts.append(f"whole fine-tune ${tpu_ft.usd:.2f} (projected, compile and setup apart) vs ${gpu_ft.usd:.2f}")
    sentence = f"{head}: {', '.join(parts)}; {calibration_text(projection, calibration)}"
    if allowed:
        sentence += f" (they differ in execution choices only: {', '.join(allowed)})"
    row = None
    if tpu_usd is not None:
        row = {
            "scenario": projection.scenario["name"],
            "run": f"{projection.slice['name']} on {projection.backend} (PROJECTED)",
            "usd_per_1m_real": tpu_usd,
            "fine_tune_usd": tpu_ft.usd if tpu_ft else None,
        }
    return sentence, row


def calibration_text(projection, calibration=None) -> str:
    """The projection's known error: measured / bound from `calibration` ({catalog key:
    (ratio, source)}) or harness.calibration's published table, with the estimate it
    gives labelled estimated; else that none is known yet."""
    from harness.calibration import measured_over_bound

    key = projection.slice["catalog_key"]
    known = (calibration or {}).get(key) or measured_over_bound(key)
    if not known:
        return NO_CALIBRATION.format(key=key) + calibrated_elsewhere(key)
    ratio, source = known
    shape = max(projection.shapes, key=lambda s: s.seq_len)
    estimate = shape.real_tokens_per_s_per_chip_bound * ratio if shape.real_tokens_per_s_per_chip_bound else None
    said = f"; estimated = bound x {ratio:.3g}: {estimate:.4g} real tokens/s per chip (estimated)" if estimate else ""
    return f"calibration: measured / bound {ratio:.3g} on {key} ({source}){said}"


def calibrated_elsewhere(key: str) -> str:
    """The other generations' measured / bound, as context for an uncalibrated one (never
    applied to it: no estimate is made from another generation's ratio)."""
    from harness.calibration import PUBLISHED

    ratios: dict[str, list[float]] = {}
    for entry in PUBLISHED:
        if entry.catalog_key != key and entry.measured_over_bound is not None:
            ratios.setdefault(entry.catalog_key, []).append(entry.measured_over_bound)
    said = [f"{k} {min(r):.2f}-{max(r):.2f}" if len(r) > 1 else f"{k} {r[0]:.2f}" for k, r in sorted(ratios.items())]
    return f"; measured / bound elsewhere, not applied here: {', '.join(said)}" if said else ""


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
        first = next(w for w in workloads if w.scenario == projected["scenario"])
        rows.append(
            replace(
                measured,
                run=projected["run"],
                accelerator=projected["run"].split(" on ")[0],
                train_usd=projected["fine_tune_usd"],
                total_usd=total,
                ratio_to_first=total / first.total_usd if first.total_usd else float("nan"),
                row=None,
                serve_basis=f"PROJECTED fine-tunes; serving as measured on {measured.run or measured.accelerator}",
                train_basis="projected whole fine-tune on the TPU slice (compiler bound; compile and setup apart)",
            )
        )
    return rows
