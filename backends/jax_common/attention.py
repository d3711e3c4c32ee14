"""Causal attention of the JAX backends (torchax, jax-tunix) through
`jax.nn.dot_product_attention`, and the option that picks its implementation
(`backend_options.<b>.attention`, #36):

- `auto` (the default): cuDNN's flash attention where it can run (a CUDA GPU, bf16 or
  fp16 compute, and a probe compile of the model's head size passes), else XLA's
  implementation. JAX's own `implementation=None` is XLA everywhere (jax 0.10/0.11:
  "defaults to XLA for now"), so auto names cuDNN itself.
- `cudnn`: cuDNN pinned; refused in one line where it cannot run.
- `xla`: `jax.nn.dot_product_attention`'s XLA implementation pinned.
- `masked`: the backend's previous path, attention scores with an additive padding mask
  (Tunix's einsums; HF's `model.attention` lowered by torchax).
- `splash` (torchax): Pallas's TPU splash attention kernel (what MaxText runs), causal,
  never the [T, S] scores in HBM; a TPU only (refused elsewhere in one line), each
  device's rows through the kernel under shard_map. Not auto's choice on a TPU yet: the
  compiler's cost model does not see into the kernel (its FLOPs are missing from
  cost_analysis; the projection's FLOPs check then flags it and uses bench's count).

No padding mask is passed: the harness pads rows on the right (harness/data/batches.py
collate), so under the causal mask no real token sees a padding key, and the padding
positions' own outputs carry loss weight 0 (their gradients are zero). A sliding-window
layer whose window holds the whole sequence is global: no window is passed then.

Packed rows (several examples a row, #45) attend within their example only: segment ids
read from the packed positions (a segment starts where the position restarts at 0; a
row's tail of padding is a segment of its own), and each kernel takes them its own way:
splash as its `SegmentIds` (block-sparse: tiles across two examples are skipped), cuDNN
as its packed layout (segment offsets and lengths: flash attention per example), XLA as a
dense block-diagonal mask beside the causal one (the scores are built anyway). On a GPU,
`auto` takes cuDNN's packed layout only where a probe compiles it and its output matches
XLA's on a packed batch; the record says which ran.

Imports JAX only inside functions (the registry imports the backends' packages).
"""

from __future__ import annotations

import functools
from typing import Any

CHOICES = ("auto", "cudnn", "xla", "masked", "splash")
DOT_PRODUCT = "jax.nn.dot_product_attention"
SPLASH = "Pallas TPU splash attention (jax.experimental.pallas.ops.tpu.splash_attention)"
SIXTEEN_BIT = ("bf16", "fp16")


def cudnn_cannot_run(
    platform: str, compute: str, heads: int, kv_heads: int, head_dim: int, packed: bool = False
) -> str | None:
    """Why cuDNN's flash attention cannot run this model's attention here, or None when
    it can: it needs a CUDA GPU and 16-bit compute, and a compile of its forward and
    backward at the model's head sizes (jax checks head size, layout and cuDNN's
    version while lowering) must pass; for packed rows, its packed layout must also
    compile and give XLA's output on a packed batch (packed_cudnn_disagrees)."""
    if platform != "gpu":
        return f"no CUDA GPU (JAX's platform is {platform})"
    if compute not in SIXTEEN_BIT:
        return f"cuDNN flash attention takes bf16 or fp16; this run computes in {compute}"
    try:
        _compile_cudnn_probe(compute, heads, kv_heads, head_dim)
    except Exception as error:  # noqa: BLE001 - any lowering error means it cannot run here
        return f"cuDNN refused head_dim {head_dim}: {str(error).splitlines()[0][:200]}"
    if packed:
        try:
            disagrees = packed_cudnn_disagrees(compute, heads, kv_heads, head_dim)
        except Exception as error:  # noqa: BLE001 - the packed layout does not lower or run here
            return f"cuDNN's packed layout failed: {str(error).splitlines()[0][:200]}"
        if disagrees:
            return disagrees
    return None


PACKED_TOLERANCE = 2e-2  # bf16/fp16 attention against XLA's in fp32: relative to the output's scale


def packed_cudnn_disagrees(compute: str, heads: int, kv_heads: int, head_dim: int) -> str | None:
    """Runs cuDNN's packed layout on a random packed batch (two rows of three and two
    examples, one with a window) and compares it with XLA's dense segment mask in fp32;
    why they differ, or None. On a GPU only: it calls the kernel."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    dtype = jnp.bfloat16 if compute == "bf16" else jnp.float16
    positions = np.stack([np.concatenate([np.arange(n) for n in lengths]) for lengths in ((50, 40, 38), (100, 28))])
    segments = segment_ids(jnp.asarray(positions))
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.random.normal(keys[0], (2, 128, heads, head_dim), jnp.float32)
    k, v = (jax.random.normal(key, (2, 128, kv_heads, head_dim), jnp.float32) for key in keys[1:])
    for window in (None, (31, 0)):
        fast = jax.jit(lambda q, k, v: _cudnn_packed(q, k, v, head_dim**-0.5, window, segments))
        got = fast(q.astype(dtype), k.astype(dtype), v.astype(dtype)).astype(jnp.float32)
        want = jax.nn.dot_product_attention(
            q, k, v, mask=segment_mask(segments), scale=head_dim**-0.5, is_causal=True, local_window_size=window
        )
        error = float(jnp.abs(got - want).max() / jnp.abs(want).max())
        if not error <= PACKED_TOLERANCE:
            return f"cuDNN's packed layout differs from XLA's segment mask by {error:.3g} (window {window})"
    return None


def _compile_cudnn_probe(compute: str, heads: int, kv_heads: int, head_dim: int) -> None:
    import jax
    import jax.numpy as jnp

    dtype = jnp.bfloat16 if compute == "bf16" else jnp.float16
    q = jax.ShapeDtypeStruct((1, 128, heads, head_dim), dtype)
    kv = jax.ShapeDtypeStruct((1, 128, kv_heads, head_dim), dtype)

    def loss(q, k, v):
        out = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")
        return out.astype(jnp.float32).sum()

    jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(q, kv, kv).compile()


def resolve(
    wanted: str, field: str, platform: str, compute: str, heads: int, kv_heads: int, head_dim: int, packed: bool = False
):
    """(implementation that runs: cudnn, xla or masked; why auto chose it, or None).
    A pinned cudnn that cannot run is refused in one line naming `field`; for `packed`
    rows cuDNN must run its packed layout too (cudnn_cannot_run)."""
    if wanted in ("xla", "masked"):
        return wanted, None
    if wanted == "splash":
        if platform != "tpu":
            raise ValueError(
                f"{field}: splash cannot run here: Pallas's splash kernel needs a TPU (JAX's platform is "
                f"{platform}); use auto or xla"
            )
        return "splash", None
    why_not = cudnn_cannot_run(platform, compute, heads, kv_heads, head_dim, packed)
    if wanted == "cudnn":
        if why_not:
            raise ValueError(f"{field}: cudnn cannot run here: {why_not}; use auto or xla")
        return "cudnn", None
    return ("xla", f"auto: xla, since cudnn cannot run ({why_not})") if why_not else ("cudnn", "auto: cudnn")


def attention_memory_kind(implementation: str) -> str:
    """The attention kind harness.plan.plan's memory model knows: `sdpa` (no score matrices
    kept) for the fused kernels, `eager` for the masked path and XLA's dot product, which
    build the scores."""
    return "sdpa" if implementation in ("cudnn", "splash") else "eager"


PACKED_HOW = {  # how each implementation keeps packed examples apart
    "splash": "segment ids (splash's SegmentIds: tiles across examples skipped)",
    "cudnn": "segment ids as cuDNN's packed layout (offsets and lengths per example)",
    "xla": "segment ids as a dense block-diagonal mask",
    "masked": "a block-diagonal causal mask from the packed positions",
}


def facts(wanted: str, implementation: str, why: str | None, masked_path: str, packed: bool = False) -> dict[str, Any]:
    """The record's execution facts: the attention that ran, its implementation, and
    whether it was the default (auto) or pinned by the scenario; for packed rows, how
    the examples were kept apart."""
    if implementation == "masked":
        attention = masked_path
    elif implementation == "splash":
        attention = f"{SPLASH}, causal, no padding mask"
    else:
        attention = f"{DOT_PRODUCT} ({implementation}), causal, no padding mask"
    if packed:
        attention += f"; packed rows: per example, by {PACKED_HOW[implementation]}"
    return {
        "attention": attention,
        "attention_kernel": implementation,
        "attention_choice": "default" if wanted == "auto" else "pinned",
        "attention_choice_why": why,
    }


def local_window(seq_len: int, sliding_window: int | None):
    """jax.nn.dot_product_attention's local_window_size for a layer with `sliding_window`
    (each position sees itself and the window - 1 before it), or None where the window
    holds the whole sequence (a global layer then) or the layer has none."""
    if sliding_window is None or seq_len <= sliding_window:
        return None
    return (sliding_window - 1, 0)


def causal_attention(query, key, value, *, scale: float, window, implementation: str, mesh=None, segments=None):
    """query [B, T, N, H], key and value [B, S, K, H] (N a multiple of K) -> [B, T, N, H]:
    causal attention without a padding mask, by `implementation` (cudnn, xla or splash;
    splash splits the rows over `mesh`'s data and fsdp axes). `segments` [B, T] (packed
    rows: segment_ids) keeps each example to its own tokens."""
    import jax

    if implementation == "splash":
        return splash_attention(query, key, value, scale=scale, window=window, mesh=mesh, segments=segments)
    if segments is not None and implementation == "cudnn":
        return _cudnn_packed(query, key, value, scale, window, segments)
    return jax.nn.dot_product_attention(
        query,
        key,
        value,
        mask=None if segments is None else segment_mask(segments),
        scale=scale,
        is_causal=True,
        local_window_size=window,
        implementation=implementation,
    )


def segment_ids(positions):
    """[B, T] packed positions -> [B, T] int32 segment ids, from 1: a new segment wherever
    the position restarts at 0 (harness/data/batches.py pack: each example's positions
    count from 0, and so do a row's tail of padding and an all-padding row)."""
    import jax.numpy as jnp

    return jnp.cumsum(positions == 0, axis=-1, dtype=jnp.int32)


def segment_mask(segments):
    """[B, 1, T, T] boolean: query and key in the same segment (the causal part is the
    kernel's own)."""
    return segments[:, None, :, None] == segments[:, None, None, :]


def packed_layout(segments):
    """cuDNN's packed layout of rows of consecutive segments: (lengths [B, T], offsets
    [B, T + 1]), each segment's token count and first index in order, -1 past a row's
    last segment (jax._src.cudnn.fused_attention_stablehlo: q_seqlen and q_offsets).
    T + 1 entries hold the most segments a row of T tokens can have."""
    import jax
    import jax.numpy as jnp

    rows, length = segments.shape
    starts = jnp.concatenate([jnp.ones((rows, 1), bool), segments[:, 1:] != segments[:, :-1]], axis=1)
    offsets = jax.vmap(lambda s: jnp.nonzero(s, size=length + 1, fill_value=-1)[0])(starts).astype(jnp.int32)
    count = starts.sum(axis=1, dtype=jnp.int32)[:, None]
    slot = jnp.arange(length + 1, dtype=jnp.int32)[None, :]
    ends = jnp.where(slot + 1 < count, jnp.roll(offsets, -1, axis=1), length)
    lengths = jnp.where(slot < count, ends - offsets, -1)[:, :length]
    return lengths.astype(jnp.int32), offsets


def _cudnn_packed(query, key, value, scale: float, window, segments):
    """cuDNN's flash attention over packed rows: each segment its own causal sequence
    (the packed layout's offsets and lengths), the window as cuDNN's sliding window.
    jax.nn.dot_product_attention does not expose the layout; its cuDNN module does."""
    from jax._src.cudnn.fused_attention_stablehlo import MaskType
    from jax._src.cudnn.fused_attention_stablehlo import dot_product_attention as cudnn_attention

    lengths, offsets = packed_layout(segments)
    return cudnn_attention(
        query,
        key,
        value,
        q_seqlen=lengths,
        kv_seqlen=lengths,
        q_offsets=offsets,
        kv_offsets=offsets,
        scale=scale,
        mask_type=MaskType.PADDING_CAUSAL,
        sliding_window_length=None if window is None else window[0] + 1,
    )


SPLASH_BLOCK = 512  # tokens per tile (MaxText's v6e Llama recipes use 2048; 512 divides more lengths)
ROW_AXES = ("data", "fsdp")  # the mesh axes the JAX backends split rows over


def splash_lengths_refused(sequence) -> str | None:
    """Why splash cannot run every length this scenario's batches have (one line naming
    the field), or None. Checked before any work: the kernel tiles a sequence by
    SPLASH_BLOCK tokens (or takes a shorter one whole), so the lengths must be known in
    advance and whole tiles: static padding, packed rows (max_length long, their examples
    told apart by segment ids), or buckets; dynamic rows are not."""
    if sequence.padding == "dynamic":
        return (
            f"sequence.padding: {sequence.padding} rows have lengths splash attention cannot tile in advance; "
            "use static or bucketed padding, or attention xla"
        )
    lengths = sequence.bucket_lengths() if sequence.padding == "bucketed" else (sequence.max_length,)
    field = "sequence.buckets" if sequence.padding == "bucketed" else "sequence.max_length"
    odd = [n for n in lengths if n > SPLASH_BLOCK and n % SPLASH_BLOCK]
    if odd:
        return (
            f"{field}: splash attention tiles the sequence by {SPLASH_BLOCK} tokens; "
            f"{', '.join(map(str, odd))} is not a multiple (pad to one, or use attention xla)"
        )
    return None


def splash_blocks(seq_len: int):
    """Splash's tile sizes for a sequence: SPLASH_BLOCK, or the whole sequence when
    shorter; a length the tile does not divide is refused (the kernel needs whole tiles;
    runs are refused earlier, by splash_lengths_refused)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash

    block = min(SPLASH_BLOCK, seq_len)
    if seq_len % block:
        raise ValueError(
            f"sequence.max_length: splash attention tiles the sequence by {block} tokens; {seq_len} is not a "
            "multiple (pad to one, or use attention xla)"
        )
    return splash.BlockSizes(
        block_q=block,
        block_kv=block,
        block_kv_compute=block,
        block_q_dkv=block,
        block_kv_dkv=block,
        block_kv_dkv_compute=block,
        block_q_dq=block,
        block_kv_dq=block,
    )


@functools.lru_cache(maxsize=32)
def _splash_kernel(t: int, s: int, heads: int, window, interpret: bool):
    """The splash kernel for one attention shape, built once: every layer of a model
    shares it (building one processes the mask's tiles for every head). Built as
    concrete arrays even when first asked for inside a trace, so that the cached kernel
    holds no tracer of that trace."""
    import jax
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

    one = masks.CausalMask((t, s)) if window is None else masks.LocalMask((t, s), window_size=(window[0], 0), offset=0)
    with jax.ensure_compile_time_eval():
        return splash.make_splash_mha(
            mask=masks.MultiHeadMask([one] * heads),
            head_shards=1,
            q_seq_shards=1,
            block_sizes=splash_blocks(t),
            interpret=interpret,
        )


def splash_attention(query, key, value, *, scale: float, window, mesh=None, interpret: bool = False, segments=None):
    """Causal (optionally local-window) attention by Pallas's TPU splash kernel, one
    kernel per row (vmap), each device's rows under shard_map: a Mosaic kernel is not
    partitioned by XLA, which would otherwise gather every row to every device.
    `segments` [B, T] (packed rows) go to the kernel as its SegmentIds. `interpret`
    runs the kernel's Python on any backend (tests on the CPU)."""
    import jax
    from jax.experimental.pallas.ops.tpu.splash_attention.splash_attention_kernel import SegmentIds
    from jax.sharding import PartitionSpec

    _, t, heads, _ = query.shape
    kernel = _splash_kernel(t, key.shape[1], heads, window, interpret)

    def one_row(q, k, v, seg):
        return kernel(q, k, v) if seg is None else kernel(q, k, v, segment_ids=SegmentIds(q=seg, kv=seg))

    def attend(q, k, v, seg):  # [rows, T, heads, H] -> the kernel's [heads, T, H] per row
        q, k, v = ((q * scale).astype(q.dtype).swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2))
        return jax.vmap(one_row)(q, k, v, seg).swapaxes(1, 2)

    if mesh is None or mesh.size == 1:
        return attend(query, key, value, segments)
    rows = PartitionSpec(tuple(axis for axis in mesh.axis_names if axis in ROW_AXES))
    seg_spec = None if segments is None else rows
    return jax.shard_map(attend, mesh=mesh, in_specs=(rows, rows, rows, seg_spec), out_specs=rows, check_vma=False)(
        query, key, value, segments
    )
