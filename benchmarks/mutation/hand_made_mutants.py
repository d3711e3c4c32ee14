"""The eight hand-made mutants of issue #31: apply each to a copy of the checkout, run the
formula modules' fast tests there, and list the tests that fail (a mutant none fails
survives). Usage: python benchmarks/mutation/hand_made_mutants.py [PYTEST ARGS]; never edits this tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = [
    "tests/harness/figures/test_metrics.py",
    "tests/harness/serving/test_serving_metrics.py",
    "tests/harness/figures/test_cost.py",
    "tests/reports/test_stats.py",
    "tests/reports/test_compare.py",
]
# (name, file, the line's text, its mutated text)
MUTANTS = [
    (
        "1 full FT FLOPs without the LM head",
        "harness/figures/metrics.py",
        "return 6 * (layers + head)",
        "return 6 * layers",
    ),
    (
        "2 step-time p90 at the 99th percentile",
        "harness/figures/metrics.py",
        '"p90": percentile(values, 90)',
        '"p90": percentile(values, 99)',
    ),
    (
        "3 goodput ignoring the TTFT target",
        "harness/figures/metrics.py",
        "slo = {k: slo.get(k) for k in SLO_TARGETS}",
        'slo = {k: slo.get(k) for k in SLO_TARGETS if k != "ttft_s"}',
    ),
    (
        "4 break-even ignoring b's chips",
        "harness/figures/cost.py",
        "hourly_a / speedup / b.chips",
        "hourly_a / speedup",
    ),
    ("5 a 90% interval labelled 95%", "reports/stats.py", "tail = (1 - LEVEL) / 2 * 100", "tail = (1 - LEVEL) * 100"),
    (
        "6 interval not inverted on a flip",
        "reports/stats.py",
        "low, high = (1 / r.high, 1 / r.low) if flip else (r.low, r.high)",
        "low, high = (r.low, r.high)",
    ),
    ("7 cost ratio not inverted on a swap", "reports/compare.py", "c.cost.inverted() if c.cost else None", "c.cost"),
    (
        "8 ITL gaps shifted, count kept",
        "harness/figures/metrics.py",
        'itl = [b - a for r in done for a, b in zip(r["chunk_s"], r["chunk_s"][1:])]',
        'itl = [b - r["chunk_s"][0] for r in done for a, b in zip(r["chunk_s"], r["chunk_s"][1:])]',
    ),
]


def failing_tests(tree: Path, extra: list[str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-rf", *TESTS, *extra],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    return sorted({line.split()[1].split(" - ")[0] for line in done.stdout.splitlines() if line.startswith("FAILED ")})


def main() -> int:
    extra = sys.argv[1:]
    survivors = 0
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        shutil.copytree(
            ROOT, tree, ignore=shutil.ignore_patterns(".venv*", ".git", "mutants", "results", "__pycache__")
        )
        assert failing_tests(tree, extra) == [], "the tests fail without any mutant"
        for name, path, line, mutated in MUTANTS:
            source = (tree / path).read_text()
            assert source.count(line) == 1, f"{path}: {line!r} not found once"
            (tree / path).write_text(source.replace(line, mutated))
            failed = failing_tests(tree, extra)
            (tree / path).write_text(source)
            survivors += not failed
            print(f"mutant {name}: {'KILLED by' if failed else 'SURVIVED'}")
            for test in failed:
                print(f"    {test}")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
