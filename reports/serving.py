"""The report's serving curves: latency percentiles against request rate (a sweep's
points, a search's probes) with the SLO drawn, the highest rate within the SLO per
accelerator with its goodput and $ per 1M output tokens, and tokens/s per user against
tokens/s per chip with its Pareto front. Every figure is recomputed from the records'
raw requests or read from their metrics; nothing is interpolated between points."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.figures.metrics import percentile, request_latencies
from harness.records.result import RunRecord
from reports import factors

PERCENTILES = (50, 90, 99)
DASH_BY_PERCENTILE = {50: "dot", 90: "solid", 99: "dash"}


@dataclass
class Curve:
    """One load curve: a sweep's records or one search's probes, in rate order."""

    label: str
    accelerator: str
    slo: dict[str, Any]
    points: list[tuple[float, list[dict[str, Any]]]] = field(default_factory=list)  # (req/s, requests)
    x_kind: str = "achieved"  # the rate achieved (sent); offered where a point sent too few to say


def _achieved_or(requests: list[dict[str, Any]], nominal: float | None) -> tuple[float | None, str]:
    """A point's x: the request rate its measured requests were sent at (two or more
    sends), else its nominal rate."""
    from harness.figures.metrics import achieved_rate

    sent = [r for r in requests if not r["warmup"] and not (r["error"] or "").startswith("not sent")]
    rate = achieved_rate(sent)
    return (rate, "achieved") if rate is not None else (nominal, "offered")


def _measured_ok(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in requests if not r["warmup"] and r["error"] is None]


def curves(records: list[RunRecord]) -> list[Curve]:
    out: dict[str, Curve] = {}
    for r in records:
        acc = factors.accelerator_label(r.accelerator)
        slo = (r.metrics.slo if r.metrics is not None else None) or {}
        name = r.scenario.name
        search = (r.raw or {}).get("slo_search")
        if search:
            curve = Curve(f"{name} · {acc} · SLO search", acc, slo)
            for p in search["points"]:
                x, kind = _achieved_or(p["requests"], p["rate"])
                curve.x_kind = kind if kind == "offered" else curve.x_kind
                curve.points.append((x, _measured_ok(p["requests"])))
            out[r.run_id] = curve
        elif r.sweep and r.sweep.get("id"):
            sweep = r.sweep
            curve = out.setdefault(sweep["id"], Curve(f"{name} · {acc} · sweep {sweep['id'][:6]}", acc, slo))
            x, kind = _achieved_or(r.raw["requests"], sweep["value"] if sweep["axis"] == "request_rate" else None)
            curve.x_kind = kind if kind == "offered" else curve.x_kind
            if x is not None:
                curve.points.append((x, _measured_ok(r.raw["requests"])))
    for curve in out.values():
        curve.points.sort(key=lambda p: p[0])
    return list(out.values())


def latency_percentiles(requests: list[dict[str, Any]], name: str) -> dict[int, float | None]:
    values = [v for v in (request_latencies(q)[name] for q in requests) if v is not None]
    return {p: percentile(values, p) if values else None for p in PERCENTILES}


def slo_rates(records: list[RunRecord]) -> list[dict[str, Any]]:
    """One line per SLO search record: the accelerator, the highest rate within the SLO,
    the goodput and $ per 1M output tokens measured there, and the price's source."""
    rows = []
    for r in records:
        search = r.metrics.slo_search if r.metrics is not None else None
        if not search:
            continue
        cost = r.cost
        price = cost.price if cost is not None else None
        targets = ", ".join(f"{k} <= {v:g} s" for k, v in search["targets"].items())
        rows.append(
            {
                "scenario": r.scenario.name,
                "accelerator": factors.accelerator_label(r.accelerator),
                "slo": f"p{search['percentile']:g} {targets}",
                "max_rate_req_s": search["max_rate_req_s"],
                "achieved_rate_req_s": _achieved_at(search),
                "goodput_req_s": r.metrics.goodput_req_s,
                "output_tok_s": r.metrics.output_throughput_tok_s,
                "usd_per_1m_output_tokens": cost.usd_per_1m_output_tokens if cost is not None else None,
                "price": (f"${price.usd_per_chip_hour:g}/chip-h {price.pricing}, {price.source}, {price.date}")
                if price
                else "unpriced",
                "stopped": search["stopped"],
                "bracket": search["bracket"],
            }
        )
    return rows


def _achieved_at(search: dict[str, Any]) -> float | None:
    """The rate actually sent at the search's answer (its point's achieved rate)."""
    found = search["max_rate_req_s"]
    return next((p.get("achieved_rate_req_s") for p in search["points"] if p["rate_req_s"] == found), None)


def per_user_per_chip(records: list[RunRecord]) -> list[tuple[str, float, float]]:
    """(accelerator, output tokens/s per user = 1 / median TPOT, output tokens/s per chip)
    for every serve record that has both."""
    out = []
    for r in records:
        m = r.metrics
        if m is not None and m.output_tok_s_per_user and m.output_tok_s_per_chip:
            out.append((factors.accelerator_label(r.accelerator), m.output_tok_s_per_user, m.output_tok_s_per_chip))
    return out


def pareto_max(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points no other point beats on both axes (both higher-is-better), by x."""
    front, best = [], float("-inf")
    for x, y in sorted(points, key=lambda p: (-p[0], -p[1])):
        if y > best:
            front.append((x, y))
            best = y
    return sorted(front)


# --------------------------------------------------------------------------- plots
def latency_vs_rate(curves_: list[Curve], metric: str, palette: dict[str, str], look) -> Any | None:
    """p50 (dotted), p90 (solid), p99 (dashed) of `metric` against request rate, one
    colour per accelerator, with each SLO target on this metric as a horizontal line."""
    import plotly.graph_objects as go

    _layout, label = look.layout, look.label
    if not curves_:
        return None
    fig = go.Figure()
    for curve in curves_:
        rows = [(x, latency_percentiles(reqs, metric)) for x, reqs in curve.points]
        for p in PERCENTILES:
            xs = [x for x, v in rows if v[p] is not None]
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=[v[p] for _, v in rows if v[p] is not None],
                    mode="lines+markers",
                    name=label(f"{curve.label} p{p}"),
                    line=dict(color=palette.get(curve.accelerator), dash=DASH_BY_PERCENTILE[p]),
                )
            )
    for target, at in sorted({(c.slo[metric], c.slo.get("percentile")) for c in curves_ if c.slo.get(metric)}):
        fig.add_hline(
            y=target,
            line=dict(color="black", width=1, dash="longdash"),
            annotation_text=label(f"SLO {metric} <= {target:g} s" + (f" at p{at:g}" if at else "")),
        )
    offered = any(c.x_kind == "offered" for c in curves_)
    x_title = "request rate achieved (req/s sent" + ("; offered where a point sent too few to say)" if offered else ")")
    fig.update_layout(
        **_layout(f"serving: {metric.removesuffix('_s').upper()} percentiles vs request rate", x_title, f"{metric} (s)")
    )
    return fig


def per_user_vs_per_chip(points: list[tuple[str, float, float]], palette: dict[str, str], look) -> Any | None:
    import plotly.graph_objects as go

    _layout, label = look.layout, look.label
    if not points:
        return None
    fig = go.Figure()
    for acc in sorted({a for a, _, _ in points}):
        mine = [(x, y) for a, x, y in points if a == acc]
        fig.add_trace(
            go.Scatter(
                x=[x for x, _ in mine],
                y=[y for _, y in mine],
                mode="markers",
                name=label(acc),
                marker=dict(color=palette.get(acc), size=9),
            )
        )
    front = pareto_max([(x, y) for _, x, y in points])
    fig.add_trace(
        go.Scatter(
            x=[x for x, _ in front],
            y=[y for _, y in front],
            mode="lines",
            name="Pareto front",
            line=dict(color="black", shape="hv", dash="dot"),
        )
    )
    fig.update_layout(
        **_layout(
            "serving: output tokens/s per user vs per chip (each point one load)",
            "tokens/s per user (1 / median TPOT)",
            "output tokens/s per chip",
        )
    )
    return fig


@dataclass(frozen=True)
class Look:
    """The report's visual language (reports/plots.py hands it over): layout, the
    escaping of record text, and the colours accelerators take."""

    layout: Any
    label: Any
    colours: list[str]


def figures(report, palette: dict[str, str], look: Look) -> list[tuple[str, Any]]:
    """The serving plots the records support, with their titles."""
    records = [r for row in report.serving for r in row.records]
    palette = dict(palette)
    for acc in sorted({factors.accelerator_label(r.accelerator) for r in records}):
        palette.setdefault(acc, look.colours[len(palette) % len(look.colours)])
    found = curves(records)
    out = []
    for metric in ("ttft_s", "tpot_s"):
        if (fig := latency_vs_rate(found, metric, palette, look)) is not None:
            out.append((f"{metric.removesuffix('_s').upper()} percentiles vs request rate, SLO drawn", fig))
    if (fig := per_user_vs_per_chip(per_user_per_chip(records), palette, look)) is not None:
        out.append(("tokens/s per user vs tokens/s per chip, with the Pareto front", fig))
    return out
