"""The loss kernels of the JAX backends (backends/jax_common/loss.py): on torchax and
jax-tunix the chunked kernel gives the plain kernel's loss and LoRA gradients (tiny fp32
LoRA model, several chunks, the last one padded; plain is the model's own logits and
cross-entropy, computed by its own jit), and its compiled loss + gradients at Gemma 3's
vocabulary (262,144) x 512 positions x 4 rows needs at most a quarter of plain's
temporary memory (XLA's memory analysis: compiled, never run). The worker,
benchmarks/probes/jax_loss_probe.py, runs in each backend's own interpreter."""

from __future__ import annotations

import pytest

from conftest import ROOT, bench, jax_kernels_probe, stack_or_skip, write_scenario

pytestmark = pytest.mark.slow

STACKS = {
    "torchax": ("torchax", "torchax", "pip install -e '.[torchax]'"),
    "jax-tunix": ("jax-tunix", "tunix", ".ci/run builds .venv-jax"),
}
FULL_LOGITS_FP32 = 4 * 512 * 262_144 * 4  # [4, 512, 262144] fp32: 2 GiB


@pytest.fixture(scope="module", params=sorted(STACKS))
def probe(request):
    """The loss half of benchmarks/probes/jax_kernels_probe.py (one interpreter per stack
    for both probes, shared with tests/backends/test_jax_attention.py)."""
    backend = request.param
    stack_or_skip(*STACKS[backend])
    return backend, jax_kernels_probe(backend)["loss"]


def test_chunked_equals_plain_in_loss_and_lora_gradients(probe):
    backend, found = probe
    parity = found["parity"]
    loss = parity["loss"]
    assert loss["plain"] > 1.0, backend  # a real sum of token losses, not an empty one
    assert loss["chunked"] == pytest.approx(loss["plain"], abs=1e-5, rel=1e-6), (backend, loss)
    assert parity["grad_names"] and parity["grad_count"] >= 6, (backend, parity)  # A and B of 3+ adapters
    assert parity["grad_max_abs"] > 1e-3, (backend, parity)  # gradients that flow (B is not zero)
    assert parity["grad_max_diff"] <= 1e-5, (backend, parity)
    # Several chunks kept for the backward (the plan an 80 GB card gives W1): the same sum.
    kept = parity["kept"]
    assert kept["loss"]["chunked"] == pytest.approx(kept["loss"]["plain"], abs=1e-5, rel=1e-6), (backend, kept)
    assert kept["grad_names"] and kept["grad_max_diff"] <= 1e-5, (backend, kept)


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


def w1_work():
    """W1's loss work on an 80 GB CUDA card, from its scenario and the plan."""
    import yaml

    from backends.jax_common.loss import work_of
    from harness.plan import plan as plans
    from harness.scenario.loader import validate

    path = ROOT / "scenarios" / "gemma270m.yaml"
    scenario = validate(yaml.safe_load(path.read_text()), str(path))
    plan = plans.build(scenario, "cuda", 1, 80 * 10**9)
    assert plan.micro_batch == 32  # the plan's micro-batch on an 80 GB card
    return work_of(plan, scenario, scenario.model.architecture(), "sdpa")


def test_on_an_80_gb_accelerator_w1_at_32_rows_is_two_chunks_and_the_head_is_not_recomputed():
    from backends import loss_chunks
    from backends.jax_common import loss

    work = w1_work()
    saved = dict(loss._CHUNK_PLAN)
    try:
        loss.size_chunks_for_device("cpu", 80 * 10**9, work)  # a CPU keeps the shared budget
        assert loss.positions_per_chunk(4, 262_144) == 64 and loss.recompute_chunks()
        loss.size_chunks_for_device("gpu", 80 * 10**9, work)
        # The budget by hand: 0.85 x 80e9 less the bf16 weights, LoRA r8's parameters at 16
        # bytes, and 32 x 512 tokens' SDPA activations (18 layers x (17 x 640 + 8 x 2,048)).
        budget = 0.85 * 80e9 - 268_042_240 * 2 - 1_898_496 * 16 - 32 * 512 * 18 * (17 * 640 + 8 * 2048)
        chunk = int((budget - 16_384 * 262_144 * 4) // (262_144 * 14)) // 64 * 64  # saved logits kept
        assert loss._CHUNK_PLAN["chunking"] == loss_chunks.plan_chunks(16_384, 262_144, 2, budget)
        assert loss.positions_per_chunk(32, 262_144) == chunk // 32 < 512  # more than one chunk ...
        facts = loss.kernel_facts("chunked", 32, 262_144, 512)
        # ... two, of 256 positions (not 2 x 357 padded to 714), and none recomputed
        assert facts["loss_chunk_positions"] == 256 and facts["loss_head_recomputed"] is False
        assert "no recompute" in facts["loss_chunk_budget"] and "74.5 GiB" in facts["loss_chunk_budget"]
        assert loss.kernel_facts("chunked", 4, 262_144, 512)["loss_chunk_positions"] == 512  # one chunk
    finally:
        loss._CHUNK_PLAN.update(saved)


def test_w3_on_a_v5p_chip_is_one_chunk_per_device_without_recompute():
    import yaml

    from backends.jax_common import loss
    from harness.plan import plan as plans
    from harness.scenario.loader import validate

    path = ROOT / "scenarios" / "w3_gemma_lora_tunix.yaml"
    scenario = validate(yaml.safe_load(path.read_text()), str(path))
    plan = plans.build(scenario, "tpu", 4, 95 * 2**30)  # v5p-8: 4 chips of 95 GiB, rows and weights over 4
    work = loss.work_of(plan, scenario, scenario.model.architecture(), "sdpa")
    assert (work.rows, work.fsdp, work.shards, work.checkpointed) == (2, 4, 4, True)
    saved = dict(loss._CHUNK_PLAN)
    try:
        loss.size_chunks_for_device("tpu", 95 * 2**30, work)
        # Eight rows a forward pass over four chips: each chip's 2 x 2,048 tokens in one chunk.
        facts = loss.kernel_facts("chunked", plan.rows_per_forward, 262_144, 2_048)
        assert facts["loss_chunk_positions"] == 2_048 and facts["loss_head_recomputed"] is False
    finally:
        loss._CHUNK_PLAN.update(saved)
