"""The published TPU calibration points as a set (issue 43): how many, of which
generations, method classes and stacks, each with a projection record that loads and
a ratio computed from it; docs/measurements/calibration.md shows every one of them.

What the set still lacks (a second TPU generation, an adapter point) is written as a
strict xfail: it turns into a failure, to be made a plain assertion, the day a point
that supplies it is added (docs/measurements/calibration.md says what was searched)."""

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


@pytest.mark.xfail(
    strict=True,
    reason="no published non-v6e TPU training point of a model bench builds was found (docs/measurements/calibration.md)",
)
def test_at_least_two_tpu_generations():
    assert len({p.catalog_key for p in _points()}) >= 2


@pytest.mark.xfail(
    strict=True,
    reason="no published TPU LoRA step time with its full configuration was found (docs/measurements/calibration.md)",
)
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
