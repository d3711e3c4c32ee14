"""The published TPU calibration points as a set (issue 43): how many, of which
generations, method classes and stacks, each with a projection record that loads and
a ratio computed from it; docs/measurements/calibration.md shows every one of them.
The set spans three generations (v4, v5p, v6e), both method classes and three stacks."""

from __future__ import annotations

import json

import pytest


def _points():
    from harness.projection import calibration

    return calibration.PUBLISHED


def test_at_least_four_tpu_points_each_with_a_record_that_loads_and_a_ratio():
    from harness.projection import calibration

    points = _points()
    assert len(points) >= 4
    assert len({p.id for p in points}) == len(points)
    for entry in points:
        assert entry.catalog_key.startswith("tpu-") and entry.slice.startswith(entry.catalog_key + "-")
        assert entry.projection, entry.id
        record = json.loads((calibration.PROJECTIONS / entry.projection).read_text())
        assert calibration.configuration_mismatch(entry, record) is None, entry.id
        assert entry.projected is not None  # loaded and checked against the entry
        assert entry.bound_tokens_per_s_per_chip and entry.measured_over_bound, entry.id
        assert 0 < entry.measured_over_bound < 1, entry.id
        # the transcribed figures agree with each other
        tokens_per_chip = entry.global_batch * entry.seq_len / record["slice"]["chips"]
        assert entry.measured_tokens_per_s_per_chip == pytest.approx(tokens_per_chip / entry.measured_step_s, rel=2e-3)
    assert [p.ratio for p in calibration.published_points()] == [e.measured_over_bound for e in points]


def test_at_least_one_point_of_a_stack_other_than_maxtext():
    stacks = {p.stack for p in _points()}
    assert "MaxText" in stacks and len(stacks) >= 2, stacks


def test_at_least_two_tpu_generations():
    assert len({p.catalog_key for p in _points()}) >= 2
    assert {p.catalog_key for p in _points()} == {"tpu-v4", "tpu-v5p", "tpu-v6e"}


def test_at_least_one_adapter_point():
    from harness.projection.calibration import method_class

    assert any(method_class(p.method) == "adapter" for p in _points())


def test_the_calibration_page_shows_every_point_with_its_records_ratio():
    from harness.projection import calibration

    doc = (calibration.ROOT / "docs" / "measurements" / "calibration.md").read_text()
    assert "2026-11-28" in doc
    rows = [line for line in doc.splitlines() if line.startswith("| ") and "`" in line]
    for entry in _points():
        (row,) = [line for line in rows if f"`{entry.id}`" in line]
        assert entry.source["commit"][:8] in row and entry.slice in row
        assert f"{entry.bound_tokens_per_s_per_chip:,.0f}" in row
        assert f"**{entry.measured_over_bound:.3f}**" in row
        # the command that wrote the record is on the page
        record = json.loads((calibration.PROJECTIONS / entry.projection).read_text())
        scenario = next(arg for arg in record["provenance"]["command"] if arg.endswith(".yaml"))
        assert scenario in doc and f"--compile-for {record['slice']['name']}" in doc


# --------------------------------------------------------------------------- #43 mutation survivors
def test_the_points_table_loads_from_the_package_and_from_a_folder(tmp_path):
    from harness.projection import calibration

    ids = [p.id for p in calibration.PUBLISHED]
    assert [p.id for p in calibration.load_published()] == ids
    (tmp_path / calibration.TABLE).write_text((calibration.PROJECTIONS / calibration.TABLE).read_text())
    loaded = calibration.load_published(tmp_path)
    assert isinstance(loaded, tuple) and loaded == calibration.PUBLISHED


def test_a_published_point_keeps_its_generation_method_and_stack():
    from harness.projection import calibration

    points = calibration.published_points()
    with_ratio = [e for e in calibration.PUBLISHED if e.measured_over_bound is not None]
    assert [(p.source, p.catalog_key, p.method, p.stack) for p in points] == [
        (e.label, e.catalog_key, e.method, e.stack) for e in with_ratio
    ]
    maxtext = next(p for p in points if p.stack == "MaxText")
    assert (maxtext.catalog_key, maxtext.method) == ("tpu-v6e", "full")
    assert maxtext.source.startswith("github.com/AI-Hypercomputer/tpu-recipes training/trillium/Llama3.1-8B-MaxText/")


def test_a_projection_record_of_another_configuration_is_refused_naming_the_field():
    from harness.projection import calibration

    entry = next(e for e in calibration.PUBLISHED if e.id == "maxtext-llama31-8b-v6e-8")
    record = json.loads((calibration.PROJECTIONS / entry.projection).read_text())
    assert calibration.configuration_mismatch(entry, record) is None

    def changed(path, value):
        copy = json.loads(json.dumps(record))
        *parents, leaf = path
        target = copy
        for key in parents:
            target = target[key]
        target[leaf] = value
        return calibration.configuration_mismatch(entry, copy)

    resolved = ("scenario", "resolved")
    assert changed(("slice", "name"), "tpu-v6e-4") == "slice.name is 'tpu-v6e-4', the published run's is 'tpu-v6e-8'"
    assert (
        changed((*resolved, "model", "preset"), "gemma-3-270m")
        == "model.preset is 'gemma-3-270m', the published run's is 'llama-3.1-8b'"
    )
    assert changed((*resolved, "train", "method"), "lora") == "train.method is 'lora', the published run's is 'full'"
    assert changed((*resolved, "train", "global_batch"), 12) == "train.global_batch is 12, the published run's is 24"
    assert changed(("shapes", 0, "seq_len"), 4096) == "shapes.seq_len is [4096], the published run's is [8192]"


def test_method_classes_and_the_note_that_names_the_lowest_point_and_its_pool():
    from harness.projection.calibration import CalibrationPoint, calibrated_low, method_class

    assert (method_class("lora"), method_class("full")) == ("adapter", "full")
    a = CalibrationPoint("A", "h100-sxm", "lora", "s", 0.5)
    b = CalibrationPoint("B", "h100-sxm", "lora", "s", 0.25)
    full = CalibrationPoint("C", "tpu-v6e", "full", "t", 0.125)
    adapter = calibrated_low("lora", [a, full, b])
    assert adapter.note() == (
        "the lowest measured / bound of the adapter points: B (h100-sxm, lora, s): 0.25; "
        "points: A (h100-sxm, lora, s): 0.5; B (h100-sxm, lora, s): 0.25"
    )
    no_full = calibrated_low("full", [a, b])
    assert (no_full.method_class, no_full.same_class, no_full.ratio) == ("full", False, 0.25)
    assert no_full.note() == (
        "no full point is calibrated, so the lowest measured / bound of all points: B (h100-sxm, lora, s): 0.25; "
        "points: A (h100-sxm, lora, s): 0.5; B (h100-sxm, lora, s): 0.25"
    )
    assert calibrated_low("full", [a, full, b]).note().startswith("the lowest measured / bound of the full points: C")
