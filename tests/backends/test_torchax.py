"""Backend `torchax` for real: JAX on the CPU with 4 virtual devices, the HF model's
step compiled by XLA as two programs (per-micro-batch gradients, the optax update), in
the project's own environment (torch 2.13, through the shim in
backends/torchax_jax/compat.py). Every record must pass the runner's plan check."""

from __future__ import annotations

import subprocess

import pytest

from conftest import ROOT, TINY, bench, failures_in, records_in, stack_or_skip, write_scenario

pytestmark = pytest.mark.slow

STACK = ("torchax", "torchax", "pip install -e '.[torchax]'")


def new_lengths_after_warmup(record) -> int:
    """Micro-batch lengths first seen after warm-up: the gradient program compiles once
    per length, whatever lengths share its step."""
    seen, new = set(), 0
    for step in record["raw"]["loop"]["steps"]:
        fresh = set(step["seq_lens"]) - seen
        if step["phase"] == "measure":
            new += len(fresh)
        seen |= fresh
    return new


@pytest.fixture(scope="module")
def padding_records(tmp_path_factory):
    """static, dynamic and bucketed padding (the scenario's matrix; the cpu profile: 4
    devices), 8 rows a step so each step is 2 micro-batches of 4 rows. Two steps, one of
    them warm-up: on this data the dynamic cell meets 2 new lengths after warm-up and the
    bucketed cell 1 new bucket (256), so each recompile assertion sees real recompiles,
    while every extra step would only add dynamic lengths to compile (seconds each)."""
    stack_or_skip(*STACK)
    out = tmp_path_factory.mktemp("torchax") / "r"
    done = bench(
        "run",
        "scenarios/padding.yaml",
        "--backend",
        "torchax",
        "--set",
        "model.preset=tiny-gemma3",
        "--set",
        "train.global_batch=8",
        "--set",
        "train.micro_batch=1",  # padding.yaml's auto would fit a step in one pass
        "--set",
        "train.steps=2",
        "--set",
        "train.warmup_steps=1",
        "--results-dir",
        str(out),
        "--no-progress",
        timeout=1500,
    )
    assert done.returncode == 0, done.stderr + done.stdout + failures_in(out)
    assert "refused" not in done.stderr  # packed rows too (#45: segment ids)
    return {r["scenario"]["resolved"]["sequence"]["padding"]: r for r in records_in(out)}


def test_records_pass_the_plan_check_with_rows_split_over_four_devices(padding_records):
    assert sorted(padding_records) == ["bucketed", "dynamic", "packed", "static"]
    for record in padding_records.values():
        assert record["status"] == "ok", record["failure"]
        assert record["raw"]["done"]["distinct_row_shards"] == 4
        assert all(len(step["seq_lens"]) == 2 for step in record["raw"]["loop"]["steps"])
        extra = record["raw"]["extra"]
        assert extra["devices"] == 4 and extra["mesh"] == {"data": 1, "fsdp": 4}
        assert extra["num_params_sharded"] > extra["num_params_total"] // 2
        assert any("'fsdp'" in spec for spec in extra["shardings"])


def test_static_compiles_each_program_once_and_dynamic_once_per_new_length(padding_records):
    static, dynamic = padding_records["static"], padding_records["dynamic"]
    assert static["metrics"]["num_compiles"] == 2 and static["metrics"]["num_recompiles"] == 0  # grad + apply
    expected = new_lengths_after_warmup(dynamic)
    assert expected > 0 and dynamic["metrics"]["num_recompiles"] == expected


def test_packed_rows_give_the_static_runs_losses_without_recompiles(padding_records):
    """The same examples packed (segment ids over 4 devices): static's losses, one
    compile of each program and none after, the record naming the per-example attention."""
    static, packed = padding_records["static"], padding_records["packed"]
    losses = {k: [s["loss"] for s in r["raw"]["loop"]["steps"]] for k, r in (("static", static), ("packed", packed))}
    assert losses["packed"] == pytest.approx(losses["static"], abs=1e-4)
    assert packed["metrics"]["num_compiles"] == 2 and packed["metrics"]["num_recompiles"] == 0
    attention = packed["raw"]["execution"]["attention"]
    assert attention.endswith("packed rows: per example, by segment ids as a dense block-diagonal mask"), attention


def test_bucketed_recompiles_at_most_once_per_bucket_new_after_warmup(padding_records):
    bucketed = padding_records["bucketed"]
    buckets = set(bucketed["scenario"]["resolved"]["sequence"]["buckets"])
    steps = bucketed["raw"]["loop"]["steps"]
    seen_in_warmup = {n for s in steps if s["phase"] == "warmup" for n in s["seq_lens"]}
    assert {n for s in steps for n in s["seq_lens"]} <= buckets
    assert bucketed["metrics"]["num_recompiles"] <= len(buckets - seen_in_warmup)
    assert bucketed["metrics"]["num_recompiles"] == new_lengths_after_warmup(bucketed)


def _run(tmp_path, backend: str, *sets: str, name: str = "") -> dict:
    path = write_scenario(tmp_path, TINY)  # padded rows + attention mask + sliding window 32
    out = tmp_path / (name or backend)
    args = [a for kv in sets for a in ("--set", kv)]
    done = bench("run", str(path), "--backend", backend, "--results-dir", str(out), "--no-progress", *args, timeout=900)
    assert done.returncode == 0, done.stderr + done.stdout + failures_in(out)
    (record,) = records_in(out)
    assert record["status"] == "ok", record["failure"]
    return record


# Losses and lrs against the torch backend's on four devices: tests/backends/test_parity.py.


def test_bf16_lora_keeps_trained_weights_in_fp32(tmp_path):
    stack_or_skip(*STACK)
    record = _run(
        tmp_path,
        "torchax",
        "train.precision=bf16",
        "parallel.devices=4",
        "train.micro_batch=1",
        "train.steps=3",
        "train.warmup_steps=1",
        "train.window_steps=0",
    )
    assert record["raw"]["done"]["dtypes"] == {
        "frozen_params": "bf16",
        "compute": "bf16",
        "trainable_params": "fp32",
        "optimizer_state": "fp32",
    }


def test_a_bf16_full_fine_tune_computes_in_bf16_and_recomputing_layers_keeps_its_losses(tmp_path):
    """Full fine-tune in bf16: fp32 master weights cast to bf16 inside the step
    (loss.in_compute_dtype). train.gradient_checkpointing puts each decoder layer under
    jax.checkpoint (remat.py): the record says how many, and the losses are the same as
    without (the recompute is the same forward)."""
    stack_or_skip(*STACK)
    common = (
        "train.precision=bf16",
        "train.method=full",
        "train.steps=3",
        "train.warmup_steps=1",
        "train.window_steps=0",
    )
    kept = _run(tmp_path, "torchax", *common, name="kept")
    recomputed = _run(tmp_path, "torchax", *common, "train.gradient_checkpointing=true", name="recomputed")
    for record in (kept, recomputed):
        assert record["raw"]["done"]["dtypes"]["compute"] == "bf16"
        assert record["raw"]["done"]["dtypes"]["trainable_params"] == "fp32"
        assert record["raw"]["execution"]["trained_weights_compute"] == "bf16"
    assert kept["raw"]["execution"]["recomputed_decoder_layers"] == 0
    assert recomputed["raw"]["execution"]["recomputed_decoder_layers"] == 2  # tiny-gemma3's two layers
    losses = [[s["loss"] for s in r["raw"]["loop"]["steps"]] for r in (kept, recomputed)]
    assert losses[0] == pytest.approx(losses[1], rel=1e-3), losses
    assert losses[0][0] != losses[0][-1]  # the weights moved


def test_optax_optimizer_applies_the_plans_lrs_and_reads_them_back():
    pytest.importorskip("jax")
    import types

    import jax.numpy as jnp
    import numpy as np
    import torch

    from backends.jax_common import applied_lr, optax_optimizer

    lrs = (0.0, 0.5, 0.25)
    for name in ("adamw", "sgd", "adafactor"):
        opt = types.SimpleNamespace(name=name, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
        tx = optax_optimizer(types.SimpleNamespace(grad_clip=None, optimizer=opt), lrs)
        params = {"w": jnp.ones((3, 2))}
        state, got = tx.init(params), []
        for _ in range(4):
            _, state = tx.update(params, state, params)
            got.append(applied_lr(state))
        assert got == pytest.approx([0.0, 0.5, 0.25, 0.25], abs=1e-7)  # past the end: the last lr
    # SGD's decay is PyTorch's (coupled, added to the gradient before the step).
    opt = types.SimpleNamespace(name="sgd", betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    tx = optax_optimizer(types.SimpleNamespace(grad_clip=1.0, optimizer=opt), (0.5,))
    params, grads = {"w": jnp.full((2, 2), 2.0)}, {"w": jnp.full((2, 2), 3.0)}
    updates, _ = tx.update(grads, tx.init(params), params)
    w = torch.nn.Parameter(torch.full((2, 2), 2.0))
    w.grad = torch.full((2, 2), 3.0)
    torch.nn.utils.clip_grad_norm_([w], 1.0)
    torch.optim.SGD([w], lr=0.5, weight_decay=0.1).step()
    np.testing.assert_allclose(np.asarray(params["w"] + updates["w"]), w.detach().numpy(), rtol=1e-6)


def test_a_diverging_run_is_a_failed_record_naming_the_step(tmp_path):
    """A full fine-tune by plain SGD at lr 10 (the largest lr a scenario accepts), no
    clipping: the loss explodes to NaN within a few steps (9 -> 25 -> 314 -> 3e5 ... on
    the torch backend)."""
    stack_or_skip(*STACK)
    path = write_scenario(tmp_path, TINY)
    done = bench(
        "run",
        str(path),
        "--backend",
        "torchax",
        "--results-dir",
        str(tmp_path / "r"),
        "--no-progress",
        "--set",
        "train.method=full",
        "--set",
        "train.optimizer.name=sgd",
        "--set",
        "train.optimizer.lr=10",
        "--set",
        "train.grad_clip=null",
        "--set",
        "train.steps=10",
        "--set",
        "train.window_steps=0",
        "--set",
        "train.micro_batch=1",
        "--set",
        "sequence.max_length=256",
        timeout=900,
    )
    assert done.returncode == 1
    (record,) = records_in(tmp_path / "r")
    assert record["status"] == "failed" and record["failure"]["kind"] == "non_finite_loss"
    assert "at step" in record["failure"]["reason"] and record["metrics"] is None


SHIM_PROBE = """
import torch

from backends.torchax_jax.compat import RemovedOverload, allow_removed_named_overloads

allow_removed_named_overloads()
allow_removed_named_overloads()  # idempotent
op = torch.ops.aten.prod.dim_Dimname
if isinstance(op, RemovedOverload):  # this torch removed it
    try:
        op(torch.ones(2), "x")
        raise SystemExit("a removed overload ran")
    except NotImplementedError:
        pass
assert not isinstance(torch.ops.aten.prod.dim_int, RemovedOverload)
try:
    torch.ops.aten.prod.no_such_overload
    raise SystemExit("an unknown overload resolved")
except AttributeError:
    pass
import torchax  # noqa: F401  - imports on this torch
print("shim ok")
"""


def test_the_shim_stands_in_for_removed_named_overloads_only():
    """In a child interpreter: importing torchax registers its 'jax' device as torch's
    PrivateUse1 accelerator for the rest of the process, and torch.compile then fails in
    every later test of that process ("PyTorch is not linked with support for jax
    devices"; tests/conftest.py refuses a test that leaves torchax imported)."""
    stack_or_skip(*STACK)
    from harness.run.registry import interpreter_for, worker_env

    done = subprocess.run(
        [interpreter_for("torchax"), "-c", SHIM_PROBE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**worker_env(), "PYTHONPATH": str(ROOT)},
        timeout=300,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("shim ok"), done.stderr[-3000:]
