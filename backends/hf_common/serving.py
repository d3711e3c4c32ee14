"""What a launched server needs from the transformers stack (`serve.engine: launch`):
the scenario's model saved with the project's tokenizer, and this machine's device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.serving import launch


def export_model(scenario, directory: Path) -> Path:
    """The scenario's model (random or pretrained) and tokenizer saved for a server,
    with the KV cache on in its config and generation config: build_model's config is
    the training one (use_cache=False), which a server (transformers serve) inherits."""
    from transformers import PreTrainedTokenizerFast

    from backends.hf_common.model import build_model
    from harness.data.tokenizer import load_tokenizer

    tok = scenario.data.tokenizer
    handle = load_tokenizer(tok.kind, tok.vocab_size, tok.path)
    model = build_model(scenario)
    model.config.use_cache = True
    model.generation_config.use_cache = True
    model.save_pretrained(directory)
    PreTrainedTokenizerFast(
        tokenizer_object=handle.tokenizer, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>"
    ).save_pretrained(directory)
    return directory


def local_device() -> dict[str, Any]:
    """This machine's accelerator, as far as torch (if installed) can tell."""
    try:
        import torch

        if torch.cuda.is_available():
            return {"kind": "cuda", "name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count()}
    except ImportError:
        pass
    from harness.records.provenance import cpu_name

    return {"kind": "cpu", "name": cpu_name(), "count": 1}


LAUNCH_ENGINE = launch.engine(export_model, local_device)


# vLLM's --dtype for the serve section's precision.
VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def auto_vllm(scenario, choice: dict[str, Any]):
    """The scenario with `engine: auto`'s vLLM as its launch section, for the platform
    the choice was made for (harness.serving.engines.choose): the precision as --dtype
    (unstated: bf16 on an accelerator, fp32 on a CPU) and the context the choice
    checked the load against. On a CPU, eager and vLLM's CPU settings (a 1 GiB KV
    cache); on a GPU or TPU (vLLM-TPU), vLLM's defaults (compiled). Prefix caching on,
    with cached tokens reported in usage, and the cache reset endpoint offered
    (VLLM_SERVER_DEV_MODE) for serve.reset_prefix_cache. The tensor- and data-parallel
    sizes the choice derived from the chips it bills (engines.vllm_parallel)."""
    from harness.serving import vllm
    from harness.tasks.serve.spec import LaunchSpec

    serve = scenario.serve
    on_cpu = choice.get("platform", "cpu") == "cpu"
    precision = serve.precision or ("fp32" if on_cpu else "bf16")
    command = vllm.server_command(
        choice["vllm_python"] or "",
        dtype=VLLM_DTYPES[precision],
        max_model_len=choice.get("max_model_len", 4096 if on_cpu else None),
        eager=on_cpu,
        launcher=[choice["vllm_executable"], "serve"] if choice["vllm_executable"] else None,
    )
    command += vllm.parallel_flags(choice.get("tensor_parallel", 1), choice.get("data_parallel", 1))
    env = {**(vllm.CPU_ENV if on_cpu else {}), "VLLM_SERVER_DEV_MODE": "1"}
    launch = LaunchSpec(command=tuple(command), model="{model_dir}", env=env)
    update = {"engine": "launch", "launch": launch, "local": None, "precision": None}
    return scenario.model_copy(update={"serve": serve.model_copy(update=update)})
