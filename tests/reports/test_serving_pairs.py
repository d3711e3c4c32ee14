"""A serving projection beside a serving measurement, by the training projection's rule:
only runs of the same configuration (scenario, accelerator and chips, the engine the
projection assumes) at the projected point's closed-loop load."""

from __future__ import annotations

import copy

import pytest

from harness.records.result import as_record
from reports.serving_pairs import beside_measurements, measured_load

from records import serve_record


def projection(points=((1, 4, 200.0), (8, 4, 1000.0))) -> dict:
    return {
        "scenario": "tiny",
        "target": "h100-sxm:2",
        "catalog_key": "h100-sxm",
        "chips": 2,
        "engine": "vllm",
        "calibration": {"low": 0.5, "high": 1.0},
        "points": [
            {"concurrency": c, "output_tokens": out, "output_tok_s": [bound * 0.5, bound]} for c, out, bound in points
        ],
    }


def measured(concurrency=8, output_tokens=4, backend="serve-vllm", chips=2, key="h100-sxm", **load):
    record = serve_record(10)
    record["backend"]["name"] = backend
    record["accelerator"].update(catalog_key=key, count=chips)
    record["scenario"]["resolved"]["serve"] = {
        "output_tokens": output_tokens,
        "load": {"concurrency": concurrency, **load},
    }
    return as_record(record)


def test_a_measurement_stands_beside_the_point_of_its_own_load():
    run = measured(concurrency=8)
    (line,) = beside_measurements([run], [projection()])
    tok_s = run.metrics.output_throughput_tok_s
    assert "at concurrency 8" in line and f"is {tok_s / 1000.0:.2f} of the projected bound (1000 tok/s" in line


@pytest.mark.parametrize(
    "changes",
    [
        {"concurrency": 4},  # a load the projection has no point for
        {"output_tokens": 64},
        {"backend": "serve-local"},  # another engine than the projection assumes
        {"chips": 1},
        {"key": "h200"},
        {"concurrency": None, "request_rate": 2.0},  # an open loop: no bound models it
    ],
)
def test_a_measurement_of_another_configuration_or_load_is_never_paired(changes):
    assert beside_measurements([measured(**changes)], [projection()]) == []


def test_a_sweeps_point_is_paired_at_its_own_concurrency():
    run = measured()
    swept = copy.deepcopy(run.model_dump(mode="json", by_alias=True))
    swept["sweep"] = {"axis": "concurrency", "value": 1, "index": 0, "id": "s"}
    assert measured_load(as_record(swept)) == (1, 4)
    (line,) = beside_measurements([as_record(swept)], [projection()])
    assert "at concurrency 1" in line and "(200 tok/s" in line
