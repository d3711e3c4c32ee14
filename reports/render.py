"""Writing the report: self-contained HTML (plotly's JS inlined, no external URL),
Markdown (CI job summaries, PR comments) and CSV (one row per run)."""

from __future__ import annotations

import io
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from harness.textsafe import md_cell
from reports.model import SERVE_COLUMNS, SUMMARY_COLUMNS, Report
from reports.plots import figures

TEMPLATES = Path(__file__).with_name("templates")


def script_json(figure) -> str:
    """A figure as JSON safe inside <script>: no `</script>` can close the element."""
    return figure.to_json().replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def html(report: Report) -> str:
    from jinja2 import Environment, FileSystemLoader, select_autoescape
    from plotly.offline import get_plotlyjs

    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]))
    plots: dict[str, list[dict[str, str]]] = {}
    for scenario, figs in figures(report).items():
        plots[scenario] = [{"id": f"plot-{len(plots)}-{i}", "title": title, "json": script_json(fig)}
                           for i, (title, fig) in enumerate(figs)]
    return env.get_template("report.html.j2").render(
        report=report, columns=[h for h, _, _ in SUMMARY_COLUMNS], serve_columns=[h for h, _, _ in SERVE_COLUMNS],
        plots=plots, plotly_js=get_plotlyjs(),
        generated=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def markdown(report: Report) -> str:
    out = ["# bench report", ""]
    for section in report.sections:
        out += [f"## {md_cell(section.name)}" + (f" ({md_cell(section.reference)})" if section.reference else ""), ""]
        out.append("| run | " + " | ".join(h for h, _, _ in SUMMARY_COLUMNS) + " |")
        out.append("|---" * (len(SUMMARY_COLUMNS) + 1) + "|")
        for row in section.rows:
            name = row.label + (" (baseline)" if row is section.baseline else "")
            out.append("| " + " | ".join([md_cell(name), *map(md_cell, row.cells)]) + " |")
        out += [""] + [f"- {md_cell(c)}" for c in section.comparisons] + [""]
    if report.serving:
        out += ["## Serving", "", "| run | " + " | ".join(h for h, _, _ in SERVE_COLUMNS) + " |",
                "|---" * (len(SERVE_COLUMNS) + 1) + "|"]
        out += ["| " + " | ".join([md_cell(row.label), *map(md_cell, row.cells)]) + " |" for row in report.serving]
        out.append("")
    if report.workloads:
        out += ["## Train + serve workload", "", "| scenario | accelerator | fine-tunes | served 1M tokens | $/fine-tune | "
                "$/1M output tokens | workload $ | ratio to first |", "|---|---|---|---|---|---|---|---|"]
        out += ["| " + " | ".join(md_cell(x) for x in (w.scenario, w.accelerator, f"{w.fine_tunes:g}",
                                                       f"{w.served_tokens_millions:g}", f"{w.train_usd:.4g}",
                                                       f"{w.serve_usd_per_1m:.4g}", f"{w.total_usd:.4g}",
                                                       f"{w.ratio_to_first:.3f}")) + " |" for w in report.workloads]
        out.append("")
    if report.failed:
        out += ["## Failed runs", "", "| scenario | variant | backend | failure | reason |", "|---|---|---|---|---|"]
        out += ["| " + " | ".join(md_cell(x) for x in (r["scenario"]["name"], r["scenario"]["variant"], r["backend"]["name"],
                                                       r["failure"]["kind"], r["failure"]["reason"])) + " |"
                for r in report.failed]
        out.append("")
    out += ["## Prices used", "", "| accelerator | $/chip-hour | pricing | source | date |", "|---|---|---|---|---|"]
    out += ["| " + " | ".join(md_cell(p[k]) for k in ("accelerator", "usd_per_chip_hour", "pricing", "source", "date")) + " |"
            for p in report.prices]
    return "\n".join(out) + "\n"


def _flat(record: dict[str, Any]) -> dict[str, Any]:
    s, acc, m, c = record["scenario"], record["accelerator"], record.get("metrics") or {}, record.get("cost") or {}
    row = {"scenario": s["name"], "variant": s["variant"], "repeat": s["repeat"], "backend": record["backend"]["name"],
           "accelerator": acc["catalog_key"], "chips": acc.get("count"), "status": record["status"],
           "failure": (record.get("failure") or {}).get("reason"), "reduced": bool(s.get("profile")),
           "run_id": record["run_id"], "commit": record["provenance"].get("commit")}
    for key, value in m.items():
        if isinstance(value, dict):
            row.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            row[key] = value
    row.update({k: c.get(k) for k in ("usd_run", "usd_steady_state", "usd_per_1m_tokens_real")})
    row["price_source"] = (c.get("price") or {}).get("source")
    return row


def csv(report: Report) -> str:
    import pandas as pd

    buffer = io.StringIO()
    pd.DataFrame([_flat(r) for r in report.runs]).to_csv(buffer, index=False)
    return buffer.getvalue()


def write(report: Report, path: Path, fmt: str) -> Path:
    text = {"html": html, "md": markdown, "csv": csv}[fmt](report)

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
