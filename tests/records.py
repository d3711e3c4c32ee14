"""Synthetic result records for tests of the readers (gate, report): built with the
real metrics and cost modules from raw step samples, so they are what a run writes."""

from __future__ import annotations

import copy
import re
import uuid

from harness.figures import metrics
from harness.figures.cost import Price, load_catalog, price_for, training_cost
from harness.records.store import SCHEMA, SCHEMA_VERSION
from harness.scenario.loader import set_dotted

ARCH = {
    "vocab_size": 8192,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 1,
    "head_dim": 16,
    "layer_windows": [None, None],
}
MODEL = {
    "num_params": 1_210_000,
    "num_embedding_params": 200_000,
    "num_trainable_params": 10_000,
    "num_layers": 2,
    "num_heads": 4,
    "head_dim": 16,
    "hidden_size": 64,
    "vocab_size": 8192,
    "architecture": ARCH,
}


def make_record(
    times,
    *,
    name="tiny",
    variant="default",
    backend="torch",
    kind="cpu",
    device="AMD EPYC",
    catalog_key="cpu",
    chips=1,
    warmup=(5.0,),
    tokens=1000,
    padded=2048,
    compiles=None,
    status="ok",
    failure=None,
    repeat=0,
    budgets=(),
    cell=None,
    precision=None,
    options=None,
    overrides=None,
    profile=None,
    started_at="2026-11-25T00:00:00+00:00",
    usd_per_chip_hour=None,
    window_s=None,
) -> dict:
    """`cell` (matrix values by dotted key) defaults to what `variant` names
    (`padding=dynamic` -> sequence.padding); `overrides` are --set values; both land in
    the resolved scenario, as a real run's do. `usd_per_chip_hour` bills at a custom price. `window_s`: an unsynced window of 4 steps of
    `tokens` real tokens taking that many seconds in all."""
    cell = _cell(variant) if cell is None else dict(cell)
    if cell and variant == "default":
        variant = ",".join(f"{k.split('.')[-1]}={v}" for k, v in cell.items())
    resolved = {"name": name, "budgets": list(budgets), "sequence": {"padding": "static"}}
    for key, value in {**cell, **(overrides or {})}.items():
        set_dotted(resolved, key, value, "make_record")
    if precision is not None:
        set_dotted(resolved, "train.precision", precision, "make_record")
    all_times = list(warmup) + list(times)
    compiles = compiles or [0] * len(all_times)
    steps = [
        {
            "index": i,
            "phase": "warmup" if i < len(warmup) else "measure",
            "start_s": float(i),
            "time_s": t,
            "tokens_real": tokens,
            "tokens_padded": padded,
            "seq_len": 128,
            "num_compiles": compiles[i],
            "row_tokens": [tokens // 8] * 8,
            "compile_s": 0.0,
            "loss": 2.0 - 0.01 * i,
        }
        for i, t in enumerate(all_times)
    ]
    raw = {
        "loop": {"steps": steps, "window": _window(window_s, tokens, padded), "setup_compiles": 0},
        "model": MODEL,
        "memory": {"peak_bytes": 2 * 1024**3, "kind": "cpu_peak_rss"},
        "setup_s": 1.0,
        "wall_s": 1.0 + sum(all_times),
        "data": {},
        "versions": {"torch": "2.13.0"},
        "notes": [],
    }
    accelerator = {"kind": kind, "name": device, "count": chips, "catalog_key": catalog_key}
    record = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "run_id": uuid.uuid4().hex,
        "run_key": uuid.uuid4().hex,
        "task": "train",
        "status": status,
        "failure": failure,
        "scenario": {
            "name": name,
            "reference": None,
            "file": f"scenarios/{name}.yaml",
            "hash": "h",
            "variant": variant,
            "cell": cell,
            "repeat": repeat,
            "overrides": dict(overrides or {}),
            "profile": profile,
            "resolved": resolved,
        },
        "backend": {"name": backend, "python": "python", "options": dict(options or {})},
        "accelerator": accelerator,
        "provenance": {
            "commit": "abc",
            "dirty": False,
            "hostname": "h",
            "platform": "linux",
            "python": "3.11",
            "bench_version": "0.1.0",
            "started_at": started_at,
            "finished_at": "2026-11-25T00:01:00+00:00",
            "command": ["bench"],
            "libraries": {},
        },
        "plan": None,
        "raw": raw,
        "metrics": None,
        "cost": None,
        "sweep": None,
        "server": None,
        "trace": None,
        "warnings": [],
    }
    if status == "ok":
        flops = metrics.FlopsModel(ARCH, lora=True, adapter_params=MODEL["num_trainable_params"])
        record["metrics"] = metrics.training_metrics(raw, accelerator, flops)
        price = (
            price_for(catalog_key, None, load_catalog())
            if usd_per_chip_hour is None
            else Price(catalog_key, usd_per_chip_hour, "custom", "test", "2026-11")
        )
        record["cost"] = training_cost(record["metrics"], chips, price)
    return record


# How a variant names a matrix key (the last part of its dotted path), for the keys tests use.
_SHORT_KEYS = {"padding": "sequence.padding", "precision": "train.precision"}


def _cell(variant: str) -> dict:
    """`padding=dynamic,precision=bf16` -> {sequence.padding: dynamic, train.precision: bf16};
    a variant that is not KEY=VALUE pairs (a hostile name) is a matrix key of its own."""
    if variant == "default":
        return {}
    pairs = [part.partition("=") for part in variant.split(",")]
    if all(sep and re.fullmatch(r"[\w.-]+", key) for key, sep, _ in pairs):
        return {_SHORT_KEYS.get(key, key): value for key, _, value in pairs}
    return {"variant": variant}


def failed_record(**kwargs) -> dict:
    return make_record(
        [1.0],
        status="failed",
        failure={"kind": "error", "reason": "RuntimeError: boom", "exit_code": 1, "log_tail": ""},
        **kwargs,
    )


def clone(record: dict, **changes) -> dict:
    out = copy.deepcopy(record)
    out.update(changes)
    return out


def _window(time_s, tokens, padded) -> dict | None:
    if time_s is None:
        return None
    return {"num_steps": 4, "time_s": time_s, "tokens_real": 4 * tokens, "tokens_padded": 4 * padded, "num_compiles": 0}


def requests(n: int, failed: int) -> list[dict]:
    """n measured requests, the last `failed` of them failed (HTTP 500)."""
    out = []
    for i in range(n):
        ok = i < n - failed
        chunks = [i + 0.1 + 0.01 * k for k in range(4)] if ok else []
        out.append(
            {
                "index": i,
                "warmup": False,
                "sent_s": float(i),
                "chunk_s": chunks,
                "end_s": (chunks[-1] if ok else i + 0.05) + 0.001,
                "prompt_tokens": 10 if ok else None,
                "output_tokens": 4 if ok else None,
                "status": 200 if ok else 500,
                "error": None if ok else "HTTP 500: server error",
            }
        )
    return out


def serve_record(n: int = 10, failed: int = 0, max_error_rate: float | None = None) -> dict:
    from harness.figures.metrics import serving_metrics

    record = make_record([0.5] * 4)
    raw = {"requests": requests(n, failed), "engine": "endpoint"}
    metrics = serving_metrics(raw, {"ttft_s": None, "tpot_s": None, "e2el_s": None})
    record.update(task="serve", raw=raw, metrics=metrics, cost=None)
    serve = {} if max_error_rate is None else {"max_error_rate": max_error_rate}
    record["scenario"]["resolved"]["serve"] = serve
    return record
