"""Model architectures by name, as plain data (no framework import).

Sizes are the public configs of each model family; the backends build the model from
these fields with random weights, so no hub download is needed.
"""

from __future__ import annotations

from typing import Any

# Gemma 3 270M (FunctionGemma's base): 268.1M params, 167.8M of them in the embedding.
_GEMMA3_270M = dict(
    family="gemma3",
    vocab_size=262_144,
    hidden_size=640,
    intermediate_size=2048,
    num_layers=18,
    num_heads=4,
    num_kv_heads=1,
    head_dim=256,
    sliding_window=512,
    query_pre_attn_scalar=256,
    max_position_embeddings=32_768,
    rope_theta=1_000_000.0,
    rope_local_theta=10_000.0,
    tie_embeddings=True,
)

MODEL_PRESETS: dict[str, dict[str, Any]] = {
    "gemma-3-270m": _GEMMA3_270M,
    "gemma-3-1b": dict(_GEMMA3_270M, hidden_size=1152, intermediate_size=6912, num_layers=26),
    # Gemma 3 27B: the largest public Gemma 3; W3's Gemma 4 31B is of the same class.
    "gemma-3-27b": dict(
        _GEMMA3_270M,
        hidden_size=5376,
        intermediate_size=21_504,
        num_layers=62,
        num_heads=32,
        num_kv_heads=16,
        head_dim=128,
        sliding_window=1024,
        query_pre_attn_scalar=168,
        max_position_embeddings=131_072,
    ),
    "qwen2.5-3b": dict(
        family="qwen2",
        vocab_size=151_936,
        hidden_size=2048,
        intermediate_size=11_008,
        num_layers=36,
        num_heads=16,
        num_kv_heads=2,
        head_dim=128,
        max_position_embeddings=32_768,
        rope_theta=1_000_000.0,
        tie_embeddings=True,
    ),
    # For tests: two layers, hidden 64. The sliding window is shorter than most
    # sequences so the padded-sliding-window path is exercised too.
    "tiny-gemma3": dict(
        family="gemma3",
        vocab_size=8192,
        hidden_size=64,
        intermediate_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=1,
        head_dim=16,
        sliding_window=32,
        query_pre_attn_scalar=16,
        max_position_embeddings=2048,
        rope_theta=1_000_000.0,
        rope_local_theta=10_000.0,
        tie_embeddings=True,
    ),
}
