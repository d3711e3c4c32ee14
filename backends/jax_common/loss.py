"""The LM head and cross-entropy of the JAX backends (torchax, jax-tunix), in JAX.

At Gemma 3's 262,144-entry vocabulary the logits are the largest tensor of the step:
[4, 512, 262144] in fp32 is 2 GiB, and plain cross-entropy keeps them, their softmax and
their gradient alive at once. `backend_options.<b>.loss_kernel` picks:

- `plain`: the model's own logits, upcast to fp32, then cross-entropy (the reference;
  each backend keeps its own plain path, the model's forward as it was).
- `chunked`: the final hidden states go through the head and cross-entropy a chunk of
  positions at a time, inside `jax.lax.scan`: the scan runs the chunks one after another
  (so XLA cannot schedule two chunks' logits at once). Where the memory plan says the
  chunks must be recomputed, the body is `jax.checkpoint`ed: it saves only its inputs (a
  slice of hidden states) and the backward recomputes each chunk's logits instead of
  storing them. The same sum as plain, to fp32 rounding.
- `auto`: chunked (the record says which ran).

The chunks come from the memory model every backend shares (backends/loss_chunks.py:
`plan_chunks` over `loss_budget_bytes`): on an accelerator, the memory left after the
step's own buffers (resident weights and optimizer state over the FSDP shards, the
micro-batch's activations) for one device's tokens (`size_chunks_for_device`). W1 at 32
rows x 512 on an 80 GB card is then one or two chunks and nothing is recomputed. Without
a device memory figure (a CPU), the shared fixed budget: 2^28 bytes of fp32 logits a
chunk, recomputed.

Where one chunk holds the whole sequence (a small vocabulary: 2^28 bytes of logits
cover it), chunked is one pass with no recompute: the same memory, no extra FLOPs.

Chunks split the sequence, never the rows: rows are sharded over the devices, so each
device keeps its own rows in every chunk and the chunking moves no data between devices.

Imports JAX only inside functions (the registry imports the backends' packages).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backends.loss_chunks import chunk_tokens_for

KERNELS = ("auto", "chunked", "plain")


def resolve_kernel(wanted: str) -> str:
    """The kernel a run uses: `auto` is chunked; the options' Literal refused the rest."""
    return "chunked" if wanted == "auto" else wanted


_SHARED = "the shared budget, backends/loss_chunks.py (2^28 bytes of fp32 logits a chunk)"
# The plan of this process's run (each backend's worker is its own process): None until
# an accelerator's memory sized it; `shards` devices split the rows.
_CHUNK_PLAN: dict = {"chunking": None, "shards": 1, "source": _SHARED}


@dataclass(frozen=True)
class LossWork:
    """What the memory model needs of a run: the architecture (harness.plan.plan's keys), the
    plan's precision, trainable parameters (None: full fine-tuning), rows per device per
    forward pass, sequence length, attention kind (`eager` keeps score matrices), FSDP
    shards, gradient checkpointing and whether the head has a final soft cap."""

    arch: dict
    precision: Any
    trainable: int | None
    rows: int
    seq_len: int
    attention: str
    fsdp: int
    checkpointed: bool
    softcap: bool = False
    shards: int = 1  # devices the rows of a forward pass are split over


def work_of(plan, scenario, arch: dict, attention: str, softcap: bool = False) -> LossWork:
    """The LossWork of a run from its plan and scenario."""
    trainable = plan.trainable_params if plan.method == "lora" else None
    return LossWork(
        arch,
        plan.precision,
        trainable,
        plan.micro_batch,
        scenario.sequence.max_length,
        attention,
        plan.mesh.get("fsdp", 1),
        plan.gradient_checkpointing,
        softcap,
        plan.data_parallel,
    )


def size_chunks_for_device(platform: str, memory_bytes: int | None, work: LossWork) -> None:
    """Chunks planned for this process's accelerator (`platform` gpu or tpu, with the
    memory JAX reports for it); elsewhere the shared budget stays."""
    from backends import loss_chunks
    from harness.plan.plan import DTYPE_BYTES

    if platform not in ("gpu", "tpu") or not memory_bytes:
        _CHUNK_PLAN.update(chunking=None, shards=1, source=_SHARED)
        return
    tokens = work.rows * work.seq_len
    budget = loss_chunks.loss_budget_bytes(
        memory_bytes,
        work.arch,
        work.precision,
        work.trainable,
        tokens,
        work.seq_len,
        work.attention,
        work.fsdp,
        work.checkpointed,
    )
    compute = DTYPE_BYTES.get(work.precision.compute, 4)
    chunking = loss_chunks.plan_chunks(tokens, work.arch["vocab_size"], compute, max(budget, 0.0), work.softcap)
    source = f"{chunking.how} (left after the step's buffers of the device's {memory_bytes / 2**30:.1f} GiB)"
    _CHUNK_PLAN.update(chunking=chunking, shards=max(work.shards, 1), source=source)


def size_chunks_for(devices, work: LossWork) -> None:
    """size_chunks_for_device for the run's first device (JAX's memory stats)."""
    stats = devices[0].memory_stats() if devices[0].platform != "cpu" else None
    size_chunks_for_device(devices[0].platform, (stats or {}).get("bytes_limit"), work)


def kernel_facts(kernel: str, rows: int, vocab_size: int, seq_len: int | None = None) -> dict:
    """The loss kernel as the record's execution facts state it, with the sequence
    positions per chunk (for the forward pass's `rows`, all devices) where it is
    chunked, where that budget comes from, and whether the backward recomputes the head
    (more than one chunk at `seq_len`, and the plan recomputes)."""
    if kernel != "chunked":
        return {"loss_kernel": kernel, "loss_chunk_positions": None}
    positions = positions_per_chunk(rows, vocab_size)
    if seq_len:
        positions = balanced_positions(seq_len, positions)
    facts = {"loss_kernel": kernel, "loss_chunk_positions": positions, "loss_chunk_budget": _CHUNK_PLAN["source"]}
    if seq_len:
        facts["loss_head_recomputed"] = positions < seq_len and recompute_chunks()
    return facts


def positions_per_chunk(rows: int, vocab_size: int) -> int:
    """Sequence positions per chunk: the planned chunk's tokens over one device's rows
    (`rows` over the shards) on an accelerator, else the shared budget over `rows`; at
    least one."""
    chunking = _CHUNK_PLAN["chunking"]
    if chunking is None:
        return max(1, chunk_tokens_for(vocab_size) // max(rows, 1))
    per_device = -(-max(rows, 1) // _CHUNK_PLAN["shards"])
    return max(1, chunking.chunk_tokens // per_device)


def balanced_positions(seq_len: int, most: int) -> int:
    """Positions a chunk of the fewest chunks of at most `most` positions that cover
    `seq_len`, spread evenly (two chunks of 256, not 394 + 394 padded to 788)."""
    chunks = -(-seq_len // max(most, 1))
    return -(-seq_len // chunks)


def recompute_chunks() -> bool:
    """Whether a chunk's logits are recomputed in the backward: the plan's word on an
    accelerator; with the shared budget, always (where there is more than one chunk)."""
    chunking = _CHUNK_PLAN["chunking"]
    return True if chunking is None else chunking.recompute


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
    step = balanced_positions(seq, positions_per_chunk(rows, head.shape[0]))
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

    def chunk_loss(h, w_head, t, w):
        return weighted_token_losses(head_logits(h, w_head, softcap), t, w)

    if recompute_chunks():  # the plan has no room for every chunk's saved logits
        chunk_loss = jax.checkpoint(chunk_loss)

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
