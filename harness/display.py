"""What the terminal shows: a progress bar during steps, a summary table at the end,
and one record in full (`bench show`). Every number says its unit."""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text


def fmt(value: Any, spec: str = ".3g", unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:{spec}}{unit}"
    return f"{value}{unit}"


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

    def start(self, run, number: int, total: int, chosen, task: str = "train") -> None:
        probe = chosen.probe
        where = (
            f"on [green]{chosen.name}[/green] ({probe.device_kind}: {probe.device_name})"
            if task == "train"
            else f"serving via [green]{run.scenario.serve.engine}[/green]"
        )
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
        total_work = run.scenario.train.steps if task == "train" else run.scenario.serve.num_requests
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

    def finish(self, record: dict[str, Any]) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        if record["status"] != "ok":
            self.console.print(f"  [red]failed ({record['failure']['kind']}): {record['failure']['reason']}[/red]")
        for warning in record.get("warnings") or []:
            self.console.print(f"  [yellow]warning: {warning}[/yellow]")
        self.console.print(f"  record: {record.get('_path')}")


SUMMARY_COLUMNS = ("step med (s)", "p90 (s)", "recomp", "tok/s real", "MFU", "mem (GiB)", "$/run")


def _summary_row(r: dict[str, Any]) -> tuple[str, Text, list[str]]:
    """A run's label, its status and its figures, in SUMMARY_COLUMNS order."""
    m, c = r.get("metrics") or {}, r.get("cost") or {}
    step = m.get("step_time_s") or (m.get("ttft_s") if r.get("task") == "serve" else None) or {}
    reduced = " [reduced]" if r["scenario"].get("profile") else ""
    task = " serve (TTFT)" if r.get("task") == "serve" else ""
    name = (
        f"{r['scenario']['name']} {r['scenario']['variant']}{reduced} r{r['scenario']['repeat']}{task}\n"
        f"{r['backend']['name']} on {r['accelerator']['catalog_key']}"
    )
    status = Text("ok", "green") if r["status"] == "ok" else Text(r["failure"]["kind"], "red")
    values = [
        fmt(step.get("median"), ".4g"),
        fmt(step.get("p90"), ".4g"),
        fmt(m.get("num_recompiles")),
        fmt(m.get("tokens_per_s_real"), ".4g"),
        fmt(m.get("mfu"), ".2%") if m.get("mfu") is not None else "n/a",
        fmt(m.get("peak_memory_gib"), ".3g"),
        fmt(c.get("usd_run"), ".2g"),
    ]
    return name, status, values


def summary_table(records: list[dict[str, Any]]) -> Table:
    """One row per run; `bench show` has every metric of one record. Nothing in it is
    ever cut with an ellipsis: a cell too wide folds (see `summary` for narrow output)."""
    table = Table(title="bench results")
    table.add_column("run", min_width=26, overflow="fold")
    table.add_column("status", overflow="fold")
    for column in SUMMARY_COLUMNS:
        table.add_column(column, justify="right", overflow="fold")
    for r in records:
        name, status, values = _summary_row(r)
        table.add_row(Text(name), status, *values)
    return table


def summary_blocks(records: list[dict[str, Any]], width: int) -> Group:
    """The narrow layout: per run, a line naming it and its status, then `column value`
    pairs packed into lines of `width`; a pair is never split, nothing is cut."""
    lines: list[Text] = [Text("bench results", style="italic")]
    for r in records:
        name, status, values = _summary_row(r)
        head = Text(name.replace("\n", " · ") + " · ")
        head.append_text(status)
        lines.append(head)
        pairs = [f"{column} {value}" for column, value in zip(SUMMARY_COLUMNS, values)]
        line = ""
        for pair in pairs:
            candidate = f"{line} · {pair}" if line else f"  {pair}"
            if line and len(candidate) > width:
                lines.append(Text(line))
                candidate = f"  {pair}"
            line = candidate
        lines.append(Text(line))
    for text in lines:
        text.overflow = "fold"
    return Group(*lines)


def summary(records: list[dict[str, Any]], console: Console) -> RenderableType:
    """The summary table where it fits the console at its natural width; otherwise (an
    80-column CI log, a narrow terminal) one block per run. Either way every value
    appears whole: rich would otherwise shrink columns and cut values to `timeo…`."""
    table = summary_table(records)
    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    if natural <= console.width:
        return table
    return summary_blocks(records, console.width)


def show_record(record: dict[str, Any], console: Console) -> None:
    """One record: identity, metrics with units, cost with its price and source."""
    s, acc, prov = record["scenario"], record["accelerator"], record["provenance"]
    console.print(f"[bold]{s['name']}[/bold] {s['variant']} r{s['repeat']}  status: {record['status']}")
    console.print(
        f"backend {record['backend']['name']} on {acc['kind']} x{acc.get('count')} ({acc.get('name')}), "
        f"catalog {acc['catalog_key']}"
    )
    console.print(f"commit {prov.get('commit')} dirty={prov.get('dirty')}  finished {prov.get('finished_at')}")
    if s.get("profile"):
        console.print(f"[yellow]reduced run: profile {s['profile']['name']}: {s['profile']['overrides']}[/yellow]")
    if record["status"] != "ok":
        f = record["failure"]
        console.print(f"[red]{f['kind']}: {f['reason']}[/red] (exit {f.get('exit_code')})")
        if f.get("log_tail"):
            console.print(Text(f["log_tail"]))
        return
    console.print(serving_table(record) if record.get("task") == "serve" else metrics_table(record))


def serving_table(record: dict[str, Any]) -> Table:
    m, c, server = record["metrics"], record.get("cost"), record.get("server") or {}
    table = Table(show_header=True)
    for column in ("metric", "mean", "median", "p90", "p99"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for name in ("ttft_s", "tpot_s", "itl_s", "e2el_s"):
        stats = m.get(name) or {}
        table.add_row(f"{name[:-2].upper()} (s)", *(fmt(stats.get(k), ".4g") for k in ("mean", "median", "p90", "p99")))
    table.add_row("requests ok / sent", f"{m['num_completed']} / {m['num_requests']}", "", "", "")
    table.add_row(
        "output tok/s, total tok/s",
        fmt(m["output_throughput_tok_s"], ".4g"),
        fmt(m["total_throughput_tok_s"], ".4g"),
        "",
        "",
    )
    table.add_row(
        "requests/s, goodput req/s", fmt(m["request_throughput_req_s"], ".4g"), fmt(m["goodput_req_s"], ".4g"), "", ""
    )
    table.add_row(
        "server",
        Text(f"{server.get('engine') or server.get('owned_by') or ''} {server.get('model') or ''}"),
        "",
        "",
        "",
    )
    if c:
        p = c["price"]
        table.add_row("$/1M output tokens", f"{c['usd_per_1m_output_tokens']:.4g}", "", "", "")
        table.add_row(
            "price", Text(f"${p['usd_per_chip_hour']}/chip-h x {c['chips']} ({p['source']}, {p['date']})"), "", "", ""
        )
    return table


def _cache_words(cache: dict[str, Any] | None) -> str:
    if cache is None:
        return "n/a (eager)"
    return (
        f"ON: {cache['what']} ({cache.get('dir')}): cached compiles are not counted"
        if cache["persistent"]
        else f"off ({cache['what']})"
    )


def metrics_table(record: dict[str, Any]) -> Table:
    m, c = record["metrics"], record.get("cost")
    table = Table(show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    step = m["step_time_s"]
    steady = (
        [
            ("step time median / p90 (s), steady", f"{step['median']:.4g} / {step['p90']:.4g}"),
            ("step time mean ± stdev (s), steady", f"{step['mean']:.4g} ± {step['stdev']:.2g} (n={step['n']})"),
        ]
        if step
        else [("step time (s), steady", f"n/a ({m.get('steady_state')})")]
    )
    rows = [
        *steady,
        (
            "recompiling measured steps, their time (s)",
            f"{m.get('recompile_steps', 0)}, {fmt(m.get('recompile_steps_time_s'), '.4g')}",
        ),
        ("warm-up steps time (s)", fmt(m["warmup_time_s"], ".4g")),
        ("compile time (s)", fmt(m["compile_time_s"], ".4g")),
        ("persistent compilation cache", _cache_words(m.get("compile_cache"))),
        ("compiles / recompiles after warm-up", f"{m['num_compiles']} / {m['num_recompiles']}"),
        (
            "tokens/s real / padded, steady",
            f"{fmt(m['tokens_per_s_real'], '.4g')} / {fmt(m['tokens_per_s_padded'], '.4g')}",
        ),
        ("tokens/s real, effective (recompiles too)", fmt(m.get("tokens_per_s_real_effective"), ".4g")),
        ("tokens/s real per chip", fmt(m["tokens_per_s_real_per_chip"], ".4g")),
        ("padding efficiency (real/padded)", fmt(m["padding_efficiency"], ".1%")),
        ("window tokens/s real (1 sync)", fmt(m.get("window_tokens_per_s_real"), ".4g")),
        ("model TFLOP/s", fmt(m["model_tflops_per_s"], ".4g")),
        ("model FLOPs per real token (see mfu_convention)", fmt(m.get("model_flops_per_token"), ".4g")),
        (
            "MFU",
            fmt(m["mfu"], ".2%")
            if m["mfu"] is not None
            else f"n/a ({m.get('mfu_invalid') or 'no peak for this device'})",
        ),
        ("HFU (with recomputation)", fmt(m.get("hfu"), ".2%") if m.get("hfu") is not None else "n/a"),
        ("peak memory (GiB)", f"{fmt(m['peak_memory_gib'], '.3g')} ({m['peak_memory_kind']})"),
        ("loss first / last", f"{fmt(m['loss_first'], '.4f')} / {fmt(m['loss_last'], '.4f')}"),
        ("run time (s), of which setup", f"{fmt(m['run_time_s'], '.4g')}, {fmt(m['setup_time_s'], '.3g')}"),
    ]
    if c:
        p = c["price"]
        rows += [
            ("$/run (whole run) / steady state", f"{fmt(c['usd_run'], '.5f')} / {fmt(c['usd_steady_state'], '.5f')}"),
            (
                "$/1M real tokens, steady / effective",
                f"{fmt(c.get('usd_per_1m_tokens_real'), '.4g')} / {fmt(c.get('usd_per_1m_tokens_real_effective'), '.4g')}",
            ),
            ("price", f"${p['usd_per_chip_hour']}/chip-h x {c['chips']} ({p['pricing']}; {p['source']}, {p['date']})"),
        ]
    for name, value in rows:
        table.add_row(name, value)
    return table
