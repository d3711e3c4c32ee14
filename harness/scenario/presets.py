"""Model architectures by name, as plain data (no framework import).

Sizes are the public configs of each model family; the backends build the model from
these fields with random weights, so no hub download is needed.
"""

from __future__ import annotations

from typing import Any

# The sizes every architecture states, in the order a model card lists them (the
# columns of `_sizes`): vocabulary, hidden, MLP intermediate, layers, query heads, KV
# heads, head dim.
SIZE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim")


def _sizes(*sizes: int) -> dict[str, int]:
    return dict(zip(SIZE_FIELDS, sizes, strict=True))


# Gemma 3 270M (FunctionGemma's base): 268.1M params, 167.8M of them in the embedding.
_GEMMA3_270M = dict(
    family="gemma3",
    **_sizes(262_144, 640, 2048, 18, 4, 1, 256),
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
        **_sizes(262_144, 5376, 21_504, 62, 32, 16, 128),
        sliding_window=1024,
        query_pre_attn_scalar=168,
        max_position_embeddings=131_072,
    ),
    "qwen2.5-3b": dict(
        family="qwen2",
        **_sizes(151_936, 2048, 11_008, 36, 16, 2, 128),
        max_position_embeddings=32_768,
        rope_theta=1_000_000.0,
        tie_embeddings=True,
    ),
    # Llama 3.1 8B (meta-llama/Llama-3.1-8B config.json): the model of the published TPU
    # measurements the projection is calibrated against (harness/projection/calibration.py). Untied
    # head; Llama 3's rope scaling is left out (it changes no FLOP and no byte).
    "llama-3.1-8b": dict(
        family="llama",
        **_sizes(128_256, 4096, 14_336, 32, 32, 8, 128),
        max_position_embeddings=131_072,
        rope_theta=500_000.0,
        tie_embeddings=False,
    ),
    # Llama 3.1/3.3 70B (meta-llama/Llama-3.3-70B-Instruct config.json, the same sizes as
    # 3.1 70B): the model of a published GPU LoRA measurement the GPU projection is
    # calibrated against (harness/projection/calibration_points/gpu_published.json).
    "llama-3.1-70b": dict(
        family="llama",
        **_sizes(128_256, 8192, 28_672, 80, 64, 8, 128),
        max_position_embeddings=131_072,
        rope_theta=500_000.0,
        tie_embeddings=False,
    ),
    # Llama 2 70B (meta-llama/Llama-2-70b-hf config.json: vocab 32,000, rope theta 10,000,
    # 4,096 positions, GQA 64 / 8 heads, untied head): the model of MaxText's published v5p
    # training figure (docs/reference/tiering.md, config llama2_70b_v5p_128), a TPU
    # calibration point (harness/projection/calibration_points/published.json).
    "llama-2-70b": dict(
        family="llama",
        **_sizes(32_000, 8192, 28_672, 80, 64, 8, 128),
        max_position_embeddings=4096,
        rope_theta=10_000.0,
        tie_embeddings=False,
    ),
    # Falcon 7B's sizes in the Llama layout, for LitGPT's published adapter fine-tune on TPU
    # v4 (harness/projection/calibration_points/published.json, `litgpt-falcon7b-adapter-v4-32`). bench builds no
    # Falcon; this decoder has Falcon 7B's matmuls (tiiuae/falcon-7b config.json: vocab
    # 65,024, hidden 4,544, 32 layers, 71 query heads of 64 and one KV head) with a SwiGLU
    # MLP of 3 x 12,117 columns in place of Falcon's GELU MLP of 2 x 18,176 (165.2M weights a
    # layer either way, 4,544 fewer), RMSNorm for LayerNorm and a sequential residual for
    # Falcon's parallel one: the same FLOPs per token within 0.01% and the same weight
    # bytes. Untied head, as LitGPT's model of that time held it.
    "llama-shaped-falcon-7b": dict(
        family="llama",
        **_sizes(65_024, 4544, 12_117, 32, 71, 1, 64),
        max_position_embeddings=2048,
        rope_theta=10_000.0,
        tie_embeddings=False,
    ),
    # For tests: Gemma 3's layout with two layers of hidden 64. The sliding window is
    # shorter than most sequences so the padded-sliding-window path is exercised too.
    "tiny-gemma3": dict(
        _GEMMA3_270M,
        **_sizes(8192, 64, 128, 2, 4, 1, 16),
        sliding_window=32,
        query_pre_attn_scalar=16,
        max_position_embeddings=2048,
    ),
}
