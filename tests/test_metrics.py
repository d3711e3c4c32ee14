"""The metrics module: statistics from raw samples, FLOPs and MFU by hand."""

from __future__ import annotations

import numpy as np
import pytest

from harness import metrics

MODEL = {"num_params": 1_000_000 + 200_000 + 10_000, "num_embedding_params": 200_000, "num_trainable_params": 10_000,
         "num_layers": 2, "num_heads": 4, "head_dim": 16, "hidden_size": 64, "vocab_size": 8192}


def raw(times, phases, seq_len=128, tokens=1000, window=None):
    steps = [{"index": i, "phase": p, "start_s": float(i), "time_s": t, "tokens_real": tokens, "tokens_padded": 2 * tokens,
              "seq_len": seq_len, "num_compiles": 1 if i == 0 else 0, "compile_s": 0.5 if i == 0 else 0.0, "loss": 1.0}
             for i, (t, p) in enumerate(zip(times, phases))]
    return {"loop": {"steps": steps, "window": window, "setup_compiles": 0}, "model": MODEL,
            "memory": {"peak_bytes": 2 * 1024**3, "kind": "cpu_peak_rss"}, "setup_s": 1.0, "wall_s": 10.0}


def test_percentile_matches_numpy():
    values = [0.3, 0.1, 0.7, 0.2, 0.9, 0.4]
    for q in (0, 10, 50, 90, 99, 100):
        assert metrics.percentile(values, q) == pytest.approx(np.percentile(values, q))


def test_warmup_steps_are_excluded_from_statistics():
    data = raw([9.0, 8.0, 1.0, 1.2, 1.1], ["warmup", "warmup", "measure", "measure", "measure"])
    m = metrics.training_metrics(data, {"count": 1, "catalog_key": "cpu"}, lora=True)
    assert m["step_time_s"]["n"] == 3
    assert m["step_time_s"]["max"] == 1.2 and m["step_time_s"]["median"] == 1.1
    assert m["warmup_time_s"] == 17.0
    assert m["num_compiles"] == 1 and m["num_recompiles"] == 0


def test_flops_per_token_by_hand():
    n = MODEL["num_params"] - MODEL["num_embedding_params"] - MODEL["num_trainable_params"]  # 1,000,000
    attention = 12 * 2 * 4 * 16 * 128
    assert metrics.flops_per_token(MODEL, 128, lora=False) == 6 * (n + 10_000) + attention
    r = 10_000 / n
    assert metrics.flops_per_token(MODEL, 128, lora=True) == pytest.approx((2 + 2 + 2 * r) * n + attention)


def test_mfu_matches_a_hand_computation_for_a_stated_peak():
    data = raw([1.0, 0.5, 0.5], ["warmup", "measure", "measure"])
    m = metrics.training_metrics(data, {"count": 2, "catalog_key": "tpu-v5e"}, lora=False)
    flops_per_s = 2 * 1000 * metrics.flops_per_token(MODEL, 128, lora=False) / 1.0
    assert m["mfu"] == pytest.approx(flops_per_s / (197e12 * 2))
    assert m["tokens_per_s_real"] == 2000.0 and m["tokens_per_s_real_per_chip"] == 1000.0


def test_mfu_is_absent_on_cpu():
    m = metrics.training_metrics(raw([1.0, 0.5], ["warmup", "measure"]), {"count": 1, "catalog_key": "cpu"}, lora=True)
    assert m["mfu"] is None and m["peak_flops_per_chip"] is None


def test_mfu_above_one_is_withheld():
    data = raw([1.0, 1e-12], ["warmup", "measure"], tokens=10**9)
    m = metrics.training_metrics(data, {"count": 1, "catalog_key": "h100-sxm"}, lora=False)
    assert m["mfu"] is None and "not device-synchronised" in m["mfu_invalid"]


def test_window_throughput_uses_the_single_sync_time():
    window = {"num_steps": 2, "time_s": 0.8, "tokens_real": 400, "tokens_padded": 800, "num_compiles": 0, "losses": [1, 1]}
    m = metrics.training_metrics(raw([1.0, 0.5], ["warmup", "measure"], window=window), {"count": 1, "catalog_key": "cpu"}, True)
    assert m["window_tokens_per_s_real"] == 500.0


def test_non_finite_loss_is_found_with_its_step():
    data = raw([1.0, 0.5, 0.5], ["warmup", "measure", "measure"])
    data["loop"]["steps"][2]["loss"] = float("nan")
    assert metrics.first_non_finite_loss(data)[0] == 2
