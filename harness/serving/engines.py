"""The registry of serving engines: what the serve task loads with requests.

An engine takes the scenario, the worker's event sink and the requests' clock origin,
and hands back raw facts: the per-request timestamps (harness.serving.client's
RequestRecord), the server's identity, and what it ran on when it can tell. Engines
are registered by name and "module:attribute", loaded in the worker on first use (the
way entry points are), so this core imports no backend and no ML framework: the
in-process engine and the model export for a launched server live in backend packages.
Adding an engine is its module plus one line below (or one `register` call, or a
`bench.engines` entry point): the one Registry of harness.plugins.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any, Callable

from harness.errors import BenchError
from harness.plugins import Registry


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
    # auto's vLLM on a TPU VM: the TPU it is billed to (TPU_ACCELERATOR_TYPE), as a
    # record's accelerator.
    accelerator: dict[str, Any] | None = None

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

    from harness.accelerators import on_tpu_vm

    if on_tpu_vm():
        return "tpu"
    return "cuda" if Path("/dev/nvidia0").exists() else "cpu"


def choose(spec, environ=None, model=None, platform: str | None = None) -> Choice:
    """The engine for a serve section. `auto`: BENCH_VLLM_PYTHON (a Python with vLLM),
    then `vllm` on PATH, where vLLM can serve `model` on this platform (vllm_limit);
    else the local engine, with the reason. A BENCH_VLLM_PYTHON that does not exist is
    refused, never passed over. `model`: a ServingModel, or a callable making one (only
    called where vLLM is found)."""
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
    limit = vllm_limit(model, platform, context)
    if limit:
        return Choice("local", f"engine auto: {where}, but {limit}: the local engine serves instead")
    accelerator = tpu_accelerator(environ) if platform == "tpu" else None
    return Choice(
        "launch",
        f"engine auto: {where} ({platform}, --max-model-len {context or 'the model' + chr(39) + 's own'})",
        vllm_python=python or None,
        vllm_executable=found,
        platform=platform,
        max_model_len=context,
        accelerator=accelerator,
    )


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
    from harness.cost import parse_fleet

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
    if scenario.model.path and (Path(scenario.model.path) / "config.json").is_file():
        config = json.loads((Path(scenario.model.path) / "config.json").read_text())
        arch = {**config, **arch}
    head_dim = arch.get("head_dim") or (
        arch["hidden_size"] // arch["num_heads"] if arch.get("hidden_size") and arch.get("num_heads") else None
    )
    longest = None
    if need:
        from harness.serving.prompts import longest_request

        longest = longest_request(scenario)
    return ServingModel(arch.get("max_position_embeddings"), head_dim, longest)
