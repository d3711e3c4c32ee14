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


# --------------------------------------------------------------------------- every figure, exactly
@pytest.fixture(scope="module")
def padding():
    """The padding matrix's two records (static, dynamic), as raw dicts to copy."""
    return _padding_records()


def _priced(raw, usd_per_chip_hour=3.0):
    """A copy of a raw record billed at a stated price (so its $ is recomputed here)."""
    import copy

    out = copy.deepcopy(raw)
    out["cost"]["price"]["usd_per_chip_hour"] = usd_per_chip_hour
    return out


def test_a_records_whole_fine_tune_is_priced_at_its_billed_rate_or_says_why_not(padding):
    """fine_tune_of: the fine-tune at the price the record was billed at (none without a
    cost: time only), or None and why (no loop to project from; the scenario refused, its
    error on one line, cut at 160 characters)."""
    import copy

    from harness.records.result import as_records
    from reports.projections import fine_tune_of

    # by hand: setup 1 s + first compile (5 - 1) s + 6 steps x 1 s, on 1 chip at $3/h
    (record,) = as_records([_priced(padding[0])])
    ft, why = fine_tune_of(record)
    assert why is None and ft.time_s == pytest.approx(11.0) and ft.usd == pytest.approx(11.0 / 3600 * 3.0)
    unpriced = copy.deepcopy(padding[0])
    unpriced["cost"] = None
    ft, why = fine_tune_of(as_records([unpriced])[0])
    assert why is None and ft.time_s == pytest.approx(11.0) and ft.usd is None
    no_loop = copy.deepcopy(padding[0])
    no_loop["raw"]["loop"] = None
    assert fine_tune_of(as_records([no_loop])[0]) == (None, "no steady step to project from")
    refused = copy.deepcopy(padding[0])
    refused["scenario"]["resolved"]["train"][" ".join(["no  such\n\tkey"] * 15)] = 1
    prefix = "SpecError: "
    assert fine_tune_of(as_records([refused])[0]) == (
        None,
        prefix + ("record: train." + " ".join(["no such key"] * 15))[:160],
    )


def test_records_of_one_scenario_are_validated_once_whatever_their_key_order(padding):
    import copy

    from harness.records.result import as_records
    from reports.projections import _scenario, fine_tune_of

    first = copy.deepcopy(padding[0])
    first["scenario"]["resolved"]["description"] = "validated once"  # a scenario no other test caches
    second = copy.deepcopy(first)
    second["scenario"]["resolved"] = dict(reversed(list(first["scenario"]["resolved"].items())))
    _scenario.cache_clear()
    (a, b) = as_records([first, second])
    assert fine_tune_of(a)[0] == fine_tune_of(b)[0]
    assert (_scenario.cache_info().misses, _scenario.cache_info().hits) == (1, 1)


def test_wants_fine_tune_takes_a_workload_or_a_padding_cell():
    from harness.records.result import as_records
    from reports.projections import wants_fine_tune

    workload = make_record([1.0] * 3)
    workload["scenario"]["resolved"]["workload"] = {"fine_tunes": 2.0, "fine_tune_tokens_millions": 1.0}
    plain, with_workload, padded = as_records(
        [make_record([1.0] * 3), workload, make_record([1.0] * 3, variant="padding=dynamic")]
    )
    assert wants_fine_tune(with_workload) is True
    assert wants_fine_tune(padded) is True
    assert wants_fine_tune(plain) is False


def test_fine_tune_rows_skip_what_is_not_a_fine_tune_warn_and_take_each_policys_median(padding):
    """Rows only for ok runs that price a workload or compare padding, wherever they stand
    in the list; a run that cannot be projected is a warning naming it; the line per
    scenario gives each policy's median of its runs' minutes."""
    import copy

    from harness.records.result import as_records
    from reports.projections import fine_tune_rows

    static, dynamic = padding
    failed = copy.deepcopy(static)
    failed.update(status="failed", failure={"kind": "error", "reason": "boom"})
    no_loop = copy.deepcopy(static)
    no_loop["raw"]["loop"] = None
    statics = []
    for setup_s in (4.0, 1.0, 5.0, 2.0, 3.0):  # minutes (setup + 4 + 6) / 60: median 13 / 60
        record = _priced(static)
        record["raw"]["setup_s"] = setup_s
        statics.append(record)
    records = as_records([make_record([1.0] * 3), failed, no_loop, *statics, _priced(dynamic)])
    rows, lines, warnings = fine_tune_rows(records, lambda r: f"label of {r.run_id}")
    assert warnings == ["projected fine-tune of tiny [padding=static]: no steady step to project from"]
    assert len(rows) == 6
    for row, setup_s, record in zip(rows, (4.0, 1.0, 5.0, 2.0, 3.0), records[3:8]):
        assert (row.scenario, row.run, row.steps, row.compiles) == ("tiny", f"label of {record.run_id}", 6, 1)
        assert row.minutes == pytest.approx((setup_s + 10.0) / 60)
        assert row.usd == pytest.approx((setup_s + 10.0) / 3600 * 3.0)
        assert row.basis == (
            f"measured: record {record.run_id} (setup, first compile, compile seconds per new shape, mean steady step)"
        )
    dyn = rows[5]
    assert dyn.minutes == pytest.approx((1.0 + 4.0 + (dyn.compiles - 1) * 2.0 + 6.0) / 60)
    assert lines == [
        f"tiny on torch, cpu: projected fine-tune: static {13 / 60:.3g} min, dynamic {dyn.minutes:.3g} min"
    ]


def _v5e_8():
    from harness.projection.projection import TpuSlice

    return TpuSlice("tpu-v5e-8", "tpu-v5e", 8, "v5e:2x4", (2, 4, 1), 16 * 1024**3, 819e9, 197e12)


def _shape(seq_len, flops, memory_gib):
    """One program of `flops` (compute-bound: 1e9 bytes) at 32 rows a step on v5e-8, $1.20 a chip-hour."""
    from harness.projection.projection import Program, shape_projection

    plan = {"rows_per_step": 32, "rows_per_forward": 32, "accumulation": 1, "devices": 8}
    program = Program(
        name="p", runs_per_step=1, compile_s=2.0, memory_bytes=memory_gib * 1024**3, flops=flops, bytes_accessed=1e9
    )
    return shape_projection(seq_len, plan, [program], _v5e_8(), 1.2, flops, real_fraction=0.5)


def _projection(shapes, fine_tune=None, variant="default"):
    from harness.projection.projection import ProjectionRecord

    return ProjectionRecord(
        scenario={"name": "tiny", "variant": variant, "resolved": {"train": {"method": "lora"}}},
        backend="torchax",
        slice=_v5e_8().to_json(),
        price=None,
        plan={"rows_per_step": 32, "rows_per_forward": 32, "accumulation": 1, "devices": 8},
        shapes=shapes,
        fine_tune=fine_tune,
        provenance={},
    )


def test_a_projected_row_gives_the_longest_shapes_bound_and_the_median_measured_over_it():
    """Two lengths, the shorter stored first: the row's figures are the longer's, recomputed
    from the datasheet; measured / projected is the median of the matching runs' padded
    tokens/s per chip over the bound, runs of another configuration left out."""
    from harness.projection.calibration import published_points
    from harness.projection.projection import FineTune
    from reports.model import as_records
    from reports.projections import projected_rows

    ft = FineTune(
        examples=48,
        epochs=1,
        steps=6,
        shapes=[512, 1024],
        compiles=2,
        setup_s=None,
        first_compile_s=4.0,
        shapes_compiled_first=2,
        compile_s_per_shape=2.0,
        step_time_s=0.5,
        time_s=90.0,
        usd=0.25,
        basis="stated",
        compile_in_time=False,
    )
    projection = _projection([_shape(512, 1e12, 1), _shape(1024, 4e12, 3)], fine_tune=ft)

    def tpu_run(step_s, **kwargs):
        # make_record: 2,048 padded tokens a step
        return make_record(
            [step_s] * 4, **{"backend": "torchax", "kind": "tpu", "catalog_key": "tpu-v5e", "chips": 8, **kwargs}
        )

    matching = [tpu_run(s) for s in (2.0, 0.25, 4.0, 0.5, 1.0)]  # 256 / s tokens/s/chip: median 256
    others = [
        make_record([0.01] * 4, name="other", backend="torch", chips=8),  # only the chip count the same
        tpu_run(0.01, chips=4),
        tpu_run(0.01, backend="jax"),
        tpu_run(0.01, name="other"),
        tpu_run(0.01, variant="padding=dynamic"),
    ]
    (row,) = projected_rows([projection], as_records(others + matching))
    step = 4e12 / 197e12  # compute-bound: 4e12 FLOPs at v5e's 197 TFLOP/s (1e9 bytes take 1.2 ms)
    rate = 32 * 1024 / step / 8
    usd = 1e6 / rate / 3600 * 1.2
    low = min(p.ratio for p in published_points() if p.method == "lora")
    assert (row.scenario, row.variant, row.backend, row.slice, row.chips, row.fits) == (
        "tiny",
        "default",
        "torchax",
        "tpu-v5e-8",
        8,
        "yes",
    )
    assert row.memory_gib == pytest.approx(3.0)
    assert row.step_bound_s == pytest.approx(step)
    assert row.tokens_per_s_per_chip_bound == pytest.approx(rate)
    assert row.usd_per_1m_bound == pytest.approx(usd)
    assert row.real_tokens_per_s_per_chip_bound == pytest.approx(rate / 2)
    assert row.usd_per_1m_real_bound == pytest.approx(usd * 2)
    assert (row.compiles, row.fine_tune_min) == (2, pytest.approx(1.5))
    assert row.measured_over_projected == pytest.approx(256 / rate)
    assert row.real_tokens_per_s_per_chip_low == pytest.approx(rate / 2 * low)
    assert row.usd_per_1m_real_high == pytest.approx(usd * 2 / low)
    # a LoRA projection: the lowest of the adapter-class points
    assert row.calibration.startswith(f"bound x {low:.3g} (the lowest measured / bound of the adapter points: ")


def test_a_projection_that_does_not_fit_says_no_and_has_no_bound_nor_fine_tune():
    from reports.projections import projected_rows

    (row,) = projected_rows([_projection([_shape(512, 1e12, 20)], variant="big")], [])  # 20 GiB on 16 GiB chips
    assert (row.variant, row.fits, row.memory_gib) == ("big", "no", pytest.approx(20.0))
    assert row.step_bound_s is None and row.tokens_per_s_per_chip_bound is None
    assert row.compiles is None and row.fine_tune_min is None and row.measured_over_projected is None
    assert row.real_tokens_per_s_per_chip_low is None and row.usd_per_1m_real_high is None


def test_without_any_calibration_point_a_projected_row_is_the_bound_alone(monkeypatch):
    from harness.projection import calibration
    from reports.projections import projected_rows

    monkeypatch.setattr(calibration, "published_points", lambda: [])
    (row,) = projected_rows([_projection([_shape(512, 1e12, 1)])], [])
    assert row.calibration == "no measured / bound point is known: the bound alone"
    assert row.real_tokens_per_s_per_chip_low is None and row.usd_per_1m_real_high is None
    assert row.real_tokens_per_s_per_chip_bound is not None


def test_an_even_count_of_measured_runs_takes_the_mean_of_the_two_middle_ones():
    """The median of 4 runs is the mean of the 2nd and 3rd (statistics' median, the one
    every other figure quotes), not the upper of the two."""
    from reports.model import as_records
    from reports.projections import projected_rows

    projection = _projection([_shape(1024, 4e12, 3)])
    runs = [
        make_record([s] * 4, backend="torchax", kind="tpu", catalog_key="tpu-v5e", chips=8)
        for s in (2.0, 0.5, 1.0, 0.25)
    ]
    (row,) = projected_rows([projection], as_records(runs))
    rate = 32 * 1024 / (4e12 / 197e12) / 8  # the bound's tokens/s per chip, compute-bound at v5e's peak
    measured = sorted(2048 / s / 8 for s in (2.0, 0.5, 1.0, 0.25))  # make_record: 2,048 padded tokens a step
    assert row.measured_over_projected == pytest.approx((measured[1] + measured[2]) / 2 / rate)
