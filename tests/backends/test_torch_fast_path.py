"""#36, the torch side: right-padded rows without a padding mask (the masked path's loss
and LoRA gradients), the SDPA kernel named from what PyTorch dispatched, the chunked
loss's memory model (its choice, the recompute it runs, the compiled peak it bounds) and
packed passes of one shape (no recompile after warm-up)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from backends import loss_chunks  # noqa: E402
from backends.hf_common import loss as losses  # noqa: E402
from backends.hf_common.model import hf_config  # noqa: E402
from backends.torch_common import attention  # noqa: E402
from harness.figures import metrics  # noqa: E402

from conftest import TINY, bench, failures_in, records_in, write_scenario  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ARCH = {
    "vocab_size": 512,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_layers": 2,  # Gemma 3's layer_types: the first sliding, the sixth global: both kinds
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 16,
    "max_position_embeddings": 128,
}


def lora_model(window: int, implementation: str = "sdpa"):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = hf_config({**ARCH, "sliding_window": window}, implementation)
    config.layer_types = ["sliding_attention", "full_attention"]
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM")
    model = get_peft_model(model, lora)
    for name, p in model.named_parameters():  # LoRA's B starts at zero: give it values
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.05)
    return model


def right_padded_batch(lengths: list[int], length: int):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, ARCH["vocab_size"], (len(lengths), length), generator=g)
    mask = (torch.arange(length) < torch.tensor(lengths)[:, None]).long()
    ids[mask == 0] = 0
    labels = ids.clone()
    labels[:, :3] = -100  # an untrained prompt
    labels[mask == 0] = -100
    return ids, mask, labels


class SdpaMasks(torch.overrides.TorchFunctionMode):
    """The attn_mask and is_causal of every SDPA call."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            self.calls.append((kwargs.get("attn_mask", args[3] if len(args) > 3 else None), kwargs.get("is_causal")))
        return func(*args, **kwargs)


@pytest.mark.parametrize(
    ("padding", "window"),
    [("static", 32), ("dynamic", 32), ("static", 8), ("dynamic", 8)],
    ids=["static-window-covers", "dynamic-window-covers", "static-window-short", "dynamic-window-short"],
)
def test_no_mask_path_gives_the_masked_paths_loss_and_lora_gradients(padding, window):
    """fp32: the padding-mask path (transformers' 4-D mask) against no mask (causal
    only). Where the sliding window covers the sequence (32 >= 20 tokens) no SDPA call
    gets a mask at all (is_causal: the flash path); where it does not (8), the sliding
    layer keeps its window mask and still matches."""
    lengths = [20, 13, 7]
    ids, mask, labels = right_padded_batch(lengths, 20 if padding == "static" else max(lengths))
    if padding == "static":
        ids, mask, labels = (
            torch.nn.functional.pad(t, (0, 4), value=v) for t, v in ((ids, 0), (mask, 0), (labels, -100))
        )
    results = {}
    for path, given in (("masked", mask), ("no mask", None)):
        model = lora_model(window)
        with SdpaMasks() as seen:
            summed, _ = losses.TokenLoss(model, "plain")(ids, given, labels)
        summed.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        results[path] = (summed.item(), grads, seen.calls)
    (want, want_grads, masked_calls), (got, got_grads, free_calls) = results["masked"], results["no mask"]
    assert got == pytest.approx(want, rel=1e-5, abs=1e-5)
    assert want_grads.keys() == got_grads.keys() and len(want_grads) == 2 * 3 * ARCH["num_layers"]
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-5, atol=1e-5, msg=name)
    assert all(m is not None for m, _ in masked_calls)  # the reference really was masked
    seq = ids.size(1)
    if window >= seq:
        assert [(m, c) for m, c in free_calls] == [(None, True)] * ARCH["num_layers"]
    else:
        assert free_calls[0][0] is not None and free_calls[1] == (None, True)  # sliding masked, global not


def test_right_padding_is_what_drops_the_mask():
    import numpy as np

    padded = np.array([[1, 1, 0], [1, 1, 1]])
    gap = np.array([[1, 0, 1]])
    assert not attention.needs_padding_mask("sdpa", padded, None)
    assert attention.needs_padding_mask("sdpa", gap, None)  # never built, but never dropped
    assert attention.needs_padding_mask("eager", padded, None)  # eager with no mask is not causal
    assert not attention.needs_padding_mask("eager", padded, np.zeros_like(padded))  # packed: the positions mask


SDPA_NAMES = {0: "math", 1: "flash", 2: "efficient", 3: "cudnn"}  # torch's SDPBackend enum


def probe_scenario(padding="static", seq=24):
    return SimpleNamespace(sequence=SimpleNamespace(padding=padding, max_length=seq))


def options(kernel="auto"):
    from backends.torch_common.options import TorchExecutionOptions

    return TorchExecutionOptions(sdpa_kernel=kernel)


def test_the_recorded_sdpa_kernel_is_the_one_torch_selects_for_those_arguments():
    """Independently of the probe: torch's own selector (`_fused_sdp_choice`) for the
    model's query/key/value shapes, no mask and is_causal, names the same kernel."""
    import contextlib

    loss = losses.TokenLoss(lora_model(32), "chunked")
    facts = attention.attention_facts(
        loss, options(), torch.device("cpu"), contextlib.nullcontext, probe_scenario(), "torch"
    )
    q = torch.randn(1, ARCH["num_heads"], 24, ARCH["head_dim"], requires_grad=True)
    kv = torch.randn(1, ARCH["num_kv_heads"], 24, ARCH["head_dim"], requires_grad=True)
    expected = SDPA_NAMES[torch._fused_sdp_choice(q, kv, kv, None, 0.0, True, enable_gqa=True)]
    assert facts["sdpa_kernel"] == expected and facts["sdpa_kernel_calls"] == {expected: ARCH["num_layers"]}
    assert facts["attention_mask"] == "none: causal only (right-padded rows)"
    pinned = attention.attention_facts(
        loss, options("math"), torch.device("cpu"), contextlib.nullcontext, probe_scenario(), "torch"
    )
    assert pinned["sdpa_kernel_calls"] == {"math": ARCH["num_layers"]}


def test_a_pinned_kernel_that_cannot_run_is_refused_in_one_line():
    import contextlib

    loss = losses.TokenLoss(lora_model(32), "chunked")
    with pytest.raises(ValueError, match=r"^backend_options\.torch\.sdpa_kernel: efficient cannot run here \(") as e:
        attention.attention_facts(
            loss, options("efficient"), torch.device("cpu"), contextlib.nullcontext, probe_scenario(), "torch"
        )
    assert "\n" not in str(e.value)
    eager = losses.TokenLoss(lora_model(32, "eager"), "chunked")
    with pytest.raises(ValueError, match=r"^backend_options\.torch\.sdpa_kernel: flash needs SDPA attention"):
        attention.attention_facts(
            eager, options("flash"), torch.device("cpu"), contextlib.nullcontext, probe_scenario(), "torch"
        )


# --------------------------------------------------------------------------- loss memory model
V, TOKENS = 262_144, 512 * 32  # W1: Gemma 3's vocabulary, 32 rows of 512 tokens


def test_an_80_gb_budget_holds_w1s_whole_pass_in_one_chunk_without_recompute():
    """By hand, bf16 compute (2 bytes): each token keeps its fp32 log-softmax (4 bytes a
    vocabulary entry) and, in flight, 2 + 12 bytes: 16,384 x 262,144 x 18 = 77.3e9 bytes,
    under 80e9. A quarter of that budget does not hold every token's saved logits with
    a 1,024-token chunk: recompute, chunks of what fits."""
    whole = TOKENS * V * (4 + 2 + 12)
    assert whole == 77_309_411_328
    chosen = loss_chunks.plan_chunks(TOKENS, V, 2, 80e9)
    assert (chosen.chunk_tokens, chosen.recompute, chosen.estimate_bytes) == (TOKENS, False, whole)
    tight = loss_chunks.plan_chunks(TOKENS, V, 2, 20e9)
    per_token = V * 18
    assert tight.recompute and tight.chunk_tokens == int(20e9 // per_token) // 64 * 64  # 4,224 tokens
    middle = loss_chunks.plan_chunks(TOKENS, V, 2, 50e9)  # the saved logits fit, chunks of the rest
    assert not middle.recompute and middle.chunk_tokens == int((50e9 - TOKENS * V * 4) // (V * 14)) // 64 * 64


class CountingCheckpoint:
    def __init__(self):
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return torch.utils.checkpoint.checkpoint(*args, **kwargs)


@pytest.mark.parametrize("budget_tokens", [None, 8])
def test_recompute_runs_only_when_the_chunk_does_not_fit(budget_tokens, monkeypatch):
    """Counted at torch.utils.checkpoint itself: a budget that holds the pass runs no
    checkpoint; one that holds 8 tokens' logits recomputes every chunk. Same loss."""
    counter = CountingCheckpoint()
    monkeypatch.setattr(losses, "checkpoint", counter)
    ids, mask, labels = right_padded_batch([20, 13, 7], 20)
    tokens = ids.numel()
    per_token = loss_chunks.saved_bytes_per_token(ARCH["vocab_size"], 4, False) + loss_chunks.live_bytes_per_token(
        ARCH["vocab_size"], 4
    )
    budget = per_token * (budget_tokens or tokens)
    chunking = loss_chunks.plan_chunks(tokens, ARCH["vocab_size"], 4, budget)
    module = losses.TokenLoss(lora_model(32), "chunked", chunking, tokens)
    summed, _ = module(ids, None, labels)
    summed.backward()
    reference, _ = losses.TokenLoss(lora_model(32), "plain")(ids, None, labels)
    assert summed.item() == pytest.approx(reference.item(), rel=1e-5)
    if budget_tokens is None:
        assert (chunking.recompute, chunking.chunk_tokens, counter.calls) == (False, tokens, 0)
    else:
        assert chunking.recompute and counter.calls == -(-tokens // chunking.chunk_tokens) == module.recomputed_chunks


def test_hfu_counts_the_recomputed_head():
    arch = {**ARCH, "sliding_window": 32}
    rows = [20, 13]
    plain = metrics.FlopsModel(arch, lora=True, adapter_params=100)
    again = metrics.FlopsModel(arch, lora=True, adapter_params=100, head_recompute=True)
    head = ARCH["vocab_size"] * ARCH["hidden_size"]
    assert again.hardware_flops(rows) - plain.hardware_flops(rows) == 2 * head * sum(rows)
    assert again.model_flops(rows) == plain.model_flops(rows)


PEAK = textwrap.dedent(
    """
    import json, time, types, torch
    from backends import loss_chunks
    from backends.hf_common import loss as losses

    tokens, vocab = 512, 32768

    class Head(torch.nn.Module):  # what TokenLoss reads of a causal LM: its config and head
        def __init__(self):
            super().__init__()
            self.config = types.SimpleNamespace(vocab_size=vocab, _attn_implementation="sdpa")
            self.lm_head = torch.nn.Linear(64, vocab, bias=False)

    def rss(field):
        for line in open("/proc/self/status"):
            if line.startswith(field):
                return int(line.split()[1]) * 1024

    found = []
    for budget_tokens in (512, 128):
        model = Head()
        per_token = loss_chunks.saved_bytes_per_token(vocab, 4, False) + loss_chunks.live_bytes_per_token(vocab, 4)
        chunking = loss_chunks.plan_chunks(tokens, vocab, 4, per_token * budget_tokens)
        step = torch.compile(losses.TokenLoss(model, "chunked", chunking, tokens)._chunked)
        hidden = torch.randn(tokens, 64, requires_grad=True)
        targets = torch.randint(0, vocab, (tokens,))

        def once():
            hidden.grad = None
            model.zero_grad(set_to_none=True)
            total, _ = step(hidden, targets)
            total.backward()

        started = time.perf_counter()
        once()  # compiles
        compile_s = time.perf_counter() - started
        once()
        base = rss("VmRSS")
        open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) starts again here
        once()
        found.append({"budget_tokens": budget_tokens, "peak_bytes": rss("VmHWM") - base,
                      "estimate_bytes": chunking.estimate_bytes, "recompute": chunking.recompute,
                      "chunk": chunking.chunk_tokens, "saved_bytes": tokens * vocab * 4, "compile_s": compile_s})
    print(json.dumps(found))
    """
)


@pytest.mark.slow
def test_the_compiled_losss_peak_memory_stays_within_the_memory_models_estimate():
    """Inductor on the CPU, vocabulary 32,768 x 512 tokens (fp32 logits 64 MiB): the
    whole pass in one chunk, then a budget of 128 tokens (recomputed chunks). The peak
    resident memory one step adds (VmHWM reset before it; large allocations mmapped so
    that a freed tensor leaves the resident set) is within the model's estimate."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "2"}
    done = subprocess.run([sys.executable, "-c", PEAK], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    whole, chunked = json.loads(done.stdout.strip().splitlines()[-1])
    assert (whole["recompute"], whole["chunk"], chunked["recompute"]) == (False, 512, True), (whole, chunked)
    for found in (whole, chunked):
        assert found["peak_bytes"] <= found["estimate_bytes"], found
    assert whole["peak_bytes"] > whole["saved_bytes"], whole  # the measure sees the logits at all


# --------------------------------------------------------------------------- packing
@pytest.mark.slow
def test_a_packed_compiled_run_on_w1s_data_never_recompiles_after_warm_up(tmp_path, results):
    """W1's function-calling data packed (examples per row vary from pass to pass) on
    the tiny Gemma 3 under torch.compile (aot_eager: dynamo's recompile decisions are
    the backend's), SDPA attention: every pass has the same rows, one compile in
    warm-up and none after; the record names the SDPA kernel that ran."""
    from harness.data.batches import build_batches
    from harness.scenario.loader import resolve_runs

    sets = [
        *("sequence.padding=packed", "model.attention=sdpa", "train.global_batch=4", "train.micro_batch=4"),
        *("train.steps=5", "train.warmup_steps=1", "train.window_steps=0", "sequence.max_length=512"),
        *("backend_options.torch.compile=true", "backend_options.torch.compile_backend=aot_eager"),
    ]
    args = [a for kv in sets for a in ("--set", kv)]
    path = write_scenario(tmp_path, TINY)
    done = bench("run", str(path), "--results-dir", str(results), "--no-progress", *args)
    assert done.returncode == 0, done.stderr[-2000:] + failures_in(results)
    (record,) = records_in(results)
    steps = record["raw"]["loop"]["steps"]
    assert [s["num_compiles"] for s in steps] == [1, 0, 0, 0, 0] and record["metrics"]["num_recompiles"] == 0
    execution = record["raw"]["execution"]
    assert execution["sdpa_kernel"] in ("flash", "math", "mixed") and execution["sdpa_kernel_calls"]
    assert execution["attention_mask"].startswith("per example")
    # The kernel read from the compiled step's first forward: one SDPA call per layer, as
    # many as the setup probe's eager forward made.
    ran = execution["attention_kernel_calls"]
    assert sum(ran.values()) == sum(execution["sdpa_kernel_calls"].values()) and "flex" not in ran
    assert execution["attention_kernel_ran"] in ("flash", "math", "mixed")
    assert execution["choices"] == {
        "compile": "pinned",
        "attention": "pinned",
        "loss_kernel": "auto",
        "sdpa_kernel": "auto",
        "flex_attention": "auto",
    }
    # The data really varies: the rows holding real tokens differ between passes (2 in
    # the warm-up pass, 3 in the first measured one: a new shape without the fixed
    # count), and the fixed row count is the largest of them.
    (run,) = resolve_runs(path, dict(kv.split("=", 1) for kv in sets[:8]))
    batches = build_batches(run.scenario)
    filled = [int((m.attention_mask.sum(axis=1) > 0).sum()) for s in batches.steps for m in s.micro_batches]
    assert len(set(filled)) > 1 and batches.description["packed_rows_per_forward"] == max(filled)
    assert [s["tokens_padded"] for s in steps] == [max(filled) * 512] * 5
    assert [s["tokens_real"] for s in steps] == [s.tokens_real for s in batches.steps]
