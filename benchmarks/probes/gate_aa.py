"""Does `bench gate` stay quiet when nothing changed? Answer: docs/measurements/gate-and-history.md, "Gate A/A trials".
A/A trials of `bench gate`: does it stay quiet when nothing changed?

Runs the tiny scenario 2 x TRIALS x RUNS times from the same code on this machine (one
`bench run` with repeats, each repeat its own worker process), splits the records into
TRIALS pairs of result sets of RUNS runs each (the baseline set and the current set of
a trial never share a run), and gates each pair with a relative budget of +10% on the
median step time. A good gate passes at least 19 of 20 trials.

Runs of the same code differ by up to ~25% on a 2-core machine, more than steps within
a run do, so a result set needs several runs (the gate then tests per-run figures).

    python benchmarks/probes/gate_aa.py [--trials 20] [--runs 5] [--steps 8] [--budget +10%]

Prints a table of trials, then one JSON document.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5, help="runs per result set")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--budget", default="+10%")
    args = parser.parse_args()
    rows = gate_trials(args, run_records(args))
    passed = sum(r["verdict"] != "regression" for r in rows)
    print(f"{'trial':>5} {'baseline (s)':>13} {'current (s)':>12}  verdict")
    for r in rows:
        print(f"{r['trial']:>5} {r['baseline_median_s']:>13.4f} {r['current_median_s']:>12.4f}  {r['verdict']}")
    print(f"passed {passed} of {args.trials} (target: at least {args.trials - args.trials // 20})")
    print(
        json.dumps(
            {
                "trials": args.trials,
                "runs_per_set": args.runs,
                "passed": passed,
                "budget": args.budget,
                "steps": args.steps,
                "rows": rows,
            }
        )
    )


def run_records(args) -> dict:
    """Every run of the A/A experiment (one `bench run` with repeats), by repeat number."""
    from harness.records.store import load_records

    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "harness.cli",
            "run",
            str(ROOT / "scenarios" / "tiny.yaml"),
            "--results-dir",
            tmp,
            "--no-progress",
            "--set",
            f"repeats={2 * args.trials * args.runs}",
            "--set",
            f"train.steps={args.steps}",
            "--set",
            "train.window_steps=0",
        ]
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        return {r.scenario.repeat: r for r in load_records([tmp]).records}


def gate_trials(args, by_repeat: dict) -> list[dict]:
    """Each trial's gate of its current set against its baseline set (no run shared)."""
    from harness.gate.gate import BudgetsFile, relative_threshold, run_gate

    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": args.budget}})
    rows = []
    k = args.runs
    for trial in range(args.trials):
        base = [by_repeat[2 * k * trial + i] for i in range(k)]
        current = [by_repeat[2 * k * trial + k + i] for i in range(k)]
        (check,) = run_gate(current, base, budgets, "aa")
        rows.append(
            {
                "trial": trial,
                "baseline_median_s": check.limit / (1 + relative_threshold(args.budget)),
                "current_median_s": check.measured,
                "verdict": check.verdict,
                "detail": check.detail,
            }
        )
    return rows


if __name__ == "__main__":
    main()
