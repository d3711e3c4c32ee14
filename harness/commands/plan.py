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
        "--project-for",
        action="append",
        default=[],
        metavar="ACCELERATOR",
        help="project the train step on N GPUs of a catalog kind (h100-sxm:2, h200:1, b200:8, a100-40gb:1, l4:1; "
        "repeatable) from bench's own FLOPs and bytes and the datasheet, with a calibrated range; with --task serve, "
        "bound TTFT, TPOT, output tok/s and $/1M output tokens on a TPU slice or GPUs (v6e-8, h100-sxm:2), "
        "calibrated against published vLLM results, shown as a range; no device needed",
    )
    plan.add_argument(
        "--recommend",
        action="store_true",
        help="rank every catalog option (TPU slices, GPU kinds x counts) by projected $ and time per fine-tune, each a "
        "range, with fit and the binding term (harness/projection/recommend.py); no device needed",
    )
    plan.add_argument(
        "--max-compiles", type=int, default=4, help="with --compile-for: compile at most the N longest distinct lengths"
    )
    plan.add_argument(
        "--task", choices=("serve",), help="with --project-for: project this task (serve: a serving roofline)"
    )
    plan.set_defaults(dry_run=True)


def run(args) -> int:
    if args.task:
        return _serve_projection(args)
    if args.recommend:
        return _recommend(args)
    if args.project_for:
        _project_gpus(args)
        if not args.compile_for:
            return 0
    if not args.compile_for:
        return run_command.run(args)
    from harness.projection.tpu_plan import project
    from harness.terminal.display import show_projection

    records = project(_request(args))
    if args.json:
        print(json.dumps([{**r.to_json(), "path": r.path} for r in records], indent=1))
        return 0
    from rich.console import Console

    for record in records:
        show_projection(record, Console())
    return 0  # a configuration that does not fit is an answer, not a failure


def _project_gpus(args) -> None:
    """--project-for: each card's projection, printed (or as JSON) and stored."""
    from harness.projection.gpu_projection import GpuRequest, lines, project

    records = project(
        GpuRequest(
            scenario_path=args.scenario,
            backend=args.backend,
            targets=args.project_for,
            overrides=dict(_overrides(args)),
            profile=args.profile,
            results_dir=Path(args.results_dir),
            prices_file=args.prices,
        )
    )
    if args.json:
        print(json.dumps(records, indent=1))
        return
    for record in records:
        print("\n".join(lines(record)))


def _recommend(args) -> int:
    """--recommend: the ranked table, per matrix cell."""
    from harness.figures.cost import load_catalog
    from harness.projection.recommend import options, table_lines
    from harness.scenario.loader import resolve_runs

    runs = resolve_runs(args.scenario, dict(_overrides(args)), None)  # full shape: no device profile
    catalog = load_catalog(args.prices)
    for run in [r for r in runs if r.repeat == 0]:
        print(f"{run.scenario.name} [{run.variant}]:")
        print("\n".join(table_lines(options(run.scenario, catalog, args.backend))))
    return 0


def _overrides(args):
    from harness.scenario.loader import parse_override

    return [parse_override(s) for s in args.set]


def _request(args):
    from harness.projection.tpu_plan import CompileRequest
    from harness.scenario.loader import parse_override

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


def _serve_projection(args) -> int:
    """`bench plan SCENARIO --task serve --project-for X`: the serving projection, each
    figure a range (harness.projection.serving), printed; nothing runs."""
    from rich.console import Console

    from harness.basics.errors import BenchError
    from harness.figures.cost import load_catalog, price_for
    from harness.scenario.loader import apply_overrides, parse_override, read_document, validate
    from harness.serving import projection
    from harness.terminal.display import show_serve_projection

    if not args.project_for:
        raise BenchError(
            "--task serve projects: give --project-for, e.g. bench plan SCENARIO --task serve --project-for v6e-8"
        )
    # The scenario as written (no profile: a projection is of the target, not this host).
    overrides = dict(parse_override(text) for text in args.set)
    scenario = validate(apply_overrides(read_document(args.scenario), overrides, args.scenario), args.scenario)
    loads, note = projection.scenario_loads(scenario)
    model, catalog = projection.ServedModel(scenario.model.architecture()), load_catalog(args.prices)
    console = Console()
    for target in args.project_for:
        device = projection.Device.named(target)
        price = price_for(device.key, scenario.cost, catalog)
        result = projection.project(model, device, loads, price.usd_per_chip_hour if price else None)
        show_serve_projection(scenario.name, target, result, note, price, console)
        path = projection.store(projection.to_record(scenario.name, target, result, note), args.results_dir)
        console.print(f"  stored: {path} (bench report {args.results_dir} puts it beside the measurements)")
    return 0
