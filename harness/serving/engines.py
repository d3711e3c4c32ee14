"""The registry of serving engines: what the serve task loads with requests.

An engine takes the scenario, the worker's event sink and the requests' clock origin,
and hands back raw facts: the per-request timestamps (harness.serving.client's
RequestRecord), the server's identity, and what it ran on when it can tell. Engines
are registered by name and "module:attribute", loaded in the worker on first use (the
way entry points are), so this core imports no backend and no ML framework: the
in-process engine and the model export for a launched server live in backend packages.
Adding an engine is its module plus one line below (or one `register` call, or a
`bench.engines` entry point): the one Registry of harness.basics.plugins.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any, Callable

from harness.basics.errors import BenchError
from harness.basics.plugins import Registry


@dataclass(frozen=True)
class Engine:
    name: str
    # (scenario, events, origin) -> raw facts: "requests", "server", optionally
    # "prompts", "accelerator" (what it measured running on) and "versions".
    serve: Callable[[Any, Any, float], dict[str, Any]]
    # What it runs on when neither the scenario (serve.accelerator) nor its facts say.
    accelerator: Callable[[], dict[str, Any]]
    notes: tuple[str, ...] = ()


ENTRY_POINT_GROUP = "bench.engines"
ENGINES = Registry("serving engine", ENTRY_POINT_GROUP)
ENGINES.register("local", "backends.torch_eager.serve_local:ENGINE")
ENGINES.register("endpoint", "harness.serving.endpoint:ENGINE")
ENGINES.register("launch", "backends.hf_common.serving:LAUNCH_ENGINE")


# ------------------------------------------------------------------ engine: auto
LOCAL_LABEL = "reference engine, not a production server"


def caveat(records) -> str:
    """What the serve figures of `records` (RunRecords) are of where that is not a
    production server's: the local engine's label ("" for none). Shown beside every
    local-engine $ (terminal, report, gate) and the report headline's TTFT."""
    labels = sorted({label for r in records if (label := getattr(getattr(r, "cost", None), "label", None))})
    return "; ".join(labels)


def with_caveat(text: str, label: str) -> str:
    """`text (label)` where a label applies, else `text` unchanged."""
    return f"{text} ({label})" if label else text


# vLLM's CPU attention (vllm/v1/attention/backends/cpu_attn.py, get_supported_head_sizes)
# serves only these head sizes: another one fails at start ("Unsupported CPU attention
# configuration"), so auto does not launch it.
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
# The context auto's vLLM is started with on a CPU or TPU (memory for the KV cache; a
# TPU compiles for it), at most the model's position limit.
VLLM_CONTEXT_CAP = 4096


@dataclass(frozen=True)
class ServingModel:
    """What auto must know of the model and the load before launching vLLM on it."""

    max_positions: int | None  # the model's position limit (max_position_embeddings)
    head_dim: int | None
    need_tokens: int | None  # the longest request: prompt tokens + output tokens
    # Its weights (parameters: decoder matmuls plus embedding and, untied, LM head) and
    # attention heads: how many chips the weights need, and which tensor-parallel sizes
    # divide the heads (vLLM refuses one that does not). None: unknown.
    params: int | None = None
    num_heads: int | None = None
    # Its Hugging Face class (config.json's architectures[0]): what auto asks vLLM's
    # model registry about.
    architecture: str | None = None


@dataclass(frozen=True)
class Choice:
    """The engine that serves a scenario, and why: `engine: auto` resolved on this machine
    (vLLM launched in its own environment where installed and able to serve this model
    here, else the local engine)."""

    engine: str  # a registered engine's name
    reason: str
    # auto's vLLM: the Python that has it, or the `vllm` executable; else both None.
    vllm_python: str | None = None
    vllm_executable: str | None = None
    platform: str = "cpu"  # cpu | cuda | tpu: the settings auto's vLLM is started with
    max_model_len: int | None = None  # auto's vLLM's --max-model-len (None: the model's own)
    # auto's vLLM on a TPU VM or a GPU host: the chips it is billed for (the TPU slice,
    # the visible GPUs; only those it uses with serve.auto_replicas: one), as a record's
    # accelerator, decided before any load runs.
    accelerator: dict[str, Any] | None = None
    # auto's vLLM's --tensor-parallel-size and --data-parallel-size (1: not passed).
    tensor_parallel: int = 1
    data_parallel: int = 1

    @property
    def label(self) -> str:
        """How the engine that ran is named in records and reports."""
        if self.vllm_python or self.vllm_executable:
            return "vllm-tpu (launch)" if self.platform == "tpu" else "vllm (launch)"
        return f"local ({LOCAL_LABEL})" if self.engine == "local" else self.engine

    def to_json(self) -> dict[str, object]:
        return {
            "engine": self.engine,
            "ran": self.label,
            "reason": self.reason,
            "vllm_python": self.vllm_python,
            "vllm_executable": self.vllm_executable,
            "platform": self.platform,
            "max_model_len": self.max_model_len,
            "accelerator": self.accelerator,
            "tensor_parallel": self.tensor_parallel,
            "data_parallel": self.data_parallel,
        }


_CHOSEN: dict[str, Choice] = {}


def choose_for(scenario) -> Choice:
    """choose() for a scenario, with its model and load checked; once per scenario in a
    process (the parent asks for its label, job and progress line)."""
    key = scenario.model_dump_json()
    if key not in _CHOSEN:
        _CHOSEN[key] = choose(scenario.serve, model=lambda: serving_model(scenario))
    return _CHOSEN[key]


def platform_probe() -> str:
    """This host's kind for auto's vLLM: tpu (a TPU VM's device files), cuda (an NVIDIA
    device file) or cpu. Device files only: no framework is imported to decide."""
    from pathlib import Path

    from harness.figures.accelerators import on_tpu_vm

    if on_tpu_vm():
        return "tpu"
    return "cuda" if Path("/dev/nvidia0").exists() else "cpu"


def choose(spec, environ=None, model=None, platform: str | None = None) -> Choice:
    """The engine for a serve section. `auto`: BENCH_VLLM_PYTHON (a Python with vLLM),
    then `vllm` on PATH, where vLLM itself says it serves `model` (vllm_refusal: it
    imports, its registry lists the architecture, its platform the dtype) and can here
    (vllm_limit), billed for the chips that serve it (vllm_parallel); else the local
    engine, with the reason. A BENCH_VLLM_PYTHON that does not exist is refused, never
    passed over. `model`: a ServingModel, or a callable making one (only called where
    vLLM is found)."""
    if spec.engine != "auto":
        return Choice(spec.engine, f"engine: {spec.engine} (the scenario names it)")
    environ = os.environ if environ is None else environ
    python = environ.get("BENCH_VLLM_PYTHON")
    found = None
    if python:
        if not os.access(python, os.X_OK):
            raise BenchError(f"BENCH_VLLM_PYTHON: {python} is not an executable Python (engine auto would launch vLLM)")
        where = f"vLLM's Python BENCH_VLLM_PYTHON={python}"
    else:
        found = shutil.which("vllm", path=environ.get("PATH"))
        where = f"vLLM on PATH ({found})"
    if not python and not found:
        return Choice("local", "engine auto: no vLLM here (BENCH_VLLM_PYTHON unset, no `vllm` on PATH)")
    platform = platform or platform_probe()
    model = model() if callable(model) else model
    context = vllm_context(model, platform)
    limit = vllm_refusal(python or found, model, served_dtype(spec, platform)) or vllm_limit(model, platform, context)
    if limit:
        return Choice("local", f"engine auto: {where}, but {limit}: the local engine serves instead")
    devices = billed_devices(platform, environ)  # vLLM can serve it: the chips it is billed for
    layout = vllm_parallel(model, devices, spec.auto_replicas, spec.precision or "bf16") if devices else NO_PARALLEL
    if isinstance(layout, str):
        return Choice("local", f"engine auto: {where}, but {layout}: the local engine serves instead")
    accelerator = dict(devices, count=layout.chips) if devices else None
    settings = f"{platform}, --max-model-len {context or 'the model' + chr(39) + 's own'}"
    return Choice(
        "launch",
        f"engine auto: {where} ({settings}{'; ' + layout.why if layout.why else ''})",
        vllm_python=python or None,
        vllm_executable=found,
        platform=platform,
        max_model_len=context,
        accelerator=accelerator,
        tensor_parallel=layout.tensor,
        data_parallel=layout.data,
    )


# ------------------------------------------------------------------ auto's vLLM: billed chips
# bench's rule for how many chips auto's vLLM shards the weights over: the fewest whose
# memory the weights fill at most this share of, leaving the rest to the KV cache and
# activations (vLLM takes 90% of a device by default: --gpu-memory-utilization 0.9).
WEIGHT_SHARE = 0.5
# Weight bytes per parameter at the dtype auto's vLLM serves in on an accelerator
# (serve.precision; unset: bf16).
BYTES_PER_PARAM = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class Parallel:
    """auto's vLLM's layout on its billed chips: tensor-parallel size x data-parallel
    replicas, and the sentence that says how it was derived ("" on a CPU)."""

    tensor: int
    data: int
    why: str

    @property
    def chips(self) -> int:
        return self.tensor * self.data


NO_PARALLEL = Parallel(1, 1, "")  # a CPU: one process, the device measured billed


def billed_devices(platform: str, environ) -> dict[str, Any] | None:
    """The chips auto's vLLM would be billed for, before any load: a TPU VM's slice, a
    GPU host's visible GPUs; None on a CPU (the device measured is billed)."""
    if platform == "tpu":
        return tpu_accelerator(environ)
    if platform == "cuda":
        return gpu_accelerator(environ)
    return None


def chip_memory(key: str) -> int | None:
    """Bytes a chip offers a server: a TPU's usable HBM, a GPU's datasheet memory."""
    from harness.figures.accelerators import GPU_MEMORY_BYTES, usable_hbm

    usable = usable_hbm(key)
    return usable[0] if usable else GPU_MEMORY_BYTES.get(key)


def vllm_parallel(
    model: ServingModel | None, devices: dict[str, Any], replicas: str, precision: str = "bf16"
) -> Parallel | str:
    """Tensor-parallel size: the fewest chips (a divisor of the billed count and of the
    model's attention heads) whose memory the weights fill at most WEIGHT_SHARE of; data
    parallel: the replicas the rest of the billed chips hold (serve.auto_replicas: fill),
    or one replica billed only for its chips (one). A string: why no size fits."""
    count, key = devices["count"], devices["catalog_key"]
    memory = chip_memory(key)
    weights = model.params * BYTES_PER_PARAM[precision] if model is not None and model.params else None
    if memory is None or weights is None:
        unknown = f"{key}'s memory per chip" if memory is None else "the model's weight size"
        return Parallel(count, 1, f"{unknown} unknown: tensor-parallel over all {count} billed chips")
    heads = model.num_heads or 1
    sizes = [t for t in range(1, count + 1) if count % t == 0 and heads % t == 0]
    fits = [t for t in sizes if weights / t <= WEIGHT_SHARE * memory]
    if not fits:
        return (
            f"the model's {weights / 2**30:.3g} GiB of {precision} weights need more than {count} {key} chips "
            f"({memory / 2**30:.3g} GiB each, at most {WEIGHT_SHARE:.0%} of it for weights)"
        )
    tensor = fits[0]
    data = count // tensor if replicas == "fill" else 1
    why = (
        f"--tensor-parallel-size {tensor} (the fewest chips holding the {weights / 2**30:.3g} GiB of {precision} weights "
        f"in at most {WEIGHT_SHARE:.0%} of {memory / 2**30:.3g} GiB each)"
    )
    if replicas == "fill":
        why += f", --data-parallel-size {data}: all {count} billed chips serve"
    else:
        why += f", one replica: billed {tensor} of the {count} chips here (serve.auto_replicas: one)"
    return Parallel(tensor, data, why)


# The NVIDIA driver's per-GPU folders, each with an `information` file naming the board.
NVIDIA_PROC = "/proc/driver/nvidia/gpus"


def gpu_accelerator(environ, proc: str | None = None) -> dict[str, Any]:
    """The GPUs auto's vLLM is billed for: those visible (CUDA_VISIBLE_DEVICES where set,
    else every one the driver lists), named by the driver's model line; a one-line
    refusal where the driver does not say (no framework is imported to find out)."""
    from pathlib import Path

    from harness.figures.accelerators import catalog_key

    proc = proc or NVIDIA_PROC
    boards = sorted(Path(proc).glob("*/information")) if Path(proc).is_dir() else []
    models = [_driver_model(b) for b in boards]
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    count = len([d for d in visible.split(",") if d.strip()]) if visible is not None else len(models)
    if not models or any(m is None for m in models) or len(set(models)) > 1 or count == 0:
        raise BenchError(
            f"engine auto: which GPUs vLLM would serve on is unknown here ({proc}: "
            f"{', '.join(filter(None, models)) or 'no GPU listed'}); name engine: launch with serve.accelerator "
            "(e.g. h100-sxm:2)"
        )
    return {"kind": "cuda", "name": models[0], "count": count, "catalog_key": catalog_key("cuda", models[0])}


def _driver_model(information) -> str | None:
    """The `Model:` line of the NVIDIA driver's /proc information file."""
    for line in information.read_text(errors="replace").splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "Model":
            return value.strip()
    return None


# Torch's names for serve.precision: what auto asks vLLM's platform about.
TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def served_dtype(spec, platform: str) -> str:
    """The dtype auto's vLLM serves in (backends.hf_common.serving.auto_vllm): the
    precision given, else fp32 on a CPU and bf16 on an accelerator."""
    return TORCH_DTYPES[spec.precision or ("fp32" if platform == "cpu" else "bf16")]


def vllm_refusal(where: str, model: ServingModel | None, dtype: str) -> str | None:
    """Why the vLLM found cannot serve this model, asked of vLLM in its own interpreter
    (harness.serving.vllm.probe): it does not import, its registry lacks the model's
    architecture, or its platform lacks the dtype. A `vllm` script is asked through the
    Python its #! line names."""
    from harness.serving import vllm

    python = where if os.path.basename(where) != "vllm" else vllm.interpreter_of(where)
    if python is None:
        return f"which Python runs {where} is unknown (no #! line)"
    return vllm_probe(python, model.architecture if model is not None else None, dtype)


def vllm_probe(python: str, architecture: str | None, dtype: str) -> str | None:
    """harness.serving.vllm.probe (a name here, so a test can stand in for vLLM)."""
    from harness.serving import vllm

    return vllm.probe(python, architecture, dtype)


def vllm_context(model: ServingModel | None, platform: str) -> int | None:
    """auto's vLLM context: on a CPU or TPU the cap or the model's position limit,
    whichever is smaller; on a GPU the model's own (None)."""
    if platform == "cuda":
        return None
    limit = model.max_positions if model is not None and model.max_positions else VLLM_CONTEXT_CAP
    return min(limit, VLLM_CONTEXT_CAP)


def vllm_limit(model: ServingModel | None, platform: str, context: int | None) -> str | None:
    """Why vLLM cannot serve this model here, or None: a head size its CPU attention
    lacks, or a load whose longest request does not fit the context it gets."""
    if model is None:
        return None
    if platform == "cpu" and model.head_dim is not None and model.head_dim not in VLLM_CPU_HEAD_SIZES:
        sizes = ", ".join(map(str, VLLM_CPU_HEAD_SIZES))
        return f"vLLM's CPU attention serves head sizes {sizes} only (this model's head_dim is {model.head_dim})"
    room = context or model.max_positions
    if model.need_tokens is not None and room is not None and model.need_tokens > room:
        return (
            f"the load's longest request ({model.need_tokens} tokens: prompt + output) exceeds the "
            f"{room}-token context vLLM would get (model position limit {model.max_positions})"
        )
    return None


def tpu_accelerator(environ) -> dict[str, Any]:
    """The TPU auto's vLLM-TPU is billed to: the VM's slice (TPU_ACCELERATOR_TYPE, e.g.
    v6e-8), or a one-line refusal where the VM does not say."""
    from harness.figures.cost import parse_fleet

    slice_name = environ.get("TPU_ACCELERATOR_TYPE")
    if not slice_name:
        raise BenchError(
            "engine auto: a TPU VM without TPU_ACCELERATOR_TYPE: which TPU vLLM-TPU would run on is unknown; "
            "name engine: launch with serve.accelerator (e.g. v6e-8)"
        )
    fleet = parse_fleet(slice_name)
    return {"kind": "declared", "name": fleet.accelerator, "count": fleet.chips, "catalog_key": fleet.accelerator}


def serving_model(scenario, need: bool = True) -> ServingModel:
    """The model's position limit and head size (its preset and arch, or a pretrained
    model's config.json), and the load's longest request in tokens of the project's
    tokenizer (the one a launched server is given)."""
    import json
    from pathlib import Path

    arch = scenario.model.architecture()
    architecture = HF_CLASSES.get(arch.get("family", "gemma3"), "LlamaForCausalLM")  # backends.hf_common.model
    if scenario.model.path and (Path(scenario.model.path) / "config.json").is_file():
        config = json.loads((Path(scenario.model.path) / "config.json").read_text())
        arch = {**config, **arch}
        architecture = (config.get("architectures") or [architecture])[0]
    head_dim = arch.get("head_dim") or (
        arch["hidden_size"] // arch["num_heads"] if arch.get("hidden_size") and arch.get("num_heads") else None
    )
    longest = None
    if need:
        from harness.serving.prompts import longest_request

        longest = longest_request(scenario)
    return ServingModel(
        arch.get("max_position_embeddings"), head_dim, longest, parameters(arch), arch.get("num_heads"), architecture
    )


# The transformers class each architecture family is built and exported as
# (backends.hf_common.model.hf_config: Gemma3TextConfig, Qwen2Config, else LlamaConfig).
HF_CLASSES = {"gemma3": "Gemma3ForCausalLM", "qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}


def parameters(arch: dict[str, Any]) -> int | None:
    """The model's weights: decoder matmuls (harness.figures.metrics.matmul_weights), the
    embedding, and a separate LM head where untied (norms and biases left out: < 0.1%).
    None where the architecture is not described (a pretrained model's unusual config)."""
    from harness.figures.metrics import matmul_weights

    try:
        layers, head = matmul_weights(arch)
    except (KeyError, TypeError):
        return None
    return layers + head * (1 if arch.get("tie_embeddings", True) else 2)
