"""Every formula of ../shared/docs/metrics.md, in one module, computed from raw samples.

Backends hand over raw facts (per-step synchronised times, tokens, compile counts);
everything here is a pure function of a record's `raw` section, so any record's
statistics can be recomputed exactly from its samples. Names carry their unit.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from harness.figures.accelerators import peak_flops

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
        "median": statistics.median(values),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "mean": statistics.fmean(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
        "n": len(values),
    }


# --------------------------------------------------------------------------- FLOPs, MFU
MFU_CONVENTION = (
    "model FLOPs per real token: every matmul a token passes through, the LM head included (tied or not); "
    "full fine-tune 6 per weight, LoRA 4 per frozen weight (forward + input gradient) and 6 per adapter weight; "
    "attention 12*heads*head_dim per attended key at each row's real length, causal (position p attends p+1 keys), "
    "sliding-window layers capped at their window; embedding lookups free; padding excluded; dense bf16 peak"
)
EXECUTED_CONVENTION = (
    "executed matmul FLOPs of a step over padded rows: the dense weights as in MFU_CONVENTION for every padded "
    "token, attention 12*heads*head_dim per query per key over the whole padded row on every layer (an eager, "
    "masked kernel computes the masked scores too); what a compiler's cost model counts for the same tokens"
)
HFU_CONVENTION = (
    "hardware FLOPs: model FLOPs plus the decoder layers' forward recomputed under activation checkpointing"
)
# Added to the convention of a run whose chunked loss recomputed the LM head (#36).
HFU_HEAD_RECOMPUTE = ", plus the LM head's forward again (2 per head weight per real token): the loss recomputed it"

# Gemma 3 interleaves sliding-window layers with a global one: every 6th layer is global
# (transformers' Gemma3TextConfig layer_types).
GEMMA3_GLOBAL_EVERY = 6


def layer_windows(arch: dict[str, Any]) -> list[int | None]:
    """Each decoder layer's attention window (None: full causal attention)."""
    if arch.get("layer_windows") is not None:
        return list(arch["layer_windows"])
    layers, window = arch["num_layers"], arch.get("sliding_window")
    if arch.get("family", "gemma3") == "gemma3" and window:
        return [None if (i + 1) % GEMMA3_GLOBAL_EVERY == 0 else window for i in range(layers)]
    return [None] * layers


def matmul_weights(arch: dict[str, Any]) -> tuple[int, int]:
    """(decoder layers' matmul weights, LM head weights): the weights a token multiplies."""
    hidden, heads, kv = arch["hidden_size"], arch["num_heads"], arch["num_kv_heads"]
    head_dim = arch.get("head_dim") or hidden // heads
    attention = hidden * head_dim * (2 * heads + 2 * kv)  # q, o; k, v
    mlp = 3 * hidden * arch["intermediate_size"]  # gate, up, down
    return arch["num_layers"] * (attention + mlp), arch["vocab_size"] * hidden


def keys_attended(length: int, window: int | None) -> int:
    """Keys attended by all tokens of a causal row of `length` real tokens: position p
    attends p + 1 keys, at most `window` on a sliding-window layer."""
    if window is None or length <= window:
        return length * (length + 1) // 2
    return window * (window + 1) // 2 + (length - window) * window


@dataclass(frozen=True)
class FlopsModel:
    """Training FLOPs of a model run, by the convention in MFU_CONVENTION."""

    arch: dict[str, Any]
    lora: bool
    adapter_params: int  # LoRA weights (0 for a full fine-tune)
    checkpointing: bool = False
    # The chunked loss recomputes the LM head's forward in the backward (the record's
    # raw.execution.loss_recompute): 2 FLOPs per head weight per token again.
    head_recompute: bool = False

    def dense_per_token(self) -> float:
        layers, head = matmul_weights(self.arch)
        if self.lora:
            return 4 * (layers + head) + 6 * self.adapter_params
        return 6 * (layers + head)

    def attention_per_row(self, length: int) -> float:
        heads = self.arch["num_heads"]
        head_dim = self.arch.get("head_dim") or self.arch["hidden_size"] // heads
        return 12 * heads * head_dim * sum(keys_attended(length, w) for w in layer_windows(self.arch))

    def recompute_per_row(self, length: int) -> float:
        """The decoder layers' forward again (activation checkpointing): 2 per weight
        and a third of the attention; the LM head's forward again (2 per head weight)
        where the loss recomputes it."""
        layers, head = matmul_weights(self.arch)
        again = length * 2 * head if self.head_recompute else 0.0
        if not self.checkpointing:
            return again
        return again + length * 2 * (layers + self.adapter_params) + self.attention_per_row(length) / 3

    def masked_attention_per_row(self, length: int) -> float:
        """Attention as an eager (masked) kernel executes it over a padded row: every
        query against every one of the row's `length` keys, masks applied after the
        matmuls, on every layer (sliding windows included)."""
        heads = self.arch["num_heads"]
        head_dim = self.arch.get("head_dim") or self.arch["hidden_size"] // heads
        return 12 * heads * head_dim * length * length * len(layer_windows(self.arch))

    def executed_flops(self, padded_lengths: Iterable[int]) -> float:
        """The matmul FLOPs a compiled step executes over padded rows (EXECUTED_CONVENTION):
        what a compiler's cost model counts, unlike the model FLOPs of MFU."""
        dense = self.dense_per_token()
        return sum(n * dense + self.masked_attention_per_row(n) for n in padded_lengths)

    def model_flops(self, row_lengths: Iterable[int]) -> float:
        dense = self.dense_per_token()
        return sum(n * dense + self.attention_per_row(n) for n in row_lengths)

    def hardware_flops(self, row_lengths: Iterable[int]) -> float:
        rows = list(row_lengths)
        return self.model_flops(rows) + sum(self.recompute_per_row(n) for n in rows)


def mfu(flops_per_s: float, peak_per_chip: float | None, chips: int) -> float | None:
    """Model FLOPs utilisation, or None where the device has no meaningful peak (CPU)."""
    if not peak_per_chip or chips < 1:
        return None
    return flops_per_s / (peak_per_chip * chips)


# --------------------------------------------------------------------------- training record
def measured(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [s for s in steps if s["phase"] == "measure"]


def steady(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Measured steps that compiled nothing: the steady state (metrics.md)."""
    return [s for s in measured(steps) if s["num_compiles"] == 0]


def _throughput(steps: list[dict[str, Any]], key: str) -> float | None:
    busy = sum(s["time_s"] for s in steps)
    return sum(s[key] for s in steps) / busy if steps and busy > 0 else None


def _rows(steps: list[dict[str, Any]]) -> list[int]:
    return [n for s in steps for n in s["row_tokens"]]


def training_metrics(raw: dict[str, Any], accelerator: dict[str, Any], flops: FlopsModel | None) -> dict[str, Any]:
    """All training metrics of a record from its raw section.

    Steady state (step time, tokens/s, MFU) is over the measured steps that compiled
    nothing; `*_effective` figures are over every measured step, recompiles included:
    what dynamic shapes really cost. Recompiling steps are counted and timed apart.
    `flops` None: the FLOPs figures (and MFU, HFU) are None, for facts without each
    row's real tokens (records of bench before d08562e: harness.records.migrations)."""
    steps = raw["loop"]["steps"]
    window = raw["loop"]["window"]
    kept, calm = measured(steps), steady(steps)
    recompiling = [s for s in kept if s["num_compiles"] > 0]
    warmup = [s for s in steps if s["phase"] == "warmup"]
    chips = accelerator.get("count", 1)
    calm_s = sum(s["time_s"] for s in calm)
    peak = peak_flops(accelerator.get("catalog_key", ""))
    real_tokens = sum(s["tokens_real"] for s in kept)
    out = {
        **_compile_figures(raw, window, steps, kept, calm, recompiling, warmup),
        **_throughput_figures(window, kept, calm, chips, real_tokens),
        **_flops_figures(flops, kept, calm, calm_s, real_tokens, peak, chips),
        **_run_figures(raw, steps, kept, calm_s, real_tokens),
    }
    for name in ("mfu", "hfu"):
        if out[name] is not None and out[name] > 1:
            # More than the chip can do: the timing measured dispatch, not execution.
            out[f"{name}_invalid"] = (
                f"computed {name.upper()} {out[name]:.2f} > 1: step times are not device-synchronised"
            )
            out[name] = None
    return out


def _compile_figures(raw, window, steps, kept, calm, recompiling, warmup) -> dict[str, Any]:
    """Steady step time, warm-up, and every compile: where, how many, how long."""
    window_recompiles = window["num_compiles"] if window else 0
    return {
        "step_time_s": summary([s["time_s"] for s in calm]) if calm else None,
        "steady_state": (
            f"{len(calm)} of {len(kept)} measured steps compiled nothing"
            if calm
            else f"none: every one of the {len(kept)} measured steps compiled"
        ),
        "warmup_time_s": sum(s["time_s"] for s in warmup),
        "compile_time_s": sum(s["compile_s"] for s in steps),
        "num_compiles": sum(s["num_compiles"] for s in steps) + window_recompiles,
        # Every compile after warm-up, traced steps' included (a profiler adds no compile).
        "num_recompiles": sum(s["num_compiles"] for s in steps if s["phase"] != "warmup") + window_recompiles,
        "recompile_steps": len(recompiling),
        "recompile_steps_time_s": sum(s["time_s"] for s in recompiling),
        "num_setup_compiles": raw["loop"].get("setup_compiles", 0),
        "compile_cache": raw.get("compile_cache"),  # a persistent cache on hides compiles
    }


def _throughput_figures(window, kept, calm, chips, real_tokens) -> dict[str, Any]:
    """Tokens per second: steady, per chip, effective (recompiles included), the window's."""
    real = _throughput(calm, "tokens_real")
    padded = _throughput(calm, "tokens_padded")
    return {
        "tokens_per_s_real": real,
        "tokens_per_s_padded": padded,
        "tokens_per_s_real_per_chip": real / chips if real is not None else None,
        "tokens_per_s_padded_per_chip": padded / chips if padded is not None else None,
        "tokens_per_s_real_effective": _throughput(kept, "tokens_real"),
        "tokens_per_s_padded_effective": _throughput(kept, "tokens_padded"),
        "padding_efficiency": real_tokens / sum(s["tokens_padded"] for s in kept) if kept else None,
        "window_tokens_per_s_real": window["tokens_real"] / window["time_s"] if window else None,
        "window_tokens_per_s_padded": window["tokens_padded"] / window["time_s"] if window else None,
    }


def _flops_figures(flops, kept, calm, calm_s, real_tokens, peak, chips) -> dict[str, Any]:
    """FLOPs per token and per second, MFU and HFU (None without a FLOPs model)."""
    counted = flops is not None
    flops_per_s = flops.model_flops(_rows(calm)) / calm_s if calm and counted else None
    hw_flops_per_s = flops.hardware_flops(_rows(calm)) / calm_s if calm and counted else None
    return {
        "model_flops_per_token": flops.model_flops(_rows(kept)) / real_tokens if real_tokens and counted else None,
        "hardware_flops_per_token": flops.hardware_flops(_rows(kept)) / real_tokens
        if real_tokens and counted
        else None,
        "model_tflops_per_s": flops_per_s / 1e12 if flops_per_s is not None else None,
        "mfu": mfu(flops_per_s, peak, chips) if flops_per_s is not None else None,
        "hfu": mfu(hw_flops_per_s, peak, chips) if hw_flops_per_s is not None else None,
        "mfu_convention": MFU_CONVENTION,
        "hfu_convention": HFU_CONVENTION + (HFU_HEAD_RECOMPUTE if counted and flops.head_recompute else ""),
        "peak_flops_per_chip": peak,
    }


def _run_figures(raw, steps, kept, calm_s, real_tokens) -> dict[str, Any]:
    """Memory, the measured steps' totals, setup and run time, first and last loss."""
    return {
        "peak_memory_gib": _gib(raw["memory"].get("peak_bytes")),
        "peak_memory_kind": raw["memory"].get("kind"),
        "measured_steps": len(kept),
        "measured_time_s": sum(s["time_s"] for s in kept),
        "steady_time_s": calm_s,
        "tokens_real": real_tokens,
        "tokens_padded": sum(s["tokens_padded"] for s in kept),
        "setup_time_s": raw.get("setup_s"),
        # From the worker process's launch to its exit (interpreter start, launcher and
        # imports included); the worker's own clock where that was not measured.
        "run_time_s": raw.get("process_s") or raw.get("wall_s"),
        "loss_first": steps[0]["loss"] if steps else None,
        "loss_last": steps[-1]["loss"] if steps else None,
    }


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
    """vLLM's per-request meanings (benchmarks/serve.py): TTFT to the first token chunk
    (a chunk with choices, its text empty or not), E2EL to the last token chunk (the
    usage-only chunk and the stream's end do not count), TPOT = (E2EL - TTFT) / (output tokens - 1), none for one output token."""
    sent, chunks = request["sent_s"], request["chunk_s"]
    ttft = chunks[0] - sent if chunks else None
    e2el = chunks[-1] - sent if chunks else None
    tokens = request.get("output_tokens")
    tpot = (e2el - ttft) / (tokens - 1) if ttft is not None and e2el is not None and tokens and tokens > 1 else None
    return {"ttft_s": ttft, "e2el_s": e2el, "tpot_s": tpot, "output_tokens": tokens}


def meets_slo(latency: dict[str, float | None], slo: dict[str, float | None]) -> bool:
    """Every given target met (<=). A request with one output token has TPOT 0 for
    this test, as vLLM's goodput counts it."""
    for name, target in slo.items():
        value = latency.get(name)
        if name == "tpot_s" and value is None and (latency.get("output_tokens") or 0) <= 1:
            value = 0.0
        if target is not None and (value is None or value > target):
            return False
    return True


SLO_TARGETS = ("ttft_s", "tpot_s", "e2el_s")


def slo_at_percentile(requests: list[dict[str, Any]], slo: dict[str, Any]) -> dict[str, Any] | None:
    """Whether a load meets the SLO at its percentile p (spec.SloSpec): no measured
    request failed, and each given target's p-th percentile (linear interpolation) over
    the completed requests is within it; TPOT of a one-token request counts as 0, as in
    goodput. None when the SLO states no percentile."""
    p = slo.get("percentile")
    if p is None:
        return None
    measured = [r for r in requests if not r["warmup"]]
    done = [request_latencies(r) for r in measured if r["error"] is None]
    values: dict[str, float | None] = {}
    for name in SLO_TARGETS:
        if slo.get(name) is None:
            continue
        sample = [
            0.0 if name == "tpot_s" and x[name] is None and (x["output_tokens"] or 0) <= 1 else x[name] for x in done
        ]
        sample = [v for v in sample if v is not None]
        values[name] = percentile(sample, p) if sample else None
    failed = len(measured) - len(done)
    met = bool(done) and failed == 0 and all(v is not None and v <= slo[k] for k, v in values.items())
    return {"percentile": p, "values": values, "failed": failed, "met": met}


# A request that waited longer than this inside bench's client (for a connection, for
# the event loop) before being written: the client, not the server, limited the load.
CLIENT_LAG_S = 0.05


def supports_percentile(n: int, p: float) -> bool:
    """Whether n samples can estimate the p-th percentile: at least one sample lies
    beyond it (n (1 - p/100) >= 1: p90 needs 10, p99 100); below that, the figure is
    essentially the sample's maximum."""
    return n * (1 - p / 100) >= 1 - 1e-9


def _sent(measured: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The measured requests that were sent (not those a deadline stopped first)."""
    return [r for r in measured if not (r["error"] or "").startswith("not sent")]


def client_figures(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """The client's side of a load: each request's wait inside bench's client before it
    was written (`queue_s`), summarised, and a sentence where any waited past
    CLIENT_LAG_S (the client was the bottleneck); the achieved (sent) request rate."""
    waits = [r["queue_s"] for r in measured if r.get("queue_s") is not None]
    late = [w for w in waits if w > CLIENT_LAG_S]
    saturated = (
        f"{len(late)} of {len(waits)} requests waited over {CLIENT_LAG_S * 1e3:g} ms inside bench's client before "
        f"being written (worst {max(late):.3g} s): the client limited this load, not the server"
        if late
        else None
    )
    return {
        "client_queue_s": summary(waits) if waits else None,
        "client_saturated": saturated,
        "achieved_rate_req_s": achieved_rate(_sent(measured)),
    }


LATENCIES = ("ttft_s", "tpot_s", "itl_s", "e2el_s")


def percentile_figures(samples: dict[str, list[float]], extra: Sequence[float]) -> dict[str, Any]:
    """The asked percentiles (serve.percentiles) of each latency, and every percentile
    shown (p90, p99 and those) that its sample is too small to support, named."""
    out = {
        name: {f"p{p:g}": percentile(values, p) if values else None for p in extra} for name, values in samples.items()
    }
    thin = [
        f"{name} p{p:g} ({len(values)} samples; needs {math.ceil(100 / (100 - p) - 1e-9)})"
        for name, values in samples.items()
        if values
        for p in (90, 99, *extra)
        if not supports_percentile(len(values), p)
    ]
    return {"percentiles": out if extra else None, "thin_percentiles": thin}


def serving_metrics(raw: dict[str, Any], slo: dict[str, float | None], extra_percentiles=()) -> dict[str, Any]:
    """Serving metrics of a record from its raw per-request timestamps. Duration as
    vLLM's: from the first measured send to the last measured request's end, failed
    ones included (a failing tail is time the load took)."""
    slo_stated = slo
    slo = {k: slo.get(k) for k in SLO_TARGETS}  # goodput's per-request targets
    measured = [r for r in raw["requests"] if not r["warmup"]]
    done = [r for r in measured if r["error"] is None]
    lat = [request_latencies(r) for r in done]
    itl = [b - a for r in done for a, b in zip(r["chunk_s"], r["chunk_s"][1:])]  # pooled gaps
    sent = _sent(measured)
    start = min((r["sent_s"] for r in sent), default=0.0)
    end = max((r["end_s"] for r in sent if r.get("end_s") is not None), default=start)
    duration = end - start
    samples = {
        "ttft_s": [x["ttft_s"] for x in lat if x["ttft_s"] is not None],
        "tpot_s": [x["tpot_s"] for x in lat if x["tpot_s"] is not None],
        "itl_s": itl,
        "e2el_s": [x["e2el_s"] for x in lat if x["e2el_s"] is not None],
    }
    output = sum(r["output_tokens"] or 0 for r in done)
    prompt = sum(r["prompt_tokens"] or 0 for r in done)
    per_s = (lambda x: x / duration) if duration > 0 and done else (lambda x: None)  # no rate of nothing
    return {
        "num_requests": len(measured),
        "num_completed": len(done),
        "num_errors": len(measured) - len(done),
        # Failed measured requests / measured requests: the figure `bench gate` holds to
        # `error_rate` (default budget max 0) and the run to serve.max_error_rate.
        "error_rate": (len(measured) - len(done)) / len(measured) if measured else None,
        "errors": sorted({r["error"].split(":")[0] for r in measured if r["error"]}),
        "duration_s": duration,
        **{name: _latency_summary(values) for name, values in samples.items()},
        **percentile_figures(samples, tuple(extra_percentiles)),
        **client_figures(measured),
        "output_tokens": output,
        "prompt_tokens": prompt,
        "output_throughput_tok_s": per_s(output),
        "total_throughput_tok_s": per_s(output + prompt),
        "request_throughput_req_s": per_s(len(done)),
        "goodput_req_s": per_s(sum(meets_slo(x, slo) for x in lat))
        if any(v is not None for v in slo.values())
        else None,
        "slo": slo_stated,
        "slo_at_percentile": slo_at_percentile(raw["requests"], slo_stated),
        # One user's view: 1 / median TPOT (NVIDIA's and AIPerf's tokens/s per user);
        # the chip's view is output_throughput_tok_s over the chips (record.py).
        "output_tok_s_per_user": 1.0 / lat_tpot if (lat_tpot := _median_tpot(lat)) else None,
        **prefix_cache_hits(done),
    }


def prefix_cache_hits(done: list[dict[str, Any]]) -> dict[str, Any]:
    """Prompt tokens the server found in its prefix cache over the completed measured
    requests (`usage.prompt_tokens_details.cached_tokens`): their total, and that total
    over the same requests' prompt tokens. Once any request of the run reported them, a
    request without them had none: vLLM leaves prompt_tokens_details out when nothing
    was cached. None where no request reported them (a server without the feature or
    with it off, the local engine)."""
    if all(r.get("cached_tokens") is None for r in done):
        return {"cached_prompt_tokens": None, "cached_prompt_fraction": None}
    cached = sum(r.get("cached_tokens") or 0 for r in done)
    prompt = sum(r["prompt_tokens"] or 0 for r in done)
    return {"cached_prompt_tokens": cached, "cached_prompt_fraction": cached / prompt if prompt else None}


def _median_tpot(lat: list[dict[str, Any]]) -> float | None:
    tpots = [x["tpot_s"] for x in lat if x["tpot_s"] is not None]
    return statistics.median(tpots) if tpots else None


def slo_search_summary(raw: dict[str, Any], slo: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The SLO search recomputed from its raw points: each rate's verdict at the SLO's
    percentile, and the highest rate that met it (bisection keeps every met rate below
    every failed one, so this is the search's answer). Returns the summary and the
    requests the record's metrics describe: warm-up plus the point at that rate (the
    lowest rate measured when none met)."""
    search = raw["slo_search"]
    points = []
    for p in search["points"]:
        verdict = slo_at_percentile(p["requests"], slo)
        cut = p["met"] is None
        points.append(
            {
                "rate_req_s": p["rate"],
                "met": None if cut else verdict["met"],
                "values": verdict["values"],
                "failed": verdict["failed"],
                "cut_short": cut,
                "achieved_rate_req_s": achieved_rate([r for r in p["requests"] if r["error"] is None]),
            }
        )
    met = [p for p in points if p["met"]]
    best = max(met, key=lambda p: p["rate_req_s"]) if met else min(points, key=lambda p: p["rate_req_s"])
    chosen = next(p for p in search["points"] if p["rate"] == best["rate_req_s"])
    summary_ = {
        "max_rate_req_s": best["rate_req_s"] if met else None,
        "percentile": slo["percentile"],
        "targets": {k: slo[k] for k in SLO_TARGETS if slo.get(k) is not None},
        "stopped": search["stopped"],
        "bracket": search["bracket"],
        "bisection_steps": search["bisection_steps"],
        "points": points,
        "measured_at": (
            "the highest rate meeting the SLO" if met else "the lowest rate measured (no rate met the SLO)"
        ),
    }
    return summary_, raw["requests"] + chosen["requests"]


def achieved_rate(requests: list[dict[str, Any]]) -> float | None:
    """Requests sent per second: (n - 1) / (last send - first send)."""
    sent = sorted(r["sent_s"] for r in requests)
    return (len(sent) - 1) / (sent[-1] - sent[0]) if len(sent) > 1 and sent[-1] > sent[0] else None
