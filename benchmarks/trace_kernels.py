"""Where a traced GPU step's time goes, from a `bench run --trace` record's torch.profiler
trace (Chrome JSON): per traced step (the harness's `bench.step.N` spans), the GPU busy
fraction (the union of the kernels' intervals over the span), then the top kernels by
total time over the traced steps. Run by benchmarks/device_suite.py after the torch W1
run; reads with harness.run.trace (no framework needed).

    python benchmarks/trace_kernels.py RESULTS_DIR [top N, default 12]
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.run.trace import read_events  # noqa: E402

KERNEL_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def union_ns(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by the intervals (overlaps counted once)."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def summarise(events) -> dict:
    spans = sorted((e for e in events if e.name.startswith("bench.step.")), key=lambda e: e.start_ns)
    kernels = [e for e in events if e.cat in KERNEL_CATEGORIES]
    steps, by_name = [], defaultdict(float)
    for span in spans:
        # The span closes after the step's device sync, so the step's kernels start in it.
        inside = [k for k in kernels if span.start_ns <= k.start_ns < span.end_ns]
        busy = union_ns([(k.start_ns, min(k.end_ns, span.end_ns)) for k in inside])
        steps.append({"step": span.name, "span_s": span.duration_ns / 1e9, "busy_fraction": busy / span.duration_ns})
        for k in inside:
            by_name[k.name] += k.duration_ns
    total = sum(by_name.values()) or 1.0
    top = sorted(by_name.items(), key=lambda item: -item[1])
    return {"steps": steps, "kernel_total_s": total / 1e9, "top": [(n, t / 1e9, t / total) for n, t in top]}


def main(results: str, top: int = 12) -> int:
    files = sorted(p for p in Path(results).rglob("*") if p.name.endswith((".json", ".json.gz")) and ".trace" in str(p))
    if not files:
        print(f"no Chrome trace under {results} (was the run traced, and did it end?)")
        return 1
    events = [e for path in files for e in read_events(path)]
    found = summarise(events)
    print(f"trace files: {', '.join(str(p.relative_to(results)) for p in files)}")
    for step in found["steps"]:
        print(f"{step['step']}: span {step['span_s']:.4f} s, GPU busy {100 * step['busy_fraction']:.1f}%")
    print(f"kernel time over the traced steps: {found['kernel_total_s']:.4f} s; top {top}:")
    for name, seconds, share in found["top"][:top]:
        print(f"  {100 * share:5.1f}%  {seconds * 1e3:9.2f} ms  {name[:140]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], *(int(a) for a in sys.argv[2:3])))
