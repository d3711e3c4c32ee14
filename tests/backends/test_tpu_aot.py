"""`bench plan --compile-for`: tiny W1 (gemma270m.yaml at tiny-gemma3 dimensions, bf16, its
own batch) compiled ahead of time for TPU v5e-8 and v5p-8 topologies on this CPU host,
with libtpu and no TPU, through each JAX backend's real model and loss.

The compiler's FLOPs per device (cost_analysis) must agree within 15% below and 10% above with the harness's
own count for the same padded tokens (harness.figures.metrics.FlopsModel.executed_flops): an
independent check of both. A configuration too big for the chips is an answer: exit 0,
`fits` false, with the bytes. BENCH_PYTHON_TPU names the interpreter with jax[tpu]
(.ci/run makes .venv-tpu); without it these tests skip (under CI=true, fail).
"""

from __future__ import annotations

import json
import os

import pytest

from conftest import SCENARIOS, bench

pytestmark = pytest.mark.slow
TINY_W1 = ("--set", "model.preset=tiny-gemma3", "--set", "sequence.max_length=256")


@pytest.fixture(autouse=True)
def tpu_python():
    if os.environ.get("BENCH_PYTHON_TPU"):
        return
    if os.environ.get("CI"):
        pytest.fail("CI must provide BENCH_PYTHON_TPU (a python with jax[tpu]: pip install -e '.[tpu,jax,torchax]')")
    pytest.skip("BENCH_PYTHON_TPU is not set (a python with jax[tpu] and the JAX backends' stacks)")


def plan_json(tmp_path, backend: str, *extra: str) -> list[dict]:
    done = bench(
        "plan",
        str(SCENARIOS / "gemma270m.yaml"),
        "--backend",
        backend,
        *TINY_W1,
        *extra,
        "--results-dir",
        str(tmp_path),
        "--json",
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


# W1 adapts k_proj and v_proj, which Tunix fuses into one adapter: accepted, as the padding
# matrix accepts it (the backend refuses it otherwise, and so does its compile).
FUSED_KV = {"jax-tunix": ("--set", "backend_options.jax-tunix.fuse_kv_lora=true"), "torchax": ()}


# torchax compiles for both slices (one `bench plan`, two projections: 8 devices of a v5e,
# 4 megacore devices of a v5p); jax-tunix for the v5p: the same backend code on another
# slice is the same check again, at about 45 s of CI's cores per TPU compile.
SLICES_OF = {"torchax": ["tpu-v5e-8", "tpu-v5p-8"], "jax-tunix": ["tpu-v5p-8"]}


@pytest.mark.parametrize("backend", ["jax-tunix", "torchax"])
def test_tiny_w1_fits_its_slices_and_its_flops_agree_with_the_harness(tmp_path, backend):
    slices = [arg for name in SLICES_OF[backend] for arg in ("--compile-for", name)]
    projections = plan_json(tmp_path, backend, *slices, *FUSED_KV[backend])
    assert [p["slice"]["name"] for p in projections] == SLICES_OF[backend]
    for p in projections:
        (shape,) = p["shapes"]  # static padding: one shape
        assert shape["fits"], p["slice"]
        assert 0 < shape["memory_bytes_per_device"] < shape["hbm_bytes_per_device"]
        ratio = shape["flops_per_device_per_forward"] / shape["bench_flops_per_device_per_forward"]
        # The compiler also counts elementwise work the convention leaves out: at tiny-gemma3's
        # sizes jax-tunix measured 0.905 with the padding mask's ops, 0.889 without (#36:
        # jax.nn.dot_product_attention, the mask gone); the matmuls are the same either way.
        assert 0.85 <= ratio <= 1.1, (p["slice"]["name"], ratio)
        micro = shape["programs"][0]
        assert micro["collectives"]["all-gather"]["count"] > 0  # weights sharded over fsdp: gathered
        assert shape["step_time_bound_s"] > 0 and shape["usd_per_1m_tokens_bound"] > 0
        assert p["fine_tune"]["compiles"] == 1
        assert not p["fine_tune"]["compile_in_time"] and "not a TPU VM" in p["fine_tune"]["compile_host"]
        assert {t["bound_by"] for t in shape["terms"]} <= {"compute", "hbm", "collectives"}
        if backend == "torchax":  # the optimizer state beside the grad program counts in its fit
            assert micro["resident_outside_bytes"] > 0
            assert shape["fit_bytes_per_device"] >= micro["memory_bytes"] + micro["resident_outside_bytes"]
    devices = {p["slice"]["name"]: p["plan"]["devices"] for p in projections}
    chips = {"tpu-v5e-8": 8, "tpu-v5p-8": 4}  # v5p-8 counts TensorCores: 4 chips
    assert devices == {name: chips[name] for name in SLICES_OF[backend]}
    shown = bench("show", str(tmp_path))
    assert shown.returncode == 0 and shown.stdout.count("PROJECTED (not measured)") == len(projections), shown.stderr


def test_too_big_is_an_answer_with_its_bytes(tmp_path):
    """4,096 rows of 256 tokens per device: the logits alone (fp32 for the loss, 8,192
    words) are 32 GiB per device, twice a v5e chip's HBM. The plain loss kernel keeps
    them whole (the default, chunked, never holds them all: that much would fit)."""
    big = (
        *("--set", "train.micro_batch=4096", "--set", "train.global_batch=32768"),
        *("--set", "backend_options.torchax.loss_kernel=plain"),
    )
    (p,) = plan_json(tmp_path, "torchax", "--compile-for", "tpu-v5e-8", *big)
    (shape,) = p["shapes"]
    assert not shape["fits"]
    assert shape["memory_bytes_per_device"] > 16 * 1024**3
    assert shape["step_time_bound_s"] is None and p["fine_tune"] is None


def test_jax_tunix_compile_refuses_peft_kv_adapters_as_its_run_does(tmp_path):
    done = bench(
        "plan",
        str(SCENARIOS / "gemma270m.yaml"),
        "--backend",
        "jax-tunix",
        *TINY_W1,
        "--compile-for",
        "tpu-v5e-8",
        "--results-dir",
        str(tmp_path),
        timeout=600,
    )
    assert done.returncode == 2 and "train.lora.target_modules: k_proj, v_proj" in done.stderr, done.stderr[-2000:]
    assert not list(tmp_path.glob("*.projection.json"))


def test_torchax_full_bf16_with_recompute_and_splash_compiles_for_v6e_and_keeps_the_update_sharded(tmp_path):
    """What the calibration (scenarios/calibration/llama31_8b_v6e.yaml) compiles, at tiny
    dimensions: a full fine-tune in bf16 over fp32 masters, decoder layers under
    jax.checkpoint and Pallas's splash kernel (rows under shard_map) compile for a v6e
    topology and fit. Recomputing keeps fewer temporaries than keeping every activation.
    The update program returns its weights and state sharded like its arguments (left to
    the compiler they came back replicated: an 8B update needed 44.9 GB per chip)."""
    # 4 rows of 2,048 tokens per device: activations that outweigh the recompute's buffers
    # (at 256 tokens and 1 row, recomputing kept more temporaries than it saved).
    full = (
        *("--set", "train.method=full", "--set", "backend_options.torchax.attention=splash"),
        *("--set", "sequence.max_length=2048", "--set", "train.micro_batch=4", "--set", "train.global_batch=32"),
    )
    kept_dir, recomputed_dir = tmp_path / "kept", tmp_path / "recomputed"
    (kept,) = plan_json(kept_dir, "torchax", "--compile-for", "tpu-v6e-8", *full)
    (recomputed,) = plan_json(
        recomputed_dir, "torchax", "--compile-for", "tpu-v6e-8", *full, "--set", "train.gradient_checkpointing=true"
    )
    temps, flops = [], []
    for p in (kept, recomputed):
        (shape,) = p["shapes"]
        assert shape["fits"] and shape["step_time_bound_s"] > 0
        assert p["plan"]["precision"]["compute"] == "bf16" and p["plan"]["precision"]["trainable_params"] == "fp32"
        grad, update = shape["programs"]
        temps.append(grad["memory"]["temp"])
        flops.append(grad["flops"])
        # Nothing came back replicated: outputs as big as the (sharded) arguments, give or
        # take the step's scalars (replicated weights and state would be ~8x on 8 chips).
        assert update["memory"]["output"] <= 1.01 * update["memory"]["argument"], update["memory"]
    assert temps[1] < 0.5 * temps[0], temps  # measured: 114.7 MB -> 40.3 MB per device
    assert flops[1] > flops[0], flops  # the recompute is work the compiled step does


def test_a_slice_is_described_one_device_per_chip_on_every_generation():
    """libtpu's default chip config describes v4 as a device per TensorCore (twice the
    devices, 16 GiB each); JAX on a v4 VM runs a chip's two cores as one device
    (megacore), as v5p's default does: the compile must see the slice's chips."""
    import subprocess

    probe = (
        "import json\n"
        "from backends.jax_common.aot import topology_devices\n"
        "out = {}\n"
        "for top, chips in (('v4:2x2x1', 4), ('v4:2x2x4', 16), ('v5p:2x2x1', 4), ('v5e:2x4', 8)):\n"
        "    devices = topology_devices(top, (2, 2, 1), chips)\n"
        "    out[top] = [len(devices), devices[0].num_cores]\n"
        "try:\n"
        "    topology_devices('v5e:2x4', (2, 2, 1), 16)\n"
        "except RuntimeError as exc:\n"
        "    out['refused'] = str(exc)\n"
        "print(json.dumps(out))\n"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [os.environ["BENCH_PYTHON_TPU"], "-c", probe],
        capture_output=True,
        text=True,
        env=env,
        cwd=SCENARIOS.parent,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["v4:2x2x1"] == [4, 2] and found["v4:2x2x4"] == [16, 2]
    assert found["v5p:2x2x1"] == [4, 2] and found["v5e:2x4"] == [8, 1]
    assert found["refused"].startswith("v5e:2x4: no chip config describes one device per chip (16 chips)")
