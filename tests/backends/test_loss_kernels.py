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
    assert losses.resolve_kernel("auto", torch.device("cpu"), "f") == "chunked"


@pytest.mark.slow
def test_chunked_peak_memory_is_at_most_a_quarter_of_plain_at_gemma3_vocabulary():
    # Vocabulary 262,144 x sequence 512 x 4 rows: plain holds [4, 512, 262144] fp32 logits
    # (2 GiB), their log-softmax and gradients; chunked one 256-token chunk at a time.
    from benchmarks.bench_train_execution import loss_peaks  # the benchmark's probe, one process

    found = loss_peaks()
    plain, chunked = found["plain"], found["chunked"]
    assert chunked["loss"] == pytest.approx(plain["loss"], rel=1e-5)
    assert plain["peak_bytes"] > 2 * 2**30  # the full fp32 logits at least
    assert chunked["peak_bytes"] <= plain["peak_bytes"] / 4, found
