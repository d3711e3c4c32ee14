"""Writing the report: self-contained HTML (plotly's JS inlined, no external URL),
Markdown (CI job summaries, PR comments) and CSV (one row per run)."""

from __future__ import annotations

import io
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from harness.basics.textsafe import md_cell
from harness.figures.cost import FINE_TUNE_FORMULA
from harness.records.result import RunRecord
from reports import absent, glance
from reports.embed import script_json
from reports.factors import profile_name, short
from reports.history import report_markdown, report_section
from reports.model import COST_NOTE, KEY_INDEXES, MORE_INDEXES, SERVE_COLUMNS, SUMMARY_HEADERS, Report
from reports.plots import figures

TEMPLATES = Path(__file__).with_name("templates")
FORMATS = {".html": "html", ".md": "md", ".csv": "csv"}  # -o's extension -> format
DEFAULT_OUTPUT = {"html": "reports/index.html", "md": "reports/index.md", "csv": "reports/index.csv"}


def output_format(output: str | None, requested: str | None) -> tuple[Path, str]:
    """The file and format `-o` and `--format` ask for: the format is `-o`'s extension
    (.html, .md, .csv; any other is refused, as is a --format that contradicts it);
    without `-o`, the default file of the format (html unless --format says)."""
    from harness.basics.errors import SpecError

    if output is None:
        fmt = requested or "html"
        return Path(DEFAULT_OUTPUT[fmt]), fmt
    fmt = FORMATS.get(Path(output).suffix.lower())
    if fmt is None:
        raise SpecError("-o", output, "the format comes from the extension: .html, .md or .csv")
    if requested and requested != fmt:
        raise SpecError("--format", requested, f"contradicts -o {output} (a .{fmt} file)")
    return Path(output), fmt


def run_label(section, row) -> str:
    """The summary table's first cell: row number, label, baseline mark."""
    return f"{row.tag}. {row.label}" + (" (baseline)" if row is section.baseline else "")


def factor_names(section) -> str:
    return ", ".join(short(f) for f in section.factors) or "none (one row)"


def trace_links(record: RunRecord, base: Path | None) -> list[dict[str, str]]:
    """A traced run's trace files (harness/run/trace.py), as links relative to the report's
    folder: the record names them relative to its own."""
    files = (record.trace or {}).get("files") or []
    if not files or not record.path:
        return []
    here = Path(record.path).parent
    return [
        {"name": Path(f).name, "href": Path(os.path.relpath(here / f, base or Path.cwd())).as_posix()} for f in files
    ]


def html(report: Report, base: Path | None = None) -> str:
    from jinja2 import Environment, FileSystemLoader, select_autoescape
    from plotly.offline import get_plotlyjs

    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]))
    plots: dict[str, list[dict[str, str]]] = {}
    for scenario, figs in figures(report).items():
        plots[scenario] = [
            {"id": f"plot-{len(plots)}-{i}", "title": title, "json": script_json(fig)}
            for i, (title, fig) in enumerate(figs)
        ]
    return env.get_template("report.html.j2").render(
        report=report,
        glances=glance.build(report),
        columns=SUMMARY_HEADERS,
        key_indexes=KEY_INDEXES,
        more_indexes=MORE_INDEXES,
        glance_train=glance.TRAIN_HEADERS,
        glance_serve=glance.SERVE_HEADERS,
        legend=absent.legend,
        serve_columns=[h for h, _, _ in SERVE_COLUMNS],
        plots=plots,
        plotly_js=get_plotlyjs(),
        run_label=run_label,
        factor_names=factor_names,
        profile_name=profile_name,
        cost_note=COST_NOTE,
        fine_tune_formula=FINE_TUNE_FORMULA,
        projected_note=PROJECTED_NOTE,
        trace_links=lambda record: trace_links(record, base),
        history=report_section(report.runs),
        generated=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )


def _md_headline(report: Report) -> list[str]:
    out = ["## At a glance", ""]
    for g in glance.build(report):
        out += [f"**{md_cell(g.name)}**" + (f" ({md_cell(g.reference)})" if g.reference else ""), ""]
        for headers, rows in ((glance.TRAIN_HEADERS, g.train), (glance.SERVE_HEADERS, g.serve)):
            if rows:
                out += [_md_row(headers), "|---" * len(headers) + "|", *(_md_row(list(map(md_cell, r))) for r in rows)]
                out.append("")
        notes = " ".join(g.notes) + (
            f" Codes (why n/a, why not the window): {'; '.join(g.legend)}." if g.legend else ""
        )
        out += [md_cell(notes.strip()), ""] if notes.strip() else []
        out += [f"- {md_cell(line)}" for line in g.more + g.lines] + [""]
    out += [f"How sure: {md_cell(report.method)}.", "", "How to read this report:", ""]
    return out + [f"- {md_cell(c)}" for c in report.conventions] + [""]


def _md_section(section) -> list[str]:
    out = [
        f"## {md_cell(section.name)}" + (f" ({md_cell(section.reference)})" if section.reference else ""),
        "",
        f"Baseline: {md_cell(section.baseline.label)} ({md_cell(section.baseline_reason)}). "
        f"Factors: {md_cell(factor_names(section))}."
        + (f" Rows also differ in: {md_cell(', '.join(section.differences))}." if section.differences else ""),
        "",
    ]
    for title, indexes in (("", KEY_INDEXES), ("The other columns:", MORE_INDEXES)):
        out += [title, ""] if title else []
        out.append("| run | " + " | ".join(SUMMARY_HEADERS[i] for i in indexes) + " |")
        out.append("|---" * (len(indexes) + 1) + "|")
        for row in section.rows:
            cells = [md_cell(run_label(section, row)), *(md_cell(row.cells[i]) for i in indexes)]
            out.append("| " + " | ".join(cells) + " |")
        codes = absent.legend(" ".join(row.cells[i] for i in indexes) for row in section.rows)
        out += ["", *([md_cell(f"Why n/a: {'; '.join(codes)}."), ""] if codes else [])]
    out += [md_cell(COST_NOTE), ""]
    if section.comparisons:
        out += ["### Each factor against the baseline's level, the others held fixed", ""]
        out += [f"- {md_cell(c.sentence)}" for c in section.comparisons] + [""]
    out += [f"- {md_cell(line)}" for line in section.not_compared] + ([""] if section.not_compared else [])
    if section.requested:
        out += ["### Requested (--compare)", ""] + [f"- {md_cell(c.sentence)}" for c in section.requested] + [""]
    return out


def markdown(report: Report) -> str:
    out = ["# bench report", "", *_md_headline(report)]  # the answers first, the caveats below them
    out += [line for w in report.warnings for line in (f"warning: {md_cell(w)}", "")]
    for section in report.sections:
        out += _md_section(section)
    if report.serving:
        rows = [[md_cell(row.label), *map(md_cell, row.cells)] for row in report.serving]
        out += _md_table("Serving", ["run", *(h for h, _, _ in SERVE_COLUMNS)], rows)
        codes = absent.legend(" ".join(row.cells) for row in report.serving)
        out += [md_cell(f"Why n/a: {'; '.join(codes)}."), ""] if codes else []
    for table in report.tables:
        rows = [[md_cell(row.label), *map(md_cell, row.cells)] for row in table.rows]
        out += _md_table(f"Task {md_cell(table.task)}", ["run", *table.headers], rows)
    if report.slo_rates:
        out += _md_slo_rates(report.slo_rates)
    if report.workloads:
        out += _md_workloads(report.workloads)
    out += _projected_markdown(report)
    out += report_markdown(report.runs)
    if report.failed:
        out += _md_failed(report.failed)
    prices = [
        [md_cell(getattr(p, k)) for k in ("accelerator", "usd_per_chip_hour", "pricing", "source", "date")]
        for p in report.prices
    ]
    out += _md_table("Prices used", ["accelerator", "$/chip-hour", "pricing", "source", "date"], prices, last=True)
    return "\n".join(out) + "\n"


def _md_table(title: str, headers: list[str], rows: list[list[str]], *, last: bool = False) -> list[str]:
    """A `## title` section holding one table; cells come escaped (md_cell), headers as
    written. A blank line follows unless it is the report's last table."""
    lines = [f"## {title}", "", _md_row(headers), "|---" * len(headers) + "|", *map(_md_row, rows)]
    return lines if last else [*lines, ""]


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _md_slo_rates(slo_rates: list[dict]) -> list[str]:
    num = lambda v: "n/a" if v is None else f"{v:.4g}"  # noqa: E731
    headers = [
        "scenario",
        "accelerator",
        "SLO",
        "max req/s",
        "goodput req/s",
        "$/1M output tokens at the SLO",
        "price",
        "stopped by",
    ]
    rows = [
        [
            md_cell(x)
            for x in (
                s["scenario"],
                s["accelerator"],
                s["slo"],
                num(s["max_rate_req_s"])
                + (f" (sent at {num(s['achieved_rate_req_s'])})" if s.get("achieved_rate_req_s") else ""),
                num(s["goodput_req_s"]),
                num(s["usd_per_1m_output_tokens"]),
                s["price"],
                s["stopped"],
            )
        ]
        for s in slo_rates
    ]
    return _md_table("Highest request rate within the SLO", headers, rows)


def _range_text(low: float, high: float | None, spec: str) -> str:
    """A figure, or a projected row's range "low-high" (reports/tpu_vs_gpu.py)."""
    return f"{low:{spec}}" if high is None else f"{low:{spec}}-{high:{spec}}"


def _md_workloads(workloads: list) -> list[str]:
    headers = [
        "scenario",
        "run",
        "fine-tunes",
        "served 1M tokens",
        "$/fine-tune",
        "$/1M output tokens",
        "workload $",
        "ratio to first",
        "serve $ from",
    ]
    rows = [
        [
            md_cell(x)
            for x in (
                w.scenario,
                w.run,
                f"{w.fine_tunes:g}",
                f"{w.served_tokens_millions:g}",
                f"{_range_text(w.train_usd, w.train_usd_high, '.4g')} ({w.train_basis})",
                f"{w.serve_usd_per_1m:.4g}" + (f" ({w.serve_label})" if w.serve_label else ""),
                _range_text(w.total_usd, w.total_usd_high, ".4g")
                + (f" (serve $ from a {w.serve_label})" if w.serve_label else ""),
                _range_text(w.ratio_to_first, w.ratio_to_first_high, ".3f"),
                w.serve_basis,
            )
        ]
        for w in workloads
    ]
    note = (
        f"Workload cost = fine-tunes x $/fine-tune + million served tokens x $/1M output tokens; {FINE_TUNE_FORMULA}."
    )
    return [*_md_table("Train + serve workload", headers, rows), md_cell(note), ""]


def _md_failed(failed: list[RunRecord]) -> list[str]:
    rows = [
        [md_cell(x) for x in (r.scenario.name, r.scenario.variant, r.backend.name, r.failure.kind, r.failure.reason)]
        for r in failed
    ]
    return _md_table("Failed runs", ["scenario", "variant", "backend", "failure", "reason"], rows)


def _projected_markdown(report: Report) -> list[str]:
    """The projected sections (reports/projections.py), each labelled projected."""
    out: list[str] = []
    num = lambda v: "n/a" if v is None else f"{v:.4g}"  # noqa: E731
    if report.fine_tunes:
        out += ["## Projected fine-tune (projected, not measured)", ""]
        out += [f"- {md_cell(line)}" for line in report.fine_tune_lines] + ([""] if report.fine_tune_lines else [])
        out += ["| scenario | run | steps | compiles | minutes | $ | basis |", "|---|---|---|---|---|---|---|"]
        out += [
            md_row((f.scenario, f.run, f.steps, f.compiles, f"{f.minutes:.3g}", num(f.usd), f.basis))
            for f in report.fine_tunes
        ]
        out.append("")
    if report.projected:
        columns = (
            "scenario | variant | backend | slice | fits | GiB/device | step bound s | real tokens/s/chip bound | "
            "$/1M real tokens bound | real tokens/s/chip calibrated low | $/1M real tokens calibrated high | padded tokens/s/chip bound | $/1M padded tokens bound | fine-tune compiles | "
            "fine-tune min | measured / projected"
        )
        rows = [_projected_cells(p, num) for p in report.projected]
        out += md_table("Projected on TPU (compiler's bound, not measured)", columns, rows)
        out += [f"- {p.slice} ({p.scenario}): {md_cell(p.flops_flag)}" for p in report.projected if p.flops_flag]
        out += [f"- {p.slice} ({p.scenario}) calibration: {md_cell(p.calibration)}" for p in report.projected]
        out += [PROJECTED_NOTE, ""]
    if report.tpu_vs_gpu is not None:
        from reports.tpu_vs_gpu import markdown_lines

        out += markdown_lines(report.tpu_vs_gpu, md_cell)
    if report.serving_pairs:
        out += ["## Serving, TPU vs GPU (each side measured or projected)", ""]
        out += [f"- {md_cell(line)}" for line in report.serving_pairs] + [""]
    return out


def _projected_cells(p, num) -> tuple:
    """One projected configuration's cells, in the projected table's column order."""
    return (
        p.scenario,
        p.variant,
        p.backend,
        f"{p.slice} ({p.chips} chips)",
        p.fits,
        f"{p.memory_gib:.3g}",
        num(p.step_bound_s),
        num(p.real_tokens_per_s_per_chip_bound),
        num(p.usd_per_1m_real_bound),
        num(p.real_tokens_per_s_per_chip_low),
        num(p.usd_per_1m_real_high),
        num(p.tokens_per_s_per_chip_bound),
        num(p.usd_per_1m_bound),
        num(p.compiles),
        num(p.fine_tune_min),
        num(p.measured_over_projected),
    )


def md_table(title: str, columns: str, rows: list) -> list[str]:
    """A Markdown section's lines: `## title`, the table under `columns` ("a | b"),
    one row per entry of `rows` (its cells), then a blank line."""
    header = f"| {columns} |"
    rule = "|" + "---|" * (columns.count("|") + 1)
    return [f"## {title}", "", header, rule, *map(md_row, rows), ""]


def md_row(cells) -> str:
    """One Markdown table row, each cell escaped (md_cell)."""
    return "| " + " | ".join(md_cell(x) for x in cells) + " |"


PROJECTED_NOTE = (
    "Projected: the step compiled ahead of time for the slice's topology on a host without a TPU; the bound is "
    "max(FLOPs / peak, bytes / HBM bandwidth, collective bytes / ICI bandwidth) per program from the compiler's "
    "cost model, a lower bound on step "
    "time (an upper bound on tokens/s), never a measurement; real tokens = padded x the fine-tune's real/padded "
    "ratio at that length. measured / projected: a measured run of the same configuration's padded tokens/s per "
    "chip over the padded bound. FLOPs checked: compiled / bench's count outside [0.9, 1.5] is flagged and the "
    "larger count used."
)


def _figures(metrics: Any) -> dict[str, Any]:
    """A record's metrics as `name -> value`: the figures it has (a task's metrics type,
    or a plug-in task's plain mapping), in their order; a distribution as one mapping."""
    if metrics is None:
        return {}
    if isinstance(metrics, BaseModel):
        # exclude_unset: the figures the record holds, not the type's empty defaults (a
        # record from before a figure existed has no column for it, as its JSON had none).
        return metrics.model_dump(exclude_unset=True)
    return dict(metrics)


def _flat(record: RunRecord) -> dict[str, Any]:
    s, acc = record.scenario, record.accelerator
    row = {
        "scenario": s.name,
        "variant": s.variant,
        "repeat": s.repeat,
        "backend": record.backend.name,
        "accelerator": acc.catalog_key,
        "chips": acc.count,
        "status": record.status,
        "failure": record.failure.reason if record.failure else None,
        "reduced": bool(s.profile),
        "run_id": record.run_id,
        "scenario_hash": s.hash,
        "commit": record.provenance.commit,
    }
    for key, value in _figures(record.metrics).items():
        if isinstance(value, dict):
            row.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            row[key] = value
    row.update(
        {
            k: record.figure(f"cost.{k}")
            for k in (
                "usd_run",
                "usd_setup",
                "usd_warmup",
                "usd_steady_state",
                "usd_per_1m_tokens_real",
                "usd_per_1m_tokens_real_effective",
                "usd_per_1m_tokens_real_window",
            )
        }
    )
    row["price_source"] = record.figure("cost.price.source")
    return row


def csv(report: Report) -> str:
    """One row per run; then, where TPU projections pair with GPU runs, one row per pair
    (row_kind `tpu_vs_gpu`) with each figure's range as two columns, low and high
    (reports/tpu_vs_gpu.py)."""
    import pandas as pd

    buffer = io.StringIO()
    ranges = report.tpu_vs_gpu.ranges if report.tpu_vs_gpu is not None else []
    runs = [{"row_kind": "run", **_flat(r)} for r in report.runs] if ranges else [_flat(r) for r in report.runs]
    pd.DataFrame(runs + ranges).to_csv(buffer, index=False)
    return buffer.getvalue()


def write(report: Report, path: Path, fmt: str) -> Path:
    text = html(report, path.parent) if fmt == "html" else {"md": markdown, "csv": csv}[fmt](report)

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{path.name}")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path
