"""The LM head and cross-entropy of the JAX backends (torchax, jax-tunix), in JAX.

At Gemma 3's 262,144-entry vocabulary the logits are the largest tensor of the step:
[4, 512, 262144] in fp32 is 2 GiB, and plain cross-entropy keeps them, their softmax and
their gradient alive at once. `backend_options.<b>.loss_kernel` picks:

- `plain`: the model's own logits, upcast to fp32, then cross-entropy (the reference;
  each backend keeps its own plain path, the model's forward as it was).
- `chunked`: the final hidden states go through the head and cross-entropy a chunk of
  positions at a time, inside `jax.lax.scan` whose body is `jax.checkpoint`ed: the scan
  runs the chunks one after another (so XLA cannot schedule two chunks' logits at once),
  and the checkpoint saves only the body's inputs (a slice of hidden states), so the
  backward recomputes each chunk's logits instead of storing them. At most one chunk's
  fp32 logits exist at a time. The same sum as plain, to fp32 rounding.
- `auto`: chunked (the record says which ran), its chunks sized for the device: on an
  accelerator up to 1/16 of its memory for one chunk's fp32 logits
  (`size_chunks_for_device`), so W1's micro-batch is one chunk and nothing is recomputed.

Where one chunk holds the whole sequence (a small vocabulary: 2^28 bytes of logits
cover it), chunked is one pass with no recompute: the same memory, no extra FLOPs.

Chunks split the sequence, never the rows: rows are sharded over the devices, so each
device keeps its own rows in every chunk and the chunking moves no data between devices.

Imports JAX only inside functions (the registry imports the backends' packages).
"""

from __future__ import annotations

from backends.loss_chunks import chunk_tokens_for

KERNELS = ("auto", "chunked", "plain")


def resolve_kernel(wanted: str) -> str:
    """The kernel a run uses: `auto` is chunked; the options' Literal refused the rest."""
    return "chunked" if wanted == "auto" else wanted


# On an accelerator one chunk's fp32 logits may take this share of the device's memory
# (#36: the chunk then holds a whole W1 micro-batch on an 80 GB card, so the head is not
# recomputed in the backward); on a CPU the shared budget (backends/loss_chunks.py).
DEVICE_SHARE = 16
_CHUNK_BUDGET: dict = {"bytes": None, "source": "the shared budget, backends/loss_chunks.py"}


def size_chunks_for_device(platform: str, memory_bytes: int | None) -> None:
    """Chunks sized for this process's accelerator (`platform` gpu or tpu, with the
    memory JAX reports for it); the shared budget stays elsewhere. Each backend's worker
    is its own process, so this sets the budget for its run."""
    if platform in ("gpu", "tpu") and memory_bytes:
        share = f"1/{DEVICE_SHARE} of the device's {memory_bytes / 2**30:.1f} GiB"
        _CHUNK_BUDGET.update(bytes=memory_bytes // DEVICE_SHARE, source=share)


def size_chunks_for(devices) -> None:
    """size_chunks_for_device for the run's first device (JAX's memory stats)."""
    stats = devices[0].memory_stats() if devices[0].platform != "cpu" else None
    size_chunks_for_device(devices[0].platform, (stats or {}).get("bytes_limit"))


def kernel_facts(kernel: str, rows: int, vocab_size: int, seq_len: int | None = None) -> dict:
    """The loss kernel as the record's execution facts state it, with the sequence
    positions per chunk (for the micro-batch's `rows`) where it is chunked, where that
    budget comes from, and whether the backward recomputes the head (more than one chunk
    at `seq_len`)."""
    if kernel != "chunked":
        return {"loss_kernel": kernel, "loss_chunk_positions": None}
    positions = positions_per_chunk(rows, vocab_size)
    facts = {"loss_kernel": kernel, "loss_chunk_positions": positions, "loss_chunk_budget": _CHUNK_BUDGET["source"]}
    if seq_len:
        facts["loss_head_recomputed"] = positions < seq_len
    return facts


def positions_per_chunk(rows: int, vocab_size: int) -> int:
    """Sequence positions per chunk: the token budget (the device's share on an
    accelerator, else the shared one) spread over the micro-batch's rows, at least one."""
    budget = _CHUNK_BUDGET["bytes"]
    tokens = chunk_tokens_for(vocab_size) if budget is None else max(1, budget // (4 * vocab_size))
    return max(1, tokens // max(rows, 1))


def head_logits(hidden, head, softcap: float | None):
    """hidden [..., D] x head [V, D] -> logits [..., V] in the matmul's dtype, with a final
    soft cap where the model has one (Gemma 2's `final_logit_softcapping`)."""
    import jax.numpy as jnp

    logits = jnp.einsum("...d,vd->...v", hidden, head)
    if softcap:
        logits = jnp.tanh(logits / softcap) * softcap
    return logits


def weighted_token_losses(logits, targets, weights):
    """Sum over positions of weight x cross-entropy(logits upcast to fp32, target). A
    weight of 0 leaves the position out (padding, untrained tokens, the last position)."""
    import jax
    import jax.numpy as jnp

    logits = logits.astype(jnp.float32)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    losses = jax.nn.logsumexp(logits, axis=-1) - picked
    return jnp.sum(losses * weights)


def chunked_loss_sum(hidden, head, targets, weights, softcap: float | None = None):
    """sum(weights x cross-entropy(head(hidden))) over [rows, seq] positions, chunk by chunk.

    hidden [B, T, D] (the model's final hidden states, after its final norm); head [V, D];
    targets [B, T] int (any valid index where the weight is 0); weights [B, T] float."""
    import jax
    import jax.numpy as jnp

    rows, seq, _ = hidden.shape
    step = positions_per_chunk(rows, head.shape[0])
    if step >= seq:
        # One chunk is the whole sequence: its logits exist in full either way, and the
        # backward needs them first (the loss is the step's last op), so recomputing
        # them would save no memory and cost a second pass through the head.
        return weighted_token_losses(head_logits(hidden, head, softcap), targets, weights)
    pad = (-seq) % step
    if pad:  # padded positions carry weight 0: they add nothing to the sum
        hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))
        targets = jnp.pad(targets, ((0, 0), (0, pad)))
        weights = jnp.pad(weights, ((0, 0), (0, pad)))
    chunks = (seq + pad) // step

    def by_chunk(a):  # [B, T, ...] -> [chunks, B, step, ...]: scan walks the first axis
        return jnp.swapaxes(a.reshape(rows, chunks, step, *a.shape[2:]), 0, 1)

    @jax.checkpoint
    def chunk_loss(h, w_head, t, w):
        return weighted_token_losses(head_logits(h, w_head, softcap), t, w)

    def body(total, chunk):
        h, t, w = chunk
        return total + chunk_loss(h, head, t, w), None

    total, _ = jax.lax.scan(body, jnp.zeros((), jnp.float32), (by_chunk(hidden), by_chunk(targets), by_chunk(weights)))
    return total


def next_token_targets(tokens, trained):
    """Targets and weights for next-token prediction from [B, T] tokens and a [B, T]
    trained-token mask: position t predicts token t+1, counted where t+1 is trained;
    the last position predicts nothing (weight 0)."""
    import jax.numpy as jnp

    targets = jnp.pad(tokens[:, 1:], ((0, 0), (0, 1)))
    weights = jnp.pad(trained[:, 1:].astype(jnp.float32), ((0, 0), (0, 1)))
    return targets, weights
