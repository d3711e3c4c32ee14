"""Attention without a padding mask on the JAX backends (#36): jax.nn.dot_product_attention
(XLA's implementation on this CPU) gives the masked path's loss and LoRA gradients within
1e-5 (tiny fp32 LoRA Gemma 3, right-padded rows, static and dynamic padding, a sliding
window shorter than the sequence and one at least as long), in each backend's own
interpreter (benchmarks/probes/jax_attention_probe.py); and the option's resolution: auto picks
cuDNN only where it can run, a pinned kernel that cannot run is refused in one line."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT, stack_or_skip

STACKS = {
    "torchax": ("torchax", "torchax", "pip install -e '.[torchax]'"),
    "jax-tunix": ("jax-tunix", "tunix", ".ci/run builds .venv-jax"),
}
CASES = {"static, window < sequence", "dynamic, window < sequence", "static, window >= sequence"}


@pytest.fixture(scope="module", params=sorted(STACKS))
def probe(request):
    from harness.run.registry import interpreter_for, worker_env

    backend = request.param
    stack_or_skip(*STACKS[backend])
    done = subprocess.run(
        [interpreter_for(backend), str(ROOT / "benchmarks" / "probes" / "jax_attention_probe.py"), backend],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**worker_env(), "PYTHONPATH": str(ROOT)},
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return backend, json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_no_mask_attention_gives_the_masked_loss_and_lora_gradients(probe):
    backend, found = probe
    assert set(found) == CASES
    for case, parity in found.items():
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
    assert splash_lengths_refused(SequenceSpec(max_length=4096, padding="packed")).startswith(
        "sequence.padding: packed"
    )
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
from backends.jax_common.attention import splash_attention, splash_blocks

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
    jax.nn.dot_product_attention: causal and local-window, rows split over a 2-device
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
    for window in ("None", "(31, 0)"):
        case = found[window]
        assert case["out_max_abs"] > 0.1 and case["grad_max_abs"] > 0.1, case  # real values compared
        assert case["out_max_diff"] <= 1e-5, case
        assert case["grad_max_rel_diff"] <= 1e-5, case
        assert "fsdp" in case["rows_sharded_out"], case  # each device kept its own rows
    assert found["refused"].startswith("sequence.max_length: splash attention tiles the sequence by 512 tokens")
