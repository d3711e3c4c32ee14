"""Execution options shared by the PyTorch backends (torch, gpu-fsdp): how the plan's
work runs, never what it is. Imported by the registry without torch.

`auto` in any of them is the backend's choice for the device it runs on (the fast path
on CUDA); a named value pins it. The record's `raw.execution.choices` says which each
run's values were: chosen by `auto` or pinned by the scenario."""

from __future__ import annotations

from typing import Any, Literal

from harness.run.backend import BackendOptions


class TorchExecutionOptions(BackendOptions):
    # torch.compile the model's forward with the loss (AOT autograd compiles the
    # backward); graph breaks and compilations are counted and recorded. auto: on on
    # CUDA, off on the CPU (where a compile costs more than the steps it speeds up).
    compile: Literal["auto"] | bool = "auto"
    compile_backend: Literal["inductor", "aot_eager", "eager"] = "inductor"
    # default | reduce-overhead (CUDA graphs: the host launches a whole step at once) |
    # max-autotune (inductor searches kernel configurations; long compiles).
    compile_mode: Literal["default", "reduce-overhead", "max-autotune"] = "default"
    # auto: dynamo's default (a second shape compiles one dynamic graph); static: every
    # new shape compiles again (what XLA does); dynamic: dynamic from the start.
    compile_shapes: Literal["auto", "static", "dynamic"] = "auto"
    # The LM head and cross-entropy (backends/hf_common/loss.py): auto = bench's chunked
    # kernel with the memory plan's chunk, Liger Kernel's fused linear cross-entropy only
    # where it runs (CUDA, installed) and its own chunk is at least the plan's; chunked
    # never holds the full fp32 logits; plain is the reference.
    loss_kernel: Literal["auto", "chunked", "plain", "liger"] = "auto"
    # The SDPA kernel (model.attention sdpa): auto lets PyTorch pick (flash first where it
    # can run); a named one is the only kernel allowed, refused with one line before the
    # steps where it cannot run. The record names the kernel that ran either way.
    sdpa_kernel: Literal["auto", "flash", "efficient", "cudnn", "math"] = "auto"
    # FlexAttention (backends/torch_common/flex.py) for rows SDPA would need a dense mask
    # for (packed rows, rows beyond a sliding window): auto on CUDA with SDPA attention
    # where the rows need a mask; true pins it (on a CPU: flex's unfused reference, said
    # in the record); false keeps masked SDPA.
    flex_attention: Literal["auto"] | bool = "auto"


def runs_eager(options: dict[str, Any]) -> bool:
    """`BackendInfo.eager` of the torch backends: a run without torch.compile (the
    record's `backend.options`) compiles nothing by design. `auto` (absent) counts as
    eager here because it is off on the CPU; on CUDA it compiles, and the reports read
    eager only together with a count of 0 compilations (reports/model.py), so a compiled
    run is never shown as eager."""
    return options.get("compile", "auto") in (False, "auto")
