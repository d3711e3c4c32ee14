"""`bench show FILE|DIR...`: result records and projections, printed."""

from __future__ import annotations

from pathlib import Path

from harness.basics.errors import SpecError
from harness.commands.common import stderr_console


def add_parser(sub) -> None:
    show = sub.add_parser("show", help="print result records (files or directories)")
    show.add_argument("records", nargs="+")


def run(args) -> int:
    from rich.console import Console

    from harness.records.locations import location
    from harness.terminal.display import show_projection, show_record

    console = Console()
    shown = []  # every target is read before anything is printed: a bad one is refused whole
    projected = []  # projections: shown after the records, labelled projected
    for target in args.records:
        _read_target(location(target), shown, projected)
    for record in shown:
        show_record(record, console)
    for projection in projected:
        show_projection(projection, console)
    return 0


def _read_target(path: Path | str, shown: list, projected: list) -> None:
    """One file or directory's (or URL's) records into `shown`, its projections into `projected`."""
    from harness.commands.common import require_paths
    from harness.projection.projection import SUFFIX, load_projection
    from harness.records.store import is_results_dir

    require_paths([path])
    if str(path).endswith(SUFFIX):
        projected.append(_refusing(path, load_projection))
    elif is_results_dir(path):
        _read_directory(path, shown, projected)
    else:
        from harness.records.store import load_record

        shown.append(_refusing(path, load_record))


def _read_directory(path: Path | str, shown: list, projected: list) -> None:
    from harness.projection.projection import load_projections
    from harness.records.store import load_records

    projected.extend(load_projections([path]))
    loaded = load_records([path])
    for warning in loaded.warnings:
        stderr_console().print(f"[yellow]warning: {warning}[/yellow]")
    if not loaded.records and not projected:
        skipped = f" ({len(loaded.warnings)} unreadable files skipped)" if loaded.warnings else ""
        raise SpecError(str(path), "", f"no result records found{skipped}")
    shown.extend(loaded.records)


def _refusing(path: Path | str, load):
    """`load(path)`, an unreadable file refused in one line naming it."""
    try:
        return load(path)
    except ValueError as exc:
        raise SpecError(str(path), "", str(exc).removeprefix(f"{path}: ")) from None
