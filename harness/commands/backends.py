"""`bench backends`: every backend, whether it can run here, and why not."""

from __future__ import annotations

import json
import sys

from harness.commands.common import interpreters


def add_parser(sub) -> None:
    backends = sub.add_parser("backends", help="list backends, whether they can run here, and why not")
    backends.add_argument("--python", action="append", default=[], metavar="BACKEND=PATH")
    backends.add_argument("--json", action="store_true")
    backends.add_argument("--fresh", action="store_true", help="probe every backend again (ignore the probe cache)")


def run(args) -> int:
    from rich.console import Console

    from harness.run import registry

    chosen = interpreters(args.python)
    registry.check_interpreters(chosen)  # a misspelt --python name is refused, not ignored
    backends = registry.all_backends()
    how = "one at a time: this accelerator admits one process" if registry.exclusive_accelerator() else "in parallel"
    print(
        f"probing {len(backends)} backends, a worker process each ({how}), unless the probe cache answers...",
        file=sys.stderr,
        flush=True,
    )
    results = _probe_cached(list(backends), chosen, args.fresh)
    table, rows = _table(backends, results)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        Console().print(table)
        print(reasons_in_full(backends, results), end="")
    return 0


def reasons_in_full(backends: dict, results: list) -> str:
    """Why each unavailable backend cannot run, one unwrapped line each, below the table:
    the table folds its cells to the terminal's width (80 columns in a pipe), which cuts
    an install command in the middle; here it can be copied whole."""
    lines = [
        f"  {name}: {result.probe.reason}" for name, result in zip(backends, results) if not result.probe.available
    ]
    return "why not, in full:\n" + "\n".join(lines) + "\n" if lines else ""


def _table(backends: dict, results: list):
    """The rich table and the JSON rows of the probes, one per backend."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="bench backends")
    for column in ("backend", "available", "devices", "python", "reason / summary"):
        table.add_column(column, overflow="fold")  # a path folds onto the next line, never cut to "…"
    rows = []
    for (name, info), result in zip(backends.items(), results):
        p = result.probe
        devices = f"{p.device_kind} x{p.device_count} ({p.device_name})" if p.available else "-"
        table.add_row(
            name,
            "yes" if p.available else "no",
            escape(devices),
            escape(result.python),
            escape(p.reason or info.summary),
        )
        rows.append({"name": name, "python": result.python, **p.to_json()})
    return table, rows


def _probe_cached(names: list[str], chosen: dict[str, str], fresh: bool) -> list:
    """Probes, from the probe cache where nothing they depend on changed (harness.run.probe_cache)."""
    from harness.run import probe_cache

    results, cached, problem = probe_cache.probe_all(names, chosen, fresh=fresh)
    if cached:
        print(
            f"{cached} of {len(names)} from the probe cache ({probe_cache.cache_file()}: interpreter, "
            "packages and code unchanged; --fresh probes again)",
            file=sys.stderr,
        )
    if problem:
        print(f"bench: warning: {problem}", file=sys.stderr)
    return results
