"""How many tokens one chunk of a chunked cross-entropy holds: the rule every backend's
chunked loss uses (backends/hf_common/loss.py in torch, backends/jax_common/loss.py in
JAX). No framework import: the JAX environments have no torch, and the reverse."""

from __future__ import annotations

from dataclasses import dataclass

# Tokens per chunk: 2^28 bytes of fp32 logits (256 MiB) whatever the vocabulary, at
# least one token. At 262,144 entries that is 256 tokens a chunk.
CHUNK_LOGIT_BYTES = 1 << 28


def chunk_tokens_for(vocab_size: int) -> int:
    return max(1, CHUNK_LOGIT_BYTES // (4 * vocab_size))


# --------------------------------------------------------------------------- memory model
# What the head and cross-entropy hold, in bytes per token per vocabulary entry (the
# PyTorch chunked kernel, backends/hf_common/loss.py; an upper bound of eager autograd
# and of inductor's saved set):
# - kept from the forward to the backward when a chunk is NOT recomputed: the fp32
#   log-softmax (4 bytes) and, under a final soft cap, the tanh output (compute dtype);
# - in flight while one chunk runs (forward or backward): its logits in the compute
#   dtype, their fp32 copy, the fp32 log-softmax and the fp32 gradient of each (12).
SAVED_FP32_BYTES = 4
LIVE_FP32_BYTES = 12
# Below this many tokens a chunk's head GEMM (tokens x hidden x vocabulary) falls under
# an H100's ridge point: rather than many small unrecomputed chunks, recompute.
MIN_CHUNK_TOKENS = 1024
# Chunks are whole multiples of this many tokens where they can be (GEMM tiles).
CHUNK_ALIGN = 64


@dataclass(frozen=True)
class LossChunking:
    """The chunked loss's plan for one forward pass: tokens per chunk, whether each
    chunk is recomputed in the backward (activation checkpointing), the peak bytes the
    head and loss add by the model above, and the sentence the record carries."""

    chunk_tokens: int
    recompute: bool
    estimate_bytes: int
    how: str


def saved_bytes_per_token(vocab_size: int, compute_bytes: int, softcap: bool) -> int:
    return vocab_size * (SAVED_FP32_BYTES + (compute_bytes if softcap else 0))


def live_bytes_per_token(vocab_size: int, compute_bytes: int) -> int:
    return vocab_size * (compute_bytes + LIVE_FP32_BYTES)


def _aligned(tokens: int) -> int:
    return tokens - tokens % CHUNK_ALIGN if tokens >= CHUNK_ALIGN else max(1, tokens)


def plan_chunks(
    tokens: int, vocab_size: int, compute_bytes: int, budget_bytes: float, softcap: bool = False
) -> LossChunking:
    """The largest chunk the budget holds, recomputed only when it must be:

    1. every token's saved tensors and the whole pass as one chunk fit: one chunk, no
       recompute (the head's GEMM at full size, its weight read once);
    2. every token's saved tensors and a chunk of at least MIN_CHUNK_TOKENS fit: the
       largest such chunk, no recompute;
    3. else recompute: the largest chunk whose saved and live tensors fit (at least one
       token: a token that does not fit is the device's problem, said by the run)."""
    saved = saved_bytes_per_token(vocab_size, compute_bytes, softcap)
    live = live_bytes_per_token(vocab_size, compute_bytes)
    gib = budget_bytes / 2**30
    whole = tokens * (saved + live)
    if whole <= budget_bytes:
        return LossChunking(tokens, False, whole, f"memory model: all {tokens} tokens in one chunk fit {gib:.3g} GiB")
    room = int((budget_bytes - tokens * saved) // live)
    if room >= min(tokens, MIN_CHUNK_TOKENS):
        chunk = _aligned(room)
        return LossChunking(
            chunk,
            False,
            tokens * saved + chunk * live,
            f"memory model: {tokens} tokens' saved logits and {chunk}-token chunks fit {gib:.3g} GiB, no recompute",
        )
    chunk = min(tokens, _aligned(int(budget_bytes // (saved + live))))
    return LossChunking(
        chunk,
        True,
        chunk * (saved + live),
        f"memory model: {tokens} tokens' logits exceed {gib:.3g} GiB: {chunk}-token chunks, recomputed",
    )


def legacy_chunks(tokens: int, vocab_size: int, compute_bytes: int, softcap: bool = False) -> LossChunking:
    """Without a device memory figure (a CPU run): chunk_tokens_for's fixed 2^28 bytes
    of fp32 logits a chunk, recomputed unless one chunk holds the whole pass."""
    chunk = min(tokens, chunk_tokens_for(vocab_size))
    saved = saved_bytes_per_token(vocab_size, compute_bytes, softcap)
    live = live_bytes_per_token(vocab_size, compute_bytes)
    if chunk >= tokens:
        return LossChunking(tokens, False, tokens * (saved + live), "no device memory figure: one chunk holds the pass")
    return LossChunking(
        chunk,
        True,
        chunk * (saved + live),
        f"no device memory figure: {chunk}-token chunks (2^28 bytes of fp32 logits), recomputed",
    )


# --------------------------------------------------------------------------- the budget
def loss_budget_bytes(
    memory_bytes: float,
    arch: dict,
    precision,
    trainable: int | None,
    tokens: int,
    seq_len: int,
    attention: str,
    fsdp: int = 1,
    checkpointed: bool = False,
) -> float:
    """Device memory left to the head and loss on every backend (torch, gpu-fsdp,
    torchax, jax-tunix): the plan's share of the device (harness.plan.plan.MEMORY_HEADROOM)
    less the step's own buffers, by the plan's memory model:

    - the resident weights, gradients and AdamW state (harness.plan.plan.resident_bytes),
      divided over the `fsdp` shards that hold them;
    - the activations one forward pass of `tokens` (on this device) keeps for the
      backward: every layer's (harness.plan.plan.activation_bytes_per_token), or, with
      gradient checkpointing, each layer's input plus one layer's set (the one being
      recomputed).

    May be negative (the step alone does not fit): plan_chunks is then given 0."""
    from harness.plan import plan as plans

    compute = plans.DTYPE_BYTES.get(precision.compute, 4)
    resident = plans.resident_bytes(arch, precision, trainable) / max(fsdp, 1)
    per_token = plans.activation_bytes_per_token(arch, precision.compute, attention, seq_len)
    if checkpointed:
        per_token = arch["num_layers"] * arch["hidden_size"] * compute + per_token / arch["num_layers"]
    return plans.MEMORY_HEADROOM * memory_bytes - resident - tokens * per_token
