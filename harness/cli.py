"""The `bench` command line. Thin: parse, call the module that does the work, print.

Exit codes: 0 success; 1 a run failed (or the gate found a regression); 2 bad input
(one line naming the file and the field, never a traceback).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import BenchError, SpecError

if TYPE_CHECKING:  # the CLI imports what a command needs when it runs
    from harness.result import RunRecord


def _key_value(text: str, what: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SpecError(what, text, "expected NAME=VALUE")
    return key, value


def cmd_run(args) -> int:
    from rich.console import Console

    from harness.display import RunProgress, summary
    from harness.loader import parse_override
    from harness.runner import RunRequest, run_sweep

    console = Console(stderr=args.json)
    request = RunRequest(
        scenario_path=args.scenario,
        backend=args.backend,
        overrides={**dict(parse_override(s) for s in args.set), **_trace_override(args.trace)},
        results_dir=Path(args.results_dir),
        profile=args.profile,
        interpreters=dict(_key_value(p, "--python") for p in args.python),
        force=args.force,
        timeout_s=args.timeout,
        prices_file=args.prices,
        command=sys.argv,
        dry_run=args.dry_run,
    )
    result = run_sweep(request, RunProgress(console, enabled=not args.no_progress))
    for variant, why in result.refused:  # the other cells ran (or would run)
        print(f"bench: refused [{variant}]: {why}", file=sys.stderr)
    if args.dry_run:
        return _print_plans(result.plans, args.json)
    if result.records:
        console.print(summary(result.records, console))
    _print_skipped(result.skipped_records, console)
    if args.json:
        skipped = [
            {"skipped": True, **s, "reason": "already has a successful record (--force reruns it)"}
            for s in result.skipped_records
        ]
        ran = [{**r.to_json(), "path": r.path} for r in result.records]
        print(json.dumps(skipped + ran, indent=1))
    for rescued in result.rescued:
        print(
            f"bench: could not write the record to {rescued['results_dir']} ({rescued['problem']}); "
            f"saved it to {rescued['path']}",
            file=sys.stderr,
        )
    for part in result.secondary:  # multi-host: this host took part; host 0 writes the record
        print(
            f"bench: host {part['host_rank']} of {part['hosts']} [{part['variant']}] repeat {part['repeat']}: "
            + (
                "done; the job's record is written by host 0"
                if part["status"] == "ok"
                else f"failed: {part['reason']}\n{part['log_tail'] or ''}"
            ),
            file=sys.stderr,
        )
    return 1 if result.failed or result.rescued else 0


def _print_skipped(skipped: list[dict], console) -> None:
    """Runs skipped as already done: their existing records' figures, said to be those."""
    from harness.display import summary
    from harness.store import load_record

    if not skipped:
        return
    records = [load_record(Path(s["path"])) for s in skipped]
    console.print(
        f"{_plural(len(records), 'run')} skipped: already recorded (--force reruns them); "
        "the figures below are their existing records':"
    )
    console.print(summary(records, console))


def cmd_plan(args) -> int:
    """`bench plan`: the execution plans; with --compile-for, projections on TPU slices."""
    if not args.compile_for:
        return cmd_run(args)
    from harness.display import show_projection
    from harness.loader import parse_override
    from harness.tpu_plan import CompileRequest, project

    request = CompileRequest(
        scenario_path=args.scenario,
        backend=args.backend,
        slices=args.compile_for,
        overrides=dict(parse_override(s) for s in args.set),
        profile=args.profile,
        results_dir=Path(args.results_dir),
        prices_file=args.prices,
        max_compiles=args.max_compiles,
        timeout_s=args.timeout,
        command=sys.argv,
    )
    records = project(request)
    if args.json:
        print(json.dumps([{**r.to_json(), "path": r.path} for r in records], indent=1))
        return 0
    from rich.console import Console

    for record in records:
        show_projection(record, Console())
    return 0  # a configuration that does not fit is an answer, not a failure


def _trace_override(steps: int | None) -> dict[str, int]:
    """`--trace [STEPS]` is `--set trace.steps=STEPS`: the scenario's `trace` field."""
    if steps is None:
        return {}
    if steps < 2:
        raise SpecError(
            "--trace", str(steps), "trace at least 2 steps (the trace's step time is the period between two)"
        )
    return {"trace.steps": steps}


def _print_plans(resolved, as_json: bool) -> int:
    """`bench run --dry-run` / `bench plan`: each run's execution plan, nothing run."""
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "variant": run.variant,
                        "repeat": run.repeat,
                        "plan": plan.model_dump(mode="json") if plan else None,
                    }
                    for run, plan in resolved
                ],
                indent=1,
            )
        )
        return 0
    for run, plan in resolved:
        print(f"{run.scenario.name} [{run.variant}] repeat {run.repeat}:")
        if plan is None:
            print("  (no train task: nothing to plan)")
            continue
        for name, value in plan.describe():
            print(f"  {name:<24}{value}")
    return 0


def cmd_launch(args) -> int:
    """`bench launch`: SkyPilot task files per target; launched unless --dry-run."""
    from harness import launch

    prepared = launch.prepare(
        args.scenario, args.on, args.set, Path(args.out_dir), Path(args.results_dir), args.bucket, args.spot
    )
    for target, path, commands in prepared:
        print(f"# {target.text}: {path}")
        for command in commands:
            print(command)
    report = f"bench report {args.results_dir} -o reports/{Path(args.scenario).stem}.html"
    print(report)
    if args.dry_run:
        return 0
    failed = [name for name, code in launch.launch(prepared, Path(args.results_dir)) if code != 0]
    for name in failed:
        print(f"bench: the launch on {name} failed (see SkyPilot's output above)", file=sys.stderr)
    return cmd_report(build_parser().parse_args(report.split()[1:])) or (1 if failed else 0)


def cmd_suite(args) -> int:
    """`bench suite FILE`: every entry resolved and planned first, then run in order, then
    one report. With --dry-run: the plans, and which optional entries would be skipped."""
    from rich.console import Console
    from rich.markup import escape

    from harness.display import RunProgress, summary
    from harness.suite import run_suite

    console = Console(stderr=args.json)
    options = {
        "results_dir": Path(args.results_dir) if args.results_dir else None,
        "interpreters": dict(_key_value(p, "--python") for p in args.python),
        "force": args.force,
        "timeout_s": args.timeout,
        "prices_file": args.prices,
        "command": sys.argv,
    }
    result = run_suite(args.suite, RunProgress(console, enabled=not args.no_progress), options, dry_run=args.dry_run)
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "index": o.index,
                        "label": o.label,
                        "scenario": o.scenario_path,
                        "backend": o.entry.backend,
                        "skipped": o.skipped_reason,
                        "runs": [
                            {
                                "variant": run.variant,
                                "repeat": run.repeat,
                                "plan": plan.model_dump(mode="json") if plan else None,
                            }
                            for run, plan in (o.result.plans if o.result else [])
                        ],
                        "records": [r.path for r in (o.result.records if o.result else [])],
                    }
                    for o in result.outcomes
                ],
                indent=1,
            )
        )
    for o in result.outcomes:
        console.print(f"[bold]{o.index}: {escape(o.label)}[/bold] ({escape(o.scenario_path)} on {o.entry.backend})")
        if o.skipped_reason:
            console.print(f"  [yellow]skipped: {escape(o.skipped_reason)}[/yellow]")
        elif args.dry_run and not args.json:
            _print_plans(o.result.plans, False)
    records = [r for o in result.outcomes if o.result for r in o.result.records]
    if records:
        console.print(summary(records, console))
    if result.report_path:
        console.print(f"wrote the suite's report to {result.report_path}")
    return 1 if result.failed else 0


def cmd_backends(args) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from harness import registry

    interpreters = dict(_key_value(p, "--python") for p in args.python)
    registry.check_interpreters(interpreters)  # a misspelt --python name is refused, not ignored
    backends = registry.all_backends()
    how = "one at a time: this accelerator admits one process" if registry.exclusive_accelerator() else "in parallel"
    print(
        f"probing {len(backends)} backends, a worker process each ({how}), unless the probe cache answers...",
        file=sys.stderr,
        flush=True,
    )
    results = _probe_cached(list(backends), interpreters, args.fresh)
    table = Table(title="bench backends")
    for column in ("backend", "available", "devices", "python", "reason / summary"):
        table.add_column(column)
    rows = []
    for (name, info), result in zip(backends.items(), results):
        p = result.probe
        devices = f"{p.device_kind} x{p.device_count} ({p.device_name})" if p.available else "-"
        table.add_row(
            name,
            "yes" if p.available else "no",
            escape(devices),
            escape(result.python),
            escape(p.reason or info.summary),
        )
        rows.append({"name": name, "python": result.python, **p.to_json()})
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        Console().print(table)
    return 0


def _probe_cached(names: list[str], interpreters: dict[str, str], fresh: bool) -> list:
    """Probes, from the probe cache where nothing they depend on changed (harness.probe_cache)."""
    from harness import probe_cache

    results, cached, problem = probe_cache.probe_all(names, interpreters, fresh=fresh)
    if cached:
        print(
            f"{cached} of {len(names)} from the probe cache ({probe_cache.cache_file()}: interpreter, "
            "packages and code unchanged; --fresh probes again)",
            file=sys.stderr,
        )
    if problem:
        print(f"bench: warning: {problem}", file=sys.stderr)
    return results


def cmd_validate(args) -> int:
    """Every file is checked (a bad one does not hide the next): an `ok` line each on
    stdout, one `bench: ` line per bad file on stderr, exit 2 if any was bad."""
    from collections import Counter

    from harness.loader import validate_runs
    from harness.spec import tasks_of

    bad = 0
    for path in args.scenarios:
        try:
            runs = validate_runs(path)
        except BenchError as exc:
            _print_error(exc)
            bad += 1
            continue
        tasks = Counter(task for run in runs for task in tasks_of(run.scenario))
        records = sum(tasks.values())
        kinds = ", ".join(f"{n} {task}" for task, n in tasks.items())
        print(f"{path}: ok ({_plural(len(runs), 'run')}, {_plural(records, 'record')}: {kinds})")
    return 2 if bad else 0


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def cmd_show(args) -> int:
    from rich.console import Console

    from harness.display import show_projection, show_record
    from harness.projection import SUFFIX, load_projection, load_projections
    from harness.store import load_record, load_records

    console = Console()
    shown = []  # every target is read before anything is printed: a bad one is refused whole
    projected = []  # projections: shown after the records, labelled projected
    for target in args.records:
        path = Path(target)
        if not path.exists():
            raise SpecError(str(path), "", "no such results file or directory")
        if path.name.endswith(SUFFIX):
            try:
                projected.append(load_projection(path))
            except ValueError as exc:
                raise SpecError(str(path), "", str(exc).removeprefix(f"{path}: ")) from None
            continue
        if path.is_dir():
            projected.extend(load_projections([path]))
            loaded = load_records([path])
            for warning in loaded.warnings:
                _stderr_console().print(f"[yellow]warning: {warning}[/yellow]")
            if not loaded.records and not projected:
                skipped = f" ({len(loaded.warnings)} unreadable files skipped)" if loaded.warnings else ""
                raise SpecError(str(path), "", f"no result records found{skipped}")
            shown.extend(loaded.records)
        else:
            try:
                shown.append(load_record(path))
            except ValueError as exc:
                raise SpecError(str(path), "", str(exc).removeprefix(f"{path}: ")) from None
    for record in shown:
        show_record(record, console)
    for projection in projected:
        show_projection(projection, console)
    return 0


def cmd_migrate(args) -> int:
    """`bench migrate DIR...`: older records rewritten to the current schema, originals
    kept under DIR/.orig/; exit 2 if any record could not be migrated (it is left as it was)."""
    from harness.store import SCHEMA_VERSION, migrate_directory

    refused = 0
    for target in args.directories:
        if not Path(target).is_dir():
            raise SpecError(target, "", "no such results directory")
        done = migrate_directory(Path(target))
        for path, why in done.refused:
            print(f"bench: {path}: not migrated: {why}", file=sys.stderr)
        refused += len(done.refused)
        kept = f" (originals kept under {done.originals})" if done.rewritten else ""
        print(
            f"{target}: {_plural(len(done.rewritten), 'record')} migrated to schema {SCHEMA_VERSION}{kept}, "
            f"{len(done.current)} already schema {SCHEMA_VERSION}, {len(done.refused)} refused"
        )
    return 2 if refused else 0


def cmd_gate(args) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from harness.gate import failing, load_budgets, markdown, no_data_reason, require_checks, run_gate

    console = Console(stderr=True)
    budgets = load_budgets(args.budgets)
    current = _load_or_fail(args.results, console)
    baseline = _load_or_fail([args.baseline], console) if args.baseline else None
    checks = run_gate(current, baseline, budgets, args.budgets or "budgets")
    require_checks(checks, ", ".join(args.results), args.budgets, args.baseline, budgets)
    summary = markdown(checks, args.allow_no_data)
    failed = failing(checks, args.allow_no_data)
    if args.markdown:
        try:
            Path(args.markdown).write_text(summary)
        except OSError as exc:
            raise SpecError(f"--markdown {args.markdown}", "", f"cannot write: {exc.strerror or exc}") from None
    if args.format == "md":
        print(summary, end="")
    else:
        table = Table(title="bench gate")
        for column in ("run", "metric", "check", "verdict", "detail"):
            table.add_column(column)
        for c in checks:
            style = "red" if c in failed else ("yellow" if c.verdict in ("noise", "no-data") else "green")
            table.add_row(escape(c.group), c.metric, c.kind, f"[{style}]{c.verdict}[/{style}]", escape(c.detail))
        Console().print(table)
    for c in failed:
        if c.failed:
            print(f"REGRESSION {c.group}: {c.detail}", file=sys.stderr)
    missing = no_data_reason(checks)
    if missing and not args.allow_no_data:
        print(
            f"bench: gate failed: {missing}; a gate that compares nothing must not pass "
            "(--allow-no-data accepts missing data)",
            file=sys.stderr,
        )
    return 1 if failed else 0


def _load_or_fail(paths, console) -> list[RunRecord]:
    from harness.store import load_records

    for path in paths:
        if not Path(path).exists():
            raise SpecError(str(path), "", "no such results file or directory")
    loaded = load_records(paths)
    for warning in loaded.warnings:
        console.print(f"[yellow]warning: {warning}[/yellow]")
    if not loaded.records:
        raise SpecError(", ".join(map(str, paths)), "", "no result records found")
    return loaded.records


def cmd_cost(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from harness.cost import check_speedup, cost_ratio, cost_statement, load_catalog, parse_fleet, sensitivity

    check_speedup(args.speedup)
    catalog = load_catalog(args.prices)
    a, b = parse_fleet(args.a, catalog, "--a"), parse_fleet(args.b, catalog, "--b")
    result = cost_ratio(args.speedup, a, b, catalog)
    rows = sensitivity(args.speedup, a, b, catalog)
    if args.json:
        print(json.dumps({**result, "sensitivity": rows}, indent=1))
        return 0
    console = Console()
    console.print(cost_statement(result))
    for p in result["prices"]:
        console.print(
            f"  price {p['accelerator']}: ${p['usd_per_chip_hour']}/chip-h ({p['pricing']}; {p['source']}, {p['date']})"
        )
    table = Table(title="cost ratio (a/b) as one side's price varies")
    for column in ("price x", f"{a} price scaled", f"{b} price scaled"):
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(
            f"{row['price_factor']:.2f}",
            f"{row['cost_ratio_if_a_price_scaled']:.3f}",
            f"{row['cost_ratio_if_b_price_scaled']:.3f}",
        )
    console.print(table)
    return 0


def cmd_export(args) -> int:
    from harness.export import to_pytest_benchmark
    from harness.store import write_json_atomic

    console = _stderr_console()
    records = _load_or_fail(args.results, console)
    try:
        document = to_pytest_benchmark(records)
    except ValueError as exc:
        raise SpecError(", ".join(args.results), "", str(exc)) from None
    write_json_atomic(Path(args.output), document)
    left = len(records) - len(document["benchmarks"])
    why = f"; {_plural(left, 'record')} without optimizer steps (serve runs) or failed, not exported" if left else ""
    console.print(f"wrote {len(document['benchmarks'])} benchmarks to {args.output}{why}")
    return 0


def _stderr_console():
    from rich.console import Console

    return Console(stderr=True)


def cmd_report(args) -> int:
    from rich.markup import escape

    from harness.projection import load_projections
    from reports.factors import accelerator_matches
    from reports.model import build
    from reports.render import output_format, write

    console = _stderr_console()
    path, fmt = output_format(args.output, args.format)  # a bad -o is refused before reading anything
    projections = _projections_or_fail(args.results, load_projections)
    records = _load_or_fail(args.results, console) if not projections else _load_records_quietly(args.results, console)
    for field, wanted in (("scenario", args.scenario), ("backend", args.backend)):
        if wanted:
            records = [r for r in records if _record_field(r, field) in wanted]
            projections = [
                p for p in projections if (p.scenario["name"] if field == "scenario" else p.backend) in wanted
            ]
    if args.accelerator:
        records = [r for r in records if any(accelerator_matches(r.accelerator, a) for a in args.accelerator)]
    if not records and not projections:
        raise SpecError(", ".join(args.results), "", "no records left after the filters")
    # a selector naming 0 or 2+ rows: exit 2
    report = build(records, args.baseline, tuple(args.compare), projections=projections)
    for warning in report.warnings:
        console.print(f"[yellow]warning: {escape(warning)}[/yellow]")
    write(report, path, fmt)
    console.print(f"wrote {fmt} report of {len(records)} records to {path}")
    return 0


def _projections_or_fail(paths, load) -> list:
    """The projections stored under the results paths; a bad one is refused, naming it."""
    for path in paths:
        if not Path(path).exists():
            raise SpecError(str(path), "", "no such results file or directory")
    try:
        return load(paths)
    except ValueError as exc:
        raise SpecError(str(exc).split(": ", 1)[0], "", str(exc).split(": ", 1)[-1]) from None


def _load_records_quietly(paths, console) -> list[RunRecord]:
    """Records beside projections: none is not an error (a report of projections only)."""
    from harness.store import load_records

    loaded = load_records(paths)
    for warning in loaded.warnings:
        console.print(f"[yellow]warning: {warning}[/yellow]")
    return loaded.records


def _record_field(record: RunRecord, field: str) -> str:
    return {"scenario": record.scenario.name, "backend": record.backend.name}[field]


def _run_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("scenario")
    run.add_argument("--backend", help="backend name (default: the scenario's, else the best available)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a dotted field")
    run.add_argument("--results-dir", default="results")
    run.add_argument(
        "--profile",
        default="auto",
        help="profile to apply: auto (the one named after the device kind: cpu, cuda, tpu), none, or a name",
    )
    run.add_argument(
        "--python",
        action="append",
        default=[],
        metavar="BACKEND=PATH",
        help="interpreter for a backend's workers (also BENCH_PYTHON_<BACKEND>)",
    )
    run.add_argument(
        "--force",
        action="store_true",
        help="rerun runs that already have a successful record (multi-host jobs, "
        "parallel.hosts > 1, always rerun: each host sees only its own records)",
    )
    run.add_argument("--timeout", type=float, help="per-run time limit in seconds (overrides run_timeout_s)")
    run.add_argument("--prices", help="a prices file laid over the shipped catalog")
    run.add_argument("--json", action="store_true", help="print the records as JSON on stdout")
    run.add_argument("--no-progress", action="store_true")
    run.add_argument(
        "--trace",
        type=int,
        nargs="?",
        const=3,
        metavar="STEPS",
        help="capture a profiler trace of STEPS measured steps (default 3), saved next to the record",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print every run's execution plan (devices, rows, accumulation, dtypes, lr) and run nothing",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench", description="Benchmark LLM fine-tuning and serving on TPU, GPU and CPU."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a scenario (every matrix cell and repeat) on one backend")
    _run_arguments(run)
    run.set_defaults(func=cmd_run)
    plan = sub.add_parser("plan", help="print a scenario's execution plan on a backend, run nothing (run --dry-run)")
    _run_arguments(plan)
    plan.add_argument(
        "--compile-for",
        action="append",
        default=[],
        metavar="TPU_SLICE",
        help="compile the train step ahead of time for a TPU slice (tpu-v5e-8, tpu-v5p-8, ...; repeatable) and store "
        "a projection: fits, memory, FLOPs, collectives, a roofline bound (jax-tunix, torchax; BENCH_PYTHON_TPU)",
    )
    plan.add_argument(
        "--max-compiles", type=int, default=4, help="with --compile-for: compile at most the N longest distinct lengths"
    )
    plan.set_defaults(func=cmd_plan, dry_run=True)

    launch = sub.add_parser("launch", help="run a scenario on several accelerators through SkyPilot, then report")
    launch.add_argument("scenario")
    launch.add_argument(
        "--on",
        action="append",
        default=[],
        metavar="ACCELERATOR[:COUNT][xNODES][=BACKEND]",
        help="a target, e.g. tpu-v5p-8, H100:2, H100:8x2 (two nodes); repeatable",
    )
    launch.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to bench run")
    launch.add_argument("--out-dir", default="launch", help="where the SkyPilot task files are written")
    launch.add_argument("--results-dir", default="results", help="where the records are gathered")
    launch.add_argument("--bucket", help="a bucket (gs://, s3://) mounted for the records, instead of rsync back")
    launch.add_argument(
        "--spot", action="store_true", help="managed spot jobs (recovered after preemption); needs --bucket"
    )
    launch.add_argument("--dry-run", action="store_true", help="write the task files and print the commands only")
    launch.set_defaults(func=cmd_launch)

    backends = sub.add_parser("backends", help="list backends, whether they can run here, and why not")
    backends.add_argument("--python", action="append", default=[], metavar="BACKEND=PATH")
    backends.add_argument("--json", action="store_true")
    backends.add_argument("--fresh", action="store_true", help="probe every backend again (ignore the probe cache)")
    backends.set_defaults(func=cmd_backends)

    validate = sub.add_parser("validate", help="check scenario files without running them")
    validate.add_argument("scenarios", nargs="+")
    validate.set_defaults(func=cmd_validate)

    show = sub.add_parser("show", help="print result records (files or directories)")
    show.add_argument("records", nargs="+")
    show.set_defaults(func=cmd_show)
    migrate = sub.add_parser("migrate", help="rewrite older result records to the current schema (originals kept)")
    migrate.add_argument("directories", nargs="+", metavar="DIR")
    migrate.set_defaults(func=cmd_migrate)
    gate = sub.add_parser("gate", help="check results against budgets; exit 1 on a regression beyond noise")
    gate.add_argument("results", nargs="+")
    gate.add_argument("--budgets", help="YAML: budgets (absolute limits), relative (e.g. step_time_s: +5%%), alpha")
    gate.add_argument("--baseline", help="results directory to compare against (relative limits)")
    gate.add_argument("--markdown", help="also write a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)")
    gate.add_argument("--format", choices=("table", "md"), default="table")
    gate.add_argument(
        "--allow-no-data",
        action="store_true",
        help="pass checks that have no data (no comparable baseline run, metric absent); by default they fail the gate",
    )
    gate.set_defaults(func=cmd_gate)
    cost = sub.add_parser("cost", help="what a speed-up means in money: cost ratio, price ratio, sensitivity")
    cost.add_argument("--speedup", type=float, required=True, help="how many times faster a is than b")
    cost.add_argument("--a", required=True, help="ACCELERATOR:CHIPS or TPU slice, e.g. v5p-8")
    cost.add_argument("--b", required=True, help="ACCELERATOR:CHIPS, e.g. h100-sxm:2")
    cost.add_argument("--prices", help="a prices file laid over the shipped catalog")
    cost.add_argument("--json", action="store_true")
    cost.set_defaults(func=cmd_cost)
    report = sub.add_parser("report", help="write an HTML (or Markdown, CSV) comparison of result records")
    report.add_argument("results", nargs="*", default=["results"])
    report.add_argument(
        "-o",
        "--output",
        help="the file to write; its extension (.html, .md, .csv) is the format "
        "(default: reports/index.html, or reports/index.md / .csv with --format)",
    )
    report.add_argument("--format", choices=("html", "md", "csv"), help="without -o: which default file to write")
    report.add_argument("--scenario", action="append", help="only these scenarios (repeatable)")
    report.add_argument("--backend", action="append", help="only these backends (repeatable)")
    report.add_argument(
        "--accelerator",
        action="append",
        help="only these accelerators: a catalog key, KEY:CHIPS or a TPU slice such as v5p-8 (repeatable)",
    )
    report.add_argument(
        "--baseline",
        metavar="'KEY=VALUE ...'",
        help="the row every factor's levels are compared to, by terms that must all match: variant=, "
        "backend=, accelerator= (v5p-8, h100-sxm:2), precision= or a configuration field "
        "(sequence.padding=static); default: the first run made. Naming no row, or several rows of "
        "one scenario, is refused, listing the candidates",
    )
    report.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="'KEY=VALUE ...'",
        help="also compare this row directly against the baseline (repeatable); must name one row",
    )
    report.set_defaults(func=cmd_report)

    export = sub.add_parser("export", help="write records as pytest-benchmark JSON (for pytest-benchmark compare)")
    export.add_argument("results", nargs="+")
    export.add_argument("-o", "--output", required=True)
    export.add_argument("--format", choices=("pytest-benchmark",), default="pytest-benchmark")
    export.set_defaults(func=cmd_export)

    suite = sub.add_parser("suite", help="run a suite file (scenario x backend entries) then write one report")
    suite.add_argument("suite")
    suite.add_argument("--results-dir", help="default: results/<suite name>")
    suite.add_argument("--python", action="append", default=[], metavar="BACKEND=PATH")
    suite.add_argument(
        "--force",
        action="store_true",
        help="rerun runs that already have a successful record (multi-host jobs, "
        "parallel.hosts > 1, always rerun: each host sees only its own records)",
    )
    suite.add_argument("--timeout", type=float, help="per-run time limit in seconds (overrides run_timeout_s)")
    suite.add_argument("--prices", help="a prices file laid over the shipped catalog")
    suite.add_argument("--json", action="store_true", help="print each entry's plans (dry run) or record paths as JSON")
    suite.add_argument("--no-progress", action="store_true")
    suite.add_argument("--dry-run", action="store_true", help="resolve and plan every entry; run nothing")
    suite.set_defaults(func=cmd_suite)
    return parser


def _print_error(exc: BenchError) -> None:
    """`bench: <message>`, one line whatever the message holds."""
    print("bench: " + " ".join(str(exc).split()), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BenchError as exc:
        _print_error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        print("bench: interrupted; the run in flight was not recorded", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
