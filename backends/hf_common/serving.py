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
