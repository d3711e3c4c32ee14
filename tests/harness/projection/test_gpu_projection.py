"""The GPU side projected (harness/projection/gpu_projection.py, issue 43): every term recomputed
here from the architecture's sizes and the datasheet, apart from bench's FLOPs model;
the published GPU calibration points checked against their own quotes; the command's
output against its record."""

from __future__ import annotations

import json
import re

import pytest

# A small Llama-family architecture (no sliding windows): every layer attends causally.
ARCH = dict(
    family="llama",
    vocab_size=1000,
    hidden_size=64,
    intermediate_size=256,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    tie_embeddings=False,
)


def _weights(a) -> int:
    """Matmul weights a token multiplies: q, o (heads x head_dim), k, v (kv heads), the
    gated MLP's three, and the head."""
    q, kv = a["num_heads"] * a["head_dim"], a["num_kv_heads"] * a["head_dim"]
    h, i = a["hidden_size"], a["intermediate_size"]
    return a["num_layers"] * (2 * h * q + 2 * h * kv + 3 * h * i) + a["vocab_size"] * h


def _shape(**changes):
    from harness.projection.gpu_projection import StepShape

    base = dict(
        arch=ARCH,
        lora=False,
        trainable=_weights(ARCH),
        rows_per_gpu=2,
        accumulation=3,
        checkpointing=False,
        fsdp=4,
        data=1,
        sharding="full_shard",
        weight_bytes=2,
        grad_bytes=4,
        compute_bytes=2,
    )
    return StepShape(**{**base, **changes})


def test_a_full_fine_tunes_micro_batch_work_is_recomputed_from_the_sizes():
    from harness.projection.gpu_projection import micro_batch_work, update_work

    seq, rows, a = 128, 2, ARCH
    w = _weights(a)
    attention = 12 * a["num_heads"] * a["head_dim"] * a["num_layers"] * seq * (seq + 1) // 2
    flops = rows * (6 * w * seq + attention)
    activations = a["num_layers"] * (17 * a["hidden_size"] + 8 * a["intermediate_size"])  # bf16 bytes a token
    memory = 2 * w * 2 + w * 4 + 2 * activations * rows * seq
    wire = 3 / 4 * (2 * w * 2 + w * 4)  # ring over 4: two all-gathers (bf16), a reduce-scatter (fp32)
    work = micro_batch_work(_shape(), seq)
    assert work.flops == pytest.approx(flops, rel=1e-12)
    assert work.memory_bytes == pytest.approx(memory, rel=1e-12)
    assert work.wire_bytes == pytest.approx(wire, rel=1e-12)
    update = update_work(_shape())
    assert update.memory_bytes == pytest.approx(w / 4 * 30) and update.wire_bytes == 0 and update.flops == 0


def test_recompute_lora_shard_grad_op_and_data_parallel_change_the_terms_as_stated():
    from harness.projection.gpu_projection import micro_batch_work, update_work

    seq, a = 64, ARCH
    w = _weights(a)
    plain = micro_batch_work(_shape(), seq)
    again = micro_batch_work(_shape(checkpointing=True), seq)
    layers = w - a["vocab_size"] * a["hidden_size"]
    attention = 12 * a["num_heads"] * a["head_dim"] * a["num_layers"] * seq * (seq + 1) // 2
    assert again.flops - plain.flops == pytest.approx(2 * (2 * layers * seq + attention / 3))
    assert again.memory_bytes - plain.memory_bytes == pytest.approx(w * 2)  # one more weight read
    lora = micro_batch_work(_shape(lora=True, trainable=1000, sharding="shard_grad_op"), seq)
    assert lora.flops == pytest.approx(2 * (4 * w * seq + 6 * 1000 * seq + attention))
    assert lora.wire_bytes == pytest.approx(3 / 4 * (1 * w * 2 + 1000 * 4))  # one all-gather with shard_grad_op
    data = update_work(_shape(fsdp=1, data=4, lora=True, trainable=1000))
    assert data.wire_bytes == pytest.approx(2 * 3 / 4 * 1000 * 4) and data.memory_bytes == pytest.approx(1000 * 28)


def test_the_terms_divide_by_the_datasheet_and_the_bound_is_their_largest():
    from harness.figures.accelerators import GPU_PROJECTION_DATASHEET, PEAK_BF16_FLOPS
    from harness.projection.gpu_projection import Work, gpu_card, step_bound

    card = gpu_card("h100-sxm:4")
    sheet = GPU_PROJECTION_DATASHEET["h100-sxm"]
    terms = Work(1e15, 1e12, 9e11).terms(card)
    assert terms["compute_s"] == pytest.approx(1e15 / PEAK_BF16_FLOPS["h100-sxm"])
    assert terms["memory_s"] == pytest.approx(1e12 / sheet["memory_bytes_per_s"])
    assert terms["links_s"] == pytest.approx(9e11 / (sheet["link_bytes_per_s"] / 2))  # one direction of the link
    assert terms["bound_s"] == max(terms["compute_s"], terms["memory_s"], terms["links_s"])
    assert terms["bound_by"] == "links"
    step = step_bound(_shape(), 128, card)
    assert step["step_s"] == pytest.approx(3 * step["micro_batch"]["bound_s"] + step["update"]["bound_s"])


@pytest.mark.parametrize(
    "text, why",
    [
        ("h100-sxm", "name a GPU kind and a count"),
        ("h100-sxm:0", "1 to 8"),
        ("h100-sxm:16", "1 to 8"),
        ("tpu-v5p:4", "no datasheet figures for 'tpu-v5p'"),
        ("l40s:1", "no datasheet figures for 'l40s'"),
    ],
)
def test_a_card_without_figures_or_beyond_one_host_is_refused_naming_the_flag(text, why):
    from harness.basics.errors import SpecError
    from harness.projection.gpu_projection import gpu_card

    with pytest.raises(SpecError, match=re.escape(why)) as info:
        gpu_card(text)
    assert "--project-for" in str(info.value)


def test_every_kind_the_catalog_prices_for_the_issue_has_datasheet_figures():
    from harness.projection.gpu_projection import gpu_card

    for key in ("h100-sxm", "h200", "b200", "a100-40gb", "a100-80gb", "l4"):
        card = gpu_card(f"{key}:2")
        assert (
            card.peak_flops > 0 and card.memory_bytes > 0 and card.memory_bytes_per_s > 0 and card.link_bytes_per_s > 0
        )


def _quoted_tokens_per_s(run) -> float:
    """The tokens/s per GPU figure as the publisher's quote prints it: torchtitan's rows
    end "TPS/GPU | Memory(GiB)", NeMo AutoModel's "... | Tokens/sec/GPU"."""
    cells = [c.strip().replace(",", "") for c in run.quote.split("|")]
    numbers = [float(c) for c in cells if re.fullmatch(r"\d+(\.\d+)?", c)]
    return numbers[-2] if "torchtitan" in run.source["repository"] else numbers[-1]


def test_the_published_gpu_runs_are_bounded_at_their_configuration_and_match_their_quotes():
    from harness.projection.gpu_projection import GPU_PUBLISHED, gpu_card, gpu_points, micro_batch_work, update_work

    assert len(GPU_PUBLISHED) >= 3
    assert {run.method for run in GPU_PUBLISHED} == {"full", "lora"}  # both classes
    for run in GPU_PUBLISHED:
        assert run.measured_tokens_per_s_per_gpu == _quoted_tokens_per_s(run), run.id
        assert len(run.source["commit"]) == 40
        assert run.global_batch == run.gpus * run.rows_per_gpu * run.accumulation  # the rows each GPU runs
        card = gpu_card(f"{run.catalog_key}:{run.gpus}")
        shape = run.step_shape()
        micro = micro_batch_work(shape, run.seq_len).terms(card)["bound_s"]
        step = run.accumulation * micro + update_work(shape).terms(card)["bound_s"]
        bound = run.rows_per_gpu * run.accumulation * run.seq_len / step
        assert run.bound_tokens_per_s_per_gpu == pytest.approx(bound, rel=1e-12)
        assert run.measured_over_bound == pytest.approx(run.measured_tokens_per_s_per_gpu / bound, rel=1e-12)
        assert 0 < run.measured_over_bound < 1, run.id  # nothing runs faster than its bound
    nemo = next(r for r in GPU_PUBLISHED if r.method == "lora")
    # the publisher's step time says the same tokens: 32 x 4,096 / 8 GPUs / 608.42 = 26.93 s (printed 26.92)
    assert nemo.global_batch * nemo.seq_len / nemo.gpus / nemo.measured_tokens_per_s_per_gpu == pytest.approx(
        26.92, rel=1e-3
    )
    assert [p.ratio for p in gpu_points()] == [r.measured_over_bound for r in GPU_PUBLISHED]


@pytest.mark.slow
def test_bench_plan_project_for_prints_a_bound_and_a_calibrated_range_with_sources(tmp_path):
    """`bench plan scenarios/gemma270m.yaml --project-for h100-sxm:1` (the issue's check):
    the bound, the calibrated range with its sources, labelled projected; the printed
    figures are the stored record's, and the range's low end is the bound x the lowest
    adapter point's measured / bound (gemma270m is LoRA)."""
    import os
    import subprocess
    import sys

    from harness.projection.gpu_projection import GPU_PUBLISHED

    out = subprocess.run(
        [sys.executable, "-m", "harness.cli", "plan", "scenarios/gemma270m.yaml", "--project-for", "h100-sxm:1"]
        + ["--results-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert out.returncode == 0, out.stderr
    (path,) = tmp_path.glob("*.gpu-projection.json")
    record = json.loads(path.read_text())
    assert record["kind"] == "gpu_projection" and record["label"] == "PROJECTED (not measured)"
    text = out.stdout
    assert text.startswith("PROJECTED (not measured): gemma270m [default] on 1x h100-sxm")
    bound = record["real_tokens_per_s_per_gpu_bound"]
    low = min(r.measured_over_bound for r in GPU_PUBLISHED if r.method == "lora")
    assert record["calibration"]["ratio"] == pytest.approx(low)
    assert f"bound at length 512: <= {bound:.4g} real tokens/s per GPU" in text
    assert f"calibrated range: {bound * low:.4g}-{bound:.4g} real tokens/s per GPU" in text
    assert "the lowest measured / bound of the adapter points: github.com/NVIDIA-NeMo/Automodel" in text
    # the bound recomputed from the record's own terms: rows x length / GPUs / step
    step = record["bounds"]["512"]["step_s"]
    assert record["tokens_per_s_per_gpu_bound"] == pytest.approx(record["plan"]["rows_per_step"] * 512 / step)
    ft = record["fine_tune"]
    assert record["calibration"]["fine_tune_time_s"] == pytest.approx(ft["time_s"] / low)


def test_docs_measurements_shows_each_gpu_point_s_bound_and_ratio():
    from pathlib import Path

    from harness.projection.gpu_projection import GPU_PUBLISHED

    section = Path("docs/measurements/projections-and-calibration.md").read_text().split("(#43)", 1)[1]
    for run in GPU_PUBLISHED:
        ratio = f"| {run.measured_over_bound:.3f} |"
        rows = [line for line in section.splitlines() if line.startswith("|") and ratio in line]
        assert len(rows) == 1, run.id
        assert f"{run.bound_tokens_per_s_per_gpu:,.0f}" in rows[0]


def test_a_scenario_projected_in_process_states_its_terms_range_and_record(tmp_path):
    """project() and lines() without the CLI: W1 on 2 H100s (fsdp over both): the links
    term is there, the record holds what the lines print, the range's ends are the bound
    and the bound x the adapter points' lowest ratio."""
    from harness.projection.gpu_projection import GPU_PUBLISHED, GpuRequest, lines, project

    (record,) = project(GpuRequest("scenarios/gemma270m.yaml", "gpu-fsdp", ["h100-sxm:2"], {}, "auto", tmp_path, None))
    assert record["card"] == {"name": "2x h100-sxm", "key": "h100-sxm", "count": 2, "link": "NVLink 4"}
    assert record["plan"]["mesh"]["fsdp"] == 2 and record["backend"] == "gpu-fsdp"
    (length,) = record["bounds"]
    micro = record["bounds"][length]["micro_batch"]
    assert micro["links_s"] > 0 and micro["bound_s"] == max(micro["compute_s"], micro["memory_s"], micro["links_s"])
    low = min(r.measured_over_bound for r in GPU_PUBLISHED if r.method == "lora")
    cal = record["calibration"]
    assert cal["ratio"] == pytest.approx(low) and cal["same_class"] and cal["method_class"] == "adapter"
    real = record["real_tokens_per_s_per_gpu_bound"]
    assert cal["real_tokens_per_s_per_gpu"] == pytest.approx(real * low)
    rate = record["price"]["usd_per_chip_hour"]
    assert record["usd_per_1m_real_tokens_bound"] == pytest.approx(rate / 3600 / real * 1e6)
    assert cal["usd_per_1m_real_tokens"] == pytest.approx(record["usd_per_1m_real_tokens_bound"] / low)
    ft = record["fine_tune"]
    assert ft["usd"] == pytest.approx(ft["time_s"] / 3600 * 2 * rate)
    assert cal["fine_tune_usd"] == pytest.approx(ft["usd"] / low)
    stored = json.loads(next(tmp_path.glob("*.gpu-projection.json")).read_text())
    assert stored["label"] == "PROJECTED (not measured)" and stored["fine_tune"] == ft
    text = "\n".join(lines(record))
    assert text.startswith("PROJECTED (not measured): gemma270m [default] on 2x h100-sxm (gpu-fsdp's plan)")
    assert f"links {micro['links_s']:.4g} s" in text
    assert f"calibrated range: {real * low:.4g}-{real:.4g} real tokens/s per GPU" in text
    assert f"whole fine-tune: {ft['steps']} steps, {ft['time_s'] / 60:.3g}-{ft['time_s'] / low / 60:.3g} min" in text


def test_without_a_calibration_point_the_projection_says_the_bound_alone():
    from harness.projection.gpu_projection import _calibrated, _range_lines

    cal = _calibrated(None, 100.0, 2.0, 60.0, 1.0)
    assert cal == {"ratio": None, "same_class": None, "note": "no published run is calibrated: the bound alone"}
    record = {"calibration": cal, "fine_tune": {"steps": 3, "time_s": 60.0, "usd": 1.0}}
    assert _range_lines(record) == [
        "  calibrated range: none (no published run is calibrated: the bound alone)",
        "  whole fine-tune: 3 steps, >= 1 min, >= $1.00 (the bound alone, a best case)",
    ]


@pytest.mark.parametrize("usd, text", [(1234.5, "$1,234.50"), (1.0, "$1.00"), (0.01234, "$0.0123")])
def test_dollars_read_to_the_cent_or_three_figures_under_a_dollar(usd, text):
    from harness.projection.gpu_projection import usd_text

    assert usd_text(usd) == text


def test_a_gpu_points_table_with_a_field_missing_or_unknown_is_refused_naming_it(tmp_path):
    from harness.projection import calibration, gpu_projection

    doc = json.loads((calibration.PROJECTIONS / gpu_projection.GPU_TABLE).read_text())
    del doc["points"][2]["seq_len"]
    (tmp_path / gpu_projection.GPU_TABLE).write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"gpu_published.json: points\[2\].seq_len: missing"):
        gpu_projection.load_gpu_published(tmp_path)
    doc["points"][2]["seq_len"] = 4096
    doc["points"][1]["ratio"] = 0.5  # a ratio is never typed in
    (tmp_path / gpu_projection.GPU_TABLE).write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"points\[1\].ratio: unknown field"):
        gpu_projection.load_gpu_published(tmp_path)
    del doc["points"][1]["ratio"]
    (tmp_path / gpu_projection.GPU_TABLE).write_text(json.dumps(doc))
    loaded = gpu_projection.load_gpu_published(tmp_path)
    assert [r.id for r in loaded] == [r.id for r in gpu_projection.GPU_PUBLISHED]
    assert loaded[2].measured_tokens_per_s_per_gpu == 608.42 and loaded[2].lora_targets[0] == "q_proj"


def test_the_fit_counts_resident_state_over_fsdp_and_one_micro_batchs_activations():
    from harness.projection.gpu_projection import fits, gpu_card

    a, w, seq = ARCH, _weights(ARCH), 128
    card = gpu_card("l4:4")
    per_token = a["num_layers"] * (17 * a["hidden_size"] + 8 * a["intermediate_size"])  # bf16
    ok, need = fits(_shape(), seq, card)
    assert ok and need == pytest.approx(w * 16 / 4 + 2 * seq * per_token)
    lora_ok, lora_need = fits(_shape(lora=True, trainable=1000, checkpointing=True), seq, card)
    kept = a["num_layers"] * a["hidden_size"] * 2 + per_token / a["num_layers"]  # layer inputs + one layer's stash
    assert lora_need == pytest.approx((w * 2 + 1000 * 16) / 4 + 2 * seq * kept)
    huge = dict(ARCH, vocab_size=10**9)
    assert not fits(_shape(arch=huge, trainable=_weights(huge)), seq, card)[0]  # 16 TB of state on 4 L4s
