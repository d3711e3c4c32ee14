"""Attention without a padding mask on the JAX backends (#36): jax.nn.dot_product_attention
(XLA's implementation on this CPU) gives the masked path's loss and LoRA gradients within
1e-5 (tiny fp32 LoRA Gemma 3, right-padded rows, static and dynamic padding, a sliding
window shorter than the sequence and one at least as long), in each backend's own
interpreter (benchmarks/probes/jax_attention_probe.py); and the option's resolution: auto picks
cuDNN only where it can run, a pinned kernel that cannot run is refused in one line.

Packed rows (#45): segment ids from the packed positions; XLA's segment mask and splash's
SegmentIds give each example's attention computed alone; each backend's packed loss and
LoRA gradients equal the same examples' one a row (and differ without the segments)."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT, jax_kernels_probe, stack_or_skip

STACKS = {
    "torchax": ("torchax", "torchax", "pip install -e '.[torchax]'"),
    "jax-tunix": ("jax-tunix", "tunix", ".ci/run builds .venv-jax"),
}
CASES = {"static, window < sequence", "dynamic, window < sequence", "static, window >= sequence"}


@pytest.fixture(scope="module", params=sorted(STACKS))
def probe(request):
    backend = request.param
    stack_or_skip(*STACKS[backend])
    return backend, jax_kernels_probe(backend)["attention"]


@pytest.mark.slow
def test_no_mask_attention_gives_the_masked_loss_and_lora_gradients(probe):
    backend, found = probe
    assert set(found) == CASES | {"packed"}
    for case in CASES:
        parity = found[case]
        where = (backend, case, parity)
        assert parity["dot_product_traced"] >= 1, where  # the dot-product path really ran
        loss = parity["loss"]
        assert loss["masked"] > 1.0, where  # a real sum of token losses
        assert loss["dot_product"] == pytest.approx(loss["masked"], abs=1e-5, rel=1e-6), where
        assert parity["grad_names"] and parity["grad_count"] >= 6, where
        assert parity["grad_max_abs"] > 1e-3, where  # gradients that flow
        assert parity["grad_max_diff"] <= 1e-5, where
    # The window matters where it is shorter than the sequence: another loss than the global one.
    assert found["static, window < sequence"]["loss"]["masked"] != found["static, window >= sequence"]["loss"]["masked"]


@pytest.mark.slow
def test_packed_rows_give_the_same_examples_loss_and_gradients_one_a_row(probe):
    """The harness's own pack (two examples sharing a row, a tail of padding, a window
    shorter than the examples) through each backend's loss with segment ids, against the
    same examples one a row: the same loss sum and LoRA gradients; without the segment ids
    the examples see each other and the loss moves (the comparison is not vacuous)."""
    backend, found = probe
    packed = found["packed"]
    where = (backend, packed)
    assert packed["dot_product_traced"] >= 2, where
    loss = packed["loss"]
    assert loss["unpacked"] > 1.0, where
    assert loss["packed"] == pytest.approx(loss["unpacked"], abs=1e-4, rel=1e-6), where
    assert packed["grad_names"] and packed["grad_count"] >= 6 and packed["grad_max_abs"] > 1e-3, where
    assert packed["grad_max_diff"] <= 1e-5, where
    assert abs(loss["unsegmented"] - loss["unpacked"]) > 1e-2, where
    assert packed["unsegmented"]["grad_max_diff"] > 1e-3, where
    if backend == "jax-tunix":  # Tunix's own attention under the packed block-diagonal mask
        assert loss["packed_masked"] == pytest.approx(loss["unpacked"], abs=1e-4, rel=1e-6), where
        assert packed["masked"]["grad_max_diff"] <= 1e-5, where


def _packed_positions(lengths_per_row):
    import numpy as np

    return np.stack([np.concatenate([np.arange(n) for n in lengths]) for lengths in lengths_per_row])


def test_segment_ids_and_cudnns_packed_layout_from_packed_positions():
    """A segment starts where the position restarts; cuDNN's layout lists each segment's
    length and first index, -1 past the row's last (recomputed here by a plain loop)."""
    import numpy as np

    from backends.jax_common.attention import packed_layout, segment_ids

    rows = [(5, 7, 4), (9, 3, 4), (16,)]
    segments = np.asarray(segment_ids(_packed_positions(rows)))
    assert segments.tolist()[0] == [1] * 5 + [2] * 7 + [3] * 4 and set(segments[2]) == {1}
    lengths, offsets = (np.asarray(a) for a in packed_layout(segments))
    assert lengths.shape == (3, 16) and offsets.shape == (3, 17)
    for r, row in enumerate(rows):
        starts = np.cumsum((0, *row[:-1]))
        assert lengths[r].tolist() == [*row, *[-1] * (16 - len(row))]
        assert offsets[r].tolist() == [*starts.tolist(), *[-1] * (17 - len(row))]


@pytest.mark.parametrize("window", [None, (2, 0)], ids=["causal", "window 3"])
def test_xlas_segment_mask_gives_each_examples_attention_computed_alone(window):
    """Two packed rows (GQA: 4 query heads on 2 KV heads) against each example run on its
    own through jax.nn.dot_product_attention; without the segments the rows differ."""
    import jax
    import numpy as np

    from backends.jax_common.attention import causal_attention, segment_ids

    rows = [(5, 7, 4), (9, 3, 4)]
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    q = jax.random.normal(keys[0], (2, 16, 4, 8))
    k, v = (jax.random.normal(key, (2, 16, 2, 8)) for key in keys[1:])
    segments = segment_ids(_packed_positions(rows))
    packed = np.asarray(causal_attention(q, k, v, scale=0.3, window=window, implementation="xla", segments=segments))
    alone = np.zeros_like(packed)
    for r, row in enumerate(rows):
        for at, n in zip(np.cumsum((0, *row[:-1])), row):
            part = (slice(r, r + 1), slice(at, at + n))
            out = jax.nn.dot_product_attention(
                q[part], k[part], v[part], scale=0.3, is_causal=True, local_window_size=window
            )
            alone[r, at : at + n] = np.asarray(out[0])
    assert np.abs(packed - alone).max() <= 1e-5 and np.abs(alone).max() > 0.1
    whole = np.asarray(causal_attention(q, k, v, scale=0.3, window=window, implementation="xla"))
    assert np.abs(whole - alone).max() > 1e-2


def test_auto_picks_cudnn_only_where_it_can_run_and_a_pinned_kernel_that_cannot_is_refused():
    from backends.jax_common.attention import facts, local_window, resolve

    heads = (4, 1, 256)
    assert resolve("auto", "f", "cpu", "bf16", *heads) == (
        "xla",
        "auto: xla, since cudnn cannot run (no CUDA GPU (JAX's platform is cpu))",
    )
    assert resolve("auto", "f", "gpu", "fp32", *heads)[0] == "xla"  # cuDNN takes 16-bit inputs only
    assert resolve("xla", "f", "gpu", "bf16", *heads) == ("xla", None)
    assert resolve("masked", "f", "tpu", "bf16", *heads) == ("masked", None)
    with pytest.raises(ValueError) as refused:
        resolve("cudnn", "backend_options.torchax.attention", "cpu", "bf16", *heads)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("backend_options.torchax.attention: cudnn cannot run here")
    assert facts("auto", "xla", "why", "old")["attention_choice"] == "default"
    # Packed rows: auto's cuDNN must also run its packed layout; off a GPU, xla. The record
    # says how the examples were kept apart.
    assert resolve("auto", "f", "cpu", "bf16", *heads, True)[0] == "xla"
    assert facts("auto", "xla", None, "old", packed=True)["attention"].endswith(
        "packed rows: per example, by segment ids as a dense block-diagonal mask"
    )
    assert "SegmentIds" in facts("splash", "splash", None, "old", packed=True)["attention"]
    assert "packed" not in facts("auto", "xla", None, "old")["attention"]
    assert facts("cudnn", "cudnn", None, "old") == {
        "attention": "jax.nn.dot_product_attention (cudnn), causal, no padding mask",
        "attention_kernel": "cudnn",
        "attention_choice": "pinned",
        "attention_choice_why": None,
    }
    assert facts("masked", "masked", None, "Tunix einsums")["attention"] == "Tunix einsums"
    # splash: a TPU's kernel, pinned only; refused off a TPU in one line naming the field
    assert resolve("splash", "f", "tpu", "bf16", *heads) == ("splash", None)
    with pytest.raises(ValueError) as refused:
        resolve("splash", "backend_options.torchax.attention", "gpu", "bf16", *heads)
    message = str(refused.value)
    assert "\n" not in message and message.startswith("backend_options.torchax.attention: splash cannot run here")
    assert facts("splash", "splash", None, "old")["attention"].startswith("Pallas TPU splash attention")
    # lengths splash cannot tile are refused before any work, naming the field
    from backends.jax_common.attention import splash_lengths_refused
    from harness.scenario.sections import SequenceSpec

    assert splash_lengths_refused(SequenceSpec(max_length=8192)) is None
    assert splash_lengths_refused(SequenceSpec(max_length=256)) is None  # shorter than a tile: one tile
    assert splash_lengths_refused(SequenceSpec(max_length=700)).startswith(
        "sequence.max_length: splash attention tiles the sequence by 512 tokens; 700 is not a multiple"
    )
    assert splash_lengths_refused(SequenceSpec(max_length=2048, padding="dynamic")).startswith(
        "sequence.padding: dynamic"
    )
    # packed rows are max_length long (their examples apart by segment ids): tiled like static
    assert splash_lengths_refused(SequenceSpec(max_length=4096, padding="packed")) is None
    assert splash_lengths_refused(SequenceSpec(max_length=700, padding="packed")).startswith("sequence.max_length")
    buckets = SequenceSpec(max_length=2048, padding="bucketed", buckets=(256, 1000, 2048))
    assert splash_lengths_refused(buckets).startswith("sequence.buckets: splash attention tiles the sequence by 512")
    assert splash_lengths_refused(SequenceSpec(max_length=2048, padding="bucketed")) is None  # 512, 1024, 2048
    # A sliding layer is global when its window holds the sequence; else (window - 1) back, 0 ahead.
    assert local_window(512, 512) is None and local_window(512, None) is None
    assert local_window(513, 512) == (511, 0)


SPLASH_PROBE = """
import json
from backends.jax_common import request_cpu_devices
request_cpu_devices(2)
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from backends.jax_common.attention import causal_attention, splash_attention, splash_blocks

rows, t, heads, kv_heads, dim = 4, 256, 4, 2, 64
q, k, v = (jax.random.normal(jax.random.PRNGKey(i), (rows, t, n, dim)) for i, n in enumerate((heads, kv_heads, kv_heads)))
mesh = Mesh(np.array(jax.devices()[:2]).reshape(1, 2), ("data", "fsdp"))
found = {}
for window in (None, (31, 0)):
    def reference(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, scale=dim**-0.5, is_causal=True, local_window_size=window)
    def splash(q, k, v):
        return splash_attention(q, k, v, scale=dim**-0.5, window=window, mesh=mesh, interpret=True)
    rows_sharded = NamedSharding(mesh, PartitionSpec(("data", "fsdp")))
    args = [jax.device_put(a, rows_sharded) for a in (q, k, v)]
    loss = lambda f: (lambda *a: (f(*a) ** 2).sum())
    out = {name: jax.jit(f)(*args) for name, f in (("xla", reference), ("splash", splash))}
    grads = {name: jax.jit(jax.grad(loss(f), argnums=(0, 1, 2)))(*args) for name, f in (("xla", reference), ("splash", splash))}
    found[str(window)] = {
        "out_max_abs": float(jnp.abs(out["xla"]).max()),
        "out_max_diff": float(jnp.abs(out["xla"] - out["splash"]).max()),
        "grad_max_abs": max(float(jnp.abs(g).max()) for g in grads["xla"]),
        "grad_max_rel_diff": max(float(jnp.abs(a - b).max() / jnp.abs(a).max()) for a, b in zip(grads["xla"], grads["splash"])),
        "rows_sharded_out": str(out["splash"].sharding.spec),
    }
from backends.jax_common.attention import segment_ids
positions = np.stack([np.concatenate([np.arange(n) for n in lengths]) for lengths in ((100, 90, 66), (200, 56), (256,), (30, 226))])
segments = jax.device_put(segment_ids(positions), NamedSharding(mesh, PartitionSpec(("data", "fsdp"))))
window = (31, 0)
def reference(q, k, v, seg):
    return causal_attention(q, k, v, scale=dim**-0.5, window=window, implementation="xla", segments=seg)
def splash(q, k, v, seg):
    return splash_attention(q, k, v, scale=dim**-0.5, window=window, mesh=mesh, interpret=True, segments=seg)
loss = lambda f: (lambda q, k, v, seg: (f(q, k, v, seg) ** 2).sum())
out = {name: jax.jit(f)(*args, segments) for name, f in (("xla", reference), ("splash", splash))}
grads = {name: jax.jit(jax.grad(loss(f), argnums=(0, 1, 2)))(*args, segments) for name, f in (("xla", reference), ("splash", splash))}
found["packed"] = {
    "out_max_abs": float(jnp.abs(out["xla"]).max()),
    "out_max_diff": float(jnp.abs(out["xla"] - out["splash"]).max()),
    "grad_max_abs": max(float(jnp.abs(g).max()) for g in grads["xla"]),
    "grad_max_rel_diff": max(float(jnp.abs(a - b).max() / jnp.abs(a).max()) for a, b in zip(grads["xla"], grads["splash"])),
    "rows_sharded_out": str(out["splash"].sharding.spec),
    "unsegmented_diff": float(jnp.abs(out["xla"] - jax.jit(reference)(*args, None)).max()),
}
try:
    splash_blocks(700)
    found["refused"] = None
except ValueError as error:
    found["refused"] = str(error)
print(json.dumps(found))
"""


@pytest.mark.slow
def test_splash_gives_xlas_attention_and_gradients_with_rows_split_over_the_mesh():
    """Pallas's splash kernel in interpret mode (its Python, on the CPU) against
    jax.nn.dot_product_attention: causal, local-window and packed rows (segment ids
    against XLA's segment mask), rows split over a 2-device
    (data, fsdp) mesh through shard_map, outputs and q/k/v gradients (GQA: 4 query heads
    on 2 KV heads). What runs on a TPU is the same kernel compiled by Mosaic."""
    from harness.run.registry import interpreter_for, worker_env

    stack_or_skip(*STACKS["torchax"])
    done = subprocess.run(
        [interpreter_for("torchax"), "-c", SPLASH_PROBE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**worker_env(), "PYTHONPATH": str(ROOT)},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for window in ("None", "(31, 0)", "packed"):  # packed: four rows of segments, window 32
        case = found[window]
        assert case["out_max_abs"] > 0.1 and case["grad_max_abs"] > 0.1, case  # real values compared
        assert case["out_max_diff"] <= 1e-5, case
        assert case["grad_max_rel_diff"] <= 1e-5, case
        assert "fsdp" in case["rows_sharded_out"], case  # each device kept its own rows
    assert found["packed"]["unsegmented_diff"] > 0.1  # the segments changed the attention
    assert found["refused"].startswith("sequence.max_length: splash attention tiles the sequence by 512 tokens")
