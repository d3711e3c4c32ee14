"""Records in pytest-benchmark's JSON format, so `pytest-benchmark compare` (and any tool
built on its files) works on bench results: one benchmark per run, its statistics taken
over the measured step times (seconds), raw samples included."""

from __future__ import annotations

import statistics
from typing import Any

from harness.figures.metrics import percentile
from harness.records.result import RunRecord, as_records

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


# A serve record's figures exported as benchmarks, each with its per-request samples.
SERVE_FIGURES = {"ttft_s": "s to the first token per request", "tpot_s": "s per output token after the first"}


def _serve_benchmarks(record: RunRecord) -> list[dict[str, Any]]:
    """One benchmark per serve figure (TTFT, TPOT): its samples the completed measured
    requests' values (vLLM's definitions, harness.figures.metrics.request_latencies)."""
    from harness.figures.metrics import request_latencies

    s, acc = record.scenario, record.accelerator
    done = [r for r in measured_requests(record) if r["error"] is None]
    out = []
    for figure, unit in SERVE_FIGURES.items():
        values = [v for v in (request_latencies(r)[figure] for r in done) if v is not None]
        if not values:
            continue
        cell = "-".join(f"{k.rsplit('.', 1)[-1]}{v}" for k, v in sorted(s.cell.items())) or s.variant
        param = f"{cell}-{record.backend.name}-{acc.catalog_key}-r{s.repeat}"
        out.append(
            {
                "group": f"{s.name}:{figure}",
                "name": f"{s.name}:{figure}[{param}]",
                "fullname": f"{s.file}::{s.name}:{figure}[{param}]",
                "params": {"figure": figure, "backend": record.backend.name, "accelerator": acc.catalog_key},
                "param": param,
                "extra_info": {"unit": unit, "run_id": record.run_id, "samples": "one per completed measured request"},
                "options": {
                    "disable_gc": False,
                    "timer": "perf_counter",
                    "min_rounds": len(values),
                    "max_time": 0,
                    "min_time": 0,
                    "warmup": True,
                },
                "stats": _stats(values),
            }
        )
    return out


def measured_requests(record: RunRecord) -> list[dict[str, Any]]:
    """A serve record's measured requests: its own, or every probe's of an SLO search
    (each with the probe's rate as `point_rate_req_s`)."""
    raw = record.raw or {}
    out = [r for r in raw.get("requests", []) if not r["warmup"]]
    for point in (raw.get("slo_search") or {}).get("points", []):
        out += [{**r, "point_rate_req_s": point["rate"]} for r in point["requests"] if not r["warmup"]]
    return out


REQUEST_COLUMNS = (
    "run_id",
    "scenario",
    "cell",
    "index",
    "due_s",
    "sent_s",
    "queue_s",
    # vLLM's client's clock (harness.serving.conventions): posted before the connection,
    # scheduled before the concurrency cap; and each token chunk's token ids, where sent
    "posted_s",
    "arrival_s",
    "first_token_s",
    "chunk_s",
    "chunk_tokens",
    "end_s",
    "ttft_s",
    "tpot_s",
    "e2el_s",
    "prompt_tokens",
    "output_tokens",
    "cached_tokens",
    "status",
    "error",
    "point_rate_req_s",
)


def request_rows(records) -> list[dict[str, Any]]:
    """One row per measured request of every serve record (vLLM's --save-detailed and
    AIPerf's profile_export in spirit): times in s on the run's clock, `queue_s` the
    wait inside bench's client, the latencies by vLLM's definitions."""
    from harness.figures.metrics import request_latencies

    rows = []
    for record in as_records(records):
        if record.task != "serve" or not record.raw:
            continue
        for r in measured_requests(record):
            lat = request_latencies(r) if r["error"] is None else {}
            row = {
                "run_id": record.run_id,
                "scenario": record.scenario.name,
                "cell": record.scenario.cell,
                **{k: r.get(k) for k in REQUEST_COLUMNS if k in r},
                "first_token_s": r["chunk_s"][0] if r["chunk_s"] else None,
                **{k: lat.get(k) for k in ("ttft_s", "tpot_s", "e2el_s")},
            }
            rows.append({k: row.get(k) for k in REQUEST_COLUMNS})
    return rows


def write_requests(rows: list[dict[str, Any]], path) -> None:
    """JSON Lines, or CSV for a .csv path (lists and dicts as JSON in their cell)."""
    import csv
    import json
    from pathlib import Path

    path = Path(path)
    with open(path, "w", newline="") as out:
        if path.suffix == ".csv":
            writer = csv.DictWriter(out, fieldnames=REQUEST_COLUMNS)
            writer.writeheader()
            for row in rows:
                writer.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in row.items()})
        else:
            for row in rows:
                out.write(json.dumps(row) + "\n")


def to_pytest_benchmark(records) -> dict[str, Any]:
    """`records`: RunRecords, or stored records' JSON (read as RunRecords here). A train
    record is one benchmark (its optimizer steps); a serve record one per figure (TTFT,
    TPOT), with its per-request samples."""
    every = [r for r in as_records(records) if r.ok]
    train = [r for r in every if "loop" in (r.raw or {})]
    serve = [r for r in every if r.task == "serve" and r.raw]
    ok = train + serve
    if not ok:
        raise ValueError("no successful train or serve records to export")
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
        "benchmarks": [_benchmark(r) for r in train] + [b for r in serve for b in _serve_benchmarks(r)],
        "datetime": first.finished_at,
        "version": PYTEST_BENCHMARK_FORMAT,
    }
