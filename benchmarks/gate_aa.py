"""A/A trials of `bench gate`: does it stay quiet when nothing changed?

Runs the tiny scenario 2 x TRIALS times from the same code on this machine (one
`bench run` with repeats, each repeat its own worker process), pairs the records
(repeat 2i is the baseline of repeat 2i+1), and gates each pair with a relative budget
of +10% on the median step time. A good gate passes at least 19 of 20 trials.

    python benchmarks/gate_aa.py [--trials 20] [--steps 10] [--budget +10%]

Prints a table of trials, then one JSON document.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--budget", default="+10%")
    args = parser.parse_args()

    from harness.gate import BudgetsFile, run_gate
    from harness.store import load_records

    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "harness.cli", "run", str(ROOT / "scenarios" / "tiny.yaml"), "--results-dir", tmp,
               "--no-progress", "--set", f"repeats={2 * args.trials}", "--set", f"train.steps={args.steps}",
               "--set", "train.window_steps=0"]
        subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        by_repeat = {r["scenario"]["repeat"]: r for r in load_records([tmp]).records}
    budgets = BudgetsFile.model_validate({"relative": {"step_time_s": args.budget}})
    rows = []
    for trial in range(args.trials):
        base, current = by_repeat[2 * trial], by_repeat[2 * trial + 1]
        (check,) = run_gate([current], [base], budgets, "aa")
        rows.append({"trial": trial, "baseline_median_s": base["metrics"]["step_time_s"]["median"],
                     "current_median_s": current["metrics"]["step_time_s"]["median"], "verdict": check.verdict})
    passed = sum(r["verdict"] != "regression" for r in rows)
    print(f"{'trial':>5} {'baseline (s)':>13} {'current (s)':>12}  verdict")
    for r in rows:
        print(f"{r['trial']:>5} {r['baseline_median_s']:>13.4f} {r['current_median_s']:>12.4f}  {r['verdict']}")
    print(f"passed {passed} of {args.trials} (target: at least {args.trials - args.trials // 20})")
    print(json.dumps({"trials": args.trials, "passed": passed, "budget": args.budget, "steps": args.steps, "rows": rows}))


if __name__ == "__main__":
    main()
