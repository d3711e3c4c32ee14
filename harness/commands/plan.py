"""`bench plan SCENARIO`: the execution plans (run --dry-run); with --compile-for,
projections on TPU slices compiled ahead of time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.commands import run as run_command


def add_parser(sub) -> None:
    plan = sub.add_parser("plan", help="print a scenario's execution plan on a backend, run nothing (run --dry-run)")
    run_command.add_run_arguments(plan)
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
    plan.set_defaults(dry_run=True)


def run(args) -> int:
    if not args.compile_for:
        return run_command.run(args)
    from harness.display import show_projection
    from harness.tpu_plan import project

    records = project(_request(args))
    if args.json:
        print(json.dumps([{**r.to_json(), "path": r.path} for r in records], indent=1))
        return 0
    from rich.console import Console

    for record in records:
        show_projection(record, Console())
    return 0  # a configuration that does not fit is an answer, not a failure


def _request(args):
    from harness.loader import parse_override
    from harness.tpu_plan import CompileRequest

    return CompileRequest(
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
