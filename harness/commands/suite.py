"""`bench suite FILE`: every entry resolved and planned first, then run in order, then
one report. With --dry-run: the plans, and which optional entries would be skipped; an
entry whose backend is not installed here is previewed (planned on this host's CPU) and
said to be not installed, so a TPU VM's suite can be read on a laptop."""

from __future__ import annotations

import json
import sys

from harness.commands.common import FORCE_HELP, PRICES_HELP, TIMEOUT_HELP, interpreters, plans_json, print_plans


def add_parser(sub) -> None:
    suite = sub.add_parser("suite", help="run a suite file (scenario x backend entries) then write one report")
    suite.add_argument("suite")
    suite.add_argument("--results-dir", help="default: results/<suite name>")
    suite.add_argument("--python", action="append", default=[], metavar="BACKEND=PATH")
    suite.add_argument("--force", action="store_true", help=FORCE_HELP)
    suite.add_argument("--timeout", type=float, help=TIMEOUT_HELP)
    suite.add_argument("--prices", help=PRICES_HELP)
    suite.add_argument("--json", action="store_true", help="print each entry's plans (dry run) or record paths as JSON")
    suite.add_argument("--no-progress", action="store_true")
    suite.add_argument("--dry-run", action="store_true", help="resolve and plan every entry; run nothing")


def run(args) -> int:
    from rich.console import Console

    from harness.commands.suite_file import run_suite
    from harness.records.locations import location
    from harness.terminal.display import RunProgress, summary

    console = Console(stderr=args.json)
    options = {
        "results_dir": location(args.results_dir) if args.results_dir else None,
        "interpreters": interpreters(args.python),
        "force": args.force,
        "timeout_s": args.timeout,
        "prices_file": args.prices,
        "command": sys.argv,
    }
    result = run_suite(args.suite, RunProgress(console, enabled=not args.no_progress), options, dry_run=args.dry_run)
    if args.json:
        print(json.dumps([_outcome_json(o) for o in result.outcomes], indent=1))
    _print_outcomes(result.outcomes, console, plans=args.dry_run and not args.json)
    records = [r for o in result.outcomes if o.result for r in o.result.records]
    if records:
        console.print(summary(records, console))
    if result.report_path:
        console.print(f"wrote the suite's report to {result.report_path}")
    return 1 if result.failed else 0


def _outcome_json(o) -> dict:
    return {
        "index": o.index,
        "label": o.label,
        "scenario": o.scenario_path,
        "backend": o.entry.backend,
        "skipped": o.skipped_reason,
        "not_installed": o.not_installed,
        "runs": plans_json(o.result.plans if o.result else [], o.entry.backend),
        "records": [r.path for r in (o.result.records if o.result else [])],
    }


def _print_outcomes(outcomes: list, console, *, plans: bool) -> None:
    """Each entry: its label, and why it was skipped or (a dry run) its plans."""
    from rich.markup import escape

    for o in outcomes:
        console.print(
            f"[bold]{o.index}: {escape(o.label)}[/bold] ({escape(o.scenario_path)} on {o.entry.backend})",
            soft_wrap=True,
        )
        if o.skipped_reason:
            console.print(f"  [yellow]skipped: {escape(o.skipped_reason)}[/yellow]", soft_wrap=True)
        if o.not_installed:
            console.print(f"  [yellow]{escape(o.not_installed)}[/yellow]", soft_wrap=True)
        if (o.skipped_reason or o.not_installed) and plans and o.result:
            console.print(
                "  a preview: not installed here, so planned on one device of this host's CPU "
                "(where the backend is installed, its probe names the devices)",
                soft_wrap=True,
            )
        if plans and o.result:
            print_plans(o.result.plans, False, o.entry.backend)
