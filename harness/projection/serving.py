"""A serving projection where no device is at hand: roofline bounds on TTFT, TPOT and
output tokens/s for a scenario's model and load on a named accelerator (a TPU slice, or
GPUs as `h100-sxm:2`), from the model's dimensions and the datasheet, calibrated
against published vLLM serving results, and shown as a range.

Per replica of `tensor` chips (auto's vLLM layout on those chips:
harness.serving.engines.vllm_parallel), bf16 weights and KV cache:
- TTFT >= one prompt's prefill alone: max(prefill FLOPs / (tensor x peak),
  weight bytes / (tensor x HBM bandwidth));
- TPOT >= one decode step of the replica's batch B (the load's concurrency over the
  replicas): max(B x decode FLOPs / (tensor x peak), (weight bytes + B x KV bytes at the
  mean context) / (tensor x HBM bandwidth));
- output tok/s <= replicas x B x output tokens / (TTFT + (output tokens - 1) x TPOT);
- $ per 1M output tokens >= chips x price per chip-hour / (3600 x output tok/s) x 1e6.
Each is a best case. The calibration's measured / bound ratios (published vLLM results
recomputed through the same bounds: CALIBRATION) give the range's other end: TPOT in
[bound, bound / lowest ratio], output tok/s in [bound x lowest ratio, bound]. TTFT has
no published calibration here: its bound is shown alone, as "at least".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from harness.figures.metrics import keys_attended, layer_windows, matmul_weights

BYTES = 2  # bf16 weights and KV cache, as auto's vLLM serves on an accelerator


# --------------------------------------------------------------------------- the model
@dataclass(frozen=True)
class ServedModel:
    """What the bounds need of a model: its matmul weights, total weights, and per
    layer its KV bytes per token and attention window."""

    arch: dict[str, Any]

    @property
    def params(self) -> int:
        from harness.serving.engines import parameters

        return parameters(self.arch)

    @property
    def weight_bytes(self) -> int:
        return self.params * BYTES

    def matmul_flops_per_token(self) -> float:
        layers, head = matmul_weights(self.arch)
        return 2.0 * (layers + head)

    def _head_dim(self) -> int:
        return self.arch.get("head_dim") or self.arch["hidden_size"] // self.arch["num_heads"]

    def kv_bytes(self, context: int) -> float:
        """KV-cache bytes one sequence of `context` tokens holds (a sliding-window layer
        at most its window): K and V, kv heads x head_dim each, per layer."""
        per_token = 2 * self.arch["num_kv_heads"] * self._head_dim() * BYTES
        return per_token * sum(min(context, w) if w else context for w in layer_windows(self.arch))

    def prefill_flops(self, prompt: int) -> float:
        """A prompt's forward: 2 per matmul weight per token, and attention's QK and PV
        (4 x heads x head_dim per query-key pair, causal, windows applied)."""
        attention = 4 * self.arch["num_heads"] * self._head_dim()
        pairs = sum(keys_attended(prompt, w) for w in layer_windows(self.arch))
        return self.matmul_flops_per_token() * prompt + attention * pairs

    def decode_flops(self, context: int) -> float:
        """One new token at `context` tokens: its matmuls and its attention to them."""
        attention = 4 * self.arch["num_heads"] * self._head_dim()
        return self.matmul_flops_per_token() + attention * sum(
            min(context, w) if w else context for w in layer_windows(self.arch)
        )


# --------------------------------------------------------------------------- the device
@dataclass(frozen=True)
class Device:
    key: str  # catalog key
    chips: int
    peak_flops: float  # per chip, dense bf16
    hbm_bytes_per_s: float  # per chip

    @classmethod
    def named(cls, text: str) -> "Device":
        """`v6e-8`, `tpu-v6e:8`, `h100-sxm:2`: refused with one line where the datasheet
        figures a bound needs are missing."""
        from harness.figures.accelerators import GPU_HBM_BYTES_PER_S, HBM_BYTES_PER_S, PEAK_BF16_FLOPS
        from harness.figures.cost import parse_fleet

        fleet = parse_fleet(text, source="--project-for")
        peak = PEAK_BF16_FLOPS.get(fleet.accelerator)
        bandwidth = HBM_BYTES_PER_S.get(fleet.accelerator) or GPU_HBM_BYTES_PER_S.get(fleet.accelerator)
        if peak is None or bandwidth is None:
            missing = "peak bf16 FLOP/s" if peak is None else "HBM bandwidth"
            raise ValueError(
                f"--project-for {text}: no datasheet {missing} for {fleet.accelerator} in harness/figures/accelerators.py"
            )
        return cls(fleet.accelerator, fleet.chips, peak, bandwidth)


# --------------------------------------------------------------------------- the bounds
@dataclass(frozen=True)
class Load:
    concurrency: int
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class Bound:
    """The best case at one load point on one layout."""

    tensor: int
    replicas: int
    batch: int  # requests per replica
    ttft_s: float
    tpot_s: float
    output_tok_s: float
    ttft_limit: str  # "compute" or "bandwidth"
    tpot_limit: str


def _limited(flops: float, bytes_: float, tensor: int, device: Device) -> tuple[float, str]:
    compute, memory = flops / (tensor * device.peak_flops), bytes_ / (tensor * device.hbm_bytes_per_s)
    return (compute, "compute") if compute >= memory else (memory, "bandwidth")


def bound(model: ServedModel, device: Device, load: Load, tensor: int, replicas: int) -> Bound:
    batch = math.ceil(load.concurrency / replicas)
    context = load.prompt_tokens + load.output_tokens // 2  # the decode's mean context
    ttft, ttft_limit = _limited(model.prefill_flops(load.prompt_tokens), model.weight_bytes, tensor, device)
    tpot, tpot_limit = _limited(
        batch * model.decode_flops(context), model.weight_bytes + batch * model.kv_bytes(context), tensor, device
    )
    per_request_s = ttft + (load.output_tokens - 1) * tpot
    # every request in flight finishes a request's tokens per per_request_s (the fullest
    # replica's pace, each replica holding at most `batch`)
    output = load.concurrency * load.output_tokens / per_request_s
    return Bound(tensor, replicas, batch, ttft, tpot, output, ttft_limit, tpot_limit)


# --------------------------------------------------------------------------- calibration
@dataclass(frozen=True)
class Published:
    """A published vLLM serving result: where, what ran, at which load, what it measured.
    `figure`: "tpot_s" (median TPOT) or "decode_tok_s" (one request's decode tokens/s).
    Prompt and output lengths None where the source does not state them: the context is
    then taken as the prompt alone at 0 tokens (the weights' bytes dominate a short
    chat's decode), said in `note`."""

    source: str
    quote: str
    model: str  # a bench preset with the same dimensions
    device: str  # --project-for text
    concurrency: int
    prompt_tokens: int | None
    output_tokens: int | None
    figure: str
    measured: float
    note: str = ""
    engine: str = "vLLM"


CALIBRATION: tuple[Published, ...] = (
    Published(
        source="https://johnmusgrave.com/p/vllm-throughput-latency-sweep-on",
        quote="On a single NVIDIA A100 40GB, decode at one request per time runs at about 75 tokens/sec",
        model="llama-3.1-8b",
        device="a100-40gb:1",
        concurrency=1,
        prompt_tokens=1024,
        output_tokens=128,
        figure="decode_tok_s",
        measured=75.0,
        note="vLLM 0.23.0, BF16, vllm bench serve --random-input-len 1024 --random-output-len 128 --ignore-eos",
    ),
    Published(
        source="https://yobitelcomm.github.io/bench/recipes/concurrency-sweep/",
        quote="conc 1: throughput 122.2 tok/s, ttft_p50 13.98 ms, tpot_p50 6.48 ms",
        model="llama-3.1-8b",
        device="h100-sxm:1",
        concurrency=1,
        prompt_tokens=None,
        output_tokens=None,
        figure="tpot_s",
        measured=6.48e-3,
        note="vLLM 0.21.0, fp16, H100-80GB-HBM3; prompt and output lengths not stated (chatbot-short)",
    ),
    Published(
        source="https://yobitelcomm.github.io/bench/recipes/concurrency-sweep/",
        quote="conc 4: throughput 580.3 tok/s, ttft_p50 22.75 ms, tpot_p50 6.59 ms",
        model="llama-3.1-8b",
        device="h100-sxm:1",
        concurrency=4,
        prompt_tokens=None,
        output_tokens=None,
        figure="tpot_s",
        measured=6.59e-3,
        note="vLLM 0.21.0, fp16, H100-80GB-HBM3; prompt and output lengths not stated (chatbot-short)",
    ),
)


def preset_model(name: str) -> ServedModel:
    from harness.scenario.presets import MODEL_PRESETS

    return ServedModel(dict(MODEL_PRESETS[name]))


def calibration_ratio(result: Published) -> tuple[float, float]:
    """(the bound on the published figure, measured / bound as a speed: <= 1 when the
    bound holds): TPOT's bound over the measured TPOT, or measured decode tok/s over
    1 / TPOT's bound."""
    load = Load(result.concurrency, result.prompt_tokens or 0, result.output_tokens or 1)
    device = Device.named(result.device)
    tpot = bound(preset_model(result.model), device, load, device.chips, 1).tpot_s
    if result.figure == "tpot_s":
        return tpot, tpot / result.measured
    return 1.0 / tpot, result.measured * tpot


@dataclass
class Calibration:
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def low(self) -> float:
        return min(r["ratio"] for r in self.rows)

    @property
    def high(self) -> float:
        return max(r["ratio"] for r in self.rows)


def calibration() -> Calibration:
    rows = []
    for result in CALIBRATION:
        figure_bound, ratio = calibration_ratio(result)
        rows.append({"published": result, "bound": figure_bound, "ratio": ratio})
    return Calibration(rows)


# --------------------------------------------------------------------------- the projection
def layout(model: ServedModel, device: Device) -> tuple[int, int]:
    """auto's vLLM's tensor-parallel size and replicas on these chips (engines.vllm_parallel),
    refused with its reason where the weights fit no divisor of the chips."""
    from harness.serving.engines import ServingModel, vllm_parallel

    serving = ServingModel(None, None, None, model.params, model.arch.get("num_heads"))
    chosen = vllm_parallel(serving, {"count": device.chips, "catalog_key": device.key}, "fill")
    if isinstance(chosen, str):
        raise ValueError(f"--project-for: {chosen}")
    return chosen.tensor, chosen.data


def project(model: ServedModel, device: Device, loads: list[Load], usd_per_chip_hour: float | None) -> dict[str, Any]:
    """Every load point's bound and range, with the calibration that makes the range."""
    tensor, replicas = layout(model, device)
    cal = calibration()
    points = []
    for load in loads:
        b = bound(model, device, load, tensor, replicas)
        usd = (lambda tok_s: device.chips * usd_per_chip_hour / 3600 / tok_s * 1e6) if usd_per_chip_hour else None
        points.append(
            {
                "load": load,
                "bound": b,
                "tpot_s": (b.tpot_s, b.tpot_s / cal.low),
                "output_tok_s": (b.output_tok_s * cal.low, b.output_tok_s),
                "usd_per_1m_output_tokens": (usd(b.output_tok_s), usd(b.output_tok_s * cal.low)) if usd else None,
            }
        )
    return {"device": device, "tensor": tensor, "replicas": replicas, "points": points, "calibration": cal}


# --------------------------------------------------------------------------- a scenario's loads
def scenario_loads(scenario) -> tuple[list[Load], str]:
    """The closed-loop load points of the scenario's serve section (a concurrency sweep's
    values, else load.concurrency, else 1) at its mean prompt length in the project's
    tokenizer and its output length; and a note where the scenario has no serve section
    (serve's defaults are projected, said). An open loop is refused: its batch sizes
    depend on queueing a bound does not model."""
    from harness.tasks.serve.spec import ServeSpec

    serve, note = scenario.serve, ""
    if serve is None:
        serve, note = ServeSpec(), "the scenario has no serve section: serve's defaults are projected"
        scenario = scenario.model_copy(update={"serve": serve})
    sweep = serve.sweep
    if (sweep is not None and sweep.axis != "concurrency") or serve.load.open_loop:
        raise ValueError(
            "--project-for: a serving projection bounds closed loops; give load.concurrency or a concurrency sweep"
        )
    levels = list(sweep.values) if sweep is not None else [serve.load.concurrency or 1]
    prompt = mean_prompt_tokens(scenario)
    return [Load(int(c), prompt, serve.output_tokens) for c in levels], note


def mean_prompt_tokens(scenario) -> int:
    """The scenario's prompts' mean length in tokens of the project's tokenizer (with the
    BOS token a server adds), rounded."""
    from harness.data.tokenizer import load_tokenizer
    from harness.serving.loads import prompt_count
    from harness.serving.prompts import build_prompts

    tok = scenario.data.tokenizer
    handle = load_tokenizer(tok.kind, tok.vocab_size, tok.path)
    prompts = build_prompts(scenario, prompt_count(scenario.serve))
    sizes = [len(p.get("token_ids") or handle.encode(p["text"])) + 1 for p in prompts]
    return round(sum(sizes) / len(sizes))


# --------------------------------------------------------------------------- the stored projection
SCHEMA = "bench.serve_projection"
SUFFIX = ".serve-projection.json"


def to_record(scenario: str, target: str, result: dict[str, Any], note: str) -> dict[str, Any]:
    """A serving projection as the report reads it back (reports/serving_pairs.py)."""
    device, cal = result["device"], result["calibration"]
    return {
        "schema": SCHEMA,
        "scenario": scenario,
        "target": target,
        "catalog_key": device.key,
        "chips": device.chips,
        "engine": "vllm-tpu" if device.key.startswith("tpu-") else "vllm",
        "tensor_parallel": result["tensor"],
        "replicas": result["replicas"],
        "note": note,
        "calibration": {"low": cal.low, "high": cal.high, "results": len(cal.rows)},
        "points": [
            {
                "concurrency": p["load"].concurrency,
                "prompt_tokens": p["load"].prompt_tokens,
                "output_tokens": p["load"].output_tokens,
                "ttft_s_at_least": p["bound"].ttft_s,
                "tpot_s": list(p["tpot_s"]),
                "output_tok_s": list(p["output_tok_s"]),
                "usd_per_1m_output_tokens": list(p["usd_per_1m_output_tokens"] or ()) or None,
            }
            for p in result["points"]
        ],
    }


def store(record: dict[str, Any], directory) -> str:
    import json
    import re
    from pathlib import Path

    name = re.sub(r"[^A-Za-z0-9_.=-]+", "-", f"{record['scenario']}__serve__{record['target']}") + SUFFIX
    path = Path(directory) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    return str(path)


def load_stored(paths) -> list[dict[str, Any]]:
    """Every stored serving projection under the given directories and files; a file of
    the suffix that is not one is refused, naming it."""
    import json
    from pathlib import Path

    found = []
    for p in map(Path, paths):
        files = sorted(p.rglob(f"*{SUFFIX}")) if p.is_dir() else ([p] if p.name.endswith(SUFFIX) else [])
        for f in files:
            doc = json.loads(f.read_text())
            if doc.get("schema") != SCHEMA:
                raise ValueError(f"{f}: not a bench serving projection")
            found.append(doc)
    return found
