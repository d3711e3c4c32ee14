"""`bench launch SCENARIO --on TARGET...`: SkyPilot task files per target; launched
unless --dry-run, then one report of the gathered records."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.commands import report as report_command


def add_parser(sub) -> None:
    launch = sub.add_parser("launch", help="run a scenario on several accelerators through SkyPilot, then report")
    launch.add_argument("scenario")
    launch.add_argument(
        "--on",
        action="append",
        default=[],
        metavar="ACCELERATOR[:COUNT][xNODES][=BACKEND]",
        help="a target, e.g. tpu-v5p-8 (or v5p-8, tpu-v5p:4), H100:2 (or h100-sxm:2), H100:8x2 (two nodes); "
        "bench's names become SkyPilot's; repeatable",
    )
    launch.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to bench run")
    launch.add_argument("--out-dir", default="launch", help="where the SkyPilot task files are written")
    launch.add_argument("--results-dir", default="results", help="where the records are gathered")
    launch.add_argument("--bucket", help="a bucket (gs://, s3://) mounted for the records, instead of rsync back")
    launch.add_argument(
        "--spot", action="store_true", help="managed spot jobs (recovered after preemption); needs --bucket"
    )
    launch.add_argument("--dry-run", action="store_true", help="write the task files and print the commands only")


def run(args) -> int:
    from harness.run import launch

    prepared = launch.prepare(
        args.scenario, args.on, args.set, Path(args.out_dir), Path(args.results_dir), args.bucket, args.spot
    )
    for target, path, commands in prepared:
        print(f"# {target.text}: {path}")
        for command in commands:
            print(command)
    report = f"bench report {args.results_dir} -o reports/{Path(args.scenario).stem}.html"
    print(report)
    if args.dry_run:
        return 0
    failed = [name for name, code in launch.launch(prepared, Path(args.results_dir)) if code != 0]
    for name in failed:
        print(f"bench: the launch on {name} failed (see SkyPilot's output above)", file=sys.stderr)
    return report_command.run_argv(report.split()[1:]) or (1 if failed else 0)
