"""How close is a whole fine-tune to its projection? Answer: docs/measurements/projections-and-calibration.md, "The whole fine-tune".
How well a short benchmark run projects a whole fine-tune, measured end to end.

For each padding policy: a short run of the scenario (a few steps: what `bench run`
measures), its whole fine-tune projected from it (harness/projection/fine_tune.py: setup + distinct
lengths x compile seconds per shape + steps x steady step time), then the whole
fine-tune really run (every example once: steps = examples / global batch, one warm-up
step), and the two compared: the fine-tune's time is its setup plus every step's time.

    python benchmarks/probes/fine_tune_projection.py --scenario scenarios/tiny.yaml --backend torchax \
        --examples 96 --global-batch 8 --short-steps 4

Prints a table, then one JSON document.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's harness, whatever an editable install points at


def bench_run(scenario: str, backend: str, sets: dict, results: Path) -> dict:
    cmd = [sys.executable, "-m", "harness.cli", "run", scenario, "--backend", backend, "--force", "--json"]
    cmd += ["--results-dir", str(results), "--no-progress", "--timeout", "3000"]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(done.stdout)[-1]


def measured_fine_tune_s(record: dict) -> float:
    """Setup plus every step's time (warm-up and measured): what the fine-tune took."""
    return record["raw"]["setup_s"] + sum(s["time_s"] for s in record["raw"]["loop"]["steps"])


def one_policy(args, padding: str, tmp: Path) -> dict:
    from harness.projection.fine_tune import fine_tune_work, from_record
    from harness.records.result import as_record
    from harness.scenario.loader import resolve_runs

    base = {
        "sequence.padding": padding,
        "train.window_steps": 0,
        "data.num_examples": args.examples,
        "train.global_batch": args.global_batch,
        "train.micro_batch": args.global_batch,
    }
    scenario = resolve_runs(args.scenario, base)[0].scenario
    short_run = {**base, "train.steps": args.short_steps, "train.warmup_steps": 1}
    short = bench_run(args.scenario, args.backend, short_run, tmp / f"short-{padding}")
    projected = from_record(as_record(short), scenario)
    steps = fine_tune_work(scenario, short["plan"]["rows_per_forward"]).steps
    full = bench_run(
        args.scenario, args.backend, {**base, "train.steps": steps, "train.warmup_steps": 1}, tmp / f"full-{padding}"
    )
    measured = measured_fine_tune_s(full)
    # The same projection from the full run's own first steps: what a short run made under
    # the full run's load would have recorded (this machine's load drifts between runs).
    prefix = {
        **full,
        "raw": {
            **full["raw"],
            "loop": {**full["raw"]["loop"], "steps": full["raw"]["loop"]["steps"][: args.short_steps]},
        },
    }
    from_prefix = from_record(as_record(prefix), scenario)
    return {
        "padding": padding,
        "short_steps": args.short_steps,
        "steps": steps,
        "projected_s": projected.time_s,
        "projected_compiles": projected.compiles,
        "measured_s": measured,
        "measured_compiles": sum(s["num_compiles"] for s in full["raw"]["loop"]["steps"]),
        "projected_over_measured": projected.time_s / measured,
        "prefix_projected_s": from_prefix.time_s,
        "prefix_projected_over_measured": from_prefix.time_s / measured,
        "projection": projected.model_dump(mode="json"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="scenarios/tiny.yaml")
    parser.add_argument("--backend", default="torchax")
    parser.add_argument("--short-steps", type=int, default=4)
    parser.add_argument("--examples", type=int, default=96)
    parser.add_argument("--global-batch", type=int, default=8, help="one micro-batch a step")
    parser.add_argument("--padding", action="append", default=[])
    parser.add_argument("--results-dir", help="keep the records here (default: a temporary directory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ft-") as tmp:
        where = Path(args.results_dir or tmp)
        rows = [one_policy(args, p, where) for p in (args.padding or ["static", "dynamic"])]
    print(
        f"{'padding':<10}{'steps':>6}{'compiles p/m':>14}{'projected s':>13}{'measured s':>12}{'p/m':>7}{'prefix p/m':>12}"
    )
    for r in rows:
        compiles = f"{r['projected_compiles']}/{r['measured_compiles']}"
        print(
            f"{r['padding']:<10}{r['steps']:>6}{compiles:>14}{r['projected_s']:>13.2f}"
            f"{r['measured_s']:>12.2f}{r['projected_over_measured']:>7.3f}{r['prefix_projected_over_measured']:>12.3f}"
        )
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
