"""The serving projection (issue 47): roofline bounds from the model's dimensions and the
datasheet, recomputed here by hand; the calibration's ratios recomputed from the
published figures; `bench plan --task serve --project-for` printing every figure as a
range on a TPU slice and on GPUs."""

from __future__ import annotations

import re

import pytest

from harness.projection.serving import CALIBRATION, Device, Load, ServedModel, bound, calibration, layout
from harness.scenario.presets import MODEL_PRESETS

from conftest import bench


def params_by_hand(a: dict) -> int:
    attention = a["hidden_size"] * a["head_dim"] * 2 * (a["num_heads"] + a["num_kv_heads"])
    mlp = 3 * a["hidden_size"] * a["intermediate_size"]
    embedding = a["vocab_size"] * a["hidden_size"] * (1 if a.get("tie_embeddings", True) else 2)
    return a["num_layers"] * (attention + mlp) + embedding


def test_llama_8b_has_8_03_billion_weights_and_its_kv_cache_128_kib_a_token():
    llama = MODEL_PRESETS["llama-3.1-8b"]
    model = ServedModel(dict(llama))
    assert model.params == params_by_hand(llama) == pytest.approx(8.03e9, rel=1e-3)  # norms left out
    assert model.kv_bytes(1) == 32 * 2 * 8 * 128 * 2 == 131_072


def test_the_calibrations_ratios_are_the_published_figures_over_their_bounds():
    """A100 40GB: 75 tok/s decoding one 1024 + 128 request, against (weights + the KV
    cache at the mean context 1088) / 1,555 GB/s; H100 SXM: 6.48 and 6.59 ms TPOT against
    the weights / 3.35 TB/s (lengths unstated: context 0)."""
    weights = 2 * params_by_hand(MODEL_PRESETS["llama-3.1-8b"])
    a100_tpot = (weights + 1088 * 131_072) / 1.555e12
    h100_tpot = weights / 3.35e12
    expected = [75.0 * a100_tpot, h100_tpot / 6.48e-3, h100_tpot / 6.59e-3]
    cal = calibration()
    assert [r["ratio"] for r in cal.rows] == pytest.approx(expected)
    assert (cal.low, cal.high) == (pytest.approx(min(expected)), pytest.approx(max(expected)))
    assert all(0 < r["ratio"] < 1 for r in cal.rows)  # a bound that holds: measured slower than it
    assert len(CALIBRATION) >= 3 and all(p.source.startswith("https://") and p.quote for p in CALIBRATION)


def test_a_bound_is_bandwidth_bound_at_one_request_and_compute_bound_in_a_long_prefill():
    model, h100 = ServedModel(dict(MODEL_PRESETS["llama-3.1-8b"])), Device.named("h100-sxm:1")
    one = bound(model, h100, Load(1, 128, 64), 1, 1)
    assert one.tpot_limit == "bandwidth" and one.tpot_s == pytest.approx(
        (model.weight_bytes + model.kv_bytes(160)) / 3.35e12
    )
    long = bound(model, h100, Load(1, 8192, 64), 1, 1)
    assert long.ttft_limit == "compute" and long.ttft_s == pytest.approx(model.prefill_flops(8192) / 989e12)
    assert long.ttft_s > 2 * 8192 * 2 * params_by_hand(MODEL_PRESETS["llama-3.1-8b"]) / 989e12 / 2  # matmuls at least


@pytest.mark.parametrize(("target", "tensor", "replicas"), [("v6e-8", 4, 2), ("h100-sxm:2", 2, 1)])
def test_the_layout_is_autos_vllms_on_those_chips(target, tensor, replicas):
    assert layout(ServedModel(dict(MODEL_PRESETS["gemma-3-27b"])), Device.named(target)) == (tensor, replicas)


def numbers(pattern: str, text: str) -> tuple[float, ...]:
    match = re.search(pattern, text)
    assert match, (pattern, text)
    return tuple(float(g) for g in match.groups())


@pytest.mark.slow
def test_bench_plan_projects_w3s_serving_on_v6e_8_and_two_h100s_as_ranges():
    """W3's scenario (no serve section: serve's defaults, said): each target's TTFT bound,
    TPOT and output tok/s ranges and $ per 1M output tokens; the two H100s' TPOT
    recomputed by hand (27B's weights and KV cache over two chips' bandwidth), its other
    end over the calibration's lowest ratio."""
    done = bench(
        "plan", "scenarios/w3_gemma_lora_tunix.yaml", "--task", "serve", "--project-for", "v6e-8",
        "--project-for", "h100-sxm:2", env={"COLUMNS": "400"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    tpu, gpu = done.stdout.split("served on h100-sxm:2")
    assert "served on v6e-8 (projected, vLLM): tensor-parallel 4 x 2 replicas" in tpu
    assert "the scenario has no serve section: serve's defaults are projected" in tpu
    for text in (tpu, gpu):
        numbers(r"TTFT at least ([\d.]+) ms", text)
        low, high = numbers(r"output ([\d.]+) to ([\d.]+) tok/s", text)
        assert 0 < low < high
        usd_low, usd_high = numbers(r"\$ per 1M output tokens \$([\d.]+) to \$([\d.]+)", text)
        assert 0 < usd_low < usd_high
    (prompt,) = numbers(r"concurrency 1 \((\d+) prompt \+ 64 output tokens", gpu)
    a = MODEL_PRESETS["gemma-3-27b"]
    context = int(prompt) + 32  # below every window: each of the 62 layers holds it all
    kv = a["num_layers"] * 2 * a["num_kv_heads"] * a["head_dim"] * 2 * context
    tpot = (2 * params_by_hand(a) + kv) / (2 * 3.35e12)
    fast, slow = numbers(r"TPOT ([\d.]+) to ([\d.]+) ms", gpu)
    assert fast == pytest.approx(tpot * 1e3, rel=2e-3) and slow == pytest.approx(
        tpot * 1e3 / calibration().low, rel=2e-3
    )


@pytest.mark.slow
def test_the_report_says_w3s_serving_sentence_each_side_measured_or_projected(tmp_path):
    """A measured serve run on 2x H100 and the stored v6e-8 projection of the same
    scenario: one sentence, the TPU side projected (TTFT at least its bound, ranges), the
    GPU side measured (its medians), output tok/s within the worst case over the range;
    and a projection of the GPU configuration beside its measurement (measured / bound)."""
    import json

    from test_serve_loads import serve_record, timed_requests

    from harness.projection.serving import load_stored

    results = tmp_path / "r"
    done = bench(
        "plan", "scenarios/w3_gemma_lora_tunix.yaml", "--task", "serve", "--project-for", "v6e-8",
        "--project-for", "h100-sxm:2", "--results-dir", str(results),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    tpu, gpu = sorted(load_stored([results]), key=lambda p: p["target"], reverse=True)
    assert (tpu["target"], gpu["target"]) == ("v6e-8", "h100-sxm:2")
    record = serve_record({"requests": timed_requests(20, 0)}, name="w3-gemma-lora-tunix", kind="cuda",
                          device="NVIDIA H100 80GB HBM3", catalog_key="h100-sxm", chips=2)  # fmt: skip
    # served by the engine the projection assumes, at its point's closed-loop load
    record["backend"]["name"] = "serve-vllm"
    first = gpu["points"][0]
    record["scenario"]["resolved"]["serve"].update(
        output_tokens=first["output_tokens"], load={"concurrency": first["concurrency"]}
    )
    (results / "gpu.json").write_text(json.dumps(record))
    done = bench("report", str(results), "-o", str(tmp_path / "report.md"), "--format", "md")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "report.md").read_text().replace("\\", "")
    m = record["metrics"]
    point = tpu["points"][0]
    low, high = point["output_tok_s"]
    tok = m["output_throughput_tok_s"]
    worst = max(high / tok, tok / low) - 1
    expected = (
        f"w3-gemma-lora-tunix: tpu-v6e:8 (vLLM-TPU, projected) vs 2x h100-sxm (vLLM, measured): TTFT at least "
        f"{point['ttft_s_at_least'] * 1e3:.3g} ms vs {m['ttft_s']['median'] * 1e3:.3g} ms, output tok/s "
        f"{low:.3g}-{high:.3g} vs {tok:.3g} (within {worst:.0%} at worst)"
    )
    assert expected in page, page[-3000:]
    bound = gpu["points"][0]["output_tok_s"][1]
    assert (
        f"w3-gemma-lora-tunix on h100-sxm:2 at concurrency {first['concurrency']}: measured output {tok:.4g} tok/s "
        f"is {tok / bound:.2f} of the"
    ) in page
