"""Execution options shared by the PyTorch backends (torch, gpu-fsdp): how the plan's
work runs, never what it is. Imported by the registry without torch."""

from __future__ import annotations

from typing import Any, Literal

from harness.backend import BackendOptions


class TorchExecutionOptions(BackendOptions):
    # torch.compile the model's forward with the loss (AOT autograd compiles the
    # backward); graph breaks and compilations are counted and recorded.
    compile: bool = False
    compile_backend: Literal["inductor", "aot_eager", "eager"] = "inductor"
    # default | reduce-overhead (CUDA graphs: the host launches a whole step at once) |
    # max-autotune (inductor searches kernel configurations; long compiles).
    compile_mode: Literal["default", "reduce-overhead", "max-autotune"] = "default"
    # auto: dynamo's default (a second shape compiles one dynamic graph); static: every
    # new shape compiles again (what XLA does); dynamic: dynamic from the start.
    compile_shapes: Literal["auto", "static", "dynamic"] = "auto"
    # The LM head and cross-entropy (backends/hf_common/loss.py): auto = Liger Kernel's
    # fused linear cross-entropy on CUDA where installed, chunked elsewhere; chunked
    # never holds the full fp32 logits; plain is the reference.
    loss_kernel: Literal["auto", "chunked", "plain", "liger"] = "auto"


def runs_eager(options: dict[str, Any]) -> bool:
    """`BackendInfo.eager` of the torch backends: a run without torch.compile (the
    record's `backend.options`) compiles nothing by design."""
    return not options.get("compile", TorchExecutionOptions.model_fields["compile"].default)
