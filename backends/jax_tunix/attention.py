"""Tunix's Gemma 3 attention through `jax.nn.dot_product_attention` (#36): the same
projections, norms, RoPE and query scaling as Tunix's `Attention.block`
(tunix/models/gemma3/model.py), then causal attention without a padding mask
(backends/jax_common/attention.py says why none is needed) instead of Tunix's score
einsums, additive mask and softmax. Decoding with a KV cache keeps Tunix's own block.

Each layer's `attn` becomes a `DotProductAttention` in place (its class swapped, its
weights and Qwix's LoRA interceptors untouched: the projections are called as Tunix
calls them). Packed rows (#45): the segment ids come from the positions Tunix hands
every layer (`segment_pos`: the packed rows' own, restarting at each example).
Imported only inside the worker, after JAX is configured.
"""

from __future__ import annotations

from tunix.models.gemma3 import model as gemma3
from tunix.utils import sharding_utils

from backends.jax_common.attention import causal_attention, local_window, segment_ids


class DotProductAttention(gemma3.Attention):
    """gemma3.Attention whose training forward is jax.nn.dot_product_attention by
    `self.implementation` (cudnn, xla or splash), per example where `self.packed`."""

    implementation = "xla"
    packed = False
    traced = 0  # how many layer calls traced this path (tests read it)

    def block(self, x, segment_pos, cache, attn_mask):
        if cache is not None:
            return super().block(x, segment_pos, cache, attn_mask)
        DotProductAttention.traced += 1
        if self.use_qkv_einsum:
            query, key, value = self.qkv_einsum(x)
        else:
            query = self.q_einsum(x)
            key, value = self.kv_einsum(x)
        query = sharding_utils.shard(query, self.shd_config.act_btnh)
        key = sharding_utils.shard(key, self.shd_config.act_btnh)
        value = sharding_utils.shard(value, self.shd_config.act_btnh)
        query, key = self._query_norm(query), self._key_norm(key)
        rope = dict(
            head_dim=self.head_dim, base_frequency=self.rope_base_frequency, scale_factor=self.rope_scale_factor
        )
        query, key = gemma3.apply_rope(query, segment_pos, **rope), gemma3.apply_rope(key, segment_pos, **rope)
        sliding = self.sliding_window_size if self.attn_type == gemma3.AttentionType.LOCAL_SLIDING else None
        # Tunix scales the query itself (query_pre_attn_scalar): no second scale here.
        encoded = causal_attention(
            query * self.query_pre_attn_scalar,
            key,
            value,
            scale=1.0,
            window=local_window(x.shape[1], sliding),
            implementation=self.implementation,
            segments=segment_ids(segment_pos) if self.packed else None,
        )
        out = sharding_utils.shard(self.attn_vec_einsum(encoded), self.shd_config.act_btd)
        return None, out


def use_dot_product_attention(model, implementation: str, packed: bool = False) -> int:
    """Every decoder layer's attention of the Tunix model as DotProductAttention running
    `implementation` (per example for `packed` rows); returns how many layers were switched."""
    for layer in model.layers:
        layer.attn.__class__ = DotProductAttention
        layer.attn.implementation = implementation
        layer.attn.packed = packed
    return len(model.layers)
