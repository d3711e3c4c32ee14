"""Backend `xla-fsdpv2` for real: torch_xla on the CPU PJRT device with 4 virtual
devices, through FSDPv2. torch_xla pins its own torch, so it lives in its own
environment: BENCH_PYTHON_XLA_FSDPV2 names that interpreter (.ci/run makes it)."""

from __future__ import annotations

import pytest

from conftest import bench, records_in, stack_or_skip

pytestmark = pytest.mark.slow


def new_shapes_after_warmup(record) -> int:
    """Micro-batch lengths first seen after warm-up: each forward-backward pass is its own
    graph, so each new length (not each new combination in a step) is one compile."""
    steps = record["raw"]["loop"]["steps"]
    warm = {n for s in steps if s["phase"] == "warmup" for n in s["seq_lens"]}
    return len({n for s in steps if s["phase"] == "measure" for n in s["seq_lens"]} - warm)


@pytest.fixture(scope="module")
def padding_records(tmp_path_factory):
    """padding.yaml's matrix under its cpu profile (4 devices, 4 rows a step, 8 steps of
    which 2 warm-up) on six examples: the dynamic cell meets 3 lengths, 2 of them new
    after warm-up (steps that recompile) among steps that repeat a seen length (steady),
    and the bucketed cell one new bucket (256). So one run answers the recompile tests and
    the steady-vs-effective throughput test; 1,024 examples gave a new length almost
    every step (6 recompiles, and no steady dynamic step to compare)."""
    stack_or_skip("xla-fsdpv2", "torch_xla", ".ci/run builds .venv-xla")
    out = tmp_path_factory.mktemp("xla") / "r"
    done = bench(
        "run",
        "scenarios/padding.yaml",
        "--backend",
        "xla-fsdpv2",
        "--set",
        "model.preset=tiny-gemma3",
        "--set",
        "data.num_examples=6",
        "--results-dir",
        str(out),
        "--no-progress",
        timeout=1500,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    # The packed cell is refused in one line naming the missing kernel; the rest ran.
    assert "refused [padding=packed]" in done.stderr and "no per-example attention kernel" in done.stderr
    return {r["scenario"]["resolved"]["sequence"]["padding"]: r for r in records_in(out)}


def test_padding_matrix_writes_three_records_shown_with_compiles(padding_records):
    assert sorted(padding_records) == ["bucketed", "dynamic", "static"]
    for record in padding_records.values():
        assert record["status"] == "ok", record["failure"]
        assert record["metrics"]["num_compiles"] > 0 and record["metrics"]["measured_steps"] > 0
        assert record["metrics"]["tokens_per_s_real_effective"] > 0
        assert record["raw"]["done"]["distinct_row_shards"] == 4  # rows split, not replicated
        # No host sync inside a step (torch_xla.sync() cuts graphs; it does not wait).
        assert {s["host_syncs"] for s in record["raw"]["loop"]["steps"]} == {0}
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
    # At most one compile per bucket not yet seen in warm-up.
    assert bucketed["metrics"]["num_recompiles"] <= new_shapes_after_warmup(bucketed)


def test_bench_show_prints_compiles_and_step_times(padding_records, tmp_path):
    import json

    for name, record in padding_records.items():
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(record))
        done = bench("show", str(path), timeout=60)
        assert done.returncode == 0 and "recompiles after warm-up" in done.stdout and "step time" in done.stdout


def test_dynamic_padding_shows_steady_and_effective_throughput_apart(padding_records):
    """Six examples: some steps repeat a length (steady), some bring a new one (a
    recompile). Steady-state figures leave the recompiling steps out; the effective
    throughput keeps them, and so is lower."""
    record = padding_records["dynamic"]
    m, steps = record["metrics"], [s for s in record["raw"]["loop"]["steps"] if s["phase"] == "measure"]
    recompiling = [s for s in steps if s["num_compiles"] > 0]
    steady = [s for s in steps if s["num_compiles"] == 0]
    assert recompiling and steady  # the data really gives both
    assert m["recompile_steps"] == len(recompiling)
    assert m["recompile_steps_time_s"] == pytest.approx(sum(s["time_s"] for s in recompiling))
    assert m["step_time_s"]["n"] == len(steady)
    assert m["tokens_per_s_real"] == pytest.approx(
        sum(s["tokens_real"] for s in steady) / sum(s["time_s"] for s in steady)
    )
    assert m["tokens_per_s_real_effective"] == pytest.approx(
        sum(s["tokens_real"] for s in steps) / sum(s["time_s"] for s in steps)
    )
    assert m["tokens_per_s_real_effective"] < m["tokens_per_s_real"]
