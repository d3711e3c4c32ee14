"""TPU projected against GPU measured on one page (reports/tpu_vs_gpu.py, issue 37), over
records shaped like the accelerator suite's (scenarios/suites/accelerator.yaml: W1 at
full shape on one H100, the scenario resolved as the suite resolves it) and a TPU
projection of the same scenario; every ratio recomputed here from the figures."""

from __future__ import annotations

import pytest

from records import make_record

SUITE_SET = {
    "tasks": ["train"],
    "parallel.devices": 1,
    "model.attention": "sdpa",
    "backend_options.torch.compile": True,
}


def _resolved(overrides):
    from harness.loader import resolve_runs

    return resolve_runs("scenarios/gemma270m.yaml", overrides, None)[0].scenario


@pytest.fixture(scope="module")
def page():
    from harness.cost import load_catalog, price_for
    from harness.fine_tune import fine_tune_work
    from harness.projection import Program, ProjectionRecord, shape_projection, tpu_slice
    from harness.tpu_plan import _tpu_fine_tune

    gpu_scenario = _resolved(SUITE_SET)
    # the suite's record: 1 H100, W1's 32 x 512 padded tokens a step, about half real
    gpu = make_record(
        [0.40, 0.41, 0.39, 0.40],
        name="gemma270m",
        backend="torch",
        kind="cuda",
        device="NVIDIA H100 80GB HBM3",
        catalog_key="h100-sxm",
        tokens=8428,
        padded=16384,
        overrides=SUITE_SET,
    )
    gpu["scenario"]["resolved"] = gpu_scenario.model_dump(mode="json")
    gpu["scenario"]["file"] = "scenarios/gemma270m.yaml"
    gpu["plan"] = {"rows_per_forward": 4}

    tpu_scenario = _resolved({"tasks": ["train"], "parallel.devices": 4})
    chip = tpu_slice("v5p-8")
    rate = price_for(chip.catalog_key, None, load_catalog()).usd_per_chip_hour
    work = fine_tune_work(tpu_scenario, 4)
    plan = {"rows_per_step": 32, "rows_per_forward": 16, "accumulation": 2, "devices": 4}
    grad = Program(
        name="grad", runs_per_step=2, compile_s=200.0, memory_bytes=10 * 1024**3, flops=2.43e12, bytes_accessed=5.8e10
    )
    update = Program(
        name="update", runs_per_step=1, compile_s=20.0, memory_bytes=1024**3, flops=1e6, bytes_accessed=1e8
    )
    shape = shape_projection(512, plan, [grad, update], chip, rate, 2.451e12, work.real_fraction[512])

    def projection(resolved):
        return ProjectionRecord(
            scenario={"name": "gemma270m", "variant": "default", "resolved": resolved},
            backend="torchax",
            slice=chip.to_json(),
            price=None,
            plan=plan,
            shapes=[shape],
            fine_tune=_tpu_fine_tune(work, [shape], chip, rate),
            provenance={},
        )

    return {
        "gpu": gpu,
        "serve": _suite_serve_record(gpu_scenario),
        "projection": projection(tpu_scenario.model_dump(mode="json")),
        "shape": shape,
        "chip": chip,
    }


def _suite_serve_record(scenario):
    """The suite's W1 serve record on the same H100: the stored serve fixture, moved to
    the scenario and card (its $/1M output tokens re-priced at a stated $3/h)."""
    import copy
    import json
    from pathlib import Path

    fixture = Path("tests/fixtures/records_v1/20261126T100550-tiny-v1-serve-local-default-r0-4a83aa06.json")
    record = copy.deepcopy(json.loads(fixture.read_text()))
    record["scenario"].update(name="gemma270m", file="scenarios/gemma270m.yaml")
    record["scenario"]["resolved"] = scenario.model_dump(mode="json")
    record["accelerator"] = {"kind": "cuda", "count": 1, "name": "NVIDIA H100 80GB HBM3", "catalog_key": "h100-sxm"}
    record["cost"]["usd_per_1m_output_tokens"] = 0.8
    record["cost"]["price"].update(accelerator="h100-sxm", usd_per_chip_hour=3.0, source="test")
    return record


def _report(records, projections):
    from reports.model import build

    return build(records, projections=projections)


def test_the_page_says_projected_tpu_against_measured_gpu_with_its_calibration(page):
    from reports.render import html, markdown

    report = _report([page["gpu"], page["serve"]], [page["projection"]])
    (sentence,) = report.tpu_vs_gpu.sentences
    gpu = next(r for r in report.runs if r.task == "train")
    shape = page["shape"]
    faster = shape.real_tokens_per_s_per_chip_bound * 4 / gpu.metrics.tokens_per_s_real
    cheaper = gpu.cost.usd_per_1m_tokens_real / shape.usd_per_1m_real_tokens_bound
    assert sentence.startswith(
        "gemma270m [default]: tpu-v5p-8 (projected, compiler bound) vs 1x h100-sxm on torch (measured)"
    )
    assert (
        f"at most {faster:.3g}x faster" in sentence
        and f"at least {cheaper:.3g}x cheaper per 1M real tokens" in sentence
    )
    assert "calibration: no measured / bound yet for tpu-v5p" in sentence
    # v6e's calibration is context only, never an estimate for v5p
    assert "measured / bound elsewhere, not applied here: tpu-v6e 0.50-0.5" in sentence
    assert "estimated" not in sentence
    # allowed differences are listed, not refused
    assert (
        "backend_options.torch.compile" in sentence and "model.attention" in sentence and "parallel.devices" in sentence
    )
    # real-token units: the measured rate and the projected one are both per real token
    assert shape.real_fraction == pytest.approx(0.514, abs=0.01)
    for text in (markdown(report), html(report)):
        assert "TPU (projected) vs GPU (measured)" in text and "(projected, compiler bound)" in text
        assert "calibration: no measured / bound yet" in text
        assert "tpu-v5p-8 on torchax (PROJECTED)" in text  # its row in the workload $ table
    measured, projected = report.workloads
    spec = gpu.scenario.resolved["workload"]
    ft = page["projection"].fine_tune
    assert projected.train_usd == ft.usd
    assert projected.total_usd == pytest.approx(
        spec["fine_tunes"] * ft.usd + spec["served_tokens_millions"] * measured.serve_usd_per_1m
    )


@pytest.mark.parametrize("field, value", [("sequence.max_length", 256), ("data.num_examples", 64)])
def test_a_pair_differing_in_data_or_sequence_is_refused_naming_the_field(page, field, value):
    import copy

    from harness.loader import set_dotted
    from harness.textsafe import md_cell
    from reports.model import as_records
    from reports.tpu_vs_gpu import markdown_lines, pair

    changed = copy.deepcopy(page["projection"].scenario["resolved"])
    set_dotted(changed, field, value, "test")
    other = page["projection"].model_copy(update={"scenario": {**page["projection"].scenario, "resolved": changed}})
    pairing = pair([other], as_records([page["gpu"]]))
    assert pairing.sentences == [] and pairing.workload_rows == []
    (refused,) = pairing.refused
    assert refused.endswith(f": {field} differs")
    assert f"- not paired: {md_cell(refused)}" in markdown_lines(pairing, md_cell)  # as the report escapes it


def test_a_published_calibration_gives_a_labelled_estimate(page):
    from reports.tpu_vs_gpu import calibration_text

    text = calibration_text(page["projection"], {"tpu-v5p": (0.4, "a source")})
    estimate = page["shape"].real_tokens_per_s_per_chip_bound * 0.4
    assert text == (
        f"calibration: measured / bound 0.4 on tpu-v5p (a source); estimated = bound x 0.4: {estimate:.4g} real "
        "tokens/s per chip (estimated)"
    )


def test_the_tpu_fine_tune_keeps_this_hosts_compile_apart(page):
    ft = page["projection"].fine_tune
    assert not ft.compile_in_time and "not a TPU VM" in ft.compile_host
    assert ft.setup_s is None
    # every step at the bound: 256 micro-batches at 512 x the grad bound + 32 updates
    shape = page["shape"]
    grad, update = shape.terms
    assert ft.time_s == pytest.approx(256 * grad.bound_s + 32 * update.bound_s)
    assert ft.length_bounds == {512: grad.bound_s} and ft.length_basis == {512: "compiled"}


def _step_bound_recomputed(record: dict) -> float:
    """The projection's step bound from its programs and the chip's datasheet, apart
    from harness.projection: per program, runs x max(FLOPs / peak, bytes / HBM
    bandwidth, collective bytes / ICI bandwidth); the micro-batch program's FLOPs the
    larger of the compiler's and bench's where the check flagged them."""
    from harness.accelerators import HBM_BYTES_PER_S, ICI_BYTES_PER_S, PEAK_BF16_FLOPS

    key = record["slice"]["catalog_key"]
    (shape,) = record["shapes"]
    total = 0.0
    for i, program in enumerate(shape["programs"]):
        flops = program["flops"]
        if i == 0 and shape["flops_flag"]:
            flops = max(flops, shape["bench_flops_per_device_per_forward"])
        moved = sum(c["bytes"] for c in program["collectives"].values())
        seconds = max(
            flops / PEAK_BF16_FLOPS[key], program["bytes_accessed"] / HBM_BYTES_PER_S[key], moved / ICI_BYTES_PER_S[key]
        )
        total += program["runs_per_step"] * seconds
    return total


def test_each_published_measurement_is_bounded_by_a_committed_projection_of_its_configuration():
    """harness/calibration.py: every published TPU measurement has the projection record
    of its own configuration (slice, model, method, global batch, sequence) committed in
    benchmarks/calibration/, written by `bench plan --compile-for`; its bound and
    measured / bound recomputed here from the record's programs and the datasheet."""
    import json

    from harness import calibration

    assert len(calibration.PUBLISHED) >= 2
    docs = (calibration.ROOT / "docs" / "measurements.md").read_text()
    table = [line for line in docs.splitlines() if "Llama3.1-8B-MaxText" in line and line.startswith("|")]
    for entry in calibration.PUBLISHED:
        record = json.loads((calibration.PROJECTIONS / entry.projection).read_text())
        assert calibration.configuration_mismatch(entry, record) is None, entry.slice
        assert record["kind"] == "tpu_aot" and "--compile-for" in record["provenance"]["command"]
        tokens_per_chip = entry.global_batch * entry.seq_len / record["slice"]["chips"]
        bound = tokens_per_chip / _step_bound_recomputed(record)
        assert entry.bound_tokens_per_s_per_chip == pytest.approx(bound, rel=1e-9)
        assert entry.measured_over_bound == pytest.approx(entry.measured_tokens_per_s_per_chip / bound, rel=1e-9)
        # The publisher's own step time says the same tokens: a check on the transcribed figures.
        assert entry.measured_tokens_per_s_per_chip == pytest.approx(tokens_per_chip / entry.measured_step_s, rel=2e-3)
        assert 0 < entry.measured_over_bound < 1  # a bound: nothing runs faster than it
        # docs/measurements.md's calibration table shows the records' figures, not others
        row = next(line for line in table if f"| {entry.slice} |" in line)
        assert f"{entry.bound_tokens_per_s_per_chip:,.0f}" in row and f"**{entry.measured_over_bound:.3f}**" in row
    ratio, source = calibration.measured_over_bound("tpu-v6e")
    assert ratio == calibration.PUBLISHED[0].measured_over_bound
    assert source == "github.com/AI-Hypercomputer/tpu-recipes training/trillium/Llama3.1-8B-MaxText/v6e-8"
    assert calibration.measured_over_bound("tpu-v5p") is None  # never borrowed from another generation


def test_a_measurement_without_its_projection_has_no_ratio_and_a_mismatched_one_is_refused(tmp_path, monkeypatch):
    import json
    from dataclasses import replace

    from harness import calibration

    entry = calibration.PUBLISHED[0]
    assert replace(entry, projection=None).measured_over_bound is None  # never guessed
    assert replace(entry, projection="missing.projection.json").measured_over_bound is None
    record = json.loads((calibration.PROJECTIONS / entry.projection).read_text())
    record["shapes"][0]["seq_len"] = 4096
    (tmp_path / "other.projection.json").write_text(json.dumps(record))
    monkeypatch.setattr(calibration, "PROJECTIONS", tmp_path)
    with pytest.raises(ValueError, match=r"shapes.seq_len is \[4096\], the published run's is \[8192\]"):
        replace(entry, projection="other.projection.json").measured_over_bound
