"""What a launched server needs from the transformers stack (`serve.engine: launch`):
the scenario's model saved with the project's tokenizer, and this machine's device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.serving import launch


def export_model(scenario, directory: Path) -> Path:
    """The scenario's model (random or pretrained) and tokenizer saved for a server."""
    from transformers import PreTrainedTokenizerFast

    from backends.hf_common.model import build_model
    from harness.data.tokenizer import load_tokenizer

    tok = scenario.data.tokenizer
    handle = load_tokenizer(tok.kind, tok.vocab_size, tok.path)
    build_model(scenario).save_pretrained(directory)
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
    from harness.provenance import cpu_name

    return {"kind": "cpu", "name": cpu_name(), "count": 1}


LAUNCH_ENGINE = launch.engine(export_model, local_device)


# vLLM's --dtype for the serve section's precision.
VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def auto_vllm(scenario, choice: dict[str, Any]):
    """The scenario with `engine: auto`'s vLLM as its launch section: the precision as
    --dtype (unstated: bf16 on an accelerator, fp32 on a CPU); on a CPU, eager, a
    4096-token context and vLLM's CPU settings (a 1 GiB KV cache); on a GPU, vLLM's
    defaults (compiled, CUDA graphs, the model's own context). Prefix caching on, with
    cached tokens reported in usage."""
    from harness.serving import vllm
    from harness.tasks.serve.spec import LaunchSpec

    serve = scenario.serve
    on_cpu = local_device()["kind"] == "cpu"
    precision = serve.precision or ("fp32" if on_cpu else "bf16")
    command = vllm.server_command(
        choice["vllm_python"] or "",
        dtype=VLLM_DTYPES[precision],
        max_model_len=4096 if on_cpu else None,
        eager=on_cpu,
        launcher=[choice["vllm_executable"], "serve"] if choice["vllm_executable"] else None,
    )
    launch = LaunchSpec(command=tuple(command), model="{model_dir}", env=dict(vllm.CPU_ENV) if on_cpu else {})
    update = {"engine": "launch", "launch": launch, "local": None, "precision": None}
    return scenario.model_copy(update={"serve": serve.model_copy(update=update)})
