"""The report's plots (plotly): per-step timelines, step-time distributions, cost vs
throughput with its Pareto front, and cost-ratio sensitivity to prices.

One visual language on every plot: colour = accelerator (the same colour for the same
accelerator everywhere in the report), marker = the section's other factor (its first
factor, other than the accelerator, that varies on one accelerator), line dash = the next
such factor (or the same one). Log axes carry full tick
labels (1, 2, 5 per decade, whole decades in range), so 0.2 s and 2 s never look alike.

Labels that come from records pass through `label()`: plotly renders a subset of HTML in
text, and a scenario name must show as text, never as markup.
"""

from __future__ import annotations

import html
import math
from typing import Any

from reports import factors

MAX_TIMELINES = 12  # per scenario: more lines hide each other (the table has them all)
COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
SYMBOLS = ["circle", "square", "diamond", "triangle-up", "cross", "star", "hexagon", "triangle-down"]
DASHES = ["solid", "dash", "dot", "dashdot", "longdash", "longdashdot"]


def label(text: str) -> str:
    return html.escape(str(text), quote=True)


def _layout(title: str, x: str, y: str, **extra) -> dict[str, Any]:
    return dict(
        title=label(title),
        xaxis_title=x,
        yaxis_title=y,
        template="plotly_white",
        margin=dict(l=70, r=20, t=50, b=50),
        height=400,
        **extra,
    )


def _legend_below(fig, entries: int) -> None:
    """Long legend entries (row labels) go under the plot, one a line, so they never
    squeeze the plot; the figure grows to hold them."""
    fig.update_layout(
        height=400 + 20 * entries,
        margin=dict(l=70, r=20, t=50, b=80 + 20 * entries),
        legend=dict(font=dict(size=11), orientation="h", x=0, y=-0.22, yanchor="top", yref="paper"),
    )


# --------------------------------------------------------------------------- style
def colours(report) -> dict[str, str]:
    """accelerator label -> colour, one mapping for the whole report."""
    names = sorted({row.attrs[factors.ACCELERATOR] for s in report.sections for row in s.rows})
    return {name: COLOURS[i % len(COLOURS)] for i, name in enumerate(names)}


def other_factors(section) -> list[str]:
    """The factors that vary on one accelerator, in the section's order (a backend that
    only ever ran on its own accelerator would repeat the colour's message)."""
    out = []
    for f in (f for f in section.factors if f != factors.ACCELERATOR):
        per_accelerator: dict[str, set[str]] = {}
        for row in section.rows:
            per_accelerator.setdefault(row.attrs[factors.ACCELERATOR], set()).add(row.attrs[f])
        if any(len(levels) > 1 for levels in per_accelerator.values()):
            out.append(f)
    return out


def style(section, row, palette: dict[str, str]) -> dict[str, str]:
    """colour: the accelerator; marker: the first other factor's level; dash: the second
    other factor's level (the first's when there is one)."""
    others = other_factors(section)

    def index(f: str | None) -> int:
        return list(dict.fromkeys(r.attrs[f] for r in section.rows)).index(row.attrs[f]) if f else 0

    marker, dash = (others + [None])[0], (others[1:] or others or [None])[0]
    return {
        "color": palette[row.attrs[factors.ACCELERATOR]],
        "symbol": SYMBOLS[index(marker) % len(SYMBOLS)],
        "dash": DASHES[index(dash) % len(DASHES)],
    }


# --------------------------------------------------------------------------- log axes
def tick_text(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:g}"


def log_axis(values, pad_low: float = 0.05, pad_high: float = 0.05) -> dict[str, Any]:
    """A log axis over whole decades around the values (pads in decades), labelled at
    1, 2 and 5 x each power of ten (only the powers of ten past 4 decades)."""
    kept = [v for v in values if v is not None and v > 0]
    if not kept:
        return dict(type="log")
    low = math.floor(math.log10(min(kept)) - pad_low)
    high = math.ceil(math.log10(max(kept)) + pad_high)
    steps = (1,) if high - low > 4 else (1, 2, 5)
    ticks = [float(f"{m}e{e}") for e in range(low, high + 1) for m in steps if m == 1 or e < high]
    return dict(type="log", range=[low, high], tickvals=ticks, ticktext=[tick_text(t) for t in ticks])


# --------------------------------------------------------------------------- plots
def timeline(section, palette) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    shown = [(row, r) for row in section.rows for r in row.records][:MAX_TIMELINES]
    warmup, times = 0, []
    for row, r in shown:
        steps = r.raw["loop"]["steps"]
        warmup = max(warmup, sum(s["phase"] == "warmup" for s in steps))
        times += [s["time_s"] for s in steps]
        look = style(section, row, palette)
        name = label(f"{row.tag}: {row.label} · r{r.scenario.repeat} · {r.run_id[:6]}")
        fig.add_trace(
            go.Scatter(
                x=[s["index"] for s in steps],
                y=[s["time_s"] for s in steps],
                mode="lines+markers",
                name=name,
                line=dict(color=look["color"], dash=look["dash"]),
                marker=dict(symbol=look["symbol"], color=look["color"]),
            )
        )
        compiled = [s for s in steps if s["num_compiles"]]
        if compiled:
            fig.add_trace(
                go.Scatter(
                    x=[s["index"] for s in compiled],
                    y=[s["time_s"] for s in compiled],
                    mode="markers",
                    marker=dict(symbol="x", size=11, color="black"),
                    name=name + " compile",
                    showlegend=False,
                )
            )
    if warmup:
        fig.add_vrect(
            x0=-0.5,
            x1=warmup - 0.5,
            fillcolor="grey",
            opacity=0.15,
            line_width=0,
            annotation_text="warm-up (excluded)",
            annotation_position="top left",
        )
    steps_shown = max((len(r.raw["loop"]["steps"]) for _, r in shown), default=1)
    fig.update_layout(
        **_layout(f"{section.name}: step time per step", "step", "step time (s)"),
        yaxis=log_axis(times, pad_high=0.15),
        xaxis=dict(dtick=max(1, math.ceil(steps_shown / 20))),
    )
    _legend_below(fig, len(shown))
    return fig


def distribution(section, palette) -> Any:
    import plotly.graph_objects as go

    fig = go.Figure()
    times = []
    for row in section.rows:
        samples = [s["time_s"] for r in row.records for s in r.raw["loop"]["steps"] if s["phase"] == "measure"]
        times += samples
        look = style(section, row, palette)
        fig.add_trace(
            go.Box(
                y=samples,
                name=label(row.tag),
                boxpoints="all",
                jitter=0.3,
                hovertext=label(row.label),
                marker=dict(color=look["color"], symbol=look["symbol"]),
                line=dict(color=look["color"]),
            )
        )
    fig.update_layout(
        **_layout(f"{section.name}: measured step times", "row (numbered as in the table)", "step time (s)"),
        showlegend=False,
        yaxis=log_axis(times),
    )
    return fig


def pareto_front(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Points no other point beats on both throughput (higher) and cost (lower)."""
    front, best_cost = [], float("inf")
    for x, y in sorted(points, key=lambda p: (-p[0], p[1])):
        if y < best_cost:
            front.append((x, y))
            best_cost = y
    return sorted(front)


def _cost_point(row) -> tuple[float | None, float | None, bool]:
    """(real tokens/s, $ per 1M real tokens, steady?): steady state where every run has
    one, else effective (every measured step) for that row, marked as such."""
    steady = (row.value("metrics.tokens_per_s_real"), row.value("cost.usd_per_1m_tokens_real"))
    if None not in steady and all(
        r.metrics is not None and r.metrics.tokens_per_s_real is not None for r in row.records
    ):
        return steady[0], steady[1], True
    return (
        row.median(lambda r: r.metrics.tokens_per_s_real_effective),
        row.median(lambda r: r.cost.usd_per_1m_tokens_real_effective if r.cost is not None else None),
        False,
    )


TAG_POSITIONS = ["top right", "bottom right", "top left", "bottom left", "middle right", "middle left"]


def _neighbours(earlier, x: float, y: float, decades: float = 0.1) -> int:
    """How many earlier points sit within `decades` on both log axes: each takes the next
    tag position, so the tags of a cluster do not print over each other."""
    near = lambda a, b: abs(math.log10(a) - math.log10(b)) < decades  # noqa: E731
    return sum(near(px, x) and near(py, y) for _, px, py, _ in earlier)


def front_outline(front: list[tuple[float, float]], left: float, top: float) -> list[tuple[float, float]]:
    """The edge of the region the front dominates (less throughput and more cost than a
    front point), closed through the plot's top-left corner: visible even for one point."""
    edge = [(left, front[0][1])]
    for (x, y), (_, y_next) in zip(front, [*front[1:], (None, top)]):
        edge += [(x, y), (x, y_next)]
    return edge + [(left, top)]


def cost_vs_throughput(section, palette) -> Any | None:
    """One point per row, tagged with its row number (the legend names it); the Pareto
    front as the edge of the region it dominates (shaded)."""
    import plotly.graph_objects as go

    points = [(row, *_cost_point(row)) for row in section.rows]
    points = [p for p in points if p[1] is not None and p[2] is not None]
    if not points:
        return None
    xaxis, yaxis = log_axis([p[1] for p in points], 0.15, 0.2), log_axis([p[2] for p in points], 0.1, 0.25)
    front = pareto_front([(x, y) for _, x, y, _ in points])
    edge = front_outline(front, 10.0 ** xaxis["range"][0], 10.0 ** yaxis["range"][1])
    fig = go.Figure(
        go.Scatter(
            x=[p[0] for p in edge],
            y=[p[1] for p in edge],
            mode="lines",
            fill="toself",
            fillcolor="rgba(0,0,0,0.05)",
            line=dict(dash="dash", color="black", width=1.5),
            hoverinfo="skip",
            name="Pareto front: no other row is both faster and cheaper (the region it beats shaded)",
        )
    )
    for i, (row, x, y, steady) in enumerate(points):
        look = style(section, row, palette)
        name = f"{row.tag}: {row.label}" + ("" if steady else " (effective: no steady state)")
        fig.add_trace(
            go.Scatter(
                x=[x],
                y=[y],
                mode="markers+text",
                text=[row.tag],
                textposition=TAG_POSITIONS[_neighbours(points[:i], x, y) % len(TAG_POSITIONS)],
                cliponaxis=False,
                name=label(name),
                marker=dict(
                    size=11,
                    color=look["color"],
                    symbol=look["symbol"] + ("" if steady else "-open"),
                    line=dict(width=1, color="white"),
                ),
            )
        )
    fig.update_layout(
        **_layout(f"{section.name}: cost vs throughput", "real tokens/s (whole system)", "$ per 1M real tokens"),
        xaxis=xaxis,
        yaxis=yaxis,
    )
    _legend_below(fig, len(points) + 1)
    return fig


def sensitivity(section) -> Any | None:
    import plotly.graph_objects as go

    if not section.sensitivity:
        return None
    fig = go.Figure()
    for i, s in enumerate(section.sensitivity):
        colour = COLOURS[i % len(COLOURS)]
        for side, dash in (("a", "solid"), ("b", "dash")):
            price = s[f"{side}_price"]
            fig.add_trace(
                go.Scatter(
                    x=s["factors"],
                    y=s[f"{side}_scaled"],
                    mode="lines+markers",
                    line=dict(color=colour, dash=dash),
                    name=label(f"{s['pair']}: {s[side]} price x ({price} at 1.0)"),
                )
            )
    fig.add_hline(y=1.0, line_dash="dot", annotation_text="equal cost")
    fig.update_layout(
        **_layout(
            f"{section.name}: cost ratio vs price", "price x the price the records used", "$ per 1M real tokens, a / b"
        )
    )
    _legend_below(fig, 2 * len(section.sensitivity))
    return fig


def latency_cdf(report) -> Any | None:
    """Empirical CDF of time to first token, one line per serving row."""
    import plotly.graph_objects as go

    if not report.serving:
        return None
    from harness.figures.metrics import request_latencies

    fig = go.Figure()
    for row in report.serving:
        ttft = sorted(
            x["ttft_s"]
            for r in row.records
            for q in r.raw["requests"]
            if not q["warmup"] and q["error"] is None
            for x in [request_latencies(q)]
            if x["ttft_s"] is not None
        )
        if ttft:
            fig.add_trace(
                go.Scatter(
                    x=ttft,
                    y=[(i + 1) / len(ttft) for i in range(len(ttft))],
                    mode="lines+markers",
                    line_shape="hv",
                    name=label(row.label),
                )
            )
    fig.update_layout(**_layout("serving: time to first token, CDF", "TTFT (s)", "fraction of requests"))
    return fig


def figures(report) -> dict[str, list[tuple[str, Any]]]:
    """(title, figure) for every plot the records support, by scenario ("" = all)."""
    palette = colours(report)
    out: dict[str, list[tuple[str, Any]]] = {}
    for section in report.sections:
        plots = [
            ("step time per step (warm-up shaded, compiles marked x)", timeline(section, palette)),
            ("distribution of measured step times", distribution(section, palette)),
        ]
        if (fig := cost_vs_throughput(section, palette)) is not None:
            plots.append(("cost vs throughput, with the Pareto front (points: row numbers)", fig))
        if (fig := sensitivity(section)) is not None:
            plots.append(("cost ratio as prices vary (a = first of each pair, b = second)", fig))
        out[section.name] = plots
    if (fig := latency_cdf(report)) is not None:
        out[""] = [("serving latency: TTFT CDF", fig)]
    from reports.serving import Look
    from reports.serving import figures as serving_figures

    # against load with the SLO lines, per user vs per chip
    if serving := serving_figures(report, palette, Look(_layout, label, COLOURS)):
        out[""] = out.get("", []) + serving
    return out
