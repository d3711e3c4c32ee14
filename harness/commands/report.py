"""`bench report RESULTS...`: an HTML (or Markdown, CSV) comparison of result records
(and stored projections)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from harness.basics.errors import SpecError
from harness.commands.common import require_paths, stderr_console

if TYPE_CHECKING:
    from harness.records.result import RunRecord


def add_parser(sub) -> None:
    report = sub.add_parser("report", help="write an HTML (or Markdown, CSV) comparison of result records")
    report.add_argument("results", nargs="*", default=["results"])
    report.add_argument(
        "-o",
        "--output",
        help="the file to write; its extension (.html, .md, .csv) is the format "
        "(default: reports/index.html, or reports/index.md / .csv with --format)",
    )
    report.add_argument("--format", choices=("html", "md", "csv"), help="without -o: which default file to write")
    report.add_argument("--scenario", action="append", help="only these scenarios (repeatable)")
    report.add_argument("--backend", action="append", help="only these backends (repeatable)")
    report.add_argument(
        "--accelerator",
        action="append",
        help="only these accelerators: a catalog key, KEY:CHIPS or a TPU slice such as v5p-8 (repeatable)",
    )
    report.add_argument(
        "--baseline",
        metavar="'KEY=VALUE ...'",
        help="the row every factor's levels are compared to, by terms that must all match: variant=, "
        "backend=, accelerator= (v5p-8, h100-sxm:2), precision= or a configuration field "
        "(sequence.padding=static); default: the first run made. Naming no row, or several rows of "
        "one scenario, is refused, listing the candidates",
    )
    report.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="'KEY=VALUE ...'",
        help="also compare this row directly against the baseline (repeatable); must name one row",
    )


def run_argv(argv: list[str]) -> int:
    """`bench report` from its own argument list (`bench launch` reports what it gathered)."""
    parser = argparse.ArgumentParser(prog="bench")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(argv))


def run(args) -> int:
    from rich.markup import escape

    from harness.projection.projection import load_projections
    from reports.model import build
    from reports.render import output_format, write

    console = stderr_console()
    path, fmt = output_format(args.output, args.format)  # a bad -o is refused before reading anything
    _check_output_folder(path)
    projections = _projections_or_fail(args.results, load_projections)
    serve_projections = _projections_or_fail(args.results, _serve_projections)
    alone = projections or serve_projections  # a report of projections alone is one
    records, unreadable = _records_and_unreadable(args.results, console, required=not alone)
    records, projections = _filtered(args, records, projections)
    if not records and not projections and not serve_projections:
        raise SpecError(", ".join(args.results), "", "no records left after the filters")
    # a selector naming 0 or 2+ rows: exit 2
    report = build(
        records,
        args.baseline,
        tuple(args.compare),
        warnings=unreadable,
        projections=projections,
        serve_projections=serve_projections,
    )
    for warning in report.warnings:
        console.print(f"[yellow]warning: {escape(warning)}[/yellow]")
    try:
        write(report, path, fmt)
    except OSError as exc:  # the folder changed since the check (removed, filled, made read-only)
        raise SpecError(f"-o {path}", "", f"cannot write the report: {exc.strerror or exc}") from None
    console.print(f"wrote {fmt} report of {len(records)} records to {path}")
    return 0


def _check_output_folder(path) -> None:
    """The report's folder can be created and written (`-o FILE/r.html` under a file is
    one line naming -o, not a traceback after every record was read)."""
    from harness.run.runner import check_results_dir

    try:
        check_results_dir(path.parent, flag="-o")
    except SpecError as exc:
        message = exc.message.replace(
            "give a directory (it is created if missing)", "the report's folder is created if missing"
        )
        if message.startswith("is a file"):
            message = f"{path.parent} {message}"
        raise SpecError(f"-o {path}", "", message) from None


def _filtered(args, records: list, projections: list) -> tuple[list, list]:
    """The records and projections that --scenario, --backend and --accelerator keep."""
    from reports.factors import accelerator_matches

    for field, wanted in (("scenario", args.scenario), ("backend", args.backend)):
        if wanted:
            records = [r for r in records if _record_field(r, field) in wanted]
            projections = [
                p for p in projections if (p.scenario["name"] if field == "scenario" else p.backend) in wanted
            ]
    if args.accelerator:
        records = [r for r in records if any(accelerator_matches(r.accelerator, a) for a in args.accelerator)]
    return records, projections


def _projections_or_fail(paths, load) -> list:
    """The projections stored under the results paths; a bad one is refused, naming it."""
    require_paths(paths)
    try:
        return load(paths)
    except ValueError as exc:
        raise SpecError(str(exc).split(": ", 1)[0], "", str(exc).split(": ", 1)[-1]) from None


def _records_and_unreadable(paths, console, required: bool) -> tuple[list[RunRecord], list[str]]:
    """The records under `paths`, and one page warning per file that looks like a record
    but could not be read: a report must not look complete when a run is missing from it.
    Without projections, no records at all is an error; beside them, a report of
    projections only."""
    from harness.records.store import load_records

    loaded = load_records(paths)
    for warning in loaded.warnings:
        console.print(f"[yellow]warning: {warning}[/yellow]")
    if required and not loaded.records:
        raise SpecError(", ".join(map(str, paths)), "", "no result records found")
    unreadable = [f"unreadable record left out of this report: {path}: {why}" for path, why in loaded.unreadable]
    return loaded.records, unreadable


def _record_field(record: RunRecord, field: str) -> str:
    return {"scenario": record.scenario.name, "backend": record.backend.name}[field]


def _serve_projections(paths) -> list:
    """Stored serving projections (harness.projection.serving) under local results paths."""
    from harness.projection.serving import load_stored
    from harness.records.locations import is_url

    return load_stored([p for p in paths if not is_url(p)])
