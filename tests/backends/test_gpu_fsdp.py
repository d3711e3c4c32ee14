"""Backend `gpu-fsdp` for real: 2 ranks over gloo on the CPU, through torchrun."""

from __future__ import annotations

import pytest

from conftest import TINY, bench, failures_in, records_in, write_scenario

pytestmark = pytest.mark.slow

FSDP = TINY + "parallel:\n  devices: 2\n"
# Four steps (tiny.yaml's 2 warm-up + 2 measured): per-step losses and timings to
# compare, the assertions need no more.
SHORT = ["--no-progress", "--set", "train.steps=4", "--set", "train.window_steps=0"]


@pytest.fixture(scope="module")
def sharding_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp")
    matrix = (
        "matrix:\n  parallel.sharding: [full_shard, shard_grad_op]\n  train.gradient_checkpointing: [false, true]\n"
    )
    path = write_scenario(tmp, FSDP + matrix)
    done = bench("run", str(path), "--backend", "gpu-fsdp", "--results-dir", str(tmp / "r"), *SHORT)
    assert done.returncode == 0, failures_in(tmp / "r") or done.stderr + done.stdout
    return records_in(tmp / "r")


def test_both_sharding_modes_with_and_without_checkpointing_shard_parameters(sharding_runs):
    cells = {
        (
            r["scenario"]["resolved"]["parallel"]["sharding"],
            r["scenario"]["resolved"]["train"]["gradient_checkpointing"],
        )
        for r in sharding_runs
    }
    assert cells == {("full_shard", False), ("full_shard", True), ("shard_grad_op", False), ("shard_grad_op", True)}
    for r in sharding_runs:
        assert r["status"] == "ok", r["failure"]
        extra = r["raw"]["extra"]
        assert extra["world_size"] == 2 and extra["backend"] == "gloo"
        assert extra["num_sharded_layers"] == 2 and extra["num_dtensor_params"] == extra["num_params_total"]
        assert extra["placements"] == ["(Shard(dim=0),)"]
        assert extra["local_param_fraction_rank0"] == pytest.approx(0.5, abs=0.02)
        assert len(r["raw"]["memory"]["per_rank_bytes"]) == 2 and all(
            b > 0 for b in r["raw"]["memory"]["per_rank_bytes"]
        )
        per_rank = extra["per_rank_step_time_s"]
        assert [s["time_s"] for s in r["raw"]["loop"]["steps"]] == [max(ts) for ts in zip(*per_rank)]


def test_first_losses_match_the_single_process_torch_backend(sharding_runs, tmp_path):
    path = write_scenario(tmp_path, TINY)
    done = bench("run", str(path), "--backend", "torch", "--results-dir", str(tmp_path / "r"), *SHORT)
    assert done.returncode == 0, done.stderr
    (reference,) = records_in(tmp_path / "r")
    expected = [s["loss"] for s in reference["raw"]["loop"]["steps"]]
    assert len(expected) == 4
    for r in sharding_runs:
        got = [s["loss"] for s in r["raw"]["loop"]["steps"]]
        assert got == pytest.approx(expected, rel=1e-3)
        assert [s["tokens_real"] for s in r["raw"]["loop"]["steps"]] == [
            s["tokens_real"] for s in reference["raw"]["loop"]["steps"]
        ]


def new_lengths_after_warmup(record) -> int:
    """Distinct micro-batch lengths first seen after warm-up: each is a new shape."""
    steps = record["raw"]["loop"]["steps"]
    warm = {n for s in steps if s["phase"] == "warmup" for n in s["seq_lens"]}
    return len({n for s in steps if s["phase"] == "measure" for n in s["seq_lens"]} - warm)


# static shapes: all three paddings; dynamo's automatic dynamic shapes: the dynamic
# padding alone (what it changes), to keep CI's compile time down. Passes of 1 row per
# rank, one warm-up step. Static shapes compile every new length, so that run is as short
# as its assertions allow: 4 rows a step, one measured step, where on this data the
# dynamic cell meets 2 new lengths and the bucketed cell 1 new bucket (512): 7 compiles
# a rank, not 26. Automatic dynamic shapes keep 8 rows a step and 5 measured steps (19
# new lengths): the lengths its dynamic graphs absorb cost no compile, and with 2 new
# lengths both still recompiled (so the run must be long enough to show the reuse).
# The static-shapes matrix compiles with dynamo's `eager` backend: whether a new shape
# recompiles is dynamo's guards' decision (its graph count), whatever backend then builds
# the graph, and AOT autograd doubled each of its 7 compiles (14-15 s against 6.5-7 s a
# fwd+bwd, measured). Automatic dynamic shapes keep `aot_eager`: there AOT's tracing can
# add shape guards, so the recompiles it causes are part of what is counted.
STATIC_SHAPES_RUN = ["train.steps=2", "train.global_batch=4"]
AUTO_DYNAMIC_RUN = ["train.steps=6", "train.global_batch=8"]


@pytest.mark.parametrize(
    "shapes,paddings,run,compiler",
    [
        ("static", "static, dynamic, bucketed", STATIC_SHAPES_RUN, "eager"),
        ("auto", "dynamic", AUTO_DYNAMIC_RUN, "aot_eager"),
    ],
    ids=["static-shapes", "auto-dynamic"],
)
def test_torch_compile_recompiles_once_per_new_shape_and_buckets_bound_them(tmp_path, shapes, paddings, run, compiler):
    options = (
        f"backend_options:\n  gpu-fsdp: {{compile: true, compile_backend: {compiler}, compile_shapes: {shapes}}}\n"
    )
    buckets = "sequence:\n  max_length: 512\n  buckets: [128, 256, 512]\n"
    path = write_scenario(
        tmp_path,
        FSDP.replace("sequence:\n  max_length: 512\n", buckets)
        + options
        + f"matrix:\n  sequence.padding: [{paddings}]\n",
    )
    done = bench(
        "run",
        str(path),
        "--backend",
        "gpu-fsdp",
        "--results-dir",
        str(tmp_path / "r"),
        "--no-progress",
        "--set",
        "train.window_steps=0",
        *[a for kv in (*run, "train.warmup_steps=1", "train.micro_batch=1") for a in ("--set", kv)],
        "--timeout",
        "900",  # tiny.yaml's 300 s per run: a slow CI machine compiles every new shape
        timeout=2000,
    )
    assert done.returncode == 0, failures_in(tmp_path / "r") or done.stderr + done.stdout
    by_padding = {r["scenario"]["resolved"]["sequence"]["padding"]: r for r in records_in(tmp_path / "r")}
    dynamic = by_padding["dynamic"]["metrics"]
    expected = new_lengths_after_warmup(by_padding["dynamic"])
    assert expected > 0  # the batches really brought new shapes after warm-up
    if shapes == "auto":  # dynamo's default: the second shape (in warm-up here) compiles
        # dynamic graphs, after which new lengths reuse them
        assert dynamic["num_recompiles"] < expected
        return
    static = by_padding["static"]["metrics"]
    # One compile per new shape, however many graphs FSDP's hooks cut the model into.
    assert static["num_compiles"] == 1 and static["num_recompiles"] == 0
    assert static["compile_time_s"] > 0  # dynamo's timers, not 0.0
    assert static["compile_cache"]["persistent"] is False  # only inductor keeps compiled code on disk
    assert by_padding["static"]["raw"]["extra"]["compiled_graphs"] > 1
    assert dynamic["num_recompiles"] == expected  # like XLA: every new shape compiles again
    bucketed = by_padding["bucketed"]
    assert bucketed["metrics"]["num_recompiles"] <= new_lengths_after_warmup(bucketed)


@pytest.mark.serial
def test_sft_trainer_mode_records_synchronised_contiguous_steps(tmp_path):
    path = write_scenario(tmp_path, TINY + "backend_options:\n  gpu-fsdp: {mode: sft_trainer}\n")
    done = bench("run", str(path), "--backend", "gpu-fsdp", "--results-dir", str(tmp_path / "r"), *SHORT)
    assert done.returncode == 0, failures_in(tmp_path / "r") or done.stderr + done.stdout
    (record,) = records_in(tmp_path / "r")
    steps = record["raw"]["loop"]["steps"]
    assert len(steps) == 4 and all(s["loss"] is not None and s["loss"] > 0 for s in steps)
    assert record["raw"]["extra"]["mode"] == "sft_trainer" and "trl" in record["provenance"]["libraries"]
    # Each step's clock runs from one synchronised boundary to the next: the samples
    # tile the training time instead of measuring a callback's dispatch.
    for a, b in zip(steps, steps[1:]):
        gap = b["start_s"] - (a["start_s"] + a["time_s"])
        assert 0 <= gap < 0.5 * a["time_s"] + 0.05
    assert record["metrics"]["step_time_s"]["n"] == 2
