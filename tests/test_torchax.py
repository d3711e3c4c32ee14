"""Backend `torchax` for real: JAX on the CPU with 4 virtual devices, the HF model's
whole step compiled by XLA, in the project's own environment (torch 2.13, through the
shim in backends/torchax_jax/compat.py)."""

from __future__ import annotations

import pytest

from conftest import TINY, bench, records_in, stack_or_skip, write_scenario
from test_xla_fsdpv2 import new_shapes_after_warmup

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def padding_records(tmp_path_factory):
    stack_or_skip("torchax", "torchax", "pip install -e '.[torchax]'")
    out = tmp_path_factory.mktemp("torchax") / "r"
    done = bench("run", "scenarios/padding.yaml", "--backend", "torchax", "--set", "model.preset=tiny-gemma3",
                 "--set", "matrix={sequence.padding: [static, dynamic]}", "--results-dir", str(out), "--no-progress",
                 timeout=1500)
    assert done.returncode == 0, done.stderr + done.stdout
    return {r["scenario"]["resolved"]["sequence"]["padding"]: r for r in records_in(out)}


def test_parameters_and_batches_are_sharded_over_four_devices(padding_records):
    for record in padding_records.values():
        assert record["status"] == "ok", record["failure"]
        extra = record["raw"]["extra"]
        assert extra["devices"] == 4 and extra["num_params_sharded"] > extra["num_params_total"] // 2
        assert any("'fsdp'" in spec for spec in extra["shardings"])


def test_static_has_no_recompiles_and_dynamic_one_per_new_shape(padding_records):
    static, dynamic = padding_records["static"], padding_records["dynamic"]
    assert static["metrics"]["num_compiles"] == 1 and static["metrics"]["num_recompiles"] == 0
    expected = new_shapes_after_warmup(dynamic)
    assert expected > 0 and dynamic["metrics"]["num_recompiles"] == expected


def test_first_losses_match_the_torch_backend_with_the_mask_applied(tmp_path):
    stack_or_skip("torchax", "torchax", "pip install -e '.[torchax]'")
    path = write_scenario(tmp_path, TINY)  # padded rows + attention mask + sliding window 32
    common = ["--no-progress", "--set", "train.micro_batch=1", "--set", "sequence.max_length=256",
              "--set", "train.steps=5", "--set", "train.window_steps=0"]
    losses = {}
    for backend in ("torch", "torchax"):
        done = bench("run", str(path), "--backend", backend, "--results-dir", str(tmp_path / backend), *common, timeout=900)
        assert done.returncode == 0, done.stderr + done.stdout
        (record,) = records_in(tmp_path / backend)
        losses[backend] = [s["loss"] for s in record["raw"]["loop"]["steps"][:5]]
    assert losses["torchax"] == pytest.approx(losses["torch"], rel=1e-3)


def test_a_diverging_run_is_a_failed_record_naming_the_step(tmp_path):
    stack_or_skip("torchax", "torchax", "pip install -e '.[torchax]'")
    path = write_scenario(tmp_path, TINY)
    done = bench("run", str(path), "--backend", "torchax", "--results-dir", str(tmp_path / "r"), "--no-progress",
                 "--set", "train.optimizer.lr=1e30", "--set", "train.grad_clip=null", "--set", "train.steps=6",
                 "--set", "train.window_steps=0", "--set", "train.micro_batch=1", "--set", "sequence.max_length=256",
                 timeout=900)
    assert done.returncode == 1
    (record,) = records_in(tmp_path / "r")
    assert record["status"] == "failed" and record["failure"]["kind"] == "non_finite_loss"
    assert "at step" in record["failure"]["reason"] and record["metrics"] is None


def test_the_shim_stands_in_for_removed_named_overloads_only():
    stack_or_skip("torchax", "torchax", "pip install -e '.[torchax]'")
    import torch

    from backends.torchax_jax.compat import RemovedOverload, allow_removed_named_overloads

    allow_removed_named_overloads()
    allow_removed_named_overloads()  # idempotent
    op = torch.ops.aten.prod.dim_Dimname
    if isinstance(op, RemovedOverload):  # this torch removed it
        with pytest.raises(NotImplementedError):
            op(torch.ones(2), "x")
    assert not isinstance(torch.ops.aten.prod.dim_int, RemovedOverload)
    with pytest.raises(AttributeError):
        torch.ops.aten.prod.no_such_overload
    import torchax  # noqa: F401  - imports on this torch
