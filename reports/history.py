"""History's figures and page: each series' figure over its runs' commits and dates
(plotly), budgets as horizontal lines, change points as vertical ones; one offline HTML
page (`bench history -o`), and the report's History section (when its records span more
than one commit)."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from harness.gate import history
from harness.gate.history import ChangePoint, Series
from reports.plots import label


@dataclass
class SeriesView:
    series: Series
    changes: list[ChangePoint]
    lines: list[str] = field(default_factory=list)  # "step_time_s +14% at commit abc1234 (p=0.001)"


def views(series_list: list[Series], alpha: float = history.ALPHA) -> list[SeriesView]:
    out = []
    for s in series_list:
        changes = history.change_points(s, alpha)
        out.append(SeriesView(s, changes, [c.line(s.metric) for c in changes]))
    return out


def figure(view: SeriesView) -> Any:
    import plotly.graph_objects as go

    s = view.series
    unit = f" ({s.gauge.unit})" if s.gauge.unit else ""
    dates = [p.date for p in s.points]
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=dates,
            y=s.values,
            mode="lines+markers",
            name=label(s.metric),
            customdata=[[p.commit[:7], p.run_id[:8]] for p in s.points],
            hovertemplate="%{y:.4g}"
            + unit
            + "<br>commit %{customdata[0]}<br>run %{customdata[1]}<br>%{x}<extra></extra>",
        )
    )
    for side, value in s.budgets:
        # a line as a trace (not a shape): it has a legend entry that says what it is
        fig.add_trace(
            go.Scatter(
                x=[dates[0], dates[-1]],
                y=[value, value],
                mode="lines",
                name=label(f"budget {side} {value:g}{unit}"),
                line=dict(color="#d62728", dash="dash"),
            )
        )
    for change in view.changes:
        fig.add_vline(x=change.date, line=dict(color="#ff7f0e", dash="dot"))
        fig.add_annotation(x=change.date, y=1, yref="paper", text=label(change.line(s.metric)), showarrow=False)
    ticks = [f"{p.commit[:7]}<br>{p.date[:10]}" for p in s.points]
    fig.update_layout(
        title=label(f"{s.label}: {s.metric}"),
        xaxis=dict(title="commit and date (run finished)", tickvals=dates, ticktext=ticks, tickangle=-45),
        yaxis_title=label(s.metric + unit),
        template="plotly_white",
        height=420,
        margin=dict(l=70, r=20, t=60, b=110),
        legend=dict(orientation="h", x=0, y=1.12),
    )
    return fig


def plots(items: list[SeriesView], prefix: str = "history") -> list[dict[str, str]]:
    """The figures as the report template's `plot` macro takes them."""
    from reports.embed import script_json

    return [
        {"id": f"{prefix}-{i}", "title": f"{v.series.label}: {v.series.metric}", "json": script_json(figure(v))}
        for i, v in enumerate(items)
    ]


def page(items: list[SeriesView]) -> str:
    """One self-contained page (plotly's JS inlined: no network)."""
    from plotly.offline import get_plotlyjs

    body = ["<h1>bench history</h1>", f"<p class='method'>{html.escape(history.METHOD)}.</p>", _changes_html(items)]
    for p in plots(items):
        body.append(
            f"<h3>{html.escape(p['title'])}</h3><div id='{p['id']}' class='plot'></div>"
            f"<script>(function () {{ var f = {p['json']}; Plotly.newPlot('{p['id']}', f.data, f.layout, "
            "{displaylogo: false, responsive: true}); })();</script>"
        )
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>bench history</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:24px;max-width:1200px}.method{color:#555;font-size:13px}</style>"
        f"<script>{get_plotlyjs()}</script></head><body>" + "\n".join(body) + "</body></html>\n"
    )


def _changes_html(items: list[SeriesView]) -> str:
    found = [(v, line) for v in items for line in v.lines]
    if not found:
        return f"<p id='changes'>No change point in {len(items)} series.</p>"
    rows = "".join(f"<li>{html.escape(v.series.label)}: {html.escape(line)}</li>" for v, line in found)
    return f"<ul id='changes'>{rows}</ul>"


def lines(items: list[SeriesView]) -> list[str]:
    """One line per series: its runs, commits and change points (the terminal's and Markdown's)."""
    out = []
    for v in items:
        s = v.series
        commits = len({p.commit for p in s.points})
        changes = "; ".join(v.lines) or "no change point"
        out.append(f"{s.label}: {s.metric} over {len(s.points)} runs, {commits} commits: {changes}")
    return out


# --------------------------------------------------------------------------- the report's section
def _over_commits(records) -> list[SeriesView]:
    """The series (default metrics) whose runs come from more than one commit: a history."""
    if len({r.provenance.commit for r in records if r.ok}) < 2:
        return []  # one commit: nothing to follow (and no change-point import)
    return views([s for s in history.build_series(list(records)) if len({p.commit for p in s.points}) > 1])


def report_section(records) -> dict[str, Any] | None:
    """The report's History section (method, one line per series, figures), or None when
    no configuration's runs span commits."""
    items = _over_commits(records)
    if not items:
        return None
    return {"method": history.METHOD, "lines": lines(items), "plots": plots(items, "report-history")}


def report_markdown(records) -> list[str]:
    from harness.basics.textsafe import md_cell

    items = _over_commits(records)
    if not items:
        return []
    return ["## History", "", f"_{md_cell(history.METHOD)}_", "", *(f"- {md_cell(line)}" for line in lines(items)), ""]
