"""FlexAttention for the rows SDPA would need a dense mask for (torch, gpu-fsdp).

SDPA's flash kernel takes no mask: it runs causal rows (`is_causal`). Two kinds of rows
need more, and transformers then builds a dense [rows, 1, T, T] mask that sends SDPA to
its efficient or math kernel:
- packed rows (several examples a row, positions restarting): a block-diagonal
  (document) mask, from the positions;
- rows longer than a sliding window (Gemma 3's sliding layers): a band mask.
FlexAttention (torch.nn.attention.flex_attention) runs the same masks as mask functions
over a block-sparse `BlockMask` (create_block_mask), compiled into one fused kernel that
skips the blocks no query sees. transformers' own flex path builds those block masks
(masking_utils: the document mask from the restarting positions, the window as a mask
function, per layer kind); bench registers it under its own name (`NAME`) so that the
function below decides the device path.

`backend_options.<b>.flex_attention` (`choose`): auto is on on CUDA with SDPA attention
where the rows need a mask (packed, or a window shorter than the rows), off elsewhere;
true pins it, false keeps masked SDPA. On a CPU, PyTorch 2.13 has no FlexAttention
backward kernel (flex_attention refuses inputs that need gradients), so a pinned run
there executes flex's own unfused reference of the same masks (the higher-order op,
eagerly: the scores materialised), and the record says so: the CPU checks the masks'
numerics, never flex's speed."""

from __future__ import annotations

from typing import Any

import torch

NAME = "bench_flex"  # the attention implementation's name in transformers' registries
CPU_PATH = "flex_attention's unfused reference (CPU: torch has no FlexAttention backward kernel here)"
KERNEL_PATH = "flex_attention (compiled, block-sparse)"


def rows_need_mask(config, padding: str, seq_len: int) -> str | None:
    """Why SDPA would get a dense mask for these rows (None: causal rows, no mask)."""
    if padding == "packed":
        return "packed rows (a document mask from the restarting positions)"
    window = getattr(config, "sliding_window", None)
    kinds = getattr(config, "layer_types", None) or []
    if window is not None and "sliding_attention" in kinds and seq_len > window:
        return f"rows of {seq_len} tokens beyond the {window}-token sliding window"
    return None


def choose(option, attention: str, device: torch.device, config, padding: str, seq_len: int, field: str):
    """(flex on, why) for `backend_options.<b>.flex_attention`; a pinned `true` without
    SDPA attention is refused naming `field`."""
    need = rows_need_mask(config, padding, seq_len)
    if option is False:
        return False, "pinned off"
    if option is True:
        if attention != "sdpa":
            raise ValueError(
                f"{field}: true needs SDPA attention (model.attention: sdpa, or auto on CUDA); this run's is {attention}"
            )
        return True, f"pinned; {need or 'causal rows (a causal block mask)'}"
    if attention != "sdpa":
        return False, f"auto: off, attention is {attention}"
    if need is None:
        return False, "auto: off, causal rows need no mask (SDPA's is_causal path)"
    if device.type != "cuda":
        return False, f"auto: off on the CPU (no FlexAttention backward kernel); {need}: masked SDPA"
    return True, f"auto: {need}"


def use_flex(model: torch.nn.Module) -> None:
    """The model (peft-wrapped or not) set to run its attention through `attention`
    below, with transformers' flex block masks."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flex_attention_mask

    global _cpu_reference_outside_compile
    # Eager by design (the reference the CPU can differentiate), wrapped here rather than
    # by a decorator: torch.compiler.disable imports torch._dynamo (~3 s of CPU), which
    # every import of this module (each backend probe's interpreter) would otherwise pay.
    _cpu_reference_outside_compile = torch.compiler.disable(_cpu_reference)
    AttentionInterface.register(NAME, attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(NAME, flex_attention_mask)
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    base.set_attn_implementation(NAME)


_cpu_reference_outside_compile = None  # set by use_flex: _cpu_reference, never compiled


def attention(module, query, key, value, attention_mask, scaling=None, softcap=None, **kwargs):
    """transformers' attention function: the compiled flex kernel where it can run a
    backward; on a CPU with gradients, flex's unfused reference (same block mask)."""
    if query.device.type == "cpu" and torch.is_grad_enabled():
        return _cpu_reference_outside_compile(query, key, value, attention_mask, scaling, softcap)
    from transformers.integrations.flex_attention import flex_attention_forward

    return flex_attention_forward(module, query, key, value, attention_mask, scaling=scaling, softcap=softcap, **kwargs)


def _cpu_reference(query, key, value, block_mask, scaling, softcap):
    from torch._higher_order_ops.flex_attention import flex_attention as flex_op
    from transformers.integrations.sdpa_attention import repeat_kv

    groups = query.shape[1] // key.shape[1]
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)

    def score_mod(score, batch, head, q_index, kv_index):
        return score if softcap is None else softcap * torch.tanh(score / softcap)

    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    options = {"OUTPUT_LOGSUMEXP": True, "OUTPUT_MAX": False}
    out, _, _ = flex_op(query, key, value, score_mod, block_mask.as_tuple(), scale, options)
    return out.transpose(1, 2).contiguous(), None


def layer_paths(config, on: bool, attention: str, device: torch.device, padding: str, seq_len: int) -> dict:
    """Which path each layer kind took, for the record (`raw.execution.attention_paths`)."""
    if attention == "eager":
        return {"all layers": "eager (matmul + softmax) with the mask transformers builds"}
    kinds = sorted(set(getattr(config, "layer_types", None) or ["full_attention"]))
    window = getattr(config, "sliding_window", None)
    packed = padding == "packed"
    paths = {}
    for kind in kinds:
        sliding = kind == "sliding_attention" and window is not None and seq_len > window
        masks = [m for m, used in (("document", packed), (f"sliding window {window}", sliding)) if used]
        mask = " + ".join(["causal", *masks])
        if on:
            paths[kind] = f"{KERNEL_PATH if device.type == 'cuda' else CPU_PATH}: {mask} block mask"
        elif masks:
            paths[kind] = f"sdpa with a dense {mask} mask (built by transformers)"
        else:
            paths[kind] = "sdpa, no mask (is_causal)"
    return paths


def facts(on: bool, why: str, attention: str, config, device: torch.device, scenario) -> dict[str, Any]:
    padding, seq_len = scenario.sequence.padding, scenario.sequence.max_length
    return {
        "flex_attention": on,
        "flex_attention_why": why,
        "attention_paths": layer_paths(config, on, attention, device, padding, seq_len),
    }


def setup(model: torch.nn.Module, options, attention: str, device: torch.device, scenario, backend: str):
    """Choose (`choose`) and, where on, switch the model to flex; the record's facts."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    field = f"backend_options.{backend}.flex_attention"
    padding, seq_len = scenario.sequence.padding, scenario.sequence.max_length
    on, why = choose(options.flex_attention, attention, device, config, padding, seq_len, field)
    if on:
        use_flex(model)
    return facts(on, why, attention, config, device, scenario)
