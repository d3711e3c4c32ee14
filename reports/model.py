"""The report's content as plain data: one table model shared by HTML, Markdown and CSV,
so every output shows the same numbers formatted the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from harness.basics.errors import BenchError, SpecError
from harness.figures.cost import scaled_cost_ratios
from harness.figures.metrics import across_runs
from harness.records.result import Price, RunRecord, as_records
from harness.run.registry import compiles_nothing
from harness.scenario import task_registry as tasks
from harness.tasks.base import Column
from reports import absent, compare, factors, stats
from reports import serving as serve_report


def _columns(layout: str) -> list[Column]:
    """The report columns of the task whose records this layout shows (harness.tasks)."""
    owners = [task for task in tasks.loaded() if task.report_layout == layout]
    if len(owners) != 1:
        raise BenchError(f"report layout {layout!r} needs exactly one task, has {[t.name for t in owners]}")
    return owners[0].report_columns


def layout_of(record: RunRecord) -> str:
    """Which part of the report shows a record: its task's layout."""
    return tasks.get(record.task).report_layout


def _over_runs(column: Column) -> Callable[[list[RunRecord]], Any]:
    if column.over_runs == "sum":
        return lambda rs: sum(column.value(r) for r in rs)
    return lambda rs: across_runs(column.value(r) for r in rs)


# The comparisons' rows (a train run's figures); a row shows the median over its runs.
SUMMARY_COLUMNS: list[Column] = _columns("comparisons")
SUMMARY_HEADERS = ["runs", *(c.header for c in SUMMARY_COLUMNS)]
# The main table's columns (a laptop's width); the rest are in a second table behind a toggle.
KEY_FIGURES = (
    "metrics.window_tokens_per_s_real",
    "cost.usd_per_1m_tokens_real_window",
    "metrics.step_time_s.median",
    "metrics.tokens_per_s_real",
    "metrics.mfu",
    "cost.usd_run",
)
KEY_INDEXES = [0, *(1 + i for i, c in enumerate(SUMMARY_COLUMNS) if c.id in KEY_FIGURES)]
MORE_INDEXES = [i for i in range(len(SUMMARY_HEADERS)) if i not in KEY_INDEXES]
COST_NOTE = (
    "$/1M real tok (window): over the unsynced window (one device sync at its end, as a fine-tune runs), the "
    "headline cost; (steady): steady-state steps only, each synchronised. $/run total = setup (model build, "
    "sharding, data) + warm-up steps (compilation) + steady state + measured steps that recompiled + "
    "process start and exit; a fine-tune pays setup and warm-up once."
)


SERVE_COLUMNS: list[tuple[str, str, Any]] = [
    ("runs", "d", lambda rs: len(rs)),
    *((c.header, c.spec, _over_runs(c)) for c in _columns("serving")),
]


def fmt(value: Any, spec: str) -> str:
    if value is None:
        return "n/a"
    if spec == "d":
        return str(int(value))
    if spec.endswith("g") and abs(value) >= 1e4:
        return f"{value:,.0f}"  # 12,345 tokens/s, not 1.234e+04
    return format(value, spec)


def na_cell(records: list[RunRecord], column: Column) -> str:
    """`n/a [code]`: why the figure is absent (reports/absent.py), from a run that lacks it."""
    lacking = next((r for r in records if column.value(r) is None), records[0])
    return absent.na(absent.cause(lacking, column.id))


@dataclass
class Row:
    """Every run of one full configuration (reports/factors.py)."""

    records: list[RunRecord]
    attrs: dict[str, str]
    label: str = ""
    tag: str = ""  # "1", "2", ...: the row's number in its section, on the plots' points
    cells: list[str] = field(default_factory=list)

    @property
    def eager(self) -> bool:
        return all(compiles_nothing(r) for r in self.records)

    def median(self, value: Callable[[RunRecord], Any]) -> float | None:
        return across_runs(value(r) for r in self.records)

    def value(self, figure: str) -> Any:
        """The median over the row's runs of a summary column, by its figure id
        ("metrics.tokens_per_s_real"); never by its header, which is only printed."""
        column = next(c for c in SUMMARY_COLUMNS if c.id == figure)
        return self.median(column.value)

    def cell(self, column: Column) -> str:
        if column.compiles and self.eager:
            return "n/a (eager)"
        value = self.median(column.value)
        return fmt(value, column.spec) if value is not None else na_cell(self.records, column)


@dataclass
class ScenarioSection:
    name: str
    reference: str | None
    rows: list[Row]
    baseline: Row
    baseline_reason: str
    factors: list[str]
    differences: list[str]
    comparisons: list[compare.Comparison]
    not_compared: list[str]
    requested: list[compare.Comparison]
    sensitivity: list[dict[str, Any]]
    headline: list[str] = field(default_factory=list)


@dataclass
class TaskTable:
    """A plug-in task's records in the "table" layout: its columns, one row per full
    configuration (medians over runs, or sums where the column says)."""

    task: str
    headers: list[str]
    rows: list["TableRow"]


@dataclass
class TableRow:
    label: str
    records: list[RunRecord]
    cells: list[str]
    accelerator: str = ""
    scenario: str = ""


@dataclass
class WorkloadRow:
    """A scenario's train-plus-serve workload priced on one accelerator."""

    scenario: str
    accelerator: str
    fine_tunes: float
    served_tokens_millions: float
    train_usd: float
    serve_usd_per_1m: float
    total_usd: float
    ratio_to_first: float
    run: str = ""  # the train row's label
    row: Any = None
    # Where serve_usd_per_1m comes from: an SLO search's rate within the SLO, or a load as run.
    serve_basis: str = ""
    # What the serve $ is of where not a production server's (the local engine's).
    serve_label: str = ""
    # Where train_usd comes from: the projected whole fine-tune, or $/1M x its tokens + setup + warm-up.
    train_basis: str = ""
    # A projected row's range (reports/tpu_vs_gpu.py): train_usd and total_usd are its low
    # ends (the bound's), these its high ends (every step at the calibrated rate); None on
    # a measured row, or where no calibration point is known.
    train_usd_high: float | None = None
    total_usd_high: float | None = None
    ratio_to_first_high: float | None = None


@dataclass
class Report:
    sections: list[ScenarioSection]
    serving: list[TableRow]
    failed: list[RunRecord]
    runs: list[RunRecord]
    prices: list[Price]
    warnings: list[str]
    workloads: list[WorkloadRow] = field(default_factory=list)
    # The highest request rate within the SLO, per SLO search record (reports/serving.py).
    slo_rates: list[dict[str, Any]] = field(default_factory=list)
    # Tasks shown as plain tables (report_layout "table"), one per task.
    tables: list[TaskTable] = field(default_factory=list)
    method: str = stats.METHOD
    conventions: list[str] = field(default_factory=list)
    # Projections (reports/projections.py): shown apart, labelled projected.
    projected: list[Any] = field(default_factory=list)
    fine_tunes: list[Any] = field(default_factory=list)
    fine_tune_lines: list[str] = field(default_factory=list)
    tpu_vs_gpu: Any = None  # reports/tpu_vs_gpu.py: TPU projected vs GPU measured
    # reports/serving_pairs.py: serving, TPU vs GPU, each side measured or projected
    serving_pairs: list[str] = field(default_factory=list)


CONVENTIONS = [
    "Rows: every run of one full configuration (resolved scenario, backend and its options, accelerator and chip "
    "count, price); repeated runs are summarised by their median. Runs that differ in anything else are separate "
    "rows; what sets them apart is shown in their labels.",
    "Comparisons: each factor (accelerator with chip count, backend, matrix keys, precision) against the baseline's "
    "level, every other factor held fixed; an accelerator comparison carries the backend along only when neither "
    "backend ran on the other's accelerator (both are named).",
    "faster: real tokens/s of the whole system over the unsynced window (steps run back to back with one device "
    "sync at the end, as a fine-tune runs: what a job gets) where every run on both sides has one, said so; else "
    "steady state (measured steps that compiled nothing, each synchronised); where a run has no steady state, "
    "effective tokens/s (every measured step, compiles included) on both sides, said so. "
    "cheaper: $ per 1M real tokens at the prices the records were billed at, on the same basis.",
    "Intervals: " + stats.METHOD + ". 'not distinguishable' when the interval contains 1.",
]


# --------------------------------------------------------------------------- rows
def _rows(records: list[RunRecord], cells: bool = True) -> list[Row]:
    groups: dict[tuple, Row] = {}
    for r in records:
        attrs = factors.attributes(r)
        # A matrix variant is its own row even where its configuration reads the same
        # (same scenario hash): runs of two variants are never one row's repeats.
        groups.setdefault((r.scenario.variant, *attrs.items()), Row([], attrs)).records.append(r)
    # In the order the runs were made: a sweep's first matrix cell is the default baseline.
    first = lambda row: min(r.provenance.started_at or "" for r in row.records)  # noqa: E731
    rows = sorted(groups.values(), key=lambda row: (first(row), tuple(row.attrs.items())))
    names = factors.factors(rows)
    shown = factors.differences(rows, names)
    for i, row in enumerate(rows):
        row.tag = str(i + 1)
        row.label = _label(row, names, shown)
        row.cells = [str(len(row.records))] + [row.cell(c) for c in SUMMARY_COLUMNS] if cells else []
    return rows


def _label(row: Row, names: list[str], shown: list[str]) -> str:
    record = row.records[0]
    parts = [record.scenario.variant, row.attrs[factors.BACKEND], row.attrs[factors.ACCELERATOR]]
    if factors.PRECISION in names and factors.PRECISION not in record.scenario.cell:
        parts.append(row.attrs[factors.PRECISION])
    parts += [f"{k}={row.attrs.get(k, factors.UNSET)}" for k in shown]
    reduced = " (reduced)" if any(r.scenario.profile for r in row.records) else ""
    return " · ".join(parts) + reduced


def _serving_groups(records: list[RunRecord]) -> list[tuple[str, Row]]:
    """(scenario, row) for serve records, grouped by full configuration like train rows."""
    return [
        (name, row)
        for name in sorted({r.scenario.name for r in records})
        for row in _rows([r for r in records if r.scenario.name == name], cells=False)
    ]


def _serving_rows(records: list[RunRecord]) -> list[TableRow]:
    return [
        TableRow(
            f"{name} · {row.label}",
            row.records,
            _labelled_cost(_serve_cells(row.records), row.records),
            row.attrs[factors.ACCELERATOR],
            name,
        )
        for name, row in _serving_groups(records)
    ]


def _serve_cells(records: list[RunRecord]) -> list[str]:
    """A serving row's cells: each column's figure over the runs, `n/a [code]` with its
    cause where absent, goodput with the SLO that decides it."""
    cells = [str(len(records))]
    for column in _columns("serving"):
        value = _over_runs(column)(records)
        cell = fmt(value, column.spec) if value is not None else na_cell(records, column)
        if column.id == "metrics.goodput_req_s" and value is not None:
            cell += f" ({slo_words(records[0])})"
        cells.append(cell)
    return cells


def slo_words(record: RunRecord) -> str:
    """The SLO a serve run's goodput counts requests against, in words."""
    from harness.tasks.serve.show import slo_words as words

    return words(record.metrics.slo)


SERVE_USD_COLUMN = [h for h, _, _ in SERVE_COLUMNS].index("$/1M out tok")


def cost_label(records: list[RunRecord]) -> str:
    """What a serve $ is of, where not a production server's ("reference engine, ...")."""
    labels = sorted({r.cost.label for r in records if r.cost is not None and r.cost.label})
    return "; ".join(labels)


def _labelled_cost(cells: list[str], records: list[RunRecord]) -> list[str]:
    label = cost_label(records)
    if label:
        cells[SERVE_USD_COLUMN] = f"{cells[SERVE_USD_COLUMN]} ({label})"
    return cells


def _task_tables(records: list[RunRecord]) -> list[TaskTable]:
    tables = []
    for name in sorted({r.task for r in records}):
        columns = [
            ("runs", "d", lambda rs: len(rs)),
            *((c.header, c.spec, _over_runs(c)) for c in tasks.get(name).report_columns),
        ]
        mine = [r for r in records if r.task == name]
        rows = [
            TableRow(f"{scenario} · {row.label}", row.records, [fmt(g(row.records), spec) for _, spec, g in columns])
            for scenario in sorted({r.scenario.name for r in mine})
            for row in _rows([r for r in mine if r.scenario.name == scenario], cells=False)
        ]
        tables.append(TaskTable(name, [h for h, _, _ in columns], rows))
    return tables


# --------------------------------------------------------------------------- selection
def select(rows_by_scenario: dict[str, list[Row]], text: str, option: str) -> dict[str, Row]:
    """The one row per scenario a selector names; exit 2 (SpecError) listing the
    candidates when it names none anywhere, or several in one scenario."""
    terms = factors.parse_selector(text, option)
    every = [row for rows in rows_by_scenario.values() for row in rows]
    for key, _ in terms:
        if not factors.known_key(every, key):
            raise SpecError(
                option,
                key,
                "unknown key (known: "
                + ", ".join(factors.SELECTOR_KEYS)
                + ", or a configuration field such as sequence.padding)",
            )
    found = {}
    for name, rows in rows_by_scenario.items():
        hits = [row for row in rows if all(factors.term_matches(row, k, v) for k, v in terms)]
        if len(hits) > 1:
            raise SpecError(
                option,
                text,
                f"matches {len(hits)} rows in scenario {name}: "
                + "; ".join(f"[{h.label}]" for h in hits)
                + "; add a term to pick one: "
                + _telling_apart(hits),
            )
        if hits:
            found[name] = hits[0]
    if not found:
        raise SpecError(
            option,
            text,
            "matches no row; candidates: " + "; ".join(f"{k}: " + ", ".join(_candidates(every, k)) for k, _ in terms),
        )
    return found


def _candidates(rows: list[Row], key: str) -> list[str]:
    if key == "accelerator":
        return list(dict.fromkeys(_accelerator_term(row) for row in rows))
    return factors.candidates(rows, key)


def _accelerator_term(row: Row) -> str:
    acc = row.records[0].accelerator
    plain = f"{acc.catalog_key}:{acc.count or 1}"
    label = row.attrs[factors.ACCELERATOR]
    return plain if label.endswith(acc.catalog_key) else f"{label} (= {plain})"


def _telling_apart(hits: list[Row]) -> str:
    keys = [k for k in {k: None for h in hits for k in h.attrs} if len({h.attrs.get(k) for h in hits}) > 1]
    key = keys[0]
    if key == factors.ACCELERATOR:
        return " or ".join(f"accelerator={_accelerator_term(h).split(' ')[0]}" for h in hits)
    if key == factors.BACKEND:
        return " or ".join(f"backend={h.records[0].backend.name}" for h in hits)
    return " or ".join(f"{key}={h.attrs.get(key)}" for h in hits)


# --------------------------------------------------------------------------- build
def build(
    records: list[RunRecord | dict[str, Any]],
    baseline: str | None = None,
    compares: tuple[str, ...] = (),
    warnings=(),
    projections=(),
    serve_projections=(),
) -> Report:
    """The report of these records: RunRecords, or stored records' JSON (validated and
    migrated here, once: everything past this point reads typed records). `projections`
    (harness.projection.projection.ProjectionRecord) are shown apart, as projected."""
    records = as_records(records)
    serving = _serving_rows([r for r in records if r.ok and layout_of(r) == "serving"])
    ok = [r for r in records if r.ok and layout_of(r) == "comparisons"]
    names = sorted({r.scenario.name for r in ok})
    rows_by_scenario = {name: _rows([r for r in ok if r.scenario.name == name]) for name in names}
    chosen = select(rows_by_scenario, baseline, "--baseline") if baseline else {}
    picked = [select(rows_by_scenario, text, "--compare") for text in compares]
    warnings = list(warnings)
    if baseline:
        warnings += [
            f"--baseline {baseline} names no row in scenario {n}: its baseline is the first run made"
            for n in names
            if n not in chosen
        ]
    warnings += _record_warnings(ok) + convention_notes(serving)
    failed = [r for r in records if not r.ok]
    report = Report(
        [],
        serving,
        failed,
        records,
        _prices(ok + [r for row in serving for r in row.records]),
        warnings,
        conventions=CONVENTIONS,
    )
    report.workloads = _workloads([r for r in records if r.ok])
    _add_projections(report, ok, list(projections))
    report.slo_rates = serve_report.slo_rates([r for row in serving for r in row.records])
    from reports.serving_pairs import sentences

    report.serving_pairs = sentences([r for row in serving for r in row.records], list(serve_projections))
    report.tables = _task_tables([r for r in records if r.ok and layout_of(r) == "table"])
    for name, rows in rows_by_scenario.items():
        base = chosen.get(name, rows[0])
        reason = f"--baseline {baseline}" if name in chosen else "the first run made (--baseline picks another)"
        report.sections.append(_section(name, rows, base, reason, [p[name] for p in picked if name in p], report))
    return report


def _add_projections(report: Report, train: list[RunRecord], projections: list) -> None:
    from reports.projections import fine_tune_rows, projected_rows

    report.projected = projected_rows(projections, train)
    label = lambda r: f"{r.scenario.variant} · {r.backend.name} · {r.accelerator.count}x {r.accelerator.catalog_key}"  # noqa: E731
    report.fine_tunes, report.fine_tune_lines, warnings = fine_tune_rows(train, label)
    report.warnings += warnings
    from reports.tpu_vs_gpu import add_to_report

    add_to_report(report, projections, train)


def convention_notes(serving: list[TableRow]) -> list[str]:
    """Where a serving row's figures differ from what vLLM's own client would report on
    the same requests by more than 5% (harness.serving.conventions), the difference,
    stated once per row (its first run's; `bench show` lists each run's)."""
    out = []
    for row in serving:
        differing = [r for r in row.records if r.metrics.convention_differences]
        if differing:
            first = differing[0].metrics.convention_differences
            out.append(
                f"serving {row.label}: bench's and vLLM's client conventions differ by more than 5% in "
                f"{len(differing)} of {len(row.records)} runs, e.g. {'; '.join(first)}"
            )
    return out


def _record_warnings(records: list[RunRecord]) -> list[str]:
    """What the runs themselves warned about (a busy machine, an unknown device), per
    scenario: their figures are reported, with the caveat."""
    out = []
    for name in sorted({r.scenario.name for r in records}):
        mine = [r for r in records if r.scenario.name == name]
        warned = [r for r in mine if r.warnings]
        if warned:
            out.append(
                f"{len(warned)} of {len(mine)} runs of {name} carry warnings, e.g. {warned[0].warnings[0]} "
                "(bench show RECORD lists them)"
            )
    return out


def _section(
    name: str, rows: list[Row], base: Row, reason: str, compared: list[Row], report: Report
) -> ScenarioSection:
    names = factors.factors(rows)
    shown = factors.differences(rows, names)
    comparisons, not_compared = [], []
    for factor in names:
        found, why = compare.factor_comparisons(rows, base, factor, names, shown)
        comparisons += found
        if why:
            not_compared.append(why)
    requested = [compare.requested(row, base) for row in compared if row is not base]
    section = ScenarioSection(
        name,
        rows[0].records[0].scenario.reference,
        rows,
        base,
        reason,
        names,
        shown,
        comparisons,
        not_compared,
        requested,
        _sensitivity(comparisons),
    )
    section.headline = _headline(section, report)
    return section


MAX_HEADLINE_PAIRS = 6  # past it, only the accelerator comparisons in the baseline's context


def _headline(section: ScenarioSection, report: Report) -> list[str]:
    """The scenario's answers: W3's form for accelerators, one line per other factor."""
    platform = sorted(
        (c for c in section.comparisons if c.factor == factors.ACCELERATOR),
        key=lambda c: c.reference is not section.baseline,
    )  # the baseline's context first
    shown = (
        platform if len(platform) <= MAX_HEADLINE_PAIRS else [c for c in platform if c.reference is section.baseline]
    )
    lines = [compare.w3_sentence(c, lambda a, b: _w3_extras(section.name, a, b, report)) for c in shown]
    if len(shown) < len(platform):
        lines.append(
            f"{len(platform) - len(shown)} more accelerator comparisons (other levels of the other factors) "
            f"in the {section.name} section"
        )
    lines += compare.factor_headline([c for c in section.comparisons if c.factor != factors.ACCELERATOR])
    accelerators = list(dict.fromkeys(row.attrs[factors.ACCELERATOR] for row in section.rows))
    if len(accelerators) == 1:
        lines.append(f"one accelerator ({accelerators[0]}): no accelerator comparison")
    return lines + section.not_compared


def _w3_extras(scenario: str, a: Row, b: Row, report: Report) -> list[str]:
    """The train + serve workload ratio and TTFT for a pair of rows, where recorded."""
    out = []
    by_run = {w.run: w for w in report.workloads if w.scenario == scenario}
    wa, wb = by_run.get(a.label), by_run.get(b.label)
    if wa and wb:
        ratio = wb.total_usd / wa.total_usd
        word = f"{ratio:.2f}x cheaper" if ratio >= 1 else f"{1 / ratio:.2f}x dearer"
        labels = sorted({w.serve_label for w in (wa, wb) if w.serve_label})
        out.append(
            f"train + serve workload {word} ({wa.fine_tunes:g} fine-tunes + "
            f"{wa.served_tokens_millions:g}M served tokens; medians over runs, no interval"
            + "".join(f"; serve $ from a {label}" for label in labels)
            + ")"
        )
    serve = [s for s in report.serving if s.scenario == scenario]
    acc_a, acc_b = a.attrs[factors.ACCELERATOR], b.attrs[factors.ACCELERATOR]
    out.append(
        compare.ttft_words(
            [s for s in serve if s.accelerator == acc_a], [s for s in serve if s.accelerator == acc_b], acc_a, acc_b
        )
    )
    return out


def _workloads(records: list[RunRecord]) -> list[WorkloadRow]:
    """harness.figures.cost.workload_cost for every train row of a scenario with a `workload`
    section and one serving configuration on the same accelerator (medians over runs)."""
    from harness.figures.cost import workload_cost

    rows: list[WorkloadRow] = []
    serving = _serving_groups([r for r in records if layout_of(r) == "serving"])
    for name in sorted({r.scenario.name for r in records}):
        train = [r for r in records if r.scenario.name == name and layout_of(r) == "comparisons"]
        spec = train[0].scenario.resolved.get("workload") if train else None
        if not spec or not spec.get("fine_tune_tokens_millions"):
            continue  # records from before the fine-tune size was stated priced the benchmark run
        found = []
        for row in _rows(train):
            serves = [
                s for n, s in serving if n == name and s.attrs[factors.ACCELERATOR] == row.attrs[factors.ACCELERATOR]
            ]
            # An SLO search's $/1M output tokens is the one at the load a user would run.
            searched = [s for s in serves if _searched(s)]
            serves = searched or serves
            per_run = row.median(lambda r: _fine_tune_usd(r, spec["fine_tune_tokens_millions"])[0])
            train_basis = _fine_tune_usd(row.records[0], spec["fine_tune_tokens_millions"])[1]
            per_1m = (
                across_runs(r.cost.usd_per_1m_output_tokens if r.cost else None for r in serves[0].records)
                if len(serves) == 1
                else None
            )
            if per_run is not None and per_1m is not None:
                found.append(
                    (
                        row,
                        per_run,
                        per_1m,
                        workload_cost(per_run, spec["fine_tunes"], per_1m, spec["served_tokens_millions"]),
                        _serve_basis(serves[0], bool(searched)),
                        cost_label(serves[0].records),
                        train_basis,
                    )
                )
        for row, train_usd, serve_usd, total, basis, label, train_basis in found:
            rows.append(
                WorkloadRow(
                    name,
                    row.records[0].accelerator.catalog_key,
                    spec["fine_tunes"],
                    spec["served_tokens_millions"],
                    train_usd,
                    serve_usd,
                    total,
                    total / found[0][3],
                    row.label,
                    row,
                    basis,
                    label,
                    train_basis,
                )
            )
    return rows


def _fine_tune_usd(record: RunRecord, tokens_millions: float) -> tuple[float | None, str]:
    """harness.figures.cost.fine_tune_cost of a train record (FINE_TUNE_FORMULA: the scenario's
    stated tokens at the record's $/1M real tokens + setup + warm-up), with the basis."""
    from harness.figures.cost import fine_tune_cost, fine_tune_rate

    rate = fine_tune_rate(record.cost)
    basis = f"{tokens_millions:g}M real tokens x {rate[1]} $/1M + setup + warm-up" if rate else "no $/1M real tokens"
    return fine_tune_cost(record.cost, tokens_millions), basis


def _serve_basis(row: Row, searched: bool) -> str:
    """Where a workload's $/1M output tokens comes from, in words."""
    runs = f"{len(row.records)} run{'s' if len(row.records) != 1 else ''}"
    if not searched:
        return f"the serve load as run ({row.label}; median of {runs})"
    search = row.records[0].metrics.slo_search
    targets = ", ".join(f"{k} <= {v:g} s" for k, v in search["targets"].items())
    found = [r.metrics.slo_search["max_rate_req_s"] for r in row.records]
    rates = ", ".join("none" if rate is None else f"{rate:g}" for rate in found)
    return f"SLO search: the highest rate within p{search['percentile']:g} {targets} ({rates} req/s; median of {runs})"


def _searched(row: Row) -> bool:
    return all(r.metrics is not None and r.metrics.slo_search for r in row.records)


def _sensitivity(comparisons: list[compare.Comparison]) -> list[dict[str, Any]]:
    """For each accelerator pair with both sides priced: the cost ratio (subject /
    reference, $ per 1M real tokens at the prices the records used) as one side's price
    is scaled; at 1.0 it is the ratio the comparison states."""
    out = []
    for c in comparisons:
        if c.factor != factors.ACCELERATOR or c.cost is None:
            continue
        ratio = 1 / c.cost.value
        factors_, a_scaled, b_scaled = (list(x) for x in zip(*scaled_cost_ratios(ratio)))
        out.append(
            {
                "pair": c.title,
                "a": c.subject_level,
                "b": c.reference_level,
                "factors": factors_,
                "a_scaled": a_scaled,
                "b_scaled": b_scaled,
                "ratio": ratio,
                "a_price": c.subject.attrs["price"],
                "b_price": c.reference.attrs["price"],
                "basis": c.basis,
            }
        )
    return out


def _prices(records: list[RunRecord]) -> list[Price]:
    seen: dict[tuple, Price] = {}
    for r in records:
        price = r.cost.price if r.cost is not None else None
        if price:
            seen[(price.accelerator, price.usd_per_chip_hour, price.source)] = price
    return sorted(seen.values(), key=lambda p: p.accelerator)
