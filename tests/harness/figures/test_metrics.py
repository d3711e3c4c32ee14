"""The metrics module: statistics from raw samples, FLOPs and MFU by hand."""

from __future__ import annotations

import numpy as np
import pytest

from harness.figures import metrics

ARCH = {
    "vocab_size": 8192,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_layers": 2,
    "num_heads": 4,
    "num_kv_heads": 1,
    "head_dim": 16,
    "layer_windows": [32, None],
}
MODEL = {
    "num_params": 1_210_000,
    "num_embedding_params": 200_000,
    "num_trainable_params": 10_000,
    "num_layers": 2,
    "num_heads": 4,
    "head_dim": 16,
    "hidden_size": 64,
    "vocab_size": 8192,
    "architecture": ARCH,
}
FULL = metrics.FlopsModel(ARCH, lora=False, adapter_params=0)
LORA = metrics.FlopsModel(ARCH, lora=True, adapter_params=10_000)


def raw(times, phases, seq_len=128, tokens=1000, window=None, compiles=None):
    rows = [tokens // 8] * 8
    compiles = compiles or [1 if i == 0 else 0 for i in range(len(times))]
    steps = [
        {
            "index": i,
            "phase": p,
            "start_s": float(i),
            "time_s": t,
            "tokens_real": tokens,
            "tokens_padded": 2 * tokens,
            "seq_len": seq_len,
            "num_compiles": compiles[i],
            "compile_s": 0.5 if compiles[i] else 0.0,
            "loss": 1.0,
            "row_tokens": rows,
        }
        for i, (t, p) in enumerate(zip(times, phases))
    ]
    return {
        "loop": {"steps": steps, "window": window, "setup_compiles": 0},
        "model": MODEL,
        "memory": {"peak_bytes": 2 * 1024**3, "kind": "cpu_peak_rss"},
        "setup_s": 1.0,
        "wall_s": 10.0,
    }


def test_percentile_matches_numpy():
    values = [0.3, 0.1, 0.7, 0.2, 0.9, 0.4]
    for q in (0, 10, 50, 90, 99, 100):
        assert metrics.percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_step_time_summary_matches_numpy_and_statistics():
    """Every statistic of the steady steps' times, each against numpy's own definition:
    ten distinct times, so p90, p99 and max are three different numbers."""
    times = [0.31, 0.12, 0.55, 0.18, 0.27, 0.92, 0.44, 0.21, 0.36, 0.15]
    data = raw([2.0] + times, ["warmup"] + ["measure"] * len(times))
    got = metrics.training_metrics(data, {"count": 1, "catalog_key": "cpu"}, LORA)["step_time_s"]
    expected = {
        "median": np.median(times),
        "p90": np.percentile(times, 90),
        "p99": np.percentile(times, 99),
        "mean": np.mean(times),
        "stdev": np.std(times, ddof=1),  # the sample standard deviation
        "min": 0.12,
        "max": 0.92,
    }
    assert {k: got[k] for k in expected} == pytest.approx(expected) and got["n"] == 10
    assert metrics.summary([0.4]) == {
        "median": 0.4,
        "p90": 0.4,
        "p99": 0.4,
        "mean": 0.4,
        "stdev": 0.0,
        "min": 0.4,
        "max": 0.4,
        "n": 1,
    }


def test_warmup_steps_are_excluded_from_statistics():
    data = raw([9.0, 8.0, 1.0, 1.2, 1.1], ["warmup", "warmup", "measure", "measure", "measure"])
    m = metrics.training_metrics(data, {"count": 1, "catalog_key": "cpu"}, LORA)
    assert m["step_time_s"]["n"] == 3
    assert m["step_time_s"]["max"] == 1.2 and m["step_time_s"]["median"] == 1.1
    assert m["warmup_time_s"] == 17.0
    assert m["num_compiles"] == 1 and m["num_recompiles"] == 0


# The test ARCH's matmul weights, shape by shape: q, k, v, o, gate, up, down per layer;
# the LM head (vocab x hidden) counts whether or not it is tied to the embedding.
LAYER_WEIGHTS = 64 * 4 * 16 + 2 * 64 * 1 * 16 + 4 * 16 * 64 + 3 * 64 * 128
HEAD_WEIGHTS = 8192 * 64


def hand_attention(length: int, windows: list[int | None], heads: int = 4, head_dim: int = 16) -> int:
    """QK^T and AV, 2 FLOPs per multiply-add each, forward and backward (x3), over the
    keys each causal position attends: p + 1, at most the layer's window."""
    keys = sum(min(p + 1, w or p + 1) for w in windows for p in range(length))
    return 3 * 2 * (2 * heads * head_dim) * keys


def hand_full_flops(rows: list[int]) -> float:
    """A full fine-tune of the test ARCH: 6 FLOPs per weight per token, head included."""
    return sum(6 * (2 * LAYER_WEIGHTS + HEAD_WEIGHTS) * n + hand_attention(n, [32, None]) for n in rows)


def test_mfu_matches_a_hand_computation_for_a_stated_peak():
    data = raw([1.0, 0.5, 0.5], ["warmup", "measure", "measure"])
    m = metrics.training_metrics(data, {"count": 2, "catalog_key": "tpu-v5e"}, FULL)
    flops_per_s = 2 * hand_full_flops([125] * 8) / 1.0  # two measured steps in 1 s
    assert m["mfu"] == pytest.approx(flops_per_s / (197e12 * 2))
    assert m["model_tflops_per_s"] == pytest.approx(flops_per_s / 1e12, rel=1e-13, abs=0)
    assert m["model_flops_per_token"] == pytest.approx(hand_full_flops([125] * 8) / 1000)
    assert m["peak_flops_per_chip"] == 197e12
    assert m["tokens_per_s_real"] == 2000.0 and m["tokens_per_s_real_per_chip"] == 1000.0
    assert m["tokens_per_s_padded"] == 4000.0 and m["tokens_per_s_padded_per_chip"] == 2000.0


def test_full_fine_tuning_flops_count_the_lm_head():
    """6 per weight of every matmul a token meets, the 524k-weight LM head included (it is
    ~90% of this toy model's weights: leaving it out would show)."""
    assert FULL.model_flops([7, 40]) == pytest.approx(hand_full_flops([7, 40]), rel=1e-12)
    assert FULL.dense_per_token() == 6 * (2 * LAYER_WEIGHTS + HEAD_WEIGHTS)
    assert FULL.hardware_flops([7, 40]) == FULL.model_flops([7, 40])  # no checkpointing: nothing recomputed


def test_lora_flops_count_4_per_frozen_and_6_per_adapter_weight():
    expected = sum(
        (4 * (2 * LAYER_WEIGHTS + HEAD_WEIGHTS) + 6 * 10_000) * n + hand_attention(n, [32, None]) for n in (5, 33)
    )
    assert LORA.model_flops([5, 33]) == pytest.approx(expected, rel=1e-12)


def hand_model_flops(rows: list[int], lora: bool, adapters: int) -> float:
    """Full: 6 per weight; LoRA: 4 per frozen weight and 6 per adapter weight; attention."""
    dense = 4 * (2 * LAYER_WEIGHTS + HEAD_WEIGHTS) + 6 * adapters if lora else 6 * (2 * LAYER_WEIGHTS + HEAD_WEIGHTS)
    return sum(dense * n + hand_attention(n, [32, None]) for n in rows)


@pytest.mark.parametrize("lora, adapters", [(False, 0), (True, 10_000)])
def test_checkpointing_adds_the_layers_forward_again(lora, adapters):
    """Hardware FLOPs: the decoder layers' forward recomputed, 2 per layer weight (and per
    adapter weight) per token, plus the attention's forward, a third of its 3x; the LM
    head is not recomputed."""
    rows = [9, 50]
    checkpointed = metrics.FlopsModel(ARCH, lora=lora, adapter_params=adapters, checkpointing=True)

    def hand_hardware(rows):
        recompute = sum(2 * (2 * LAYER_WEIGHTS + adapters) * n + hand_attention(n, [32, None]) / 3 for n in rows)
        return hand_model_flops(rows, lora, adapters) + recompute

    assert checkpointed.model_flops(rows) == pytest.approx(hand_model_flops(rows, lora, adapters), rel=1e-12)
    assert checkpointed.hardware_flops(rows) == pytest.approx(hand_hardware(rows), rel=1e-12)
    data = raw([1.0, 0.5], ["warmup", "measure"], tokens=400)  # one measured step: 8 rows of 50 in 0.5 s
    m = metrics.training_metrics(data, {"count": 1, "catalog_key": "h100-sxm"}, checkpointed)
    assert m["hfu"] == pytest.approx(hand_hardware([50] * 8) / 0.5 / 989e12)
    assert m["mfu"] == pytest.approx(hand_model_flops([50] * 8, lora, adapters) / 0.5 / 989e12)
    assert m["hardware_flops_per_token"] == pytest.approx(hand_hardware([50] * 8) / 400)


def test_steady_and_effective_throughput_keep_recompiles_apart():
    data = raw(
        [5.0, 1.0, 3.0, 1.0, 1.0], ["warmup", "measure", "measure", "measure", "measure"], compiles=[2, 0, 1, 0, 0]
    )
    m = metrics.training_metrics(data, {"count": 1, "catalog_key": "cpu"}, LORA)
    assert m["step_time_s"]["n"] == 3 and m["step_time_s"]["max"] == 1.0  # the compiling step is not in it
    assert m["tokens_per_s_real"] == pytest.approx(3000 / 3.0)
    assert m["tokens_per_s_real_effective"] == pytest.approx(4000 / 6.0)
    assert (m["recompile_steps"], m["recompile_steps_time_s"], m["num_recompiles"]) == (1, 3.0, 1)
    every = metrics.training_metrics(raw([5.0, 3.0], ["warmup", "measure"], compiles=[1, 1]), {"count": 1}, LORA)
    assert every["step_time_s"] is None and every["tokens_per_s_real"] is None
    assert "every one of the 1 measured steps compiled" in every["steady_state"]
    assert every["tokens_per_s_real_effective"] == pytest.approx(1000 / 3.0)


def test_mfu_is_absent_on_cpu():
    m = metrics.training_metrics(raw([1.0, 0.5], ["warmup", "measure"]), {"count": 1, "catalog_key": "cpu"}, LORA)
    assert m["mfu"] is None and m["peak_flops_per_chip"] is None


def test_mfu_above_one_is_withheld():
    data = raw([1.0, 1e-12], ["warmup", "measure"], tokens=10**9)
    m = metrics.training_metrics(data, {"count": 1, "catalog_key": "h100-sxm"}, FULL)
    assert m["mfu"] is None and "not device-synchronised" in m["mfu_invalid"]


def test_window_throughput_uses_the_single_sync_time():
    window = {
        "num_steps": 2,
        "time_s": 0.8,
        "tokens_real": 400,
        "tokens_padded": 800,
        "num_compiles": 0,
        "losses": [1, 1],
    }
    m = metrics.training_metrics(
        raw([1.0, 0.5], ["warmup", "measure"], window=window), {"count": 1, "catalog_key": "cpu"}, LORA
    )
    assert m["window_tokens_per_s_real"] == 500.0


def test_non_finite_loss_is_found_with_its_step():
    data = raw([1.0, 0.5, 0.5], ["warmup", "measure", "measure"])
    data["loop"]["steps"][2]["loss"] = float("nan")
    assert metrics.first_non_finite_loss(data)[0] == 2


# --------------------------------------------------------------------------- FLOPs by hand
def hand_flops(arch: dict, layer_types: list[str], rows: list[int], rank: int, targets: list[str]) -> tuple[float, int]:
    """Training FLOPs of LoRA fine-tuning rows of these lengths, counted by hand: every
    matmul a token meets, forward 2 FLOPs per weight, backward 2 more for the input
    gradient of a frozen weight (4 in all) and 4 more for a trained adapter weight
    (6 in all); the LM head is a matmul whatever its storage; attention QK^T and AV,
    forward and backward (x3), over the keys each causal position really attends."""
    d, f, h, k, q, v, layers = (
        arch[n]
        for n in (
            "hidden_size",
            "intermediate_size",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "vocab_size",
            "num_layers",
        )
    )
    shapes = {
        "q_proj": (d, h * q),
        "k_proj": (d, k * q),
        "v_proj": (d, k * q),
        "o_proj": (h * q, d),
        "gate_proj": (d, f),
        "up_proj": (d, f),
        "down_proj": (f, d),
    }
    frozen = layers * sum(i * o for i, o in shapes.values()) + v * d  # the head counts
    adapters = layers * sum(rank * (shapes[t][0] + shapes[t][1]) for t in targets)
    total = 0.0
    for n in rows:
        total += n * (4 * frozen + 6 * adapters)
        for kind in layer_types:
            window = arch["sliding_window"] if kind == "sliding_attention" else None
            for position in range(n):
                keys = position + 1 if window is None else min(position + 1, window)
                total += 3 * (2 * h * q * keys) * 2  # QK^T and AV, forward + backward
    return total / sum(rows), adapters


@pytest.mark.parametrize("preset", ["gemma-3-270m", "gemma-3-1b", "qwen2.5-3b", "llama-3.1-8b", "tiny-gemma3"])
@pytest.mark.parametrize("tied", [True, False])
def test_records_flops_per_token_match_a_hand_count(preset, tied):
    transformers = pytest.importorskip("transformers")

    from harness.records.record import build_record
    from harness.scenario.loader import ResolvedRun, validate
    from harness.scenario.presets import MODEL_PRESETS

    arch = MODEL_PRESETS[preset]
    layers = arch["num_layers"]
    if arch["family"] == "gemma3":
        types = transformers.Gemma3TextConfig(
            num_hidden_layers=layers, sliding_window=arch["sliding_window"]
        ).layer_types
    else:
        types = ["full_attention"] * layers
    rows = [7, 333, 700, 1024] if arch["family"] == "gemma3" and preset != "tiny-gemma3" else [5, 40, 200, 64]
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    expected, adapters = hand_flops(arch, types, rows, 8, targets)
    scenario = validate(
        {
            "name": "flops",
            "model": {"preset": preset, "arch": {"tie_embeddings": tied}},
            "sequence": {"max_length": 1024},
            "train": {"lora": {"rank": 8}},
        },
        "t",
    )
    step = {
        "index": 1,
        "phase": "measure",
        "start_s": 1.0,
        "time_s": 1.0,
        "tokens_real": sum(rows),
        "tokens_padded": 4096,
        "seq_len": 1024,
        "seq_lens": [1024],
        "num_compiles": 0,
        "compile_s": 0.0,
        "rows": 4,
        "row_tokens": rows,
        "loss": 1.0,
    }
    facts = {
        "loop": {"steps": [{**step, "index": 0, "phase": "warmup"}, step], "window": None},
        "model": {"num_trainable_params": adapters},
        "memory": {"peak_bytes": 1, "kind": "cpu_peak_rss"},
        "accelerator": {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "count": 1},
        "versions": {},
        "setup_s": 1.0,
        "wall_s": 3.0,
    }
    record = build_record(
        ResolvedRun(scenario, "t", {}, 0, {}),
        "torch",
        "python",
        None,
        {"facts": facts},
        key="k",
        started=0.0,
        finished=1.0,
        catalog={},
        command=[],
    )
    assert record.status == "ok", record.failure
    assert record.metrics.model_flops_per_token == pytest.approx(expected, rel=0.005)
    assert record.metrics.mfu == pytest.approx(expected * sum(rows) / 989e12, rel=0.005)


# --------------------------------------------------------------------------- every other figure, by hand
def test_every_counted_figure_of_a_training_record():
    """Warm-up 2 steps (3 compiles), measured 0.5 s / 0.75 s (recompiled twice) / 0.25 s,
    a window of 2 steps in 0.6 s with one compile: each total counted by hand."""
    window = {
        "num_steps": 2,
        "time_s": 0.6,
        "tokens_real": 300,
        "tokens_padded": 500,
        "num_compiles": 1,
        "losses": [1.0],
    }
    data = raw(
        [4.0, 1.0, 0.5, 0.75, 0.25],
        ["warmup", "warmup", "measure", "measure", "measure"],
        tokens=1000,
        window=window,
        compiles=[2, 1, 0, 2, 0],
    )
    data["loop"]["setup_compiles"] = 4
    data["loop"]["steps"][-1]["loss"] = 0.5
    data.update(process_s=12.5, compile_cache="on")
    m = metrics.training_metrics(data, {"count": 4, "catalog_key": "cpu"}, LORA)
    assert (m["num_compiles"], m["num_recompiles"], m["num_setup_compiles"]) == (2 + 1 + 2 + 1, 2 + 1, 4)
    assert m["compile_time_s"] == pytest.approx(0.5 * 3) and m["compile_cache"] == "on"
    assert (m["warmup_time_s"], m["measured_time_s"], m["steady_time_s"]) == pytest.approx((5.0, 1.5, 0.75))
    assert (m["recompile_steps"], m["recompile_steps_time_s"], m["measured_steps"]) == (1, 0.75, 3)
    assert m["steady_state"] == "2 of 3 measured steps compiled nothing"
    assert (m["tokens_real"], m["tokens_padded"]) == (3000, 6000) and m["padding_efficiency"] == 0.5
    assert m["tokens_per_s_real"] == pytest.approx(2000 / 0.75) and m["tokens_per_s_padded"] == pytest.approx(
        4000 / 0.75
    )
    assert m["tokens_per_s_real_per_chip"] == pytest.approx(2000 / 0.75 / 4)
    assert m["tokens_per_s_padded_per_chip"] == pytest.approx(4000 / 0.75 / 4)
    assert m["tokens_per_s_real_effective"] == pytest.approx(3000 / 1.5)
    assert m["tokens_per_s_padded_effective"] == pytest.approx(6000 / 1.5)
    assert m["window_tokens_per_s_real"] == pytest.approx(500) and m["window_tokens_per_s_padded"] == pytest.approx(
        500 / 0.6
    )
    assert (m["peak_memory_gib"], m["peak_memory_kind"]) == (2.0, "cpu_peak_rss")
    assert (m["setup_time_s"], m["run_time_s"], m["loss_first"], m["loss_last"]) == (1.0, 12.5, 1.0, 0.5)
    assert m["model_tflops_per_s"] == pytest.approx(LORA_FLOPS_PER_ROW_125 * 8 * 2 / 0.75 / 1e12, rel=1e-13, abs=0)
    assert m["hardware_flops_per_token"] == pytest.approx(m["model_flops_per_token"])  # no checkpointing
    del data["process_s"]
    assert metrics.training_metrics(data, {"count": 1}, LORA)["run_time_s"] == 10.0  # the worker's own clock


LORA_FLOPS_PER_ROW_125 = (4 * (2 * LAYER_WEIGHTS + HEAD_WEIGHTS) + 6 * 10_000) * 125 + hand_attention(125, [32, None])


def test_traced_steps_count_their_compiles_as_recompiles():
    data = raw([1.0, 0.5, 0.5], ["warmup", "trace", "measure"], compiles=[1, 1, 0])
    m = metrics.training_metrics(data, {"count": 1}, LORA)
    assert (m["num_compiles"], m["num_recompiles"], m["measured_steps"]) == (2, 1, 1)


def test_no_measured_step_gives_no_rates():
    data = raw([1.0], ["warmup"])
    data["memory"] = {}
    m = metrics.training_metrics(data, {"count": 1}, LORA)
    for key in (
        "tokens_per_s_real_effective",
        "padding_efficiency",
        "model_flops_per_token",
        "hardware_flops_per_token",
    ):
        assert m[key] is None, key
    assert m["peak_memory_gib"] is None and m["mfu"] is None and m["hfu"] is None
    assert m["steady_state"] == "none: every one of the 0 measured steps compiled"


def test_mfu_is_none_without_a_peak_or_a_chip():
    assert metrics.mfu(1e12, None, 1) is None and metrics.mfu(1e12, 1e14, 0) is None
    assert metrics.mfu(1e12, 1e14, 1) == pytest.approx(0.01) and metrics.mfu(1e12, 1e14, 2) == pytest.approx(0.005)


def test_an_hfu_above_one_is_withheld_too():
    flops = metrics.FlopsModel(ARCH, lora=False, adapter_params=0, checkpointing=True)
    rows_flops = hand_full_flops([125] * 8)
    # Chosen so MFU is just under 1 and HFU (with the recomputed forward) just over it.
    seconds = rows_flops / 989e12 / 0.99
    m = metrics.training_metrics(
        raw([1.0, seconds], ["warmup", "measure"]), {"count": 1, "catalog_key": "h100-sxm"}, flops
    )
    assert m["mfu"] == pytest.approx(0.99) and m["hfu"] is None
    assert m["hfu_invalid"].startswith("computed HFU 1.") and "mfu_invalid" not in m


def test_layer_windows_interleave_gemma3_globals_every_sixth():
    arch = {"num_layers": 7, "sliding_window": 512}
    assert metrics.layer_windows(arch) == [512] * 5 + [None] + [512]
    assert metrics.layer_windows({**arch, "family": "qwen2"}) == [None] * 7
    assert metrics.layer_windows({"num_layers": 2}) == [None, None]
    assert metrics.layer_windows({"num_layers": 2, "layer_windows": (4, None)}) == [4, None]


@pytest.mark.parametrize(
    "length, window, keys", [(5, None, 15), (5, 5, 15), (5, 2, 1 + 2 * 4), (1, 3, 1), (6, 3, 6 + 3 * 3)]
)
def test_keys_attended_by_a_causal_row(length, window, keys):
    assert metrics.keys_attended(length, window) == keys == sum(min(p + 1, window or p + 1) for p in range(length))


def test_matmul_weights_without_a_head_dim_split_the_hidden_size():
    arch = {k: v for k, v in ARCH.items() if k != "head_dim"}  # 64 / 4 heads = 16: the same shapes
    assert metrics.matmul_weights(arch) == (2 * LAYER_WEIGHTS, HEAD_WEIGHTS)
    assert metrics.FlopsModel(arch, lora=False, adapter_params=0).attention_per_row(9) == hand_attention(9, [32, None])


def test_the_first_non_finite_loss_is_found_in_steps_or_window():
    data = raw([1.0, 0.5, 0.5], ["warmup", "measure", "measure"])
    assert metrics.first_non_finite_loss(data) is None
    data["loop"]["steps"][1]["loss"] = float("inf")
    data["loop"]["steps"][2]["loss"] = float("nan")
    assert metrics.first_non_finite_loss(data) == (1, float("inf"))
    data["loop"]["steps"][1]["loss"] = data["loop"]["steps"][2]["loss"] = None  # not recorded: not a failure
    data["loop"]["window"] = {"losses": [1.0, float("-inf"), float("nan")]}
    assert metrics.first_non_finite_loss(data) == (3 + 1, float("-inf"))
    data["loop"]["window"] = {"losses": [1.0]}
    assert metrics.first_non_finite_loss(data) is None


def test_across_runs_is_the_median_of_the_present_figures():
    assert metrics.across_runs([3.0, None, 1.0, 10.0]) == 3.0
    assert metrics.across_runs([4.0, 1.0]) == 2.5 and metrics.across_runs([None]) is None


@pytest.mark.parametrize(
    "value, baseline, lower, words",
    [
        (0.5, 3.05, True, "6.10x lower median step time (better)"),
        (3.05, 0.5, True, "6.10x higher median step time (worse)"),
        (2.0, 1.0, False, "2.00x higher median step time (better)"),
        (1.0, 2.0, False, "2.00x lower median step time (worse)"),
        (1.004, 1.0, True, "same median step time"),
        (1.0, 1.006, True, "1.01x lower median step time (better)"),
        (0.0, 1.0, True, None),
        (1.0, None, True, None),
        (None, 1.0, True, None),
        (1.0, -1.0, True, None),
    ],
)
def test_ratio_words(value, baseline, lower, words):
    assert metrics.ratio_words(value, baseline, lower, "median step time") == words


def test_an_accelerator_without_count_or_key_is_one_chip_without_a_peak():
    m = metrics.training_metrics(raw([1.0, 0.5], ["warmup", "measure"]), {}, LORA)
    assert m["tokens_per_s_real_per_chip"] == m["tokens_per_s_real"] == 2000.0 and m["peak_flops_per_chip"] is None


def test_steps_of_zero_time_have_no_throughput():
    # Through _throughput itself: training_metrics' own MFU division has no such guard
    # (steps of exactly 0 s raise ZeroDivisionError there; reported, not changed here).
    zero = [{"time_s": 0.0, "tokens_real": 10}] * 2
    assert metrics._throughput(zero, "tokens_real") is None and metrics._throughput([], "tokens_real") is None
    assert metrics._throughput([{"time_s": 0.5, "tokens_real": 10}, *zero], "tokens_real") == 30 / 0.5


def test_percentile_of_nothing_is_refused_and_two_values_have_a_spread():
    with pytest.raises(ValueError, match="^percentile of no values$"):
        metrics.percentile([], 50)
    assert metrics.summary([1.0, 3.0])["stdev"] == pytest.approx(np.std([1.0, 3.0], ddof=1))


def test_flops_use_the_stated_head_dim_and_every_kv_head():
    """head_dim 32 with hidden 64 and 4 heads (not 64 / 4), 2 KV heads: q and o 64 x 128,
    k and v 64 x 64 per layer."""
    arch = {**ARCH, "head_dim": 32, "num_kv_heads": 2, "layer_windows": [None, None]}
    layers = 2 * (2 * 64 * 128 + 2 * 64 * 64 + 3 * 64 * 128)
    assert metrics.matmul_weights(arch) == (layers, HEAD_WEIGHTS)
    flops = metrics.FlopsModel(arch, lora=False, adapter_params=0)
    assert flops.attention_per_row(10) == hand_attention(10, [None, None], heads=4, head_dim=32)
    floor = {k: v for k, v in arch.items() if k != "head_dim"} | {"hidden_size": 66}  # 66 // 4 = 16
    assert metrics.matmul_weights(floor)[0] == 2 * (66 * 16 * (2 * 4 + 2 * 2) + 3 * 66 * 128)
    assert metrics.FlopsModel(floor, lora=False, adapter_params=0).attention_per_row(10) == hand_attention(
        10, [None, None], heads=4, head_dim=16
    )


def test_a_record_without_steps_setup_compiles_or_window_losses():
    data = raw([], [])
    del data["loop"]["setup_compiles"]
    m = metrics.training_metrics(data, {"count": 1}, LORA)
    assert m["num_setup_compiles"] == 0 and m["loss_first"] is None and m["loss_last"] is None
    data["loop"]["window"] = {"num_steps": 1}  # no losses recorded
    assert metrics.first_non_finite_loss(data) is None


def test_ratio_words_at_their_edges():
    assert metrics.ratio_words(1.0, 0.0, True, "x") is None
    assert metrics.ratio_words(1.005, 1.0, True, "x") == "1.00x higher x (worse)"  # 1.005 is not "same"


def test_an_mfu_of_exactly_1_is_kept_only_more_is_withheld():
    flops = hand_full_flops([100] * 8)
    seconds = flops / 989e12  # one step at exactly the H100's dense bf16 peak
    m = metrics.training_metrics(
        raw([1.0, seconds], ["warmup", "measure"], tokens=800), {"count": 1, "catalog_key": "h100-sxm"}, FULL
    )
    assert m["mfu"] == 1.0 and "mfu_invalid" not in m
