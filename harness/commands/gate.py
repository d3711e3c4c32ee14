"""`bench gate RESULTS...`: results checked against budgets and a baseline; exit 1 on a
regression beyond noise (or, unless --allow-no-data, a check with no data)."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.commands.common import load_or_fail
from harness.errors import SpecError


def add_parser(sub) -> None:
    gate = sub.add_parser("gate", help="check results against budgets; exit 1 on a regression beyond noise")
    gate.add_argument("results", nargs="+")
    gate.add_argument("--budgets", help="YAML: budgets (absolute limits), relative (e.g. step_time_s: +5%%), alpha")
    gate.add_argument("--baseline", help="results directory to compare against (relative limits)")
    gate.add_argument("--markdown", help="also write a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY)")
    gate.add_argument("--format", choices=("table", "md"), default="table")
    gate.add_argument(
        "--history",
        metavar="DIR",
        help="results of earlier runs (directory or fsspec URL): each current configuration is held to the band "
        "of its last --window runs there (harness/history.py states the rule)",
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
        "--allow-no-data",
        action="store_true",
        help="pass checks that have no data (no comparable baseline run, metric absent); by default they fail the gate",
    )


def run(args) -> int:
    from rich.console import Console

    from harness.gate import failing, load_budgets, markdown, require_checks, run_gate

    console = Console(stderr=True)
    budgets = load_budgets(args.budgets)
    current = load_or_fail(args.results, console)
    baseline = load_or_fail([args.baseline], console) if args.baseline else None
    checks = run_gate(current, baseline, budgets, args.budgets or "budgets")
    if args.history:
        checks += _history_checks(args, current, console)
    require_checks(checks, ", ".join(args.results), args.budgets, args.baseline, budgets)
    summary = markdown(checks, args.allow_no_data)
    failed = failing(checks, args.allow_no_data)
    if args.markdown:
        _write_markdown(args.markdown, summary)
    if args.format == "md":
        print(summary, end="")
    else:
        _print_table(checks, failed)
    _print_failures(checks, failed, args.allow_no_data)
    return 1 if failed else 0


def _history_checks(args, current, console) -> list:
    from harness.history import MIN_HISTORY, check_metric_names, history_checks

    check_metric_names(args.metric)
    if args.window < MIN_HISTORY:
        raise SpecError("--window", str(args.window), f"a band needs at least {MIN_HISTORY} runs")
    return history_checks(current, load_or_fail([args.history], console), args.window, args.metric)


def _write_markdown(path: str, summary: str) -> None:
    try:
        Path(path).write_text(summary)
    except OSError as exc:
        raise SpecError(f"--markdown {path}", "", f"cannot write: {exc.strerror or exc}") from None


def _print_table(checks: list, failed: list) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from harness.gate import value_and_limit

    table = Table(title="bench gate")
    for column in ("run", "metric", "check", "measured", "limit", "verdict", "detail"):
        # the figures and the metric's name never wrap at 80 columns; the run and detail do
        short = column in ("metric", "check", "measured", "limit", "verdict")
        table.add_column(
            column, justify="right" if column in ("measured", "limit") else "left", no_wrap=short, overflow="fold"
        )
    for c in checks:
        style = "red" if c in failed else ("yellow" if c.verdict in ("noise", "no-data") else "green")
        verdict = c.verdict.upper() if c in failed else c.verdict
        table.add_row(
            escape(c.group), c.metric, c.kind, *value_and_limit(c), f"[{style}]{verdict}[/{style}]", escape(c.detail)
        )
    Console().print(table)


def _print_failures(checks: list, failed: list, allow_no_data: bool) -> None:
    from harness.gate import no_data_reason

    for c in failed:
        if c.failed:
            print(f"{'REGRESSION' if c.verdict == 'regression' else 'FAILED'} {c.group}: {c.detail}", file=sys.stderr)
    missing = no_data_reason(checks)
    if missing and not allow_no_data:
        print(
            f"bench: gate failed: {missing}; a gate that compares nothing must not pass "
            "(--allow-no-data accepts missing data)",
            file=sys.stderr,
        )
