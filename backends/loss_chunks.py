"""How many tokens one chunk of a chunked cross-entropy holds: the rule every backend's
chunked loss uses (backends/hf_common/loss.py in torch, backends/jax_common/loss.py in
JAX). No framework import: the JAX environments have no torch, and the reverse."""

from __future__ import annotations

# Tokens per chunk: 2^28 bytes of fp32 logits (256 MiB) whatever the vocabulary, at
# least one token. At 262,144 entries that is 256 tokens a chunk.
CHUNK_LOGIT_BYTES = 1 << 28


def chunk_tokens_for(vocab_size: int) -> int:
    return max(1, CHUNK_LOGIT_BYTES // (4 * vocab_size))
