"""The loss kernels of the PyTorch backends (backends/hf_common/loss.py) against an
independent cross-entropy: the chunked kernel gives the plain kernel's loss and LoRA
gradients, and never holds the full fp32 logits."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from backends.hf_common import loss as losses  # noqa: E402
from backends.hf_common.model import hf_config  # noqa: E402

ARCH = {
    "vocab_size": 1000,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_layers": 2,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 16,
    "max_position_embeddings": 128,
    "sliding_window": 8,
}


def lora_model(seed: int = 0):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(ARCH, "eager"), dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], task_type="CAUSAL_LM")
    model = get_peft_model(model, config)
    for name, p in model.named_parameters():  # LoRA's B starts at zero: give it values
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.02)
    return model


def batch(rows: int = 3, length: int = 20, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, ARCH["vocab_size"], (rows, length), generator=g)
    mask = torch.ones_like(ids)
    mask[0, 15:] = 0  # a padded row
    labels = ids.clone()
    labels[:, :4] = -100  # an untrained prompt
    labels[mask == 0] = -100
    return ids, mask, labels


def reference_loss_sum(model, ids, mask, labels):
    """By hand: the model's own logits, log-sum-exp minus the target's logit, summed over
    positions whose NEXT token is trained."""
    logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float()
    logits, targets = logits[:, :-1], labels[:, 1:]
    keep = targets != -100
    lse = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return ((lse - picked) * keep).sum()


def lora_grads(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("kernel", ["plain", "chunked"])
def test_kernel_equals_an_independent_cross_entropy_in_loss_and_lora_gradients(kernel, monkeypatch):
    ids, mask, labels = batch()
    reference = lora_model()
    expected = reference_loss_sum(reference, ids, mask, labels)
    expected.backward()
    model = lora_model()
    module = losses.TokenLoss(model, kernel)
    module.chunk = 7  # 3 rows x 20 tokens in uneven chunks (the last one short)
    got, made = module(ids, mask, labels)
    got.backward()
    assert made.dtype == torch.float32 and made.numel() == 0
    assert got.item() == pytest.approx(expected.item(), rel=1e-5, abs=1e-5)
    want, have = lora_grads(reference), lora_grads(model)
    assert want.keys() == have.keys() and len(want) == 2 * 3 * ARCH["num_layers"]
    for name in want:
        torch.testing.assert_close(have[name], want[name], rtol=1e-5, atol=1e-5, msg=name)


def test_chunk_size_is_256_mib_of_fp32_logits_whatever_the_vocabulary():
    assert losses.chunk_tokens_for(262_144) == 256  # 256 x 262,144 x 4 bytes = 2^28
    assert losses.chunk_tokens_for(1000) == (1 << 28) // 4000
    assert losses.chunk_tokens_for(1 << 30) == 1


def test_liger_refused_off_cuda_naming_the_field():
    with pytest.raises(ValueError, match=r"^backend_options\.torch\.loss_kernel: liger needs a CUDA device"):
        losses.resolve_kernel("liger", torch.device("cpu"), "backend_options.torch.loss_kernel")
    assert losses.resolve_kernel("auto", torch.device("cpu"), "f")[0] == "chunked"
    assert losses.resolve_kernel("plain", torch.device("cpu"), "f") == ("plain", "pinned")


# --------------------------------------------------------------------------- auto at W1 and W3
def planned(path: str, devices: int, memory: float = 80e9):
    """The plan of a reference scenario on `devices` CUDA devices of `memory` bytes,
    the tokens of one device's forward pass and the chunked loss's plan for them."""
    import yaml

    from backends import loss_chunks
    from harness.plan import plan as plans
    from harness.scenario.loader import validate

    scenario = validate(yaml.safe_load(open(path)), path)
    plan = plans.build(scenario, "cuda", devices, memory)
    arch, seq = scenario.model.architecture(), scenario.sequence.max_length
    tokens = plan.micro_batch * seq
    attention = "sdpa" if scenario.model.attention == "auto" else scenario.model.attention
    budget = loss_chunks.loss_budget_bytes(
        memory,
        arch,
        plan.precision,
        plan.trainable_params,
        tokens,
        seq,
        attention,
        plan.mesh["fsdp"],
        plan.gradient_checkpointing,
    )
    return arch, tokens, budget, loss_chunks.plan_chunks(tokens, arch["vocab_size"], 2, max(budget, 0.0))


def test_liger_chunk_is_its_own_formula_at_w1_and_w3():
    # next_pow2(ceil(BT / ceil(V / H))): W1 16,384 / ceil(262,144 / 640 = 409.6) = 39.96 -> 40 -> 64;
    # W3 (2 rows x 2,048 a device) 4,096 / ceil(262,144 / 5,376 = 48.8) = 83.6 -> 84 -> 128.
    assert losses.liger_chunk_tokens(16_384, 262_144, 640) == 64
    assert losses.liger_chunk_tokens(4_096, 262_144, 5_376) == 128
    assert losses.liger_chunk_tokens(100, 1_000, 2_000) == 100  # one chunk, never more than the pass


def test_w1_on_an_80_gb_h100_plans_two_unrecomputed_chunks_and_auto_keeps_bench_s_path():
    arch, tokens, budget, chunking = planned("scenarios/gemma270m.yaml", 1)
    # By hand: 0.85 x 80e9 less bf16 weights (268,042,240 x 2 bytes), LoRA r8's 1,898,496
    # parameters at 16 bytes (weight, gradient, two moments) and 32 SDPA rows of 512 at
    # 18 layers x (17 x 640 + 8 x 2,048) bytes a token.
    by_hand = 0.85 * 80e9 - 268_042_240 * 2 - 1_898_496 * 16 - 32 * 512 * 18 * (17 * 640 + 8 * 2048)
    assert tokens == 16_384 and budget == pytest.approx(by_hand)
    # Every token's fp32 log-softmax kept (4 bytes a vocabulary entry), 14 bytes in flight a chunk.
    room = int((by_hand - tokens * 262_144 * 4) // (262_144 * 14)) // 64 * 64
    assert (chunking.chunk_tokens, chunking.recompute) == (room, False) and -(-tokens // room) == 2
    kernel, why = losses.auto_kernel(tokens, 262_144, 640, chunking, liger_runs=True)
    assert kernel == "chunked" and "Liger's own chunks would be 64 tokens" in why


def test_w3_on_two_80_gb_h100s_plans_one_unrecomputed_chunk_and_auto_keeps_bench_s_path():
    arch, tokens, budget, chunking = planned("scenarios/w3_gemma_lora_tunix.yaml", 2)
    assert arch["hidden_size"] == 5_376 and tokens == 2 * 2_048
    # The whole pass: 4,096 tokens x 262,144 x (4 + 2 + 12) bytes, within the budget.
    assert budget > tokens * 262_144 * 18
    assert (chunking.chunk_tokens, chunking.recompute) == (tokens, False)
    assert losses.auto_kernel(tokens, 262_144, 5_376, chunking, liger_runs=True)[0] == "chunked"


def test_auto_picks_liger_only_where_its_chunk_is_at_least_the_plan_s():
    from backends.loss_chunks import LossChunking

    tight = LossChunking(64, True, 0, "a card with room for 64 tokens' logits")
    assert losses.auto_kernel(16_384, 262_144, 640, tight, liger_runs=True)[0] == "liger"
    assert losses.auto_kernel(16_384, 262_144, 640, tight, liger_runs=False)[0] == "chunked"
    wider = LossChunking(128, True, 0, "room for 128")
    kernel, why = losses.auto_kernel(16_384, 262_144, 640, wider, liger_runs=True)
    assert kernel == "chunked" and "128-token chunks, recomputed" in why


@pytest.mark.slow
def test_chunked_peak_memory_is_at_most_a_quarter_of_plain_at_gemma3_vocabulary():
    # Vocabulary 262,144 x sequence 512 x 4 rows: plain holds [4, 512, 262144] fp32 logits
    # (2 GiB), their log-softmax and gradients; chunked one 256-token chunk at a time.
    from benchmarks.probes.bench_train_execution import loss_peaks  # the benchmark's probe, one process

    found = loss_peaks()
    plain, chunked = found["plain"], found["chunked"]
    assert chunked["loss"] == pytest.approx(plain["loss"], rel=1e-5)
    assert plain["peak_bytes"] > 2 * 2**30  # the full fp32 logits at least
    assert chunked["peak_bytes"] <= plain["peak_bytes"] / 4, found
