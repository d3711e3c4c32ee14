"""Every formula of ../shared/docs/metrics.md, in one module, computed from raw samples.

Backends hand over raw facts (per-step synchronised times, tokens, compile counts);
everything here is a pure function of a record's `raw` section, so any record's
statistics can be recomputed exactly from its samples. Names carry their unit.
"""

from __future__ import annotations

import math
import statistics
from typing import Any, Iterable, Sequence

from harness.accelerators import peak_flops

GIB = 1024**3


# --------------------------------------------------------------------------- statistics
def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method), q in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Sequence[float]) -> dict[str, float | int]:
    """median, p90, p99, mean, stdev, min, max and n of a sample (quote the median)."""
    return {
        "median": statistics.median(values), "p90": percentile(values, 90), "p99": percentile(values, 99),
        "mean": statistics.fmean(values), "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values), "max": max(values), "n": len(values),
    }


# --------------------------------------------------------------------------- FLOPs, MFU
def flops_per_token(model: dict[str, Any], seq_len: int, lora: bool) -> float:
    """Training FLOPs per token of a dense decoder: 6N + 12*L*H*Q*T (PaLM, appendix B),
    N = non-embedding parameters of the base model. With LoRA the backward pass computes
    no gradient for frozen weights, so 6N becomes (2 + 2 + 2r)N, r = trainable fraction."""
    base = model["num_params"] - model["num_embedding_params"]
    if lora:
        base -= model["num_trainable_params"]
        r = model["num_trainable_params"] / base
        dense = (2 + 2 + 2 * r) * base
    else:
        dense = 6 * base
    attention = 12 * model["num_layers"] * model["num_heads"] * model["head_dim"] * seq_len
    return dense + attention


MFU_CONVENTION = {
    True: "PaLM 6N+12LHQT with LoRA (2+2+2r)N, N non-embedding, real tokens, bf16 peak",
    False: "PaLM 6N+12LHQT, N non-embedding, real tokens, bf16 peak",
}


def model_flops(steps: Iterable[dict[str, Any]], model: dict[str, Any], lora: bool) -> float:
    """Model FLOPs of the given steps: real tokens x FLOPs/token at each step's length."""
    return sum(s["tokens_real"] * flops_per_token(model, s["seq_len"], lora) for s in steps)


def mfu(flops_per_s: float, peak_per_chip: float | None, chips: int) -> float | None:
    """Model FLOPs utilisation, or None where the device has no meaningful peak (CPU)."""
    if not peak_per_chip or chips < 1:
        return None
    return flops_per_s / (peak_per_chip * chips)


# --------------------------------------------------------------------------- training record
def measured(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in steps if s["phase"] == "measure"]


def training_metrics(raw: dict[str, Any], accelerator: dict[str, Any], lora: bool) -> dict[str, Any]:
    """All training metrics of a record from its raw section."""
    steps = raw["loop"]["steps"]
    window = raw["loop"]["window"]
    kept = measured(steps)
    warmup = [s for s in steps if s["phase"] == "warmup"]
    chips = accelerator.get("count", 1)
    busy_s = sum(s["time_s"] for s in kept)
    real = sum(s["tokens_real"] for s in kept)
    padded = sum(s["tokens_padded"] for s in kept)
    flops_per_s = model_flops(kept, raw["model"], lora) / busy_s
    peak = peak_flops(accelerator.get("catalog_key", ""))
    util = mfu(flops_per_s, peak, chips)
    window_recompiles = window["num_compiles"] if window else 0
    out = {
        "step_time_s": summary([s["time_s"] for s in kept]),
        "warmup_time_s": sum(s["time_s"] for s in warmup),
        "compile_time_s": sum(s["compile_s"] for s in steps),
        "num_compiles": sum(s["num_compiles"] for s in steps) + window_recompiles,
        "num_recompiles": sum(s["num_compiles"] for s in kept) + window_recompiles,
        "num_setup_compiles": raw["loop"].get("setup_compiles", 0),
        "tokens_per_s_real": real / busy_s,
        "tokens_per_s_padded": padded / busy_s,
        "tokens_per_s_real_per_chip": real / busy_s / chips,
        "tokens_per_s_padded_per_chip": padded / busy_s / chips,
        "padding_efficiency": real / padded,
        "window_tokens_per_s_real": window["tokens_real"] / window["time_s"] if window else None,
        "window_tokens_per_s_padded": window["tokens_padded"] / window["time_s"] if window else None,
        "model_tflops_per_s": flops_per_s / 1e12,
        "mfu": util,
        "mfu_convention": MFU_CONVENTION[lora],
        "peak_flops_per_chip": peak,
        "peak_memory_gib": _gib(raw["memory"].get("peak_bytes")),
        "peak_memory_kind": raw["memory"].get("kind"),
        "measured_steps": len(kept),
        "measured_time_s": busy_s,
        "tokens_real": real,
        "tokens_padded": padded,
        "setup_time_s": raw.get("setup_s"),
        "run_time_s": raw.get("wall_s"),
        "loss_first": steps[0]["loss"] if steps else None,
        "loss_last": steps[-1]["loss"] if steps else None,
    }
    if util is not None and util > 1:
        # More than the chip can do: the timing measured dispatch, not execution.
        out["mfu"] = None
        out["mfu_invalid"] = f"computed MFU {util:.2f} > 1: step times are not device-synchronised"
    return out


def first_non_finite_loss(raw: dict[str, Any]) -> tuple[int, float] | None:
    """(step, value) of the first NaN/inf loss: a fast but wrong run must fail."""
    for step in raw["loop"]["steps"]:
        loss = step.get("loss")
        if loss is not None and not math.isfinite(loss):
            return step["index"], loss
    window = raw["loop"].get("window")
    if window:
        offset = len(raw["loop"]["steps"])
        for i, loss in enumerate(window.get("losses", [])):
            if not math.isfinite(loss):
                return offset + i, loss
    return None


def _gib(value: int | None) -> float | None:
    return None if value is None else value / GIB


# --------------------------------------------------------------------------- comparing runs
def across_runs(values: Iterable[float | None]) -> float | None:
    """One figure for repeated runs of the same configuration: the median (metrics.md)."""
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def ratio_words(value: float | None, baseline: float | None, lower_is_better: bool, what: str) -> str | None:
    """`6.1x lower median step time`: a ratio always >= 1, with its direction in words."""
    if value is None or baseline is None or value <= 0 or baseline <= 0:
        return None
    ratio = max(value, baseline) / min(value, baseline)
    if ratio < 1.005:
        return f"same {what}"
    direction = "lower" if value < baseline else "higher"
    verdict = "better" if (value < baseline) == lower_is_better else "worse"
    return f"{ratio:.2f}x {direction} {what} ({verdict})"


# --------------------------------------------------------------------------- serving
def _latency_summary(values: list[float]) -> dict[str, float | int] | None:
    """mean, median, p90, p99 (and the rest of `summary`) of a latency, in seconds."""
    return summary(values) if values else None


def request_latencies(request: dict[str, Any]) -> dict[str, float | None]:
    """vLLM's per-request meanings (benchmarks/serve.py): TTFT to the first content
    chunk, E2EL to the last byte, TPOT = (E2EL - TTFT) / (output tokens - 1)."""
    sent, chunks, end = request["sent_s"], request["chunk_s"], request["end_s"]
    ttft = chunks[0] - sent if chunks else None
    e2el = end - sent if end is not None else None
    tokens = request.get("output_tokens")
    tpot = (e2el - ttft) / (tokens - 1) if ttft is not None and e2el is not None and tokens and tokens > 1 else None
    return {"ttft_s": ttft, "e2el_s": e2el, "tpot_s": tpot}


def meets_slo(latency: dict[str, float | None], slo: dict[str, float | None]) -> bool:
    for name, target in slo.items():
        if target is not None and (latency.get(name) is None or latency[name] > target):
            return False
    return True


def serving_metrics(raw: dict[str, Any], slo: dict[str, float | None]) -> dict[str, Any]:
    """Serving metrics of a record from its raw per-request timestamps."""
    measured = [r for r in raw["requests"] if not r["warmup"]]
    done = [r for r in measured if r["error"] is None]
    lat = [request_latencies(r) for r in done]
    itl = [b - a for r in done for a, b in zip(r["chunk_s"], r["chunk_s"][1:])]  # pooled gaps
    start = min((r["sent_s"] for r in measured), default=0.0)
    end = max((r["end_s"] for r in done if r["end_s"] is not None), default=start)
    duration = end - start
    output = sum(r["output_tokens"] or 0 for r in done)
    prompt = sum(r["prompt_tokens"] or 0 for r in done)
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: None)
    return {
        "num_requests": len(measured), "num_completed": len(done), "num_errors": len(measured) - len(done),
        "errors": sorted({r["error"].split(":")[0] for r in measured if r["error"]}),
        "duration_s": duration,
        "ttft_s": _latency_summary([x["ttft_s"] for x in lat if x["ttft_s"] is not None]),
        "tpot_s": _latency_summary([x["tpot_s"] for x in lat if x["tpot_s"] is not None]),
        "itl_s": _latency_summary(itl),
        "e2el_s": _latency_summary([x["e2el_s"] for x in lat if x["e2el_s"] is not None]),
        "output_tokens": output, "prompt_tokens": prompt,
        "output_throughput_tok_s": per_s(output), "total_throughput_tok_s": per_s(output + prompt),
        "request_throughput_req_s": per_s(len(done)),
        "goodput_req_s": per_s(sum(meets_slo(x, slo) for x in lat)) if any(v is not None for v in slo.values()) else None,
        "slo": slo,
    }
