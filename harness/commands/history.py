"""`bench history RESULTS...`: each configuration's figure over commits and dates, its
change points listed, and (with -o) every series drawn on one offline HTML page."""

from __future__ import annotations

from pathlib import Path

from harness.basics.errors import SpecError
from harness.commands.common import load_or_fail, stderr_console


def add_parser(sub) -> None:
    parser = sub.add_parser("history", help="each configuration's figures over commits and dates, with change points")
    parser.add_argument("results", nargs="+", help="results directories, files or fsspec URLs (gs://, s3://)")
    parser.add_argument(
        "--metric",
        action="append",
        metavar="M",
        help="a gate metric to follow (repeatable; default: step_time_s for training, ttft_s and "
        "output_throughput_tok_s for serving)",
    )
    parser.add_argument("--budgets", help="a budgets file (as bench gate's) whose budgets are drawn as lines")
    parser.add_argument("-o", "--output", help="write the figures to this HTML page (one file, works offline)")


def run(args) -> int:
    from harness.gate.gate import load_budgets
    from harness.gate.history import METHOD, build_series, check_metric_names
    from reports.history import lines, page, views

    check_metric_names(args.metric)
    if args.output and Path(args.output).suffix != ".html":
        raise SpecError(f"-o {args.output}", "", "the history page is HTML: give a file ending in .html")
    budgets = list(load_budgets(args.budgets).budgets)
    records = load_or_fail(args.results, stderr_console())
    series = build_series(records, args.metric, budgets)
    if not series:
        raise SpecError(", ".join(args.results), "", "no successful run has the metrics asked for")
    items = views(series)
    print(f"method: {METHOD}")
    for line in lines(items):
        print(line)
    if args.output:
        from harness.basics.files import write_text_atomic

        try:
            write_text_atomic(Path(args.output), page(items))
        except OSError as exc:
            raise SpecError(f"-o {args.output}", "", f"cannot write: {exc.strerror or exc}") from None
        stderr_console().print(f"wrote the history of {len(series)} series to {args.output}")
    return 0
