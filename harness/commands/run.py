"""`bench run SCENARIO`: every matrix cell and repeat on one backend, then a summary."""

from __future__ import annotations

import json
import sys

from harness.basics.errors import SpecError
from harness.commands.common import FORCE_HELP, PRICES_HELP, TIMEOUT_HELP, interpreters, plural, print_plans


def add_parser(sub) -> None:
    parser = sub.add_parser("run", help="run a scenario (every matrix cell and repeat) on one backend")
    add_run_arguments(parser)


def add_run_arguments(run) -> None:
    """The flags `bench run` and `bench plan` share."""
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
    run.add_argument("--force", action="store_true", help=FORCE_HELP)
    run.add_argument("--timeout", type=float, help=TIMEOUT_HELP)
    run.add_argument("--prices", help=PRICES_HELP)
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


def run(args) -> int:
    from rich.console import Console

    from harness.run.runner import run_sweep
    from harness.terminal.display import RunProgress, summary

    console = Console(stderr=args.json)
    result = run_sweep(_request(args), RunProgress(console, enabled=not args.no_progress))
    for variant, why in result.refused:  # the other cells ran (or would run)
        print(f"bench: refused [{variant}]: {why}", file=sys.stderr)
    if args.dry_run:
        return print_plans(result.plans, args.json, result.backend)
    if result.records:
        console.print(summary(result.records, console))
    _print_skipped(result.skipped_records, console)
    if args.json:
        _print_json(result)
    _print_rescued(result.rescued)
    _print_secondary(result.secondary)
    return 1 if result.failed or result.rescued else 0


def _request(args):
    from harness.records.locations import location
    from harness.run.runner import RunRequest
    from harness.scenario.loader import parse_override

    return RunRequest(
        scenario_path=args.scenario,
        backend=args.backend,
        overrides={**dict(parse_override(s) for s in args.set), **_trace_override(args.trace)},
        results_dir=location(args.results_dir),
        profile=args.profile,
        interpreters=interpreters(args.python),
        force=args.force,
        timeout_s=args.timeout,
        prices_file=args.prices,
        command=sys.argv,
        dry_run=args.dry_run,
    )


def _trace_override(steps: int | None) -> dict[str, int]:
    """`--trace [STEPS]` is `--set trace.steps=STEPS`: the scenario's `trace` field."""
    if steps is None:
        return {}
    if steps < 2:
        raise SpecError(
            "--trace", str(steps), "trace at least 2 steps (the trace's step time is the period between two)"
        )
    return {"trace.steps": steps}


def _print_skipped(skipped: list[dict], console) -> None:
    """Runs skipped as already done: their existing records' figures, said to be those."""
    from harness.records.store import load_record
    from harness.terminal.display import summary

    if not skipped:
        return
    records = [load_record(s["path"]) for s in skipped]
    console.print(
        f"{plural(len(records), 'run')} skipped: already recorded (--force reruns them); "
        "the figures below are their existing records':"
    )
    console.print(summary(records, console))


def _print_json(result) -> None:
    skipped = [
        {"skipped": True, **s, "reason": "already has a successful record (--force reruns it)"}
        for s in result.skipped_records
    ]
    ran = [{**r.to_json(), "path": r.path} for r in result.records]
    print(json.dumps(skipped + ran, indent=1))


def _print_rescued(rescued: list[dict]) -> None:
    for one in rescued:
        print(
            f"bench: could not write the record to {one['results_dir']} ({one['problem']}); saved it to {one['path']}",
            file=sys.stderr,
        )


def _print_secondary(parts: list[dict]) -> None:
    """Multi-host: this host took part; host 0 writes the record."""
    for part in parts:
        print(
            f"bench: host {part['host_rank']} of {part['hosts']} [{part['variant']}] repeat {part['repeat']}: "
            + (
                "done; the job's record is written by host 0"
                if part["status"] == "ok"
                else f"failed: {part['reason']}\n{part['log_tail'] or ''}"
            ),
            file=sys.stderr,
        )
