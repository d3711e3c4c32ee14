"""`bench export RESULTS... -o FILE`: records as pytest-benchmark JSON; with --requests,
every measured request of the serve records, one line each (JSON Lines, or CSV)."""

from __future__ import annotations

from pathlib import Path

from harness.basics.errors import SpecError
from harness.commands.common import load_or_fail, plural, stderr_console


def add_parser(sub) -> None:
    export = sub.add_parser(
        "export",
        help="write records as pytest-benchmark JSON (for pytest-benchmark compare), or serve requests (--requests)",
    )
    export.add_argument("results", nargs="+")
    export.add_argument("-o", "--output", required=True)
    export.add_argument("--format", choices=("pytest-benchmark",), default="pytest-benchmark")
    export.add_argument(
        "--requests",
        action="store_true",
        help="one line per measured serve request (run id, send, first token, chunk times, tokens, cached tokens, "
        "client queue time, error): JSON Lines, or CSV when -o ends in .csv",
    )


def run(args) -> int:
    from harness.basics.files import write_json_atomic
    from harness.records.export import request_rows, to_pytest_benchmark, write_requests

    console = stderr_console()
    records = load_or_fail(args.results, console)
    if args.requests:
        rows = request_rows(records)
        if not rows:
            raise SpecError(", ".join(args.results), "", "no serve records with measured requests to export")
        write_requests(rows, Path(args.output))
        console.print(f"wrote {plural(len(rows), 'request')} to {args.output}")
        return 0
    try:
        document = to_pytest_benchmark(records)
    except ValueError as exc:
        raise SpecError(", ".join(args.results), "", str(exc)) from None
    write_json_atomic(Path(args.output), document)
    exported = {b["extra_info"]["run_id"] for b in document["benchmarks"]}
    left = len(records) - len(exported)
    why = f"; {plural(left, 'record')} failed or without figures, not exported" if left else ""
    console.print(f"wrote {len(document['benchmarks'])} benchmarks to {args.output}{why}")
    return 0
