"""What several commands share: argument parsing helpers, loading records for a command,
and the one-line error format."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.basics.errors import BenchError, SpecError

if TYPE_CHECKING:  # the CLI imports what a command needs when it runs
    from harness.records.result import RunRecord

FORCE_HELP = (
    "rerun runs that already have a successful record (multi-host jobs, "
    "parallel.hosts > 1, always rerun: each host sees only its own records)"
)
TIMEOUT_HELP = "per-run time limit in seconds (overrides run_timeout_s)"
PRICES_HELP = "a prices file, or a named price set of harness/figures/prices.yaml (w3: the prices W3 assumed), laid over the shipped catalog"


def key_value(text: str, what: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise SpecError(what, text, "expected NAME=VALUE")
    return key, value


def interpreters(pairs: list[str]) -> dict[str, str]:
    """`--python BACKEND=PATH` flags as a mapping."""
    return dict(key_value(p, "--python") for p in pairs)


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def print_error(exc: BenchError) -> None:
    """`bench: <message>`, one line whatever the message holds."""
    print("bench: " + " ".join(str(exc).split()), file=sys.stderr)


def stderr_console():
    from rich.console import Console

    return Console(stderr=True)


def plans_json(resolved, backend: str | None = None) -> list[dict]:
    """Each run's execution plan as JSON: variant, repeat, plan (None without a train
    task), and the choices above it (`choices`: harness.terminal.run_lines, field -> text)."""
    from harness.terminal.run_lines import run_lines

    return [
        {
            "variant": run.variant,
            "repeat": run.repeat,
            "plan": plan.model_dump(mode="json") if plan else None,
            "choices": dict(run_lines(run, backend)),
        }
        for run, plan in resolved
    ]


def print_plans(resolved, as_json: bool, backend: str | None = None) -> int:
    """`bench run --dry-run` / `bench plan`: each run's choices (backend, profile, tasks,
    padding, attention, options: harness.terminal.run_lines) and execution plan, nothing run."""
    from harness.terminal.run_lines import run_lines

    if as_json:
        print(json.dumps(plans_json(resolved, backend), indent=1))
        return 0
    for run, plan in resolved:
        print(f"{run.scenario.name} [{run.variant}] repeat {run.repeat}:")
        for name, value in run_lines(run, backend):
            print(f"  {name:<24}{value}")
        if plan is None:
            print("  (no train task: nothing to plan)")
            continue
        for name, value in plan.describe():
            print(f"  {name:<24}{value}")
    return 0


def require_paths(paths) -> None:
    from harness.records.locations import exists, is_url

    for path in paths:
        if not (exists(str(path)) if is_url(path) else Path(path).exists()):
            raise SpecError(str(path), "", "no such results file or directory")


def load_or_fail(paths, console) -> list[RunRecord]:
    from harness.records.store import load_records

    require_paths(paths)
    loaded = load_records(paths)
    for warning in loaded.warnings:
        console.print(f"[yellow]warning: {warning}[/yellow]")
    if not loaded.records:
        raise SpecError(", ".join(map(str, paths)), "", "no result records found")
    return loaded.records
