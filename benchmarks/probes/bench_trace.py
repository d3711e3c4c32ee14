"""Does the harness's step time agree with the profiler's? Answer: docs/measurements/overhead-and-step-loop.md, "Profiler traces".
The harness's step time against the profiler's: one traced tiny run per backend.

Each run traces 4 measured steps (`bench run --trace 4`: 3 step periods); the record states the median
trace step time (per step: first start to last end of the framework's own program / op
events in the step, `trace.step_time_s.programs`), the harness's median over the same
steps, their ratio (below 1 by the host time outside the programs), and what tracing cost
(traced steps' harness median over the untraced steady median). Backends whose stack is missing are
listed as such.

    BENCH_PYTHON_XLA_FSDPV2=.venv-xla/bin/python BENCH_PYTHON_JAX_TUNIX=.venv-jax/bin/python \\
        python benchmarks/probes/bench_trace.py [--backends torch,torchax,xla-fsdpv2,jax-tunix]

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
# The tiny traced run: each `--set` of the scenario, then the trace window.
SETTINGS = "model.preset=tiny-gemma3 sequence.padding=static train.steps=10 train.window_steps=0 data.num_examples=32"
RUN = [arg for setting in SETTINGS.split() for arg in ("--set", setting)] + ["--trace", "4", "--no-progress"]


def traced(backend: str, out: Path) -> dict:
    scenario = "scenarios/tiny.yaml" if backend == "torch" else "scenarios/padding.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", scenario, "--backend", backend, *RUN, "--results-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    records = [json.loads(p.read_text()) for p in out.glob("*.json")]
    if done.returncode != 0 or len(records) != 1 or records[0]["status"] != "ok":
        return {"backend": backend, "error": (done.stderr.strip().splitlines() or ["no record"])[-1]}
    section = records[0]["trace"]
    times = section["busy_s"]
    return {
        "backend": backend,
        "tool": section["tool"],
        "trace_median_s": times["trace_median"],
        "harness_median_s": times["harness_median"],
        "ratio": times["ratio"],
        "programs": times["programs"],
        "program_events": times["program_events"],
        "slowdown": section["slowdown"],
        "compile_steps_agree": section["compile_steps"]["agree"],
        "period_trace_median_s": section["step_time_s"]["trace_median"],
        "period_harness_median_s": section["step_time_s"]["harness_median"],
        "period_ratio": section["step_time_s"]["ratio"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="torch,torchax,xla-fsdpv2,jax-tunix")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-trace-") as tmp:
        for backend in args.backends.split(","):
            rows.append(traced(backend, Path(tmp) / backend))
    # busy: first to last program within the step; period: first program to the next
    # step's first (torchprime's); each against the harness's median of the same steps.
    print(
        f"{'backend':<12}{'busy med (s)':>14}{'harness (s)':>13}{'ratio':>8}"
        f"{'period med (s)':>16}{'harness (s)':>13}{'ratio':>8}{'slowdown':>10}"
    )
    for r in rows:
        if "error" in r:
            print(f"{r['backend']:<12}  not run: {r['error']}")
            continue
        slow = f"{r['slowdown']:.3f}" if r["slowdown"] is not None else "n/a"
        print(
            f"{r['backend']:<12}{r['trace_median_s']:>14.4f}{r['harness_median_s']:>13.4f}{r['ratio']:>8.3f}"
            f"{r['period_trace_median_s']:>16.4f}{r['period_harness_median_s']:>13.4f}{r['period_ratio']:>8.3f}{slow:>10}"
        )
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
