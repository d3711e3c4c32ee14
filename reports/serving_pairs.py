"""Serving, TPU versus GPU, in one sentence per scenario (W3's form, issue 47):

    "w3 [default]: tpu-v6e:8 (vLLM-TPU, projected) vs 2x h100-sxm (vLLM, measured): TTFT
    at least 8.2 ms vs 475 ms, output tok/s 88-121 vs 117 (within 27% at worst),
    $ per 1M output tokens $49-68 vs $25"

Each side is a measurement where the scenario has serve records on that kind of device
(the median over its runs), else a stored serving projection (harness/serving/
projection.py: a bound and its calibrated range, labelled projected). A projection is
also set beside a measurement of the same configuration (scenario, accelerator and
chips: the training projection's pairing rule for serving), as measured over bound.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Side:
    """One device's serving figures: each a (low, high) pair; equal ends when measured."""

    name: str
    engine: str
    label: str  # "measured" or "projected"
    ttft_s: tuple[float, float] | None  # a projection's is (bound, inf): "at least"
    output_tok_s: tuple[float, float] | None
    usd: tuple[float, float] | None


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _measured_sides(records) -> dict[tuple[str, bool], Side]:
    """Per scenario and device kind (TPU or not), the first accelerator's measured serve
    runs, medians over them."""
    out: dict[tuple[str, bool], Side] = {}
    for record in records:
        key, count = record.accelerator.catalog_key, record.accelerator.count
        tpu = key.startswith("tpu-")
        if (record.scenario.name, tpu) in out:
            continue
        same = [r for r in records if r.scenario.name == record.scenario.name and r.accelerator.catalog_key == key]
        ttft = _median(r.metrics.ttft_s.median if r.metrics.ttft_s else None for r in same)
        tok_s = _median(r.metrics.output_throughput_tok_s for r in same)
        usd = _median(r.cost.usd_per_1m_output_tokens if r.cost else None for r in same)
        out[(record.scenario.name, tpu)] = Side(
            f"{key}:{count}" if tpu else f"{count}x {key}",
            "vLLM-TPU" if tpu else "vLLM",
            "measured",
            (ttft, ttft) if ttft is not None else None,
            (tok_s, tok_s) if tok_s is not None else None,
            (usd, usd) if usd is not None else None,
        )
    return out


def _projected_side(projection: dict[str, Any]) -> Side:
    point = projection["points"][0]
    tpu = projection["catalog_key"].startswith("tpu-")
    usd = point.get("usd_per_1m_output_tokens")
    return Side(
        f"{projection['catalog_key']}:{projection['chips']}"
        if tpu
        else f"{projection['chips']}x {projection['catalog_key']}",
        "vLLM-TPU" if tpu else "vLLM",
        "projected",
        (point["ttft_s_at_least"], float("inf")),
        tuple(point["output_tok_s"]),
        tuple(usd) if usd else None,
    )


def _span(pair: tuple[float, float] | None, scale: float = 1.0, unit: str = "", money: bool = False) -> str:
    if pair is None:
        return "n/a"
    low, high = pair
    sign = "$" if money else ""
    if high == float("inf"):
        return f"at least {sign}{low * scale:.3g}{unit}"
    if low == high:
        return f"{sign}{low * scale:.3g}{unit}"
    return f"{sign}{low * scale:.3g}-{sign}{high * scale:.3g}{unit}"


def within(a: tuple[float, float], b: tuple[float, float]) -> float:
    """The largest relative difference between any value of range a and any of range b,
    over the smaller (the worst case a range allows)."""
    return max(a[1] / b[0], b[1] / a[0]) - 1


def sentence(scenario: str, tpu: Side, gpu: Side) -> str:
    def side(s: Side) -> str:
        return f"{s.name} ({s.engine}, {s.label})"

    tok = "n/a"
    if tpu.output_tok_s and gpu.output_tok_s:
        worst = " at worst" if "projected" in (tpu.label, gpu.label) else ""
        tok = f"{_span(tpu.output_tok_s)} vs {_span(gpu.output_tok_s)} (within {within(tpu.output_tok_s, gpu.output_tok_s):.0%}{worst})"
    return (
        f"{scenario}: {side(tpu)} vs {side(gpu)}: TTFT {_span(tpu.ttft_s, 1e3, ' ms')} vs {_span(gpu.ttft_s, 1e3, ' ms')}, "
        f"output tok/s {tok}, $ per 1M output tokens {_span(tpu.usd, money=True)} vs {_span(gpu.usd, money=True)}"
    )


def sentences(records, projections: list[dict[str, Any]]) -> list[str]:
    """One TPU-versus-GPU sentence per scenario with both sides, then each projection
    beside a measurement of its configuration."""
    measured = _measured_sides(records)
    scenarios = sorted({name for name, _ in measured} | {p["scenario"] for p in projections})
    out = []
    for name in scenarios:
        sides = {}
        for tpu in (True, False):
            projected = [p for p in projections if p["scenario"] == name and p["catalog_key"].startswith("tpu-") == tpu]
            side = measured.get((name, tpu)) or (_projected_side(projected[0]) if projected else None)
            sides[tpu] = side
        if sides[True] and sides[False]:
            out.append(sentence(name, sides[True], sides[False]))
    return out + beside_measurements(records, projections)


def measured_load(record) -> tuple[int, int | None] | None:
    """A serve record's closed-loop load, (requests in flight, output tokens a request), or
    None for an open loop (its batch sizes depend on queueing, which no bound models)."""
    serve = record.scenario.resolved.get("serve") or {}
    load = serve.get("load") or {}
    sweep = record.sweep or {}
    if sweep.get("axis") == "concurrency":
        return int(sweep["value"]), serve.get("output_tokens")
    if load.get("request_rate") is not None or load.get("ramp") is not None or sweep:
        return None
    return int(load.get("concurrency") or 1), serve.get("output_tokens")


def pairs(p: dict[str, Any], point: dict[str, Any], records) -> list:
    """The serve runs a projection's load point stands beside, by the training projection's
    rule (the same configuration): the same scenario, accelerator and chips, served by the
    engine the projection assumes (vLLM, or vLLM-TPU), at the point's closed-loop load."""
    engine = "serve-" + p["engine"]
    return [
        r
        for r in records
        if r.ok
        and r.scenario.name == p["scenario"]
        and r.accelerator.catalog_key == p["catalog_key"]
        and r.accelerator.count == p["chips"]
        and r.backend.name == engine
        and measured_load(r) == (point["concurrency"], point["output_tokens"])
    ]


def beside_measurements(records, projections: list[dict[str, Any]]) -> list[str]:
    """Each projection's load point beside the serve runs of the same configuration and
    load: measured output tok/s over the point's bound (at most 1 where the bound holds)."""
    out = []
    for p in projections:
        for point in p["points"]:
            tok_s = _median(r.metrics.output_throughput_tok_s for r in pairs(p, point, records))
            if tok_s is None:
                continue
            bound = point["output_tok_s"][1]
            out.append(
                f"{p['scenario']} on {p['target']} at concurrency {point['concurrency']}: measured output "
                f"{tok_s:.4g} tok/s is {tok_s / bound:.2f} of the projected bound ({bound:.4g} tok/s; calibrated "
                f"range {p['calibration']['low']:.2f}-{p['calibration']['high']:.2f})"
            )
    return out
