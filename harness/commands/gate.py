"""`bench gate RESULTS...`: results checked against budgets and a baseline; exit 1 on a
regression beyond noise, a failed run, a bad figure or an unreadable record (or, unless
--allow-no-data, a check with no data or one that cannot tell); harness/gate/gate.py states
the rules."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.basics.errors import SpecError
from harness.commands.common import require_paths


def add_parser(sub) -> None:
    gate = sub.add_parser("gate", help="check results against budgets; exit 1 on a regression beyond noise")
    gate.add_argument("results", nargs="+")
    gate.add_argument("--budgets", help="YAML: budgets (absolute limits), relative (e.g. step_time_s: +5%%), alpha")
    gate.add_argument("--baseline", help="results directory to compare against (relative limits)")
    gate.add_argument("--markdown", help="also write a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)")
    gate.add_argument("--format", choices=("table", "md", "json"), default="table")
    gate.add_argument(
        "--history",
        metavar="DIR",
        help="results of earlier runs (directory or fsspec URL): each current configuration is held to the band "
        "of its last --window runs there (harness/gate/history.py states the rule)",
    )
    gate.add_argument("--window", type=int, default=10, metavar="N", help="runs of history in the band (default 10)")
    gate.add_argument(
        "--metric",
        action="append",
        metavar="M",
        help="with --history: a metric to hold to its band (repeatable; default step_time_s for training, "
        "ttft_s and output_throughput_tok_s for serving)",
    )
    gate.add_argument(
        "--reference",
        metavar="DIR",
        help="with --history: a pinned run set (the last release's results) each configuration is also held to, "
        "so a slow creep fails once its total passes --creep-limit (default: the first runs since the last "
        "accepted change point)",
    )
    gate.add_argument(
        "--creep-limit",
        default="10%",
        metavar="PCT",
        help="with --history: the total drift from the reference allowed (default 10%%)",
    )
    gate.add_argument(
        "--since",
        metavar="COMMIT_OR_DATE",
        help="with --history: accept the history from this commit (prefix) or ISO date on, e.g. after an "
        "intended slowdown",
    )
    gate.add_argument(
        "--allow-no-data",
        action="store_true",
        help="pass checks that have no data (no comparable baseline run, metric absent for a stated reason) or "
        "that cannot tell a change within the limit from noise; by default they fail the gate",
    )
    gate.add_argument(
        "--skip-unreadable",
        action="store_true",
        help="skip files that look like records but cannot be read (by default each fails the gate)",
    )
    gate.add_argument(
        "--strict",
        action="store_true",
        help="fail on warnings too (a bare budget limit over 100x away from every measured value: a likely unit mistake)",
    )


def run(args) -> int:
    from rich.console import Console

    from harness.gate.gate import as_json, failing, load_budgets, markdown, require_checks, run_gate

    console = Console(stderr=True)
    for flag, value in (("--reference", args.reference), ("--since", args.since)):
        if value and not args.history:
            raise SpecError(flag, value, "compares history: give --history DIR too")
    budgets = load_budgets(args.budgets)
    current, unreadable = _load(args.results, console, "results", args.skip_unreadable)
    baseline = None
    if args.baseline:
        baseline, unreadable_base = _load([args.baseline], console, "baseline", args.skip_unreadable)
        unreadable += unreadable_base
    checks = unreadable + run_gate(current, baseline, budgets, args.budgets or "budgets")
    if args.history:
        checks += _history_checks(args, current, console)
    require_checks(checks, ", ".join(args.results), args.budgets, args.baseline, budgets)
    summary = markdown(checks, args.allow_no_data, args.strict)
    failed = failing(checks, args.allow_no_data, args.strict)
    if args.markdown:
        _write_markdown(args.markdown, summary)
    if args.format == "md":
        print(summary, end="")
    elif args.format == "json":
        print(json.dumps(as_json(checks, args.allow_no_data, args.strict), indent=1))
    else:
        _print_table(checks, failed)
    _print_failures(checks, failed, args.allow_no_data)
    return 1 if failed else 0


def _load(paths, console, where: str, skip_unreadable: bool) -> tuple[list, list]:
    """The records under `paths`, and a FAILED check for each file that looks like a
    record and cannot be read (none with --skip-unreadable: then a warning each)."""
    from harness.gate.gate import unreadable_checks
    from harness.records.store import load_records

    require_paths(paths)
    loaded = load_records(paths)
    if skip_unreadable:
        for warning in loaded.warnings:
            console.print(f"[yellow]warning: {warning}[/yellow]")
    if not loaded.records and not loaded.unreadable:
        raise SpecError(", ".join(map(str, paths)), "", "no result records found")
    return loaded.records, ([] if skip_unreadable else unreadable_checks(loaded.unreadable, where))


def _history_checks(args, current, console) -> list:
    from harness.gate.gate import _PERCENT, relative_threshold
    from harness.gate.history import MIN_HISTORY, check_metric_names, history_checks

    check_metric_names(args.metric)
    if args.window < MIN_HISTORY:
        raise SpecError("--window", str(args.window), f"a band needs at least {MIN_HISTORY} runs")
    if not _PERCENT.match(args.creep_limit):
        raise SpecError("--creep-limit", args.creep_limit, "expected a percentage such as 10%")
    history, unreadable = _load([args.history], console, "history", args.skip_unreadable)
    reference = None
    if args.reference:
        reference, unreadable_ref = _load([args.reference], console, "reference", args.skip_unreadable)
        unreadable += unreadable_ref
    checks = history_checks(
        current,
        history,
        args.window,
        args.metric,
        reference=reference,
        creep=relative_threshold(args.creep_limit),
        since=args.since,
    )
    return unreadable + checks


def _write_markdown(path: str, summary: str) -> None:
    try:
        Path(path).write_text(summary)
    except OSError as exc:
        raise SpecError(f"--markdown {path}", "", f"cannot write: {exc.strerror or exc}") from None


def _print_table(checks: list, failed: list) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from harness.gate.gate import value_and_limit

    table = Table(title="bench gate")
    for column in ("run", "metric", "check", "measured", "limit", "verdict", "detail"):
        # the figures and the metric's name never wrap at 80 columns; the run and detail do
        short = column in ("metric", "check", "measured", "limit", "verdict")
        table.add_column(
            column, justify="right" if column in ("measured", "limit") else "left", no_wrap=short, overflow="fold"
        )
    for c in checks:
        style = (
            "red"
            if c in failed
            else ("yellow" if c.verdict in ("noise", "no-data", "cannot-tell", "warning") else "green")
        )
        verdict = c.verdict.upper() if c in failed else c.verdict
        table.add_row(
            escape(c.group), c.metric, c.kind, *value_and_limit(c), f"[{style}]{verdict}[/{style}]", escape(c.detail)
        )
    Console().print(table)


def _print_failures(checks: list, failed: list, allow_no_data: bool) -> None:
    from harness.gate.gate import no_data_reason

    for c in failed:
        if c.verdict not in ("no-data",):
            word = {"regression": "REGRESSION", "cannot-tell": "CANNOT-TELL", "warning": "WARNING"}.get(
                c.verdict, "FAILED"
            )
            print(f"{word} {c.group}: {c.detail}", file=sys.stderr)
    missing = no_data_reason(checks)
    if missing and not allow_no_data:
        print(
            f"bench: gate failed: {missing}; a gate that compares nothing must not pass "
            "(--allow-no-data accepts missing data)",
            file=sys.stderr,
        )
