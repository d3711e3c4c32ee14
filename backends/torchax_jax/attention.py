"""The HF model's attention on torchax through `jax.nn.dot_product_attention` (#36).

torchax 0.0.13 lowers torch's scaled_dot_product_attention (and HF's eager attention)
to its own matmul + softmax, never to JAX's attention function, so neither reaches
cuDNN's flash attention. Here a function registered with transformers' AttentionInterface
(`bench_jax_<implementation>`) takes the projected query, key and value (torchax
tensors), crosses to JAX (`jax_view`: the same arrays), runs causal attention without a
padding mask (backends/jax_common/attention.py says why none is needed), and crosses
back. transformers builds no mask for an attention it has no mask function for, so the
model's mask code (data-dependent checks jax.jit could not trace) never runs. Packed rows
(#45): the model is given their positions, which transformers hands every attention call
(`position_ids`); the segment ids are read from them.
"""

from __future__ import annotations

from backends.hf_common.loss import causal_lm
from backends.jax_common.attention import causal_attention, local_window, segment_ids

FIELD = "backend_options.torchax.attention"
PREFIX = "bench_jax_"
TRACED = {"calls": 0}  # how many layer calls the dot-product function traced (tests read it)


def attention_function(implementation: str, mesh=None, packed: bool = False):
    """HF's attention signature -> (output [B, T, heads, head_dim], no weights); splash
    splits its rows over `mesh`; `packed` rows attend per example (their position ids)."""

    def bench_jax_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        from torchax.interop import jax_view, torch_view

        TRACED["calls"] += 1
        if dropout:
            raise ValueError(f"{FIELD}: attention dropout {dropout} is not run by {implementation}; use masked")
        if kwargs.get("softcap"):
            raise ValueError(f"{FIELD}: an attention logit soft cap is not run by {implementation}; use masked")
        # HF hands [B, heads, T, head_dim]; JAX's function takes [B, T, heads, head_dim].
        q, k, v = (jax_view(t).swapaxes(1, 2) for t in (query, key, value))
        window = local_window(q.shape[1], kwargs.get("sliding_window"))
        segments = None
        if packed:
            if kwargs.get("position_ids") is None:
                raise ValueError(f"{FIELD}: packed rows reached the attention without their position ids")
            segments = segment_ids(jax_view(kwargs["position_ids"]))
        out = causal_attention(
            q, k, v, scale=scaling, window=window, implementation=implementation, mesh=mesh, segments=segments
        )
        return torch_view(out), None

    return bench_jax_attention


def use_dot_product_attention(model, implementation: str, mesh=None, packed: bool = False) -> str:
    """The HF model (peft-wrapped or not) set to run its attention by `implementation`
    (cudnn, xla or splash over `mesh`; per example for `packed` rows); returns the
    attention implementation's name in transformers."""
    from transformers import AttentionInterface

    name = f"{PREFIX}{implementation}{'_packed' if packed else ''}"
    AttentionInterface.register(name, attention_function(implementation, mesh, packed))
    causal_lm(model).set_attn_implementation(name)
    return name
