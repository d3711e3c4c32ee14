"""How long does `bench report` take over 1,000 records? Answer: docs/measurements/reports.md, "Report generation".
The target: 1,000 records in under 10 seconds (HTML, Markdown and CSV each), measured end
to end through the CLI.

The records are synthetic but built by the real metrics and cost modules (tests/records.py):
10 scenarios x 4 variants x 5 backends/accelerators x 5 repeats = 1,000 runs of 30 steps.

    python benchmarks/probes/bench_report.py [--records 1000]

Prints a table, then one JSON document.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

DEVICES = [
    ("torch", "cpu", "AMD EPYC", "cpu", 1),
    ("torch", "cuda", "NVIDIA H100 80GB HBM3", "h100-sxm", 1),
    ("gpu-fsdp", "cuda", "NVIDIA H100 80GB HBM3", "h100-sxm", 8),
    ("xla-fsdpv2", "tpu", "TPU v5 lite", "tpu-v5e", 8),
    ("jax-tunix", "tpu", "TPU v5", "tpu-v5p", 4),
]


def make_records(count: int, directory: Path) -> None:
    from records import make_record

    rng = random.Random(0)
    for i in range(count):
        backend, kind, name, key, chips = DEVICES[i % len(DEVICES)]
        times = [rng.uniform(0.2, 0.3) for _ in range(30)]
        record = make_record(
            times,
            name=f"scenario-{i // 100}",
            variant=f"padding={('static', 'dynamic', 'bucketed', 'x')[i // 25 % 4]}",
            backend=backend,
            kind=kind,
            device=name,
            catalog_key=key,
            chips=chips,
            repeat=i % 5,
        )
        (directory / f"{i:05d}.json").write_text(json.dumps(record))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1000)
    args = parser.parse_args()
    timings = {}
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results"
        results.mkdir()
        make_records(args.records, results)
        for fmt, name in (("html", "index.html"), ("md", "index.md"), ("csv", "runs.csv")):
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "harness.cli", "report", str(results), "-o", str(Path(tmp) / name)],
                check=True,
                cwd=ROOT,
                capture_output=True,
            )
            timings[fmt] = time.perf_counter() - start
        size = (Path(tmp) / "index.html").stat().st_size
    print(f"{'format':<8}{'seconds':>10}")
    for fmt, seconds in timings.items():
        print(f"{fmt:<8}{seconds:>10.2f}")
    print(json.dumps({"records": args.records, "seconds": timings, "html_bytes": size, "target_s": 10}))


if __name__ == "__main__":
    main()
