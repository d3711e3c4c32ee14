"""Same scenario, same work: every backend executes one plan. The tiny model, 4 rows
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
    "train.global_batch=4",  # one row per device on the 4-device backends
    "--set",
    "train.steps=5",
    "--set",
    "train.warmup_steps=1",
    "--set",
    "train.window_steps=0",
    "--set",
    "train.precision=fp32",
]
# One schedule whose lr rises, falls and restarts within 5 steps. Each schedule's formula
# is checked against Hugging Face's in tests/harness/plan/test_plan.py; here, that every backend
# applies the plan's lr at every step (one run per backend setting: CI's time).
SCHEDULE = "  schedule: {name: cosine_with_restarts, cycles: 2, warmup_ratio: 0.2}\n"

# (label, backend, extra --set values, stack module, how CI provides it)
RUNS = [
    ("torch", "torch", ["train.micro_batch=1"], None, None),
    ("gpu-fsdp micro 1", "gpu-fsdp", ["parallel.devices=2", "train.micro_batch=1"], None, None),
    # micro_batch auto: the memory model fits a shard's 2 rows in one pass (no accumulation)
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
            # 2 devices: 2 micro-batches a step, so the lr must step once per optimizer
            # step inside Tunix's MultiSteps, not once per micro-batch.
            "parallel.devices=2",
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
    assert "  schedule: {name: constant}\n" in TINY
    path = write_scenario(tmp, TINY.replace("  schedule: {name: constant}\n", SCHEDULE))
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
        (found[label],) = records_in(out)
    return found


def stack_available(backend: str, module: str, how: str) -> bool:
    try:
        stack_or_skip(backend, module, how)
    except pytest.skip.Exception:
        return False
    return True


def steps(record, key):
    return [s[key] for s in record["raw"]["loop"]["steps"]]


def test_every_backend_processed_the_same_rows_and_tokens(records):
    reference = records["torch"]
    for label, record in records.items():
        assert record["status"] == "ok", (label, record["failure"])
        assert [s["done"]["rows"] for s in record["raw"]["loop"]["steps"]] == [4] * 5, label
        assert steps(record, "tokens_real") == steps(reference, "tokens_real"), label
        assert [s["done"]["tokens_real"] for s in record["raw"]["loop"]["steps"]] == steps(reference, "tokens_real")


def test_every_backend_applied_the_torch_backends_lr_at_every_step(records):
    restarts = steps(records["torch"], "lr")
    assert restarts[0] == 0.0 and len(set(restarts)) > 2  # warm-up from 0, then restarts
    if "jax-tunix" in records:  # its lr steps per optimizer step, over 2 micro-batches
        assert records["jax-tunix"]["raw"]["execution"]["accumulation"] == 2
    for label, record in records.items():
        assert steps(record, "lr") == pytest.approx(restarts, abs=1e-9), label


def test_devices_did_distinct_work(records):
    shards = {"torch": 1, "gpu-fsdp micro 1": 2, "gpu-fsdp auto": 2, "xla-fsdpv2": 4, "torchax": 4, "jax-tunix": 2}
    for label, record in records.items():
        assert record["raw"]["done"]["distinct_row_shards"] == shards[label], label
        assert record["plan"]["data_parallel"] == shards[label]


def test_no_backend_makes_the_host_wait_inside_a_measured_step(records):
    """At most one device sync per optimizer step, the one timing needs (outside the
    counted block): every backend counts its host waits (.item(), a loss read, a
    blocking copy, block_until_ready, np.asarray of a device array) and counts none."""
    for label, record in records.items():
        counts = [s["host_syncs"] for s in record["raw"]["loop"]["steps"] if s["phase"] == "measure"]
        assert counts == [0] * len(counts) and counts, (label, counts)


def test_pytorch_model_backends_match_the_torch_backends_losses(records):
    expected = steps(records["torch"], "loss")
    for label, record in records.items():
        if label in ("gpu-fsdp micro 1", "gpu-fsdp auto", "xla-fsdpv2", "torchax"):
            assert steps(record, "loss") == pytest.approx(expected, rel=1e-3), label


def test_jax_backends_ran_the_chunked_loss_by_default_and_say_so(records):
    """loss_kernel auto is chunked on torchax and jax-tunix (their losses above are the
    chunked kernel's); the record states it, with jax-tunix's remat and attention."""
    for label in ("torchax", "jax-tunix"):
        if label in records:
            execution = records[label]["raw"]["execution"]
            assert execution["loss_kernel"] == "chunked" and execution["loss_chunk_positions"] >= 1, label
            assert execution["attention"], label
    if "jax-tunix" in records:
        assert records["jax-tunix"]["raw"]["execution"]["remat"] == "none"  # gradient checkpointing off


def test_micro_batch_auto_chose_one_pass_and_matches_micro_1(records):
    """The work is fixed (rows per step); auto only changes its execution: here one
    forward pass of 2 rows per rank instead of 2 passes of 1, with the same losses."""
    for label, record in records.items():
        execution = record["raw"]["execution"]
        if label == "gpu-fsdp auto":
            assert (execution["micro_batch"], execution["accumulation"]) == (2, 1)
            assert execution["micro_batch_how"].startswith("memory model")
        elif label == "gpu-fsdp micro 1":
            assert (execution["micro_batch"], execution["accumulation"], execution["micro_batch_how"]) == (
                1,
                2,
                "pinned",
            )


# One row per device per step: bf16 matmuls are slow on a CPU, and the dtypes are what is checked.
BF16 = [
    ("torch", ["train.global_batch=1"]),
    ("gpu-fsdp", ["parallel.devices=2", "train.global_batch=2"]),
    ("xla-fsdpv2", ["parallel.devices=4", "train.global_batch=4"]),
]


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
