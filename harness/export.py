"""Records in pytest-benchmark's JSON format, so `pytest-benchmark compare` (and any tool
built on its files) works on bench results: one benchmark per run, its statistics taken
over the measured step times (seconds), raw samples included."""

from __future__ import annotations

import statistics
from typing import Any

from harness.metrics import percentile
from harness.result import RunRecord, as_records

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


def _benchmark(record: RunRecord) -> dict[str, Any]:
    s, acc, m = record.scenario, record.accelerator, record.metrics
    steps = record.raw["loop"]["steps"]
    times = [x["time_s"] for x in steps if x["phase"] == "measure"]
    param = f"{s.variant}-{record.backend.name}-{acc.catalog_key}-r{s.repeat}"
    return {
        "group": s.name,
        "name": f"{s.name}[{param}]",
        "fullname": f"{s.file}::{s.name}[{param}]",
        "params": {
            "variant": s.variant,
            "backend": record.backend.name,
            "accelerator": acc.catalog_key,
            "repeat": s.repeat,
        },
        "param": param,
        "extra_info": {
            "unit": "s per optimizer step (device-synchronised)",
            "run_id": record.run_id,
            "tokens_per_s_real": m.tokens_per_s_real,
            "num_recompiles": m.num_recompiles,
        },
        "options": {
            "disable_gc": False,
            "timer": "perf_counter",
            "min_rounds": len(times),
            "max_time": 0,
            "min_time": 0,
            "warmup": m.measured_steps != len(steps),
        },
        "stats": _stats(times),
    }


def to_pytest_benchmark(records) -> dict[str, Any]:
    """`records`: RunRecords, or stored records' JSON (read as RunRecords here)."""
    # Its format holds one timed operation per benchmark: a run's optimizer steps. A serve
    # run has none (its figures are per request): not exported, and `bench export` says so.
    ok = [r for r in as_records(records) if r.ok and "loop" in (r.raw or {})]
    if not ok:
        raise ValueError("no successful records with optimizer steps to export")
    first = ok[0].provenance
    extra = first.model_extra or {}  # what the host said: hostname, platform, python, machine
    return {
        "machine_info": {
            "node": extra.get("hostname"),
            "machine": extra.get("machine"),
            "system": extra.get("platform"),
            "python_version": extra.get("python"),
            "python_implementation": "CPython",
            "accelerator": ok[0].accelerator.model_dump(mode="json", exclude_unset=True),  # as stored
        },
        "commit_info": {"id": first.commit, "dirty": first.dirty, "project": "bench"},
        "benchmarks": [_benchmark(r) for r in ok],
        "datetime": first.finished_at,
        "version": PYTEST_BENCHMARK_FORMAT,
    }
