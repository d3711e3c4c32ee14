"""`bench validate FILE...`: scenario files (and suite files, as suites) checked without
running them."""

from __future__ import annotations

from harness.basics.errors import BenchError
from harness.commands.common import plural, print_error


def add_parser(sub) -> None:
    validate = sub.add_parser("validate", help="check scenario files without running them")
    validate.add_argument("scenarios", nargs="+")


def run(args) -> int:
    """Every file is checked (a bad one does not hide the next): an `ok` line each on
    stdout, one `bench: ` line per bad file on stderr, exit 2 if any was bad."""
    from collections import Counter

    from harness.run.registry import validate_runs
    from harness.scenario.spec import tasks_of

    bad = 0
    for path in args.scenarios:
        try:
            if is_suite(path):
                _validate_suite(path)
                continue
            runs = validate_runs(path)
        except BenchError as exc:
            print_error(exc)
            bad += 1
            continue
        tasks = Counter(task for run in runs for task in tasks_of(run.scenario))
        records = sum(tasks.values())
        kinds = ", ".join(f"{n} {task}" for task, n in tasks.items())
        print(f"{path}: ok ({plural(len(runs), 'run')}, {plural(records, 'record')}: {kinds})")
    return 2 if bad else 0


def is_suite(path: str) -> bool:
    """A suite file (`bench suite`) lists `runs:`; a scenario has no such key."""
    from harness.basics.yaml_io import read_document

    return "runs" in read_document(path)


def _validate_suite(path: str) -> None:
    from harness.commands.suite_file import validate_suite

    suite, runs = validate_suite(path)
    print(
        f"{path}: ok (suite {suite.name}: {len(suite.runs)} {'entry' if len(suite.runs) == 1 else 'entries'}, {plural(runs, 'run')})"
    )
