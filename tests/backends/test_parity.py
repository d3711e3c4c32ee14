"""Same scenario, same work: every backend executes one plan. The tiny model, 8 rows
per step in forward passes of 1 row per device, fp32, a cosine schedule with warm-up
and restarts: the records' real tokens per step are identical, every step's lr equals
the torch backend's, and the PyTorch-model backends' losses match the torch backend's
(same initial weights, same batches). jax-tunix builds its own model (Tunix's
initialiser), so its tokens and lr are compared here and its losses in its own tests."""

from __future__ import annotations

import pytest

from conftest import TINY, bench, failures_in, records_in, stack_or_skip, write_scenario

pytestmark = pytest.mark.slow

COMMON = [
    "--no-progress",
    "--set",
    "train.global_batch=8",
    "--set",
    "train.steps=5",
    "--set",
    "train.warmup_steps=1",
    "--set",
    "train.window_steps=0",
    "--set",
    "train.precision=fp32",
]
# Two schedules: one without warm-up, one with warm-up and restarts. Each schedule's
# formula is checked in tests/harness/test_plan.py; here, that every backend applies it.
SCHEDULES = (
    "matrix:\n  train.schedule:\n"
    "    - {name: cosine}\n"
    "    - {name: cosine_with_restarts, cycles: 2, warmup_ratio: 0.2}\n"
)

# (label, backend, extra --set values, stack module, how CI provides it)
RUNS = [
    ("torch", "torch", ["train.micro_batch=1"], None, None),
    ("gpu-fsdp micro 1", "gpu-fsdp", ["parallel.devices=2", "train.micro_batch=1"], None, None),
    # micro_batch auto: the memory model fits a shard's 4 rows in one pass (no accumulation)
    ("gpu-fsdp auto", "gpu-fsdp", ["parallel.devices=2", "train.micro_batch=auto"], None, None),
    (
        "xla-fsdpv2",
        "xla-fsdpv2",
        ["parallel.devices=4", "train.micro_batch=1"],
        "torch_xla",
        ".ci/run builds .venv-xla",
    ),
    ("torchax", "torchax", ["parallel.devices=4", "train.micro_batch=1"], "torchax", "pip install -e '.[torchax]'"),
    (
        "jax-tunix",
        "jax-tunix",
        [
            "parallel.devices=4",
            "train.micro_batch=1",
            "train.lora.target_modules=[q_proj,o_proj,gate_proj,up_proj,down_proj]",
        ],
        "tunix",
        ".ci/run builds .venv-jax",
    ),
]


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("parity")
    path = write_scenario(tmp, TINY + SCHEDULES)
    found = {}
    for label, backend, sets, module, how in RUNS:
        if module and not stack_available(backend, module, how):
            continue  # compared where installed; under CI every stack must be there
        out = tmp / label.replace(" ", "-")
        done = bench(
            "run",
            str(path),
            "--backend",
            backend,
            "--results-dir",
            str(out),
            *COMMON,
            *[a for s in sets for a in ("--set", s)],
            timeout=900,
        )
        assert done.returncode == 0, f"{label}: {failures_in(out) or done.stderr + done.stdout}"
        for record in records_in(out):
            found[(label, schedule_of(record))] = record
    return found


def schedule_of(record) -> str:
    schedule = record["scenario"]["resolved"]["train"]["schedule"]
    return f"{schedule['name']} warm-up {schedule['warmup_ratio']}"


def stack_available(backend: str, module: str, how: str) -> bool:
    try:
        stack_or_skip(backend, module, how)
    except pytest.skip.Exception:
        return False
    return True


def steps(record, key):
    return [s[key] for s in record["raw"]["loop"]["steps"]]


def test_every_backend_processed_the_same_rows_and_tokens(records):
    assert len({schedule for _, schedule in records}) == 2
    for (label, schedule), record in records.items():
        reference = records[("torch", schedule)]
        assert record["status"] == "ok", (label, schedule, record["failure"])
        assert [s["done"]["rows"] for s in record["raw"]["loop"]["steps"]] == [8] * 5, label
        assert steps(record, "tokens_real") == steps(reference, "tokens_real"), label
        assert [s["done"]["tokens_real"] for s in record["raw"]["loop"]["steps"]] == steps(reference, "tokens_real")


def test_every_backend_applied_the_torch_backends_lr_at_every_step_of_every_schedule(records):
    restarts = steps(records[("torch", "cosine_with_restarts warm-up 0.2")], "lr")
    assert restarts[0] == 0.0 and len(set(restarts)) > 2  # warm-up from 0, then restarts
    assert steps(records[("torch", "cosine warm-up 0.0")], "lr")[0] == 1e-3  # no warm-up: the full lr at once
    for (label, schedule), record in records.items():
        assert steps(record, "lr") == pytest.approx(steps(records[("torch", schedule)], "lr"), abs=1e-9), (
            label,
            schedule,
        )


def test_devices_did_distinct_work(records):
    shards = {"torch": 1, "gpu-fsdp micro 1": 2, "gpu-fsdp auto": 2, "xla-fsdpv2": 4, "torchax": 4, "jax-tunix": 4}
    for (label, _), record in records.items():
        assert record["raw"]["done"]["distinct_row_shards"] == shards[label], label
        assert record["plan"]["data_parallel"] == shards[label]


def test_pytorch_model_backends_match_the_torch_backends_losses(records):
    for (label, schedule), record in records.items():
        if label in ("gpu-fsdp micro 1", "gpu-fsdp auto", "xla-fsdpv2", "torchax"):
            expected = steps(records[("torch", schedule)], "loss")
            assert steps(record, "loss") == pytest.approx(expected, rel=1e-3), (label, schedule)


def test_micro_batch_auto_chose_one_pass_and_matches_micro_1(records):
    """The work is fixed (rows per step); auto only changes its execution: here one
    forward pass of 4 rows per rank instead of 4 passes of 1, with the same losses."""
    for (label, _), record in records.items():
        execution = record["raw"]["execution"]
        if label == "gpu-fsdp auto":
            assert (execution["micro_batch"], execution["accumulation"]) == (4, 1)
            assert execution["micro_batch_how"].startswith("memory model")
        elif label == "gpu-fsdp micro 1":
            assert (execution["micro_batch"], execution["accumulation"], execution["micro_batch_how"]) == (
                1,
                4,
                "pinned",
            )


BF16 = [("torch", []), ("gpu-fsdp", ["parallel.devices=2"]), ("xla-fsdpv2", ["parallel.devices=4"])]


@pytest.mark.parametrize("backend,sets", BF16)
def test_a_bf16_run_completes_and_its_record_says_bf16(tmp_path, backend, sets):
    """The precision policy executed on the CPU too (slow bf16 matmuls, a tiny model):
    frozen weights and compute in bf16, trained weights and optimizer state in fp32."""
    if backend == "xla-fsdpv2" and not stack_available(backend, "torch_xla", ".ci/run builds .venv-xla"):
        pytest.skip("torch_xla is not installed here")
    path = write_scenario(tmp_path, TINY)
    done = bench(
        "run",
        str(path),
        "--backend",
        backend,
        "--results-dir",
        str(tmp_path / "r"),
        "--no-progress",
        "--set",
        "train.precision=bf16",
        "--set",
        "train.global_batch=8",
        "--set",
        "train.micro_batch=1",
        "--set",
        "train.steps=2",
        "--set",
        "train.warmup_steps=1",
        "--set",
        "train.window_steps=0",
        *[a for s in sets for a in ("--set", s)],
        timeout=900,
    )
    assert done.returncode == 0, failures_in(tmp_path / "r") or done.stderr + done.stdout
    (record,) = records_in(tmp_path / "r")
    assert record["plan"]["precision"]["name"] == "bf16"
    assert record["raw"]["done"]["dtypes"] == {
        "frozen_params": "bf16",
        "trainable_params": "fp32",
        "compute": "bf16",
        "optimizer_state": "fp32",
    }
