"""What the terminal shows: a progress bar during steps, a summary table at the end,
and one record in full (`bench show`). Every number says its unit."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from harness.records.failure_text import first_line
from harness.records.result import RunRecord, as_record, as_records
from harness.scenario import task_registry as tasks
from harness.tasks.base import fmt


class RunProgress:
    """Receives the runner's callbacks and worker events; draws a rich progress bar."""

    def __init__(self, console: Console, enabled: bool = True) -> None:
        self.console = console
        self.enabled = enabled
        self.bar: Progress | None = None
        self.task = None

    def skipped(self, run, number: int, total: int) -> None:
        self.console.print(
            f"[{number}/{total}] {run.scenario.name} {run.variant} r{run.repeat}: "
            "already has a successful record, skipped (--force reruns it)"
        )

    def start(self, run, number: int, total: int, chosen, task: str) -> None:
        where = tasks.get(task).progress_where(run, chosen)
        self.console.print(
            f"[bold][{number}/{total}][/bold] {task} {run.scenario.name} [cyan]{run.variant}[/cyan] "
            f"r{run.repeat} {where}"
        )
        if run.profile:
            changes = ", ".join(f"{k}={v}" for k, v in run.profile["overrides"].items())
            self.console.print(f"  [yellow]reduced run: profile {run.profile['name']!r} ({changes})[/yellow]")
        if not self.enabled:
            return
        self.bar = Progress(
            TextColumn("  {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self.bar.start()
        total_work = tasks.get(task).progress_total(run)
        self.task = self.bar.add_task("setup", total=total_work, status="")

    def event(self, event: dict[str, Any]) -> None:
        if self.bar is None:
            return
        if event.get("event") == "phase":
            self.bar.update(self.task, description=event["name"])
        elif event.get("event") == "step":
            status = (
                f"step {event['time_s']:.3g} s  loss {fmt(event.get('loss'), '.4f')}  "
                f"compiles {event['num_compiles']}  [{event['phase']}]"
            )
            self.bar.update(self.task, completed=event["index"] + 1, total=event["total"], status=status)
        elif event.get("event") == "request":
            status = "error: " + event["error"][:40] if event.get("error") else "ok"
            self.bar.advance(self.task)
            self.bar.update(self.task, status=f"last request {status}")

    def finish(self, record: RunRecord) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        if not record.ok:
            self.console.print(
                f"  [red]failed ({record.failure.kind}): {escape(first_line(record.failure.reason))}[/red]"
            )
        for warning in record.warnings:
            self.console.print(f"  [yellow]warning: {warning}[/yellow]")
        self.console.print(f"  record: {record.path}")


def _summary_row(r: RunRecord, columns: tuple[str, ...]) -> tuple[str, Text, list[str]]:
    """A run's label, its status and its figures under its task's summary columns."""
    task = tasks.of(r)
    s = r.scenario
    reduced = " [reduced]" if s.profile else ""
    name = (
        f"{s.name} {s.variant}{reduced} r{s.repeat}{task.summary_label()}\n"
        f"{r.backend.name} on {r.accelerator.catalog_key}"
    )
    status = Text("ok", "green") if r.ok else Text(f"{r.failure.kind}: {first_line(r.failure.reason)}", "red")
    figures = task.summary_values(r)
    return name, status, [figures.get(column, "-") for column in columns]


def _by_task(records: list[RunRecord]) -> list[tuple[tuple[str, ...], list[RunRecord]]]:
    """(the task's summary columns, its records), in the order the tasks first appear:
    each task's runs under its own headers (a serve run's TTFT is no step time)."""
    grouped: dict[str, list[RunRecord]] = {}
    for r in records:
        grouped.setdefault(r.task, []).append(r)
    return [(tasks.of(rs[0]).summary_columns(), rs) for rs in grouped.values()]


def _task_table(columns: tuple[str, ...], records: list[RunRecord], title: str) -> Table:
    table = Table(title=title)
    table.add_column("run", min_width=26, overflow="fold")
    table.add_column("status", overflow="fold")
    for column in columns:
        table.add_column(column, justify="right", overflow="fold")
    for r in records:
        name, status, values = _summary_row(r, columns)
        table.add_row(Text(name), status, *values)
    return table


def summary_table(records) -> Group:
    """One table per task, one row per run, under the task's own columns; `bench show`
    has every metric of one record. Nothing in it is ever cut with an ellipsis: a cell
    too wide folds (see `summary` for narrow output). `records`: RunRecords, or stored
    records' JSON (read as RunRecords here)."""
    groups = _by_task(as_records(records))
    titled = len(groups) > 1
    return Group(
        *(
            _task_table(columns, rs, f"bench results: {rs[0].task}" if titled else "bench results")
            for columns, rs in groups
        )
    )


def summary_blocks(records, width: int) -> Group:
    """The narrow layout: per run, a line naming it and its status, then `column value`
    pairs (its task's columns) packed into lines of `width`; a pair is never split,
    nothing is cut."""
    lines: list[Text] = [Text("bench results", style="italic")]
    for columns, rs in _by_task(as_records(records)):
        for r in rs:
            lines += _block(r, columns, width)
    for text in lines:
        text.overflow = "fold"
    return Group(*lines)


def _block(r: RunRecord, columns: tuple[str, ...], width: int) -> list[Text]:
    name, status, values = _summary_row(r, columns)
    head = Text(name.replace("\n", " · ") + " · ")
    head.append_text(status)
    lines, line = [head], ""
    for pair in (f"{column} {value}" for column, value in zip(columns, values)):
        candidate = f"{line} · {pair}" if line else f"  {pair}"
        if line and len(candidate) > width:
            lines.append(Text(line))
            candidate = f"  {pair}"
        line = candidate
    return [*lines, Text(line)]


def summary(records, console: Console) -> RenderableType:
    """The summary table where it fits the console at its natural width; otherwise (an
    80-column CI log, a narrow terminal) one block per run. Either way every value
    appears whole: rich would otherwise shrink columns and cut values to `timeo…`.
    `records`: RunRecords, or stored records' JSON (read as RunRecords here)."""
    records = as_records(records)
    table = summary_table(records)
    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if natural <= console.width:
        return table
    return summary_blocks(records, console.width)


def show_record(record, console: Console) -> None:
    """One record (a RunRecord, or a stored record's JSON): identity, metrics with
    units, cost with its price and source."""
    record = as_record(record)
    s, acc, prov = record.scenario, record.accelerator, record.provenance
    console.print(f"[bold]{s.name}[/bold] {s.variant} r{s.repeat}  status: {record.status}")
    console.print(f"backend {record.backend.name} on {acc.count}x {acc.kind} ({acc.name}), catalog {acc.catalog_key}")
    console.print(f"commit {prov.commit} dirty={prov.dirty}  finished {prov.finished_at}")
    if s.profile:
        console.print(f"[yellow]reduced run: profile {s.profile['name']}: {s.profile['overrides']}[/yellow]")
    for warning in record.warnings:  # what the run warned about (a busy machine): its figures carry it
        console.print(Text(f"warning: {warning}", style="yellow"))
    if not record.ok:
        f = record.failure
        console.print(Text(f"{f.kind}: {f.reason}", "red"), Text(f"(exit {f.exit_code})"))
        if f.log_tail:
            console.print(Text(f.log_tail))
        return
    console.print(tasks.of(record).show(record))
    for why, ids in _absent_by_reason(record).items():
        console.print(f"[yellow]absent ({why}): {', '.join(ids)}[/yellow]")


def _absent_by_reason(record: RunRecord) -> dict[str, list[str]]:
    """A migrated record's figures its bench did not measure, grouped by why (one line
    each in `bench show`): they read "-" or "n/a" in the table above."""
    grouped: dict[str, list[str]] = {}
    for figure_id, why in record.absent.items():
        grouped.setdefault(why, []).append(figure_id)
    return grouped


# --------------------------------------------------------------------------- projections
def projection_lines(record) -> list[str]:
    """A projection (harness/projection/projection.py) in lines, every figure labelled projected."""
    gib = 1024**3
    chip = record.slice
    lines = [
        f"PROJECTED (not measured): {record.scenario['name']} [{record.scenario['variant']}] on {record.backend}, "
        f"{chip['name']} ({chip['chips']} chips, topology {chip['topology']})",
        f"method: {record.method}",
    ]
    for s in record.shapes:
        fit = "fits" if s.fits else "DOES NOT FIT"
        lines.append(
            f"  length {s.seq_len} x {s.rows_per_forward} rows/forward x {s.accumulation} accumulation: {fit}, "
            f"{s.memory_bytes_per_device / gib:.2f} GiB of {s.hbm_bytes_per_device / gib:.0f} GiB HBM per device "
            f"({s.memory_bytes_per_device:,} bytes); compile {s.compile_s:.1f} s on this host"
        )
        for p in s.programs:
            if p.out_of_memory:
                lines.append(f"    {p.name}: the compiler: {p.out_of_memory}")
                continue
            moved = ", ".join(_collective_text(k, v) for k, v in p.collectives.items()) or "none"
            lines.append(
                f"    {p.name} (x{p.runs_per_step}/step): {fmt(p.flops, '.4g')} FLOPs, "
                f"{fmt(p.bytes_accessed, '.4g')} bytes accessed per device; collectives: {moved}"
            )
            lines.extend(largest_collective_lines(p))
        if s.fits:
            lines.extend(projection_shape_lines(s))
    lines.extend(calibrated_range_lines(record))
    ft = record.fine_tune
    if ft is not None:
        lines.extend(projected_fine_tune_lines(ft))
    if record.price:
        p = record.price
        lines.append(
            f"  price {p['accelerator']}: ${p['usd_per_chip_hour']}/chip-h ({p['pricing']}; {p['source']}, {p['date']})"
        )
    return lines


def _collective_text(kind: str, c) -> str:
    wire = f", {c.wire_bytes / 2**20:.1f} MiB on the wire" if c.wire_bytes is not None else ""
    return f"{kind} {c.count}x {c.bytes / 2**20:.1f} MiB{wire}"


def largest_collective_lines(program) -> list[str]:
    """The program's five collective ops that send the most (backends/jax_common/hlo_collectives.largest_collectives)."""
    if not program.largest_collectives:
        return []
    return [f"      largest collectives of {program.name} (wire bytes a device sends, all runs):"] + [
        f"        {op['kind']} {op['op']}: {op['wire_bytes'] / 2**20:.1f} MiB ({op['runs']} runs x "
        f"{op['result_bytes'] / 2**20:.2f} MiB result, group of {op['group']})"
        for op in program.largest_collectives
    ]


def projection_shape_lines(s) -> list[str]:
    """A fitting shape's FLOPs check, fit, bound terms and rates (real tokens, padded beside)."""
    gib = 1024**3
    bench = s.bench_flops_per_device_per_forward
    ratio = f" (harness count {bench:.4g}: HLO / harness {s.flops_ratio:.3f})" if bench and s.flops_ratio else ""
    lines = [f"    FLOPs per device per forward pass: {fmt(s.flops_per_device_per_forward, '.4g')}{ratio}"]
    if s.flops_flag:
        lines.append(f"    FLAGGED: {s.flops_flag}")
    if s.bench_bytes_per_device_per_forward and s.bytes_ratio is not None:
        lines.append(
            f"    HBM bytes per device per forward pass: {fmt(s.programs[0].bytes_accessed, '.4g')} compiled (bench's "
            f"floor {s.bench_bytes_per_device_per_forward:.4g}: compiled / floor {s.bytes_ratio:.3f})"
        )
    if s.bytes_flag:
        lines.append(f"    FLAGGED: {s.bytes_flag}")
    if s.fit_bytes_per_device is not None:
        lines.append(
            f"    fit: {s.fit_bytes_per_device / gib:.2f} GiB per device (largest program + state kept on device "
            f"outside it) of {s.usable_hbm_bytes_per_device / gib:.2f} GiB usable ({s.usable_hbm_source})"
        )
    for t in s.terms:
        ici = f"{t.collectives_s:.4g} s ({t.collectives_basis})" if t.collectives_s is not None else "no ICI figure"
        lines.append(
            f"    {t.program} x{t.runs_per_step}: compute {t.compute_s:.4g} s, HBM {t.hbm_s:.4g} s, "
            f"collectives {ici}: bound by {t.bound_by}"
        )
    real = (
        f"<= {fmt(s.real_tokens_per_s_per_chip_bound, '.4g')} real tokens/s per chip, >= "
        f"${fmt(s.usd_per_1m_real_tokens_bound, '.4g')} per 1M real tokens (real/padded {s.real_fraction:.3f}); "
        if s.real_fraction
        else ""
    )
    lines.append(
        f"    bound: step >= {fmt(s.step_time_bound_s, '.4g')} s, {real}<= {fmt(s.tokens_per_s_per_chip_bound, '.4g')} "
        f"padded tokens/s per chip, >= ${fmt(s.usd_per_1m_tokens_bound, '.4g')} per 1M padded tokens"
    )
    return lines


def calibrated_range_lines(record) -> list[str]:
    """The longest fitting shape's rate and $ as a range (reports/tpu_vs_gpu.py's rule):
    the bound's end (the best case) and the end at the lowest calibrated measured / bound
    of the method's class, naming its points; the whole fine-tune's $ likewise."""
    from harness.projection.calibration import calibrated_fine_tune_usd, calibrated_low, method_of

    fitting = [s for s in record.shapes if s.fits and s.real_tokens_per_s_per_chip_bound]
    if not fitting:
        return []
    low = calibrated_low(method_of(record))
    if low is None:
        return ["  calibrated range: none (no measured / bound point is known): the bound alone, a best case"]
    s = max(fitting, key=lambda x: x.seq_len)
    usd = s.usd_per_1m_real_tokens_bound
    cost = f", ${usd:.4g}-${usd / low.ratio:.4g} per 1M real tokens" if usd else ""
    ft = record.fine_tune
    high = calibrated_fine_tune_usd(ft, low.ratio)
    whole = f", whole fine-tune ${ft.usd:.2f}-${high:.2f}" if high is not None else ""
    return [
        f"  calibrated range at length {s.seq_len}: {s.real_tokens_per_s_per_chip_bound * low.ratio:.4g}-"
        f"{s.real_tokens_per_s_per_chip_bound:.4g} real tokens/s per chip{cost}{whole} (the bound's end is a best "
        f"case; the other is bound x {low.ratio:.3g}: {low.note()})"
    ]


def projected_fine_tune_lines(ft) -> list[str]:
    """The whole fine-tune: its time and $, setup stated, compiles apart where another host measured them."""
    usd = f", ${ft.usd:.2f}" if ft.usd is not None else ""
    setup = f"setup {ft.setup_s:.1f} s" if ft.setup_s is not None else "setup not projected"
    lines = [
        f"  projected fine-tune: {ft.steps} steps ({ft.examples} examples x {ft.epochs} epochs), "
        f"{ft.compiles} compiles, {ft.time_s / 60:.2f} min{usd}; {setup} ({ft.basis})"
    ]
    if not ft.compile_in_time:
        lines.append(
            f"    compile, apart (not in the time): {ft.compiles} shapes x {ft.compile_s_per_shape:.0f} s per shape "
            f"= {ft.compile_s / 60:.1f} min on {ft.compile_host}"
        )
    if ft.length_bounds:
        lines.append(
            "    per length met (one micro-batch's bound): "
            + ", ".join(f"{n}: {b:.4g} s ({ft.length_basis.get(n, '')})" for n, b in sorted(ft.length_bounds.items()))
        )
    return lines


def show_projection(record, console: Console) -> None:
    for line in projection_lines(record):
        console.print(Text(line))


def show_serve_projection(scenario: str, target: str, result: dict, note: str, price, console: Console) -> None:
    """A serving projection (harness.projection.serving) as lines, every figure a range."""
    for line in serve_projection_lines(scenario, target, result, note, price):
        console.print(Text(line))


def serve_projection_lines(scenario: str, target: str, result: dict, note: str, price) -> list[str]:
    cal = result["calibration"]
    lines = [
        f"{scenario} served on {target} (projected, vLLM): tensor-parallel {result['tensor']} x "
        f"{result['replicas']} replicas; a roofline bound (best case), the range's other end from "
        f"{len(cal.rows)} published vLLM results (measured / bound {cal.low:.2f} to {cal.high:.2f}, GPUs; "
        "no published vLLM-TPU result is calibrated yet)"
    ]
    lines += [f"  note: {note}"] if note else []
    for point in result["points"]:
        load, b = point["load"], point["bound"]
        tpot, tok_s, usd = point["tpot_s"], point["output_tok_s"], point["usd_per_1m_output_tokens"]
        money = f"${usd[0]:.3g} to ${usd[1]:.3g}" if usd else "n/a (no price for this device)"
        lines.append(
            f"  concurrency {load.concurrency} ({load.prompt_tokens} prompt + {load.output_tokens} output tokens, "
            f"batch {b.batch} a replica): TTFT at least {b.ttft_s * 1e3:.3g} ms ({b.ttft_limit}-bound; uncalibrated), "
            f"TPOT {tpot[0] * 1e3:.3g} to {tpot[1] * 1e3:.3g} ms ({b.tpot_limit}-bound), "
            f"output {tok_s[0]:.4g} to {tok_s[1]:.4g} tok/s, $ per 1M output tokens {money}"
        )
    if price is not None:
        lines.append(f"  price: ${price.usd_per_chip_hour}/chip-h ({price.pricing}; {price.source}, {price.date})")
    return lines
