"""Records in pytest-benchmark's JSON format, so `pytest-benchmark compare` (and any tool
built on its files) works on bench results: one benchmark per run, its statistics taken
over the measured step times (seconds), raw samples included."""

from __future__ import annotations

import statistics
from typing import Any

from harness.metrics import percentile

PYTEST_BENCHMARK_FORMAT = "5.1.0"


def _stats(times: list[float]) -> dict[str, Any]:
    q1, q3 = percentile(times, 25), percentile(times, 75)
    iqr = q3 - q1
    mean = statistics.fmean(times)
    stddev = statistics.stdev(times) if len(times) > 1 else 0.0
    inside = [t for t in times if q1 - 1.5 * iqr <= t <= q3 + 1.5 * iqr]
    return {
        "min": min(times),
        "max": max(times),
        "mean": mean,
        "stddev": stddev,
        "rounds": len(times),
        "median": statistics.median(times),
        "iqr": iqr,
        "q1": q1,
        "q3": q3,
        "iqr_outliers": len(times) - len(inside),
        "stddev_outliers": sum(abs(t - mean) > stddev for t in times),
        "outliers": f"{sum(abs(t - mean) > stddev for t in times)};{len(times) - len(inside)}",
        "ld15iqr": min(inside),
        "hd15iqr": max(inside),
        "ops": 1.0 / mean,
        "total": sum(times),
        "data": times,
        "iterations": 1,
    }


def _benchmark(record: dict[str, Any]) -> dict[str, Any]:
    s, acc = record["scenario"], record["accelerator"]
    times = [x["time_s"] for x in record["raw"]["loop"]["steps"] if x["phase"] == "measure"]
    param = f"{s['variant']}-{record['backend']['name']}-{acc['catalog_key']}-r{s['repeat']}"
    return {
        "group": s["name"],
        "name": f"{s['name']}[{param}]",
        "fullname": f"{s['file']}::{s['name']}[{param}]",
        "params": {
            "variant": s["variant"],
            "backend": record["backend"]["name"],
            "accelerator": acc["catalog_key"],
            "repeat": s["repeat"],
        },
        "param": param,
        "extra_info": {
            "unit": "s per optimizer step (device-synchronised)",
            "run_id": record["run_id"],
            "tokens_per_s_real": record["metrics"]["tokens_per_s_real"],
            "num_recompiles": record["metrics"]["num_recompiles"],
        },
        "options": {
            "disable_gc": False,
            "timer": "perf_counter",
            "min_rounds": len(times),
            "max_time": 0,
            "min_time": 0,
            "warmup": record["metrics"]["measured_steps"] != len(record["raw"]["loop"]["steps"]),
        },
        "stats": _stats(times),
    }


def to_pytest_benchmark(records: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in records if r["status"] == "ok"]
    if not ok:
        raise ValueError("no successful records to export")
    first = ok[0]["provenance"]
    return {
        "machine_info": {
            "node": first.get("hostname"),
            "machine": first.get("machine"),
            "system": first.get("platform"),
            "python_version": first.get("python"),
            "python_implementation": "CPython",
            "accelerator": ok[0]["accelerator"],
        },
        "commit_info": {"id": first.get("commit"), "dirty": first.get("dirty"), "project": "bench"},
        "benchmarks": [_benchmark(r) for r in ok],
        "datetime": first.get("finished_at"),
        "version": PYTEST_BENCHMARK_FORMAT,
    }
