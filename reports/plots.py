"""The report's plots (plotly): per-step timelines, step-time distributions, cost vs
throughput with its Pareto front, and cost-ratio sensitivity to prices.

Labels that come from records pass through `label()`: plotly renders a subset of HTML in
text, and a scenario name must show as text, never as markup.
"""

from __future__ import annotations

import html
from typing import Any

MAX_TIMELINES = 12  # per scenario: more lines hide each other (the table has them all)


def label(text: str) -> str:
    return html.escape(str(text), quote=True)


def _layout(title: str, x: str, y: str, **extra) -> dict[str, Any]:
    return dict(title=label(title), xaxis_title=x, yaxis_title=y, template="plotly_white",
                margin=dict(l=60, r=20, t=50, b=50), height=380, **extra)


def timeline(section) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    shown = [r for row in section.rows for r in row.records][:MAX_TIMELINES]
    warmup = 0
    for r in shown:
        steps = r["raw"]["loop"]["steps"]
        warmup = max(warmup, sum(s["phase"] == "warmup" for s in steps))
        name = label(f"{r['scenario']['variant']} · {r['backend']['name']} · r{r['scenario']['repeat']}")
        fig.add_trace(go.Scatter(x=[s["index"] for s in steps], y=[s["time_s"] for s in steps], mode="lines+markers",
                                 name=name))
        compiled = [s for s in steps if s["num_compiles"]]
        if compiled:
            fig.add_trace(go.Scatter(x=[s["index"] for s in compiled], y=[s["time_s"] for s in compiled], mode="markers",
                                     marker=dict(symbol="x", size=11, color="crimson"), name=name + " compile",
                                     showlegend=False))
    if warmup:
        fig.add_vrect(x0=-0.5, x1=warmup - 0.5, fillcolor="grey", opacity=0.15, line_width=0,
                      annotation_text="warm-up (excluded)", annotation_position="top left")
    fig.update_layout(**_layout(f"{section.name}: step time per step", "step", "step time (s)"), yaxis_type="log")
    return fig


def distribution(section) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    for row in section.rows:
        samples = [s["time_s"] for r in row.records for s in r["raw"]["loop"]["steps"] if s["phase"] == "measure"]
        fig.add_trace(go.Box(y=samples, name=label(row.label), boxpoints="all", jitter=0.3))
    fig.update_layout(**_layout(f"{section.name}: measured step times", "", "step time (s)"), showlegend=False)
    return fig


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points no other point beats on both throughput (higher) and cost (lower)."""
    front, best_cost = [], float("inf")
    for x, y in sorted(points, key=lambda p: (-p[0], p[1])):
        if y < best_cost:
            front.append((x, y))
            best_cost = y
    return sorted(front)


def cost_vs_throughput(report) -> Any | None:
    import plotly.graph_objects as go

    points = []
    for section in report.sections:
        for row in section.rows:
            x, y = row.value("tok/s real"), row.value("$/1M tok")
            if x is not None and y is not None:
                points.append((x, y, label(f"{section.name}: {row.label}")))
    if not points:
        return None
    fig = go.Figure(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="markers+text",
                               text=[p[2] for p in points], textposition="top center", name="runs"))
    front = pareto_front([(p[0], p[1]) for p in points])
    fig.add_trace(go.Scatter(x=[p[0] for p in front], y=[p[1] for p in front], mode="lines", name="Pareto front",
                             line=dict(dash="dash")))
    fig.update_layout(**_layout("cost vs throughput", "real tokens/s (whole system)", "$ per 1M real tokens"),
                      xaxis_type="log", yaxis_type="log")
    return fig


def sensitivity(section) -> Any | None:
    import plotly.graph_objects as go

    if not section.sensitivity:
        return None
    fig = go.Figure()
    for s in section.sensitivity:
        fig.add_trace(go.Scatter(x=s["factors"], y=s["a_scaled"], mode="lines+markers", name=label(f"{s['a']} price varied")))
        fig.add_trace(go.Scatter(x=s["factors"], y=s["b_scaled"], mode="lines+markers", name=label(f"{s['b']} price varied")))
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="equal cost")
    fig.update_layout(**_layout(f"{section.name}: cost ratio vs price", "price x list price", "cost ratio (a / baseline)"))
    return fig


def latency_cdf(report) -> Any | None:
    """Empirical CDF of time to first token, one line per serving row."""
    import plotly.graph_objects as go

    if not report.serving:
        return None
    from harness.metrics import request_latencies

    fig = go.Figure()
    for row in report.serving:
        ttft = sorted(x["ttft_s"] for r in row.records for q in r["raw"]["requests"]
                      if not q["warmup"] and q["error"] is None for x in [request_latencies(q)] if x["ttft_s"] is not None)
        if ttft:
            fig.add_trace(go.Scatter(x=ttft, y=[(i + 1) / len(ttft) for i in range(len(ttft))], mode="lines+markers",
                                     line_shape="hv", name=label(row.label)))
    fig.update_layout(**_layout("serving: time to first token, CDF", "TTFT (s)", "fraction of requests"))
    return fig


def figures(report) -> dict[str, list[tuple[str, Any]]]:
    """(title, figure) for every plot the records support, by scenario ("" = all)."""
    out: dict[str, list[tuple[str, Any]]] = {}
    for section in report.sections:
        plots = [("step time per step (warm-up shaded, compiles marked x)", timeline(section)),
                 ("distribution of measured step times", distribution(section))]
        if (fig := sensitivity(section)) is not None:
            plots.append(("cost ratio as prices vary", fig))
        out[section.name] = plots
    everything = []
    if (fig := cost_vs_throughput(report)) is not None:
        everything.append(("cost vs throughput, with the Pareto front", fig))
    if (fig := latency_cdf(report)) is not None:
        everything.append(("serving latency: TTFT CDF", fig))
    if everything:
        out[""] = everything
    return out
