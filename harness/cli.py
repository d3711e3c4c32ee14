"""The `bench` command line. Thin: parse, hand the arguments to the command's module
(harness/commands/<command>.py: `add_parser` declares its flags, `run` does the work).

Exit codes: 0 success; 1 a run failed (or the gate found a regression); 2 bad input
(one line naming the file and the field, never a traceback).
"""

from __future__ import annotations

import argparse
import sys

from harness.basics.errors import BenchError
from harness.commands import (
    backends,
    cost,
    export,
    gate,
    history,
    launch,
    migrate,
    plan,
    report,
    run,
    show,
    suite,
    validate,
)
from harness.commands.common import print_error

# The dispatcher table, in `bench --help`'s order.
COMMANDS = {
    "run": run,
    "plan": plan,
    "launch": launch,
    "backends": backends,
    "validate": validate,
    "show": show,
    "migrate": migrate,
    "gate": gate,
    "history": history,
    "cost": cost,
    "report": report,
    "export": export,
    "suite": suite,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench", description="Benchmark LLM fine-tuning and serving on TPU, GPU and CPU."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS.values():
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command].run(args)
    except BenchError as exc:
        print_error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        print("bench: interrupted; the run in flight was not recorded", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
