"""`bench export RESULTS... -o FILE`: records as pytest-benchmark JSON."""

from __future__ import annotations

from pathlib import Path

from harness.commands.common import load_or_fail, plural, stderr_console
from harness.errors import SpecError


def add_parser(sub) -> None:
    export = sub.add_parser("export", help="write records as pytest-benchmark JSON (for pytest-benchmark compare)")
    export.add_argument("results", nargs="+")
    export.add_argument("-o", "--output", required=True)
    export.add_argument("--format", choices=("pytest-benchmark",), default="pytest-benchmark")


def run(args) -> int:
    from harness.export import to_pytest_benchmark
    from harness.store import write_json_atomic

    console = stderr_console()
    records = load_or_fail(args.results, console)
    try:
        document = to_pytest_benchmark(records)
    except ValueError as exc:
        raise SpecError(", ".join(args.results), "", str(exc)) from None
    write_json_atomic(Path(args.output), document)
    left = len(records) - len(document["benchmarks"])
    why = f"; {plural(left, 'record')} without optimizer steps (serve runs) or failed, not exported" if left else ""
    console.print(f"wrote {len(document['benchmarks'])} benchmarks to {args.output}{why}")
    return 0
