"""The report's top answers ("At a glance"), for one record as for fifty: per scenario,
each train configuration's headline figures (real tokens/s and $ per 1M real tokens over
the unsynced window, docs/metrics.md's headline, or the steady state where no window was
measured, saying so; MFU or why not; step time), each serving configuration's (TTFT,
TPOT, output tokens/s, $ per 1M output tokens, with the engine named), then the
comparisons where there are any."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.figures.metrics import across_runs
from reports import absent
from reports.model import SERVE_USD_COLUMN, fmt

MAX_ROWS = 8  # past it, the rest are in the scenario's tables below
TRAIN_HEADERS = ["run", "tok/s real", "$/1M real tok", "MFU", "step median (s)"]
SERVE_HEADERS = ["run", "engine", "TTFT median (s)", "TPOT median (s)", "output tok/s", "$/1M output tok"]

# The headline's basis, best first: (tokens/s figure, $/1M figure, name, cause if absent).
BASES = (
    ("metrics.window_tokens_per_s_real", "cost.usd_per_1m_tokens_real_window", "window", None),
    ("metrics.tokens_per_s_real", "cost.usd_per_1m_tokens_real", "steady", "w"),
    ("metrics.tokens_per_s_real_effective", "cost.usd_per_1m_tokens_real_effective", "effective", "s"),
)


@dataclass
class Glance:
    """One scenario's answers at the top of the page."""

    name: str
    reference: str | None
    train: list[list[str]] = field(default_factory=list)
    serve: list[list[str]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # the comparisons
    more: list[str] = field(default_factory=list)  # "N more rows below"
    legend: list[str] = field(default_factory=list)  # what each n/a code means
    notes: list[str] = field(default_factory=list)  # the basis of the figures, in words


def build(report) -> list[Glance]:
    sections = {s.name: s for s in report.sections}
    names = list(dict.fromkeys([*sections, *(row.scenario for row in report.serving)]))
    out = []
    for name in names:
        section = sections.get(name)
        serving = [row for row in report.serving if row.scenario == name]
        first = section.rows[0].records[0] if section else serving[0].records[0]
        glance = Glance(name, first.scenario.reference)
        if section:
            glance.train = [train_cells(row) for row in section.rows[:MAX_ROWS]]
            glance.lines = section.headline
            if len(section.rows) > MAX_ROWS:
                glance.more.append(f"{len(section.rows) - MAX_ROWS} more train configurations in the table below")
        glance.serve = [serve_cells(row) for row in serving[:MAX_ROWS]]
        if len(serving) > MAX_ROWS:
            glance.more.append(f"{len(serving) - MAX_ROWS} more serving configurations in the Serving table")
        glance.legend = absent.legend(c for row in glance.train + glance.serve for c in row)
        glance.notes = _notes(glance)
        out.append(glance)
    return out


def _notes(glance: Glance) -> list[str]:
    notes = []
    if glance.train:
        notes.append(
            "tok/s real and $/1M real tok: over the unsynced window (steps back to back, one device sync at the "
            "end, as a fine-tune runs: the headline), where measured; else the steady state or effective figure, "
            "as the cell says. Medians over a configuration's runs."
        )
    if glance.serve:
        notes.append("TTFT and TPOT: medians over requests (vLLM's definitions); $/1M output tok at the measured rate.")
    return notes


def train_cells(row) -> list[str]:
    tokens, usd = _headline(row)
    mfu = _figure(row.records, "metrics.mfu", ".2%")
    step = _figure(row.records, "metrics.step_time_s.median", ".4g")
    return [row.label, tokens, usd, mfu, step]


def _headline(row) -> tuple[str, str]:
    """Real tokens/s and $/1M real tokens on the best basis every run of the row has."""
    for tokens_id, usd_id, basis, skipped in BASES:
        tokens = across_runs(r.figure(tokens_id) for r in row.records)
        if tokens is None or any(r.figure(tokens_id) is None for r in row.records):
            continue
        said = "" if skipped is None else f" ({basis} [{skipped}])"  # why not the window, by its code
        usd = _figure(row.records, usd_id, ".4g")
        return f"{fmt(tokens, '.4g')}{said}", (f"{usd}{said}" if not usd.startswith("n/a") else usd)
    return absent.na(absent.cause(row.records[0], "metrics.window_tokens_per_s_real")), absent.na(
        absent.cause(row.records[0], "cost.usd_per_1m_tokens_real_window")
    )


def serve_cells(row) -> list[str]:
    records = row.records
    return [
        row.label.removeprefix(f"{row.scenario} · "),  # under the scenario's own heading
        engine(records[0]),
        _figure(records, "metrics.ttft_s.median", ".4g"),
        _figure(records, "metrics.tpot_s.median", ".4g"),
        _figure(records, "metrics.output_throughput_tok_s", ".4g"),
        row.cells[SERVE_USD_COLUMN],  # the serving table's, with its label
    ]


def engine(record) -> str:
    """What served: the engine the run chose and ran (with its caveat), else the server's name."""
    server = record.server or {}
    chosen = (server.get("chosen") or {}).get("ran")
    return chosen or server.get("engine") or server.get("owned_by") or record.backend.name


def _figure(records, figure: str, spec: str) -> str:
    value = across_runs(r.figure(figure) for r in records)
    if value is None:
        lacking = next((r for r in records if r.figure(figure) is None), records[0])
        return absent.na(absent.cause(lacking, figure))
    return fmt(value, spec)
