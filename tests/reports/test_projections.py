"""The report's projected sections (reports/projections.py): a padding matrix's whole
fine-tune (one compile static, one per distinct length dynamic), and a stored TPU
projection shown apart, with measured / projected where a measured run matches."""

from __future__ import annotations

import pytest

from records import make_record


def _padding_records():
    from harness.projection.fine_tune import fine_tune_work
    from harness.scenario.loader import resolve_runs

    out = []
    for policy in ("static", "dynamic"):
        scenario = resolve_runs(
            "scenarios/padding.yaml",
            {"sequence.padding": policy, "data.num_examples": 48, "model.preset": "tiny-gemma3"},
        )[0].scenario
        # warm-up 5 s (2 compiles) at one length met first, measured steps 1 s, one measured recompile of 3 s
        record = make_record([1.0, 1.0, 3.0], warmup=(5.0,), compiles=[2, 0, 0, 1], variant=f"padding={policy}")
        record["scenario"]["resolved"] = scenario.model_dump(mode="json")
        record["plan"] = {"rows_per_forward": 4}
        # the warm-up step met one of the fine-tune's lengths (an input here, not a result)
        record["raw"]["loop"]["steps"][0]["seq_lens"] = fine_tune_work(scenario, 4).shapes[:1]
        out.append(record)
    return out


def test_padding_matrix_projected_fine_tune_line_and_compiles():
    from reports.model import build
    from reports.render import markdown

    report = build(_padding_records())
    static, dynamic = report.fine_tunes
    assert static.compiles == 1 and dynamic.compiles > 1
    assert static.steps == dynamic.steps == 6  # 48 examples / 8 rows a step, one epoch
    # by hand: setup 1 s + first compile (5 - 1) s + each later shape (3 - 1) s + 6 steps x 1 s
    assert static.minutes == pytest.approx((1.0 + 4.0 + 0 * 2.0 + 6 * 1.0) / 60)
    assert dynamic.minutes == pytest.approx((1.0 + 4.0 + (dynamic.compiles - 1) * 2.0 + 6 * 1.0) / 60)
    (line,) = report.fine_tune_lines
    assert f"projected fine-tune: static {static.minutes:.3g} min, dynamic {dynamic.minutes:.3g} min" in line
    assert "Projected fine-tune (projected, not measured)" in markdown(report)


def test_a_projection_is_shown_apart_with_measured_over_projected():
    from harness.projection.projection import Program, ProjectionRecord, TpuSlice, shape_projection
    from reports.model import build
    from reports.render import markdown

    chip = TpuSlice("tpu-v5e-8", "tpu-v5e", 8, "v5e:2x4", (2, 4, 1), 16 * 1024**3, 819e9, 197e12)
    plan = {"rows_per_step": 32, "rows_per_forward": 32, "accumulation": 1, "devices": 8}
    program = Program(name="p", runs_per_step=1, compile_s=2.0, memory_bytes=1024**3, flops=4e12, bytes_accessed=1e9)
    shape = shape_projection(512, plan, [program], chip, 1.2, 4e12)
    projection = ProjectionRecord(
        scenario={"name": "tiny", "variant": "default", "resolved": {"train": {"method": "lora"}}},
        backend="torchax",
        slice=chip.to_json(),
        price=None,
        plan=plan,
        shapes=[shape],
        provenance={},
    )
    measured = make_record(
        [0.5] * 4, backend="torchax", kind="tpu", device="TPU v5 lite", catalog_key="tpu-v5e", chips=8
    )
    elsewhere = make_record([0.5] * 4, backend="torchax")  # on a CPU: not the same configuration
    report = build([measured, elsewhere], projections=[projection])
    (row,) = report.projected
    # make_record: 2048 padded tokens a step, 0.5 s a step, 8 chips
    assert row.measured_over_projected == pytest.approx(2048 / 0.5 / 8 / shape.tokens_per_s_per_chip_bound)
    assert row.fits == "yes" and row.slice == "tpu-v5e-8"
    text = markdown(report)
    assert "Projected on TPU (compiler's bound, not measured)" in text
    assert len(report.sections[0].rows) == 2  # the projection is no measured row


def test_the_report_flags_a_flops_mismatch_and_gives_real_and_padded_units():
    from harness.projection.projection import Program, ProjectionRecord, TpuSlice, shape_projection
    from reports.model import build
    from reports.render import html, markdown

    chip = TpuSlice("tpu-v5e-8", "tpu-v5e", 8, "v5e:2x4", (2, 4, 1), 16 * 1024**3, 819e9, 197e12)
    plan = {"rows_per_step": 32, "rows_per_forward": 32, "accumulation": 1, "devices": 8}
    program = Program(name="p", runs_per_step=1, compile_s=2.0, memory_bytes=1024**3, flops=4e12, bytes_accessed=1e9)
    shape = shape_projection(512, plan, [program], chip, 1.2, 5.6e12, real_fraction=0.5)
    projection = ProjectionRecord(
        scenario={"name": "tiny", "variant": "default", "resolved": {"train": {"method": "lora"}}},
        backend="torchax",
        slice=chip.to_json(),
        price=None,
        plan=plan,
        shapes=[shape],
        provenance={},
    )
    report = build([make_record([0.5] * 4)], projections=[projection])
    (row,) = report.projected
    assert row.real_tokens_per_s_per_chip_bound == pytest.approx(row.tokens_per_s_per_chip_bound / 2)
    assert row.usd_per_1m_real_bound == pytest.approx(2 * row.usd_per_1m_bound)
    assert row.flops_flag.startswith("length 512: FLOPs check: compiled 4e+12 / bench 5.6e+12 = 0.714")
    for text in (markdown(report), html(report)):
        assert "real tokens/s/chip bound" in text and "padded tokens/s/chip bound" in text
        assert "outside [0.9, 1.5]" in text


def test_a_measured_fine_tune_says_its_record_setup_and_compile_host():
    from harness.projection.fine_tune import from_record
    from harness.records.result import as_records
    from harness.scenario.loader import validate

    raw = _padding_records()[0]
    raw["accelerator"].update(count=2, catalog_key="h100-sxm", kind="cuda")
    (record,) = as_records([raw])
    scenario = validate(record.scenario.resolved, "t")
    ft = from_record(record, scenario, 3.0)
    assert ft.basis == (
        f"measured: record {record.run_id} (setup, first compile, compile seconds per new shape, mean steady step)"
    )
    assert ft.compile_host == "h100-sxm (the measured run's own)" and ft.compile_in_time and ft.setup_s == 1.0
    assert ft.usd == pytest.approx(2 * ft.time_s / 3600 * 3.0)
    raw["raw"].pop("setup_s")
    (no_setup,) = as_records([raw])
    ft = from_record(no_setup, scenario)
    assert ft.setup_s is None and "(setup not recorded: not projected, first compile" in ft.basis and ft.usd is None
    raw["raw"]["loop"] = None
    assert from_record(as_records([raw])[0], scenario) is None
