"""The loss kernels of the JAX backends (backends/jax_common/loss.py): on torchax and
jax-tunix the chunked kernel gives the plain kernel's loss and LoRA gradients (tiny fp32
LoRA model, several chunks, the last one padded; plain is the model's own logits and
cross-entropy, computed by its own jit), and its compiled loss + gradients at Gemma 3's
vocabulary (262,144) x 512 positions x 4 rows needs at most a quarter of plain's
temporary memory (XLA's memory analysis: compiled, never run). The worker,
benchmarks/jax_loss_probe.py, runs in each backend's own interpreter."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import ROOT, bench, stack_or_skip, write_scenario

pytestmark = pytest.mark.slow

STACKS = {
    "torchax": ("torchax", "torchax", "pip install -e '.[torchax]'"),
    "jax-tunix": ("jax-tunix", "tunix", ".ci/run builds .venv-jax"),
}
FULL_LOGITS_FP32 = 4 * 512 * 262_144 * 4  # [4, 512, 262144] fp32: 2 GiB


@pytest.fixture(scope="module", params=sorted(STACKS))
def probe(request):
    from harness.registry import interpreter_for, worker_env

    backend = request.param
    stack_or_skip(*STACKS[backend])
    done = subprocess.run(
        [interpreter_for(backend), str(ROOT / "benchmarks" / "jax_loss_probe.py"), backend],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**worker_env(), "PYTHONPATH": str(ROOT)},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return backend, json.loads(done.stdout.strip().splitlines()[-1])


def test_chunked_equals_plain_in_loss_and_lora_gradients(probe):
    backend, found = probe
    parity = found["parity"]
    loss = parity["loss"]
    assert loss["plain"] > 1.0, backend  # a real sum of token losses, not an empty one
    assert loss["chunked"] == pytest.approx(loss["plain"], abs=1e-5, rel=1e-6), (backend, loss)
    assert parity["grad_names"] and parity["grad_count"] >= 6, (backend, parity)  # A and B of 3+ adapters
    assert parity["grad_max_abs"] > 1e-3, (backend, parity)  # gradients that flow (B is not zero)
    assert parity["grad_max_diff"] <= 1e-5, (backend, parity)


def test_chunked_compiled_temp_memory_is_at_most_a_quarter_of_plain_at_gemma3_vocabulary(probe):
    backend, found = probe
    temp = found["temp_bytes"]
    assert temp["plain"] >= FULL_LOGITS_FP32, (backend, temp)  # plain holds the full fp32 logits at least
    assert temp["chunked"] <= temp["plain"] / 4, (backend, temp)


@pytest.mark.parametrize("backend", sorted(STACKS))
def test_a_kernel_the_backend_cannot_run_is_refused_in_one_line_naming_the_field(tmp_path, backend):
    text = f"{(ROOT / 'scenarios' / 'tiny.yaml').read_text()}\nbackend_options:\n  {backend}: {{loss_kernel: liger}}\n"
    done = bench("validate", str(write_scenario(tmp_path, text)))
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"backend_options.{backend}.loss_kernel" in lines[0], done.stderr


def test_remat_option_contradicting_the_plan_is_refused_naming_the_field():
    from backends.jax_tunix.model import remat_policy

    assert remat_policy(True, "auto") == "block" and remat_policy(False, "auto") == "none"
    assert remat_policy(True, "decoder") == "decoder"
    with pytest.raises(ValueError, match=r"^backend_options\.jax-tunix\.remat: decoder contradicts"):
        remat_policy(False, "decoder")
    with pytest.raises(ValueError, match=r"^backend_options\.jax-tunix\.remat: none contradicts"):
        remat_policy(True, "none")


def test_chunks_split_the_sequence_within_the_shared_budget():
    from backends.jax_common.loss import kernel_facts, positions_per_chunk

    # 2^28 bytes of fp32 logits a chunk: 256 tokens at 262,144 entries, over 4 rows 64 positions.
    assert positions_per_chunk(4, 262_144) == 64
    assert positions_per_chunk(1, 262_144) == 256
    assert positions_per_chunk(512, 262_144) == 1  # at least one position
    assert kernel_facts("plain", 4, 262_144) == {"loss_kernel": "plain", "loss_chunk_positions": None}


def test_on_an_80_gib_accelerator_a_w1_micro_batch_is_one_chunk_and_the_head_is_not_recomputed():
    from backends.jax_common import loss

    saved = dict(loss._CHUNK_BUDGET)
    try:
        loss.size_chunks_for_device("cpu", 80 * 2**30)  # a CPU keeps the shared budget
        assert loss.positions_per_chunk(4, 262_144) == 64
        loss.size_chunks_for_device("gpu", 80 * 2**30)
        # 80 GiB / 16 = 5 GiB of fp32 logits = 5,120 tokens at 262,144 entries; 4 rows: 1,280 positions
        assert loss.positions_per_chunk(4, 262_144) == 5 * 2**30 // (4 * 262_144) // 4 == 1280
        facts = loss.kernel_facts("chunked", 4, 262_144, 512)
        assert facts["loss_head_recomputed"] is False and "1/16 of the device's 80.0 GiB" in facts["loss_chunk_budget"]
        assert loss.kernel_facts("chunked", 32, 262_144, 512)["loss_head_recomputed"] is True  # 160 < 512
    finally:
        loss._CHUNK_BUDGET.update(saved)
