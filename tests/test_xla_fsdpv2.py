"""Backend `xla-fsdpv2` for real: torch_xla on the CPU PJRT device with 4 virtual
devices, through FSDPv2. torch_xla pins its own torch, so it lives in its own
environment: BENCH_PYTHON_XLA_FSDPV2 names that interpreter (.ci/run makes it)."""

from __future__ import annotations

import pytest

from conftest import TINY, bench, records_in, stack_or_skip, write_scenario

pytestmark = pytest.mark.slow


def new_shapes_after_warmup(record) -> int:
    """Step shapes (every micro-batch's length) first seen after warm-up: each is a graph."""
    seen, new = set(), 0
    for step in record["raw"]["loop"]["steps"]:
        shape = tuple(step["seq_lens"])
        if shape not in seen and step["phase"] == "measure":
            new += 1
        seen.add(shape)
    return new


@pytest.fixture(scope="module")
def padding_records(tmp_path_factory):
    stack_or_skip("xla-fsdpv2", "torch_xla", ".ci/run builds .venv-xla")
    out = tmp_path_factory.mktemp("xla") / "r"
    done = bench("run", "scenarios/padding.yaml", "--backend", "xla-fsdpv2", "--set", "model.preset=tiny-gemma3",
                 "--results-dir", str(out), "--no-progress", timeout=1500)
    assert done.returncode == 0, done.stderr + done.stdout
    return {r["scenario"]["resolved"]["sequence"]["padding"]: r for r in records_in(out)}


def test_padding_matrix_writes_three_records_shown_with_compiles(padding_records):
    assert sorted(padding_records) == ["bucketed", "dynamic", "static"]
    for record in padding_records.values():
        assert record["status"] == "ok", record["failure"]
        assert record["metrics"]["num_compiles"] > 0 and record["metrics"]["step_time_s"]["n"] > 0
        extra = record["raw"]["extra"]
        assert extra["mesh"]["fsdp"] == 4
        assert extra["num_params_sharded_on_fsdp"] == extra["num_params_total"]  # FSDPv2 sharded every one
        assert record["scenario"]["profile"]["name"] == "cpu"


def test_static_has_no_recompiles_dynamic_one_per_new_shape_bucketed_at_most_buckets(padding_records):
    static, dynamic, bucketed = (padding_records[k] for k in ("static", "dynamic", "bucketed"))
    assert static["metrics"]["num_recompiles"] == 0
    expected = new_shapes_after_warmup(dynamic)
    assert expected > 0
    assert dynamic["metrics"]["num_recompiles"] == expected
    buckets = bucketed["scenario"]["resolved"]["sequence"]["buckets"]
    assert bucketed["metrics"]["num_recompiles"] <= len(buckets)


def test_bench_show_prints_compiles_and_step_times(padding_records, tmp_path):
    import json

    for name, record in padding_records.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(record))
        done = bench("show", str(path), timeout=60)
        assert done.returncode == 0 and "compiles / recompiles" in done.stdout and "step time median" in done.stdout


def test_first_losses_match_the_torch_backend(tmp_path):
    stack_or_skip("xla-fsdpv2", "torch_xla", ".ci/run builds .venv-xla")
    path = write_scenario(tmp_path, TINY)
    common = ["--no-progress", "--set", "train.micro_batch=1", "--set", "sequence.max_length=256",
              "--set", "train.steps=5", "--set", "train.window_steps=0"]
    losses = {}
    for backend in ("torch", "xla-fsdpv2"):
        done = bench("run", str(path), "--backend", backend, "--results-dir", str(tmp_path / backend), *common, timeout=900)
        assert done.returncode == 0, done.stderr + done.stdout
        (record,) = records_in(tmp_path / backend)
        losses[backend] = [s["loss"] for s in record["raw"]["loop"]["steps"][:5]]
    assert losses["xla-fsdpv2"] == pytest.approx(losses["torch"], rel=1e-3)
