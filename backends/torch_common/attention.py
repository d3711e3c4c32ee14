"""Attention as the PyTorch backends run it: which implementation (`model.attention`),
which mask a forward pass needs, and which SDPA kernel really ran.

- `auto` attention is SDPA on CUDA (its flash kernel where it can run) and eager on the
  CPU (the CPU default as it was); a scenario's `eager` or `sdpa` pins it.
- Right-padded causal rows need no padding mask: a real token attends only to earlier
  positions, all real, and the padding positions' outputs never reach the loss (their
  labels are ignored). So SDPA runs without a mask (`is_causal`), the path its flash
  kernel takes. Packed rows keep their per-example mask (built from the positions).
- The kernel is named from what ran in the step itself: the run's first forward pass
  that compiled nothing is profiled (torch.profiler, CPU events: the aten ops the step dispatched, inside the
  compiled graph where compile is on, and FlexAttention's op or kernel), never from a
  rule. A probe forward in setup still checks that a pinned SDPA kernel can run (refused
  before the steps where it cannot)."""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import numpy as np
import torch

# The fused aten ops SDPA dispatches to, by the name the record gives the kernel.
FUSED_OPS = {
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_flash_attention_for_cpu": "flash",
    "_scaled_dot_product_efficient_attention": "efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_fused_attention_overrideable": "fused-overrideable",
}


def resolve_attention(wanted: str, device: torch.device) -> str:
    """The transformers attention implementation a run uses."""
    if wanted != "auto":
        return wanted
    return "sdpa" if device.type == "cuda" else "eager"


def right_padded(mask: np.ndarray) -> bool:
    """Every row real tokens first, then padding (never a gap): a host array, no sync."""
    return bool(np.all(mask[:, :-1] >= mask[:, 1:])) if mask.shape[1] > 1 else True


def needs_padding_mask(attention: str, mask: np.ndarray, position_ids) -> bool:
    """Whether a forward pass must be given its padding mask: packed rows (position ids)
    carry per-example masking through their positions; right-padded rows under SDPA need
    the causal mask only."""
    return position_ids is None and not (attention == "sdpa" and right_padded(mask))


def causal_only_masks(config, seq_len: int):
    """What the decoder is given as its attention mask when rows need only causality.

    Where the model takes a mask per layer kind (Gemma 3, Qwen 2: `layer_types`) and
    every sliding window covers the sequence (position p attends p - window + 1 ..,
    all of them when seq_len <= window), each kind gets None: SDPA's `is_causal` path
    on every layer. Otherwise None for the whole model: transformers builds the causal
    (and sliding) mask, with no padding in it."""
    kinds = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None)
    if kinds and (window is None or "sliding_attention" not in kinds or seq_len <= window):
        return {kind: None for kind in set(kinds)}
    return None


def sdpa_context(kernel: str):
    """The pinned kernel as the only one SDPA may use (`auto`: PyTorch's own order)."""
    if kernel == "auto":
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backends = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }
    return sdpa_kernel([backends[kernel]])


def observe_kernels(forward) -> dict[str, int]:
    """SDPA calls of `forward()` by the kernel PyTorch dispatched them to."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    calls, fused = [0], Counter()

    class Calls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            calls[0] += func is torch.nn.functional.scaled_dot_product_attention
            return func(*args, **(kwargs or {}))

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = FUSED_OPS.get(func.overloadpacket.__name__)
            if name:
                fused[name] += 1
            return func(*args, **(kwargs or {}))

    with Calls(), Ops():
        forward()
    if calls[0] > sum(fused.values()):
        fused["math"] += calls[0] - sum(fused.values())
    return dict(fused)


def probe_kernels(loss, options, device, autocast, seq_len: int, packed: bool, field: str) -> dict[str, Any]:
    """One row of `seq_len` tokens through the model and loss, eagerly (a compiled loss
    too: the op it would trace is the one eager dispatches for the same arguments), as
    the run feeds it: no mask for unpacked rows under SDPA, two examples' positions for
    packed ones. Gradients enabled (some kernels refuse a backward), none taken.
    A pinned kernel that cannot run is refused naming `field`."""
    ids = torch.arange(seq_len, device=device).remainder(100).add(3).unsqueeze(0)
    labels = ids.clone()
    mask = None
    positions = None
    if packed:
        half = seq_len // 2
        positions = torch.cat([torch.arange(half), torch.arange(seq_len - half)]).to(device).unsqueeze(0)
        mask = torch.ones_like(ids)
    elif loss.attention != "sdpa":
        mask = torch.ones_like(ids)
    try:
        with torch.compiler.set_stance("force_eager"), sdpa_context(options.sdpa_kernel), autocast():
            kernels = observe_kernels(lambda: loss(ids, mask, labels, positions))
    except RuntimeError as error:
        if options.sdpa_kernel == "auto":
            raise
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ValueError(f"{field}: {options.sdpa_kernel} cannot run here ({first})") from None
    return kernels


def kernels_from_profile(averages) -> dict[str, int]:
    """Attention calls by kernel from a profile's op and kernel names: the fused SDPA ops
    by FUSED_OPS, FlexAttention (its op, or an inductor kernel named after it) as
    `flex`, and SDPA calls that reached no fused op (not decomposed away) as `math`."""
    found: Counter = Counter()
    composite = 0
    for event in averages:
        name = event.key.split("::")[-1]
        if name in FUSED_OPS:
            found[FUSED_OPS[name]] += event.count
        elif "flexattention" in name.lower().replace("_", ""):
            found["flex"] += event.count
        elif name == "scaled_dot_product_attention":
            composite += event.count
    if composite > sum(v for k, v in found.items() if k != "flex"):
        found["math"] += composite - sum(v for k, v in found.items() if k != "flex")
    return dict(found)


class StepKernels:
    """The attention kernels the run's first forward pass dispatched, profiled inside the
    step (the compiled one where compile is on): the record's kernel is the one that ran."""

    SOURCE = "the run's first forward pass that compiled nothing, profiled inside the step"

    def __init__(self):
        self.seen: dict[str, int] | None = None

    def around(self, forward, graphs=lambda: 0):
        """forward(), profiled when nothing was seen yet and no other profile is running
        (the harness's own trace). A call during which dynamo compiled (`graphs()`, its
        graph count, grew) is not kept: tracing dispatches every op again on fake
        tensors, so the kernels are read from the next call, the compiled step itself."""
        if self.seen is not None or torch.autograd.profiler._is_profiler_enabled:
            return forward()
        from torch.profiler import ProfilerActivity, profile

        before = graphs()
        with profile(activities=[ProfilerActivity.CPU]) as profiled:
            result = forward()
        if graphs() == before:
            self.seen = kernels_from_profile(profiled.key_averages())
        return result

    def facts(self, attention: str) -> dict[str, Any]:
        if self.seen is None:
            return {}
        name = "flex" if attention == "bench_flex" and self.seen else kernel_name(self.seen, attention)
        return {
            "attention_kernel_ran": name,
            "attention_kernel_calls": self.seen or None,
            "attention_kernel_source": self.SOURCE,
        }


def kernel_name(kernels: dict[str, int], attention: str) -> str:
    """One word for the record: the SDPA kernel every call took, `mixed` where the
    layers took different ones, or `eager` (matmul, softmax, matmul)."""
    if attention != "sdpa" or not kernels:
        return "eager (matmul + softmax)" if attention == "eager" else attention
    return next(iter(kernels)) if len(kernels) == 1 else "mixed"


def attention_facts(loss, options, device, autocast, scenario, backend: str) -> dict[str, Any]:
    """The attention a run executes, for the record (`raw.execution`): implementation,
    mask, and the SDPA kernels the probe saw dispatched. A pinned `sdpa_kernel` without
    SDPA attention, or one that cannot run, is refused naming the field."""
    field = f"backend_options.{backend}.sdpa_kernel"
    if options.sdpa_kernel != "auto" and loss.attention != "sdpa":
        raise ValueError(
            f"{field}: {options.sdpa_kernel} needs SDPA attention (model.attention: sdpa, or auto on CUDA); "
            f"this run's is {loss.attention}"
        )
    packed = scenario.sequence.padding == "packed"
    seq = scenario.sequence.max_length
    if loss.attention == "bench_flex":  # backends/torch_common/flex.py: its own facts
        return {
            "attention": "flex",
            "attention_mask": "block masks (flex)",
            "sdpa_kernel": None,
            "sdpa_kernel_calls": None,
        }
    kernels = probe_kernels(loss, options, device, autocast, seq, packed, field) if loss.attention == "sdpa" else {}
    if packed:
        mask = "per example (built from the packed rows' positions)"
    elif loss.attention == "sdpa":
        config = causal_lm_config(loss)
        per_kind = causal_only_masks(config, seq) is not None
        mask = "none: causal only (right-padded rows)" + ("" if per_kind else "; transformers builds the causal mask")
    else:
        mask = "padding mask (eager attention)"
    return {
        "attention": loss.attention,
        "attention_mask": mask,
        "sdpa_kernel": kernel_name(kernels, loss.attention),
        "sdpa_kernel_calls": kernels or None,  # SDPA calls of one probe forward, by kernel
    }


def causal_lm_config(loss):
    """The config of the transformers model inside a peft wrapper (or of the model itself);
    as backends.hf_common.loss.causal_lm, which imports this module: no import cycle."""
    model = loss.model
    return (model.get_base_model() if hasattr(model, "get_base_model") else model).config
