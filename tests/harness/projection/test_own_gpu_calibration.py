"""This project's own GPU measurements join the GPU calibration automatically (issue 43
item 3): a training record copied into calibration_points/measured_gpu/ becomes a point,
measured / bound at its own plan and card, and the projections' lower end uses it."""

from __future__ import annotations

import json
import shutil

import pytest

from harness.plan.plan import Plan
from harness.projection import gpu_projection
from harness.projection.calibration import calibrated_low
from harness.scenario.spec import Scenario

from conftest import ROOT

QUICKSTART = ROOT / "tests" / "fixtures" / "quickstart" / "20261127T182138-gemma270m-torch-default-r0-10c5f0b1.json"
H100 = {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "count": 1, "catalog_key": "h100-sxm", "warning": None}


def gpu_record(folder, name="run.json", scale=1.0, **changes):
    """The quick start's training record as if measured on one H100, its rates x scale."""
    record = json.loads(QUICKSTART.read_text())
    record["accelerator"] = dict(H100)
    for key in ("tokens_per_s_padded_per_chip", "tokens_per_s_real_per_chip", "tokens_per_s_padded"):
        record["metrics"][key] *= scale
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        target = record
        for part in parents:
            target = target[part]
        target[leaf] = value
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(record))
    return record


def test_a_gpu_record_becomes_a_point_of_its_own_bound(tmp_path):
    record = gpu_record(tmp_path / "measured")
    (point,) = gpu_projection.own_gpu_points(tmp_path / "measured")
    seq = record["scenario"]["resolved"]["sequence"]["max_length"]
    scenario = Scenario.model_validate(record["scenario"]["resolved"])
    shape = gpu_projection.shape_of_plan(Plan.model_validate(record["plan"]), scenario.model.architecture())
    bound_s = gpu_projection.step_bound(shape, seq, gpu_projection.gpu_card("h100-sxm:1"))["step_s"]
    padded_tokens_per_step = record["plan"]["rows_per_step"] * seq
    expected = record["metrics"]["tokens_per_s_padded_per_chip"] * bound_s / padded_tokens_per_step
    assert point.ratio == pytest.approx(expected, rel=1e-12)
    assert point.catalog_key == "h100-sxm" and point.method == "lora" and point.stack == "bench torch"
    assert "run.json" in point.source


def test_the_ratio_scales_with_the_measured_rate(tmp_path):
    gpu_record(tmp_path / "a")
    gpu_record(tmp_path / "b", scale=3.0)
    (a,), (b,) = gpu_projection.own_gpu_points(tmp_path / "a"), gpu_projection.own_gpu_points(tmp_path / "b")
    assert b.ratio == pytest.approx(3 * a.ratio, rel=1e-12)


def test_records_the_bound_cannot_take_are_left_out_with_their_reason(tmp_path):
    folder = tmp_path / "measured"
    gpu_record(folder, "cpu.json", accelerator__catalog_key="cpu")
    gpu_record(folder, "failed.json", status="failed", failure={"reason": "out of memory", "kind": "oom"})
    gpu_record(folder, "dynamic.json", plan__padding="dynamic")
    gpu_record(folder, "nine.json", accelerator__count=9)
    gpu_record(folder, "unsized.json", plan__trainable_params=None)
    # a JSON file beside the records that is none (a --project-for output, a trace)
    (folder / "x.gpu-projection.json").write_text(json.dumps({"kind": "gpu-projection"}))
    assert gpu_projection.own_gpu_points(folder) == []
    skipped = sorted(gpu_projection.own_gpu_skipped(folder))
    assert skipped[:4] + skipped[5:] == [
        "cpu.json: no datasheet figures for 'cpu'",
        "dynamic.json: dynamic padding: no one padded length to bound",
        "failed.json: not a successful training run",
        "nine.json: 9 GPUs: more than one host",
        "x.gpu-projection.json: not a bench result record (" + skipped[5].split("(", 1)[1],
    ]
    assert skipped[4] == "unsized.json: LoRA on modules bench cannot size: no trainable-parameter count"


def test_an_own_point_joins_the_lower_end_of_its_method_class(tmp_path):
    """The published LoRA point is NeMo's (0.182); a slower own LoRA run takes the low end."""
    published_low = calibrated_low("lora", gpu_projection.gpu_points(tmp_path / "none"))
    gpu_record(tmp_path / "measured")
    (own,) = gpu_projection.own_gpu_points(tmp_path / "measured")
    scale = published_low.ratio / own.ratio / 2  # half the published low
    shutil.rmtree(tmp_path / "measured")
    gpu_record(tmp_path / "measured", scale=scale)
    low = calibrated_low("lora", gpu_projection.gpu_points(tmp_path / "measured"))
    assert low.same_class and "bench's own measurement run.json" in low.point.source
    assert low.ratio == pytest.approx(published_low.ratio / 2, rel=1e-9)


def test_the_package_folder_ships_and_every_record_in_it_is_a_point_or_says_why_not():
    folder = ROOT / "harness" / "projection" / "calibration_points" / gpu_projection.MEASURED_FOLDER
    assert (folder / "README.md").is_file()
    records = [p for p in folder.rglob("*.json") if not p.name.endswith(".calibration.json")]
    assert len(gpu_projection.own_gpu_points()) + len(gpu_projection.own_gpu_skipped()) == len(records)


def test_the_device_suites_archive_layout_is_read(tmp_path):
    """records.tgz holds a folder per run, with the calibration probe's file beside."""
    run = tmp_path / "measured" / "gemma270m-gpu-fsdp"
    gpu_record(run, "record.json")
    (run / "abc.calibration.json").write_text("{}")
    (point,) = gpu_projection.own_gpu_points(tmp_path / "measured")
    assert "gemma270m-gpu-fsdp/record.json" in point.source


def test_a_full_host_of_eight_gpus_is_a_point_whose_bound_is_per_gpu(tmp_path):
    """8 GPUs is one host (not skipped); the measured rate is per GPU, so the bound's is
    too: the step's padded tokens / 8 GPUs / the step's bound."""
    eight = dict(H100, count=8)
    record = gpu_record(tmp_path / "measured", accelerator=eight)
    (point,) = gpu_projection.own_gpu_points(tmp_path / "measured")
    assert gpu_projection.own_gpu_skipped(tmp_path / "measured") == []
    seq = record["scenario"]["resolved"]["sequence"]["max_length"]
    scenario = Scenario.model_validate(record["scenario"]["resolved"])
    shape = gpu_projection.shape_of_plan(Plan.model_validate(record["plan"]), scenario.model.architecture())
    bound_s = gpu_projection.step_bound(shape, seq, gpu_projection.gpu_card("h100-sxm:8"))["step_s"]
    per_gpu_tokens_per_step = record["plan"]["rows_per_step"] * seq / 8
    expected = record["metrics"]["tokens_per_s_padded_per_chip"] * bound_s / per_gpu_tokens_per_step
    assert point.ratio == pytest.approx(expected, rel=1e-12)
    assert point.source.endswith("(gemma270m, torch, h100-sxm:8)")


def test_records_are_read_in_the_order_of_their_paths_as_text(tmp_path):
    """The order does not depend on the file system's: "a-b/" before "a/" ('-' < '/'),
    top-level files in their place; projection records beside them are not records."""
    folder = tmp_path / "measured"
    for name in ("z.json", "a/run.json", "a-b/run.json"):
        *parents, leaf = name.split("/")
        gpu_record(folder.joinpath(*parents), leaf, status="failed", failure={"reason": "oom", "kind": "oom"})
    tpu = ROOT / "harness" / "projection" / "calibration_points" / "llama31_8b_v6e-8.projection.json"
    shutil.copy(tpu, folder / "a" / "llama31_8b_v6e-8.projection.json")
    assert gpu_projection.own_gpu_skipped(folder) == [
        "a-b/run.json: not a successful training run",
        "a/run.json: not a successful training run",
        "z.json: not a successful training run",
    ]


def test_a_file_that_is_no_record_is_named_with_the_loaders_reason_in_one_short_line(tmp_path):
    from harness.records.store import load_record

    folder = tmp_path / "measured"
    folder.mkdir()
    name = "n" * 180 + ".json"  # a long name: the loader's message quotes the path
    (folder / name).write_text("{}\n")
    with pytest.raises(ValueError) as refused:
        load_record(folder / name)
    reason = " ".join(str(refused.value).split())
    assert len(reason) > 200
    assert gpu_projection.own_gpu_skipped(folder) == [f"{name}: not a bench result record ({reason[:200]})"]


def test_the_device_suites_calibration_probes_beside_a_record_are_neither_points_nor_skipped(tmp_path):
    """The suite's archive keeps <run_id>.calibration.json (and .projection.json) beside
    each record: not records, and not worth a line; a good record is no skip either."""
    folder = tmp_path / "measured"
    gpu_record(folder / "run1", "record.json")
    (folder / "run1" / "abc.calibration.json").write_text(json.dumps({"probe": 1}))
    (folder / "run1" / "abc.projection.json").write_text(json.dumps({"kind": "tpu_aot"}))
    assert len(gpu_projection.own_gpu_points(folder)) == 1
    assert gpu_projection.own_gpu_skipped(folder) == []


def test_the_shipped_h200_records_are_points_of_their_own_bound_recomputed():
    """The device suite's records in the package (W1 on one H200, 2026-11-28): each one a
    point, its ratio recomputed here from the record's own measured rate, plan and card."""
    folder = ROOT / "harness" / "projection" / "calibration_points" / gpu_projection.MEASURED_FOLDER
    shipped = {p.name: json.loads(p.read_text()) for p in folder.glob("*.json")}
    assert shipped and not gpu_projection.own_gpu_skipped()
    points = {next(p for p in shipped if p in point.source): point for point in gpu_projection.own_gpu_points()}
    assert points.keys() == shipped.keys()
    for name, record in shipped.items():
        seq = record["scenario"]["resolved"]["sequence"]["max_length"]
        scenario = Scenario.model_validate(record["scenario"]["resolved"])
        shape = gpu_projection.shape_of_plan(Plan.model_validate(record["plan"]), scenario.model.architecture())
        card = gpu_projection.gpu_card(f"{record['accelerator']['catalog_key']}:{record['accelerator']['count']}")
        bound_s = gpu_projection.step_bound(shape, seq, card)["step_s"]
        expected = record["metrics"]["tokens_per_s_padded_per_chip"] * bound_s / (record["plan"]["rows_per_step"] * seq)
        assert points[name].ratio == pytest.approx(expected, rel=1e-12), name
        assert 0.1 < points[name].ratio < 0.3 and points[name].method == "lora", name  # 0.192 and 0.183 printed
