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
    points = gpu_points()
    assert [p.ratio for p in points[: len(GPU_PUBLISHED)]] == [r.measured_over_bound for r in GPU_PUBLISHED]
    # then the device suite's own records shipped in the package, one point each
    from pathlib import Path

    from harness.projection import gpu_projection

    shipped = Path(gpu_projection.__file__).parent / "calibration_points" / "measured_gpu"
    own = points[len(GPU_PUBLISHED) :]
    assert sorted(p.stem for p in shipped.glob("*.json")) == sorted(
        next(part for part in p.label.split() if part.endswith(".json")).removesuffix(".json") for p in own
    )


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

    # the GPU table: after the TPU one, which has a measured / bound column too
    section = Path("docs/measurements/projections-and-calibration.md").read_text().split("(#43)", 1)[1]
    section = section.split("GPU (bound:", 1)[1]
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


# --------------------------------------------------------------------------- #43 mutation survivors
# The figures and text below are recomputed by hand from the inputs (never with the module's
# own formula), so that a changed formula, branch or sentence fails a test.


def test_the_cards_refusals_read_flag_value_and_reason_in_full():
    from harness.basics.errors import SpecError
    from harness.projection.gpu_projection import gpu_card

    expected = {
        "h100": "--project-for: h100: name a GPU kind and a count, e.g. h100-sxm:2",
        "l40s:1": "--project-for: l40s:1: no datasheet figures for 'l40s'; known: h100-sxm, h200, b200, a100-40gb, "
        "a100-80gb, l4",
        "h100-sxm:9": "--project-for: h100-sxm:9: 9 GPUs: the projection models one host's links, 1 to 8",
    }
    for text, message in expected.items():
        with pytest.raises(SpecError) as info:
            gpu_card(text)
        assert str(info.value) == message
    with pytest.raises(SpecError) as info:
        gpu_card("h100-sxm:0", "--recommend")
    assert str(info.value) == "--recommend: h100-sxm:0: 0 GPUs: the projection models one host's links, 1 to 8"
    assert gpu_card(" H100-SXM:8 ").name == "8x h100-sxm"  # a full host is one host


def test_a_card_with_no_link_figure_has_a_zero_links_term_where_nothing_crosses_it():
    """A TPU chip with no ICI figure (`--recommend`'s tpu_card: link 0) on a program with
    no collective: the links term is 0 s, not a division by zero."""
    from harness.projection.gpu_projection import Card, Work

    chip = Card("tpu-x", 1, 1e15, 16e9, 8e11, 0.0, "ICI")
    terms = Work(2e12, 4e9, 0.0).terms(chip)
    assert terms == {"compute_s": 2e-3, "memory_s": 5e-3, "links_s": 0.0, "bound_s": 5e-3, "bound_by": "memory"}


def test_one_gpu_moves_no_wire_bytes_and_a_two_way_all_reduce_sends_the_gradients_once():
    from harness.projection.gpu_projection import gpu_card, micro_batch_work, update_work

    alone = micro_batch_work(_shape(fsdp=1), 64)
    assert alone.wire_bytes == 0.0 and isinstance(alone.wire_bytes, float)
    assert alone.terms(gpu_card("h100-sxm:1"))["links_s"] == 0.0
    # data parallelism over 2: a ring all-reduce sends 2 (N - 1) / N = 1 x the fp32 gradients
    two = update_work(_shape(fsdp=1, data=2, lora=True, trainable=1000))
    assert two.wire_bytes == 1000 * 4
    assert update_work(_shape(fsdp=1, data=1, lora=True, trainable=1000)).wire_bytes == 0.0


def test_fp32_activations_are_twice_bf16s_in_the_work_and_the_fit():
    from harness.projection.gpu_projection import fits, gpu_card, micro_batch_work

    a, seq, rows = ARCH, 128, 2
    bf16_per_token = a["num_layers"] * (17 * a["hidden_size"] + 8 * a["intermediate_size"])
    fp32, bf16 = micro_batch_work(_shape(compute_bytes=4), seq), micro_batch_work(_shape(), seq)
    # written then read back: 2 x the extra bf16-sized bytes of every token
    assert fp32.memory_bytes - bf16.memory_bytes == pytest.approx(2 * bf16_per_token * rows * seq, rel=1e-12)
    card = gpu_card("h100-sxm:4")
    extra = fits(_shape(compute_bytes=4), seq, card)[1] - fits(_shape(), seq, card)[1]
    assert extra == pytest.approx(bf16_per_token * rows * seq, rel=1e-12)


def test_a_full_fine_tune_that_needs_exactly_the_cards_memory_fits():
    """The fit's boundary: need == the card's memory fits, one byte more does not. A full
    fine-tune holds no frozen copy: 16 bytes a trained weight, over fsdp."""
    from harness.projection.gpu_projection import Card, fits

    a, seq, rows = ARCH, 128, 2
    w = _weights(a)
    per_token = a["num_layers"] * (17 * a["hidden_size"] + 8 * a["intermediate_size"])  # bf16
    need = w * 16 + rows * seq * per_token  # fsdp 1: exact integers
    shape = _shape(fsdp=1)

    def card(memory):
        return Card("x", 1, 1e15, memory, 1e12, 1e11, "x")

    assert fits(shape, seq, card(float(need))) == (True, need)
    assert fits(shape, seq, card(float(need - 1)))[0] is False


def test_a_step_bound_names_its_padded_length():
    from harness.projection.gpu_projection import gpu_card, step_bound

    bound = step_bound(_shape(), 128, gpu_card("h100-sxm:4"))
    assert bound["seq_len"] == 128 and set(bound) == {"seq_len", "micro_batch", "update", "step_s"}


def _plan(**changes):
    """The quick start's plan (LoRA, fp32), changed."""
    from harness.plan.plan import Plan

    from conftest import ROOT

    path = ROOT / "tests" / "fixtures" / "quickstart" / "20261127T182138-gemma270m-torch-default-r0-10c5f0b1.json"
    plan = Plan.model_validate(json.loads(path.read_text())["plan"])
    precision = changes.pop("precision", {})
    return plan.model_copy(update={**changes, "precision": plan.precision.model_copy(update=precision)})


def test_a_lora_plan_is_the_step_of_its_adapters_over_frozen_weights_in_the_frozen_dtype():
    from harness.projection.gpu_projection import StepShape, shape_of_plan

    plan = _plan(
        micro_batch=3,
        accumulation=5,
        gradient_checkpointing=True,
        mesh={"data": 1, "fsdp": 2, "tensor": 1},
        sharding="shard_grad_op",
        trainable_params=12345,
        precision={"frozen_params": "bf16", "compute": "fp32", "grad_reduce": "fp32"},
    )
    assert shape_of_plan(plan, ARCH) == StepShape(
        arch=ARCH,
        lora=True,
        trainable=12345,
        rows_per_gpu=3,
        accumulation=5,
        checkpointing=True,
        fsdp=2,
        data=1,
        sharding="shard_grad_op",
        weight_bytes=2,  # the frozen bf16 copy is what each micro-batch reads
        grad_bytes=4,
        compute_bytes=4,
    )


def test_a_lora_plan_without_its_adapter_count_is_refused_naming_the_field():
    """Unsized adapters would drop the gradient and update terms from the bound unsaid."""
    from harness.basics.errors import SpecError
    from harness.projection.gpu_projection import shape_of_plan

    with pytest.raises(SpecError) as refused:
        shape_of_plan(_plan(trainable_params=None, lora_targets=("query_key_value",)), ARCH)
    assert str(refused.value).startswith("the GPU projection: train.lora.target_modules: query_key_value:")
    assert "\n" not in str(refused.value)


def test_a_full_plan_trains_every_matmul_weight_read_in_the_compute_dtype():
    from harness.projection.gpu_projection import shape_of_plan

    plan = _plan(
        method="full",
        trainable_params=None,
        gradient_checkpointing=False,
        precision={"frozen_params": "-", "compute": "bf16", "grad_reduce": "fp32"},
    )
    shape = shape_of_plan(plan, ARCH)
    assert shape.lora is False and shape.checkpointing is False
    assert shape.trainable == _weights(ARCH)  # layers and head
    assert (shape.weight_bytes, shape.grad_bytes, shape.compute_bytes) == (2, 4, 2)


def test_a_published_runs_step_is_its_stated_configuration():
    from harness.projection.gpu_projection import GPU_PUBLISHED, StepShape
    from harness.scenario.presets import MODEL_PRESETS

    for run in GPU_PUBLISHED:
        a = MODEL_PRESETS[run.model]
        if run.method == "lora":  # rank x (in + out) for each targeted projection of every layer
            h, q, kv, i = (
                a["hidden_size"],
                a["num_heads"] * a["head_dim"],
                a["num_kv_heads"] * a["head_dim"],
                a["intermediate_size"],
            )
            sizes = {
                "q_proj": h + q,
                "k_proj": h + kv,
                "v_proj": h + kv,
                "o_proj": q + h,
                "gate_proj": h + i,
                "up_proj": h + i,
                "down_proj": i + h,
            }
            trainable = a["num_layers"] * run.lora_rank * sum(sizes[t] for t in run.lora_targets)
        else:
            trainable = _weights(a)
        assert run.step_shape() == StepShape(
            arch=a,
            lora=run.method == "lora",
            trainable=trainable,
            rows_per_gpu=run.rows_per_gpu,
            accumulation=run.accumulation,
            checkpointing=run.checkpointing,
            fsdp=run.fsdp,
            data=run.data,
            sharding=run.sharding,
            weight_bytes=run.weight_bytes,
            grad_bytes=run.grad_bytes,
            compute_bytes=run.compute_bytes,
        ), run.id
    nemo = next(r for r in GPU_PUBLISHED if r.method == "lora")
    assert nemo.step_shape().trainable == 207_093_760  # Llama 3.3 70B, r=16 on all seven projections


def test_the_gpu_points_name_each_published_run_its_card_method_and_stack(tmp_path):
    from harness.projection.gpu_projection import GPU_PUBLISHED, gpu_points, load_gpu_published

    assert [r.id for r in load_gpu_published()] == [r.id for r in GPU_PUBLISHED]  # the package's table
    points = gpu_points(tmp_path / "no-own-records")
    assert [(p.source, p.catalog_key, p.method, p.stack) for p in points] == [
        (r.label, r.catalog_key, r.method, r.stack) for r in GPU_PUBLISHED
    ]
    nemo = next(p for p in points if p.method == "lora")
    assert nemo.source == (
        "github.com/NVIDIA-NeMo/Automodel docs/performance-summary.md@01926a5c (nemo-automodel-llama33-70b-lora-8xh100)"
    )
    assert (nemo.catalog_key, nemo.stack) == ("h100-sxm", "NeMo AutoModel (PyTorch)")


def test_dollars_per_million_tokens_from_an_hourly_price():
    """$1.80 an hour is $0.0005 a second; at 500 tokens/s a million tokens take 2,000 s: $1."""
    from harness.projection.gpu_projection import usd_per_1m

    assert usd_per_1m(500.0, 1.8) == pytest.approx(1.0, rel=1e-12)
    assert usd_per_1m(500.0, None) is None  # no price
    assert usd_per_1m(0.0, 1.8) is None and usd_per_1m(None, 1.8) is None  # no rate


def test_the_calibrated_end_without_a_price_has_no_dollars():
    from harness.projection.calibration import CalibrationPoint, calibrated_low
    from harness.projection.gpu_projection import _calibrated

    low = calibrated_low("lora", [CalibrationPoint("p", "h100-sxm", "lora", "s", 0.25)])
    cal = _calibrated(low, 1000.0, None, 60.0, None)
    assert cal["real_tokens_per_s_per_gpu"] == 250.0 and cal["fine_tune_time_s"] == 240.0
    assert cal["usd_per_1m_real_tokens"] is None and cal["fine_tune_usd"] is None
    priced = _calibrated(low, 1000.0, 1.8, 60.0, 2.0)
    assert priced["fine_tune_usd"] == 8.0
    assert priced["usd_per_1m_real_tokens"] == pytest.approx(2.0, rel=1e-12)  # $1.80/h at 250 tokens/s


def _terms_of(compute, memory, links, by):
    return {
        "compute_s": compute,
        "memory_s": memory,
        "links_s": links,
        "bound_s": max(compute, memory, links),
        "bound_by": by,
    }


def _display_record(**changes):
    """A GPU projection record as project() writes it (JSON: the bounds keyed by text)."""
    bound = {"micro_batch": _terms_of(0.5, 0.25, 0.0, "compute"), "update": _terms_of(0.0, 0.125, 0.0, "memory")}
    record = {
        "label": "PROJECTED (not measured)",
        "scenario": {"name": "w1", "variant": "default", "file": "w1.yaml"},
        "backend": "gpu-fsdp",
        "card": {"name": "2x h100-sxm", "key": "h100-sxm", "count": 2, "link": "NVLink 4"},
        "plan": {
            "rows_per_step": 32,
            "micro_batch": 8,
            "accumulation": 2,
            "mesh": {"data": 1, "fsdp": 2, "tensor": 1},
            "method": "lora",
            "gradient_checkpointing": True,
        },
        "fits": True,
        "memory_bytes_per_gpu": 3.5 * 1024**3,
        # not in length order, and "1024" < "512" < "64" as text
        "bounds": {
            "1024": {**bound, "step_s": 1.125},
            "64": {**bound, "step_s": 0.5},
            "512": {**bound, "step_s": 0.75},
        },
        "longest": 1024,
        "real_tokens_per_s_per_gpu_bound": 1500.0,
        "tokens_per_s_per_gpu_bound": 2000.0,
        "usd_per_1m_real_tokens_bound": 1.25,
        "fine_tune": {"steps": 30, "time_s": 1800.0, "usd": 12.5},
        "calibration": {
            "ratio": 0.25,
            "same_class": True,
            "method_class": "adapter",
            "real_tokens_per_s_per_gpu": 375.0,
            "usd_per_1m_real_tokens": 5.0,
            "fine_tune_time_s": 7200.0,
            "fine_tune_usd": 50.0,
            "note": "the lowest of the adapter points",
        },
        "conventions": {"memory": "MEMORY", "wire": "WIRE"},
    }
    return {**record, **changes}


def test_the_terminal_lines_of_a_priced_calibrated_projection_read_in_full():
    from harness.projection.gpu_projection import lines

    terms = "micro-batch compute 0.5 s, memory 0.25 s, links 0 s: bound by compute; update compute 0 s, memory 0.125 s"
    assert lines(_display_record()) == [
        "PROJECTED (not measured): w1 [default] on 2x h100-sxm (gpu-fsdp's plan), from bench's FLOPs and bytes and the "
        "datasheet; no GPU ran",
        "  plan: 32 rows a step, 8 per GPU per micro-batch x 2 micro-batches; fsdp 2, data 1; lora, checkpointing on",
        "  fits: yes, 3.50 GiB per GPU by bench's memory model (weights, gradients, AdamW state over fsdp, one "
        "micro-batch's activations)",
        f"  length 64: {terms}, links 0 s: bound by memory; step >= 0.5 s",
        f"  length 512: {terms}, links 0 s: bound by memory; step >= 0.75 s",
        f"  length 1024: {terms}, links 0 s: bound by memory; step >= 1.125 s",
        "  bound at length 1024: <= 1500 real tokens/s per GPU (<= 2000 padded), >= $1.25 per 1M real tokens",
        "  calibrated range: 375-1500 real tokens/s per GPU, $1.25-$5 per 1M real tokens (the bound's end is a best "
        "case; the other is bound x 0.25: the lowest of the adapter points)",
        "  whole fine-tune: 30 steps, 30-120 min, $12.50-$50.00 (projected: steps only, setup and compiles not included)",
        "  memory bytes: MEMORY",
        "  wire bytes: WIRE",
    ]


def test_the_terminal_lines_of_an_unpriced_projection_that_does_not_fit_say_so_without_dollars():
    from harness.projection.gpu_projection import lines

    record = _display_record(
        plan={**_display_record()["plan"], "gradient_checkpointing": False},
        fits=False,
        memory_bytes_per_gpu=100 * 1024**3,
        usd_per_1m_real_tokens_bound=None,
        fine_tune={"steps": 30, "time_s": 1800.0, "usd": None},
        calibration={"ratio": None, "same_class": None, "note": "no published run is calibrated: the bound alone"},
    )
    text = lines(record)
    assert text[1].endswith("; lora, checkpointing off")
    assert text[2].startswith("  fits: NO, 100.00 GiB per GPU by bench's memory model (")
    assert text[6] == "  bound at length 1024: <= 1500 real tokens/s per GPU (<= 2000 padded)"
    assert text[7:9] == [
        "  calibrated range: none (no published run is calibrated: the bound alone)",
        "  whole fine-tune: 30 steps, >= 30 min (the bound alone, a best case)",
    ]


def test_a_calibrated_range_without_a_price_has_no_dollars():
    from harness.projection.gpu_projection import _range_lines

    record = _display_record(usd_per_1m_real_tokens_bound=None, fine_tune={"steps": 30, "time_s": 1800.0, "usd": None})
    record["calibration"] = {**record["calibration"], "usd_per_1m_real_tokens": None, "fine_tune_usd": None}
    assert _range_lines(record) == [
        "  calibrated range: 375-1500 real tokens/s per GPU (the bound's end is a best case; the other is bound x "
        "0.25: the lowest of the adapter points)",
        "  whole fine-tune: 30 steps, 30-120 min (projected: steps only, setup and compiles not included)",
    ]


def _w1_on_h100(tmp_path):
    """gemma270m.yaml as a user's copy: a name and a matrix cell that are not file-name
    safe, a `cuda` profile (16 rows a step), spot pricing."""
    from conftest import ROOT

    text = (ROOT / "scenarios" / "gemma270m.yaml").read_text()
    text = text.replace("name: gemma270m", "name: W1 Cuda").replace(
        "profiles:\n",
        "cost: {pricing: spot}\nmatrix:\n  sequence.padding: [static]\nprofiles:\n  cuda:\n    train.global_batch: 16\n",
    )
    path = tmp_path / "w1.yaml"
    path.write_text(text)
    return path


def test_a_projection_takes_the_cuda_profile_the_overrides_and_the_prices_file_and_names_its_file(tmp_path):
    from harness.projection.fine_tune import fine_tune_work
    from harness.projection.gpu_projection import GpuRequest, project
    from harness.scenario.loader import resolve_runs

    path = _w1_on_h100(tmp_path)
    prices = tmp_path / "prices.yaml"
    prices.write_text('h100-sxm: {spot: 2.5, source: "my negotiated spot price", date: "2026-12"}\n')
    out = tmp_path / "out"
    request = GpuRequest(str(path), "gpu-fsdp", ["h100-sxm:2"], {"train.steps": 7}, "auto", out, str(prices))
    (record,) = project(request)
    name = "W1_Cuda-padding_static-2xh100-sxm.gpu-projection.json"
    assert record["path"] == str(out / name) and [p.name for p in out.iterdir()] == [name]
    assert record["kind"] == "gpu_projection"
    assert record["scenario"] == {"name": "W1 Cuda", "variant": "padding=static", "file": str(path)}
    plan = record["plan"]
    assert plan["rows_per_step"] == 16 and plan["steps"] == 7  # the cuda profile, then --set
    assert plan["device_kind"] == "cuda" and plan["devices"] == 2
    assert record["price"] == {
        "accelerator": "h100-sxm",
        "usd_per_chip_hour": 2.5,
        "pricing": "spot",
        "source": "my negotiated spot price",
        "date": "2026-12",
    }
    stored = json.loads((out / name).read_text())
    assert stored["plan"] == plan  # the record in memory is the one written: JSON through and through
    # the bound's padded tokens a GPU a second x 2 GPUs x the step's bound = the step's padded tokens
    longest = record["longest"]
    step_s = record["bounds"][longest]["step_s"]
    assert record["tokens_per_s_per_gpu_bound"] * 2 * step_s == pytest.approx(16 * longest, rel=1e-12)
    (run,) = resolve_runs(str(path), {"train.steps": 7}, "cuda")
    work = fine_tune_work(run.scenario, plan["rows_per_forward"])
    assert record["real_tokens_per_s_per_gpu_bound"] / record["tokens_per_s_per_gpu_bound"] == pytest.approx(
        work.real_fraction[longest], rel=1e-12
    )
    assert 0 < work.real_fraction[longest] < 1
    # static padding: every step of the whole fine-tune costs the step's bound
    ft = record["fine_tune"]
    assert ft["time_s"] == pytest.approx(ft["steps"] * step_s, rel=1e-12)
    assert ft["usd"] == pytest.approx(ft["time_s"] / 3600 * 2 * 2.5, rel=1e-12)


def test_a_plan_the_backend_cannot_run_is_refused_naming_file_variant_and_card(tmp_path):
    """No --backend: torch's plan, which has no fsdp (one device)."""
    from harness.basics.errors import SpecError
    from harness.projection.gpu_projection import GpuRequest, project

    with pytest.raises(SpecError) as info:
        project(GpuRequest("scenarios/gemma270m.yaml", None, ["h100-sxm:2"], {}, "auto", tmp_path, None))
    assert str(info.value) == (
        "scenarios/gemma270m.yaml [default] on 2x h100-sxm: parallel.fsdp: 2 (of parallel.devices 2): this backend "
        "has no fsdp parallelism (its axes: none: one device)"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nbogus: 1\n")
    with pytest.raises(SpecError) as info:
        project(GpuRequest(str(bad), None, ["h100-sxm:1"], {}, "auto", tmp_path, None))
    assert str(info.value).startswith(f"{bad}: bogus")


def test_an_unpriced_projection_without_points_is_the_bound_alone():
    from harness.projection.gpu_projection import gpu_card, lines, project_scenario
    from harness.run import registry
    from harness.scenario.loader import resolve_runs

    (run,) = resolve_runs("scenarios/gemma270m.yaml")
    card = gpu_card("h100-sxm:1")
    record = project_scenario(run.scenario, card, None, registry.get("torch").capabilities, "w1", points=[])
    assert record["plan"]["device_kind"] == "cuda"
    assert record["price"] is None and record["usd_per_1m_real_tokens_bound"] is None
    assert record["fine_tune"]["usd"] is None
    assert record["calibration"] == {
        "ratio": None,
        "same_class": None,
        "note": "no published run is calibrated: the bound alone",
    }
    record.update(scenario={"name": "gemma270m", "variant": "default"}, backend="torch")
    assert "whole fine-tune: " in lines(record)[-3] and "$" not in "\n".join(lines(record))


def test_a_card_without_a_link_figure_has_no_links_term_and_says_so():
    """tpu-v4 has no ICI figure in the catalog: bytes that cross no known link give no
    term (not a zero, not a division by zero); the bound is compute and memory alone."""
    from harness.projection.gpu_projection import Card, Work, _terms

    card = Card("tpu-v4", 16, 275e12, 32e9, 1.2e12, 0.0, "ICI")
    terms = Work(flops=275e12, memory_bytes=2.4e12, wire_bytes=1e9).terms(card)
    assert terms == {"compute_s": 1.0, "memory_s": 2.0, "links_s": None, "bound_s": 2.0, "bound_by": "memory"}
    assert _terms(terms) == "compute 1 s, memory 2 s, links no link figure: bound by memory"
    moving_nothing = Work(flops=275e12, memory_bytes=0.0, wire_bytes=0).terms(card)
    assert moving_nothing["links_s"] == 0.0 and moving_nothing["bound_by"] == "compute"


def test_the_refusal_names_every_unsized_target_or_none():
    from harness.basics.errors import SpecError
    from harness.projection.gpu_projection import shape_of_plan

    with pytest.raises(SpecError, match=r"train.lora.target_modules: query_key_value, dense: no trainable"):
        shape_of_plan(_plan(trainable_params=None, lora_targets=("query_key_value", "dense")), ARCH)
    with pytest.raises(SpecError, match=r"train.lora.target_modules: none: no trainable"):
        shape_of_plan(_plan(trainable_params=None, lora_targets=()), ARCH)
