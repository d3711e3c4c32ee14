"""The execution plan: one meaning per field, recomputed here independently; refusals
before any work; a backend that does less than planned is a failed record."""

from __future__ import annotations

import json
import time

import pytest

from harness.plan import plan as plans
from harness.run.backend import Capabilities
from harness.scenario.loader import validate
from harness.scenario.spec import Scenario

from conftest import TINY, bench, records_in, write_scenario

SCHEDULES = [
    ("constant", 0.0),
    ("constant", 0.25),
    ("linear", 0.0),
    ("linear", 0.25),
    ("cosine", 0.0),
    ("cosine", 0.25),
    ("cosine_with_restarts", 0.0),
    ("cosine_with_restarts", 0.2),
]


def scenario(**train) -> Scenario:
    doc = {
        "name": "t",
        "model": {"preset": "tiny-gemma3"},
        "train": {
            "global_batch": 8,
            "micro_batch": 1,
            "steps": 17,
            "warmup_steps": 1,
            "window_steps": 3,
            "optimizer": {"lr": 1e-3},
            "precision": "fp32",
            **train,
        },
    }
    return validate(doc, "test")


# --------------------------------------------------------------------------- learning rate
@pytest.mark.parametrize("name,warmup_ratio", SCHEDULES)
def test_learning_rates_are_hugging_faces_schedules(name, warmup_ratio):
    """The plan's lr of every step equals what transformers' own schedulers give a torch
    optimizer stepped the same number of times (an independent implementation)."""
    torch = pytest.importorskip("torch")
    from transformers import get_scheduler

    cycles = 3 if name == "cosine_with_restarts" else 1
    s = scenario(schedule={"name": name, "warmup_ratio": warmup_ratio, "cycles": cycles})
    lrs = plans.learning_rates(s.train)
    total = 20
    warmup = int(warmup_ratio * total)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    hf_name = "constant_with_warmup" if name == "constant" and warmup else name
    kwargs = {"num_cycles": cycles} if name == "cosine_with_restarts" else {}
    schedule = get_scheduler(
        hf_name, optimizer, num_warmup_steps=warmup, num_training_steps=total, scheduler_specific_kwargs=kwargs
    )
    expected = []
    for _ in range(total):
        expected.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert len(lrs) == total
    assert lrs == pytest.approx(expected, abs=1e-12)
    if warmup:
        assert lrs[0] == 0.0 and max(lrs) == pytest.approx(1e-3)
    else:
        assert lrs[0] == pytest.approx(1e-3)  # no warm-up: full lr at step 0, on every backend


@pytest.mark.parametrize("name,warmup_ratio", SCHEDULES)
def test_the_torch_family_applies_the_plans_lr_at_every_step(name, warmup_ratio):
    torch = pytest.importorskip("torch")
    from backends.hf_common.model import PlannedSteps
    from harness.run.backend import WorkLog

    cycles = 2 if name == "cosine_with_restarts" else 1
    plan = plans.build(scenario(schedule={"name": name, "warmup_ratio": warmup_ratio, "cycles": cycles}), "cpu", 1)
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.AdamW([weight], lr=123.0)
    work, steps, applied = WorkLog(), None, []
    steps = PlannedSteps(optimizer, plan, work)
    for _ in range(plan.total_steps):
        weight.grad = torch.ones(3)
        steps.step(torch.nn.Module(), None)
        applied.append(work.take()[1])
    assert applied == list(plan.lr)


@pytest.mark.parametrize("name,warmup_ratio", SCHEDULES)
def test_the_jax_backends_optimizer_applies_the_plans_lr(name, warmup_ratio):
    """optax, as the JAX backends build it, reports the same lr per update (fp32)."""
    jax = pytest.importorskip("jax")
    pytest.importorskip("optax")
    import jax.numpy as jnp

    from backends import jax_common

    cycles = 2 if name == "cosine_with_restarts" else 1
    s = scenario(schedule={"name": name, "warmup_ratio": warmup_ratio, "cycles": cycles})
    plan = plans.build(s, "cpu", 1)
    optimizer = jax_common.optax_optimizer(s.train, plan.lr)
    params = {"w": jnp.ones(3)}
    state = optimizer.init(params)
    applied = []
    for _ in range(plan.total_steps):
        _, state = optimizer.update({"w": jnp.ones(3)}, state, params)
        applied.append(jax_common.applied_lr(state))
    assert applied == pytest.approx(list(plan.lr), abs=1e-9)
    jax.clear_caches()


# --------------------------------------------------------------------------- resolution
def test_rows_accumulation_and_mesh_resolve_from_degrees():
    s = validate(
        {
            "name": "t",
            "model": {"preset": "tiny-gemma3"},
            "train": {"global_batch": 32, "micro_batch": 2},
            "parallel": {"devices": 8, "fsdp": -1, "tensor": 2},
        },
        "test",
    )
    plan = plans.build(s, "cuda", 8)
    assert plan.mesh == {"data": 1, "fsdp": 4, "tensor": 2}
    assert (plan.data_parallel, plan.rows_per_forward, plan.accumulation, plan.rows_per_step) == (4, 8, 4, 32)
    # `all` is every accelerator of the host, one on a CPU
    every = validate({"name": "t", "parallel": {"devices": "all"}, "train": {"global_batch": 8, "micro_batch": 1}}, "t")
    assert plans.build(every, "tpu", 4).devices == 4 and plans.build(every, "cpu", 4).devices == 1


def w1(attention: str, micro="auto") -> Scenario:
    return validate(
        {
            "name": "w1",
            "model": {"preset": "gemma-3-270m", "attention": attention},
            "sequence": {"max_length": 512},
            "train": {"global_batch": 32, "micro_batch": micro, "precision": "bf16"},
        },
        "test",
    )


def test_micro_batch_auto_is_the_largest_divisor_that_fits_by_hand():
    # Gemma 3 270M at 512 tokens, bf16 (2-byte activations), written out by hand: per
    # token and layer 17h + 8i (+ 4 a s for eager attention's scores), 18 layers.
    h, i, a, layers, seq = 640, 2048, 4, 18, 512
    eager_row = seq * layers * (17 * h + 8 * i + 4 * a * seq)
    sdpa_row = seq * layers * (17 * h + 8 * i)
    assert (eager_row, sdpa_row) == (326_762_496, 251_265_024)
    # bf16 frozen weights (268,042,240 of them) + LoRA r8's 1,898,496 at 16 bytes each
    resident = 268_042_240 * 2 + 1_898_496 * 16
    memory = 12 * 2**30
    budget = 0.85 * memory - resident
    assert budget // eager_row == 31 and budget // sdpa_row == 41  # the largest divisors of 32: 16 and 32
    eager, sdpa = plans.build(w1("eager"), "cuda", 1, memory), plans.build(w1("sdpa"), "cuda", 1, memory)
    assert (eager.micro_batch, eager.accumulation) == (16, 2)
    assert (sdpa.micro_batch, sdpa.accumulation) == (32, 1)
    assert eager.micro_batch_how.startswith("memory model") and eager.rows_per_step == sdpa.rows_per_step == 32
    assert plans.build(w1("eager"), "cuda", 1, 2**20).micro_batch == 1  # nothing fits: one row, the run will say
    pinned = plans.build(w1("eager", micro=4), "cuda", 1, memory)
    assert (pinned.micro_batch, pinned.micro_batch_how) == (4, "pinned")


def test_micro_batch_auto_without_the_devices_memory_is_refused_naming_the_field():
    with pytest.raises(plans.PlanRefusal, match="device's memory") as refused:
        plans.build(w1("eager"), "cuda", 1, None)
    assert refused.value.field == "train.micro_batch"


def test_precision_policy_is_the_same_everywhere():
    p = plans.build(scenario(precision="bf16"), "cpu", 1).precision
    assert (p.frozen_params, p.trainable_params, p.compute, p.grad_reduce, p.optimizer_state) == (
        "bf16",
        "fp32",
        "bf16",
        "fp32",
        "fp32",
    )
    full = plans.build(scenario(precision="bf16", method="full"), "cpu", 1).precision
    assert full.frozen_params == "-" and full.trainable_params == "fp32"


def test_lora_trainable_count_matches_peft():
    """The plan's count from the architecture equals what peft really makes trainable."""
    pytest.importorskip("peft")
    from backends.hf_common.model import apply_lora, build_model, model_facts

    for preset, targets in (("tiny-gemma3", None), ("tiny-gemma3", ["q_proj", "o_proj", "down_proj"])):
        doc = {"name": "t", "model": {"preset": preset}}
        if targets:
            doc["train"] = {"lora": {"target_modules": targets}}
        s = validate(doc, "t")
        assert (
            plans.build(s, "cpu", 1, device_memory_bytes=2**34).trainable_params
            == model_facts(apply_lora(build_model(s), s)).num_trainable_params
        )


@pytest.mark.parametrize(
    "changes,field",
    [
        ({"parallel": {"devices": 2, "tensor": 2}}, "parallel.tensor"),
        ({"parallel": {"devices": 4}, "train": {"global_batch": 6, "micro_batch": 1}}, "train.global_batch"),
        ({"parallel": {"devices": 6, "fsdp": 4}}, "parallel.devices"),
        ({"parallel": {"devices": 2, "sharding": "shard_grad_op"}}, "parallel.sharding"),
    ],
)
def test_what_a_backend_cannot_execute_is_refused_naming_the_field(changes, field):
    doc = {"name": "t", "model": {"preset": "tiny-gemma3"}, "train": {"global_batch": 8, "micro_batch": 1}}
    for section, values in changes.items():
        doc[section] = {**doc.get(section, {}), **values}
    fsdp_only = Capabilities(axes=("fsdp",), max_devices=None, cpu_devices=True)
    with pytest.raises(Exception) as info:
        plans.resolve(validate(doc, "s.yaml"), "cpu", 1, fsdp_only, "s.yaml")
    assert f"s.yaml: {field}:" in str(info.value) and "\n" not in str(info.value)


def test_packed_rows_over_several_shards_only_where_the_backend_splits_them():
    """sequence.padding packed over 2 fsdp shards: refused, naming the field, unless the
    backend declares it splits packed rows over shards (packing_over_shards)."""
    doc = {
        "name": "t",
        "model": {"preset": "tiny-gemma3"},
        "sequence": {"padding": "packed"},
        "train": {"global_batch": 8, "micro_batch": 1},
        "parallel": {"devices": 2},
    }
    caps = Capabilities(axes=("fsdp",), max_devices=None, cpu_devices=True, packing_why=None)
    with pytest.raises(Exception) as info:
        plans.resolve(validate(doc, "s.yaml"), "cpu", 2, caps, "s.yaml")
    assert "s.yaml: sequence.padding: packed: this backend packs" in str(info.value)
    over = Capabilities(axes=("fsdp",), max_devices=None, cpu_devices=True, packing_why=None, packing_over_shards=True)
    assert plans.resolve(validate(doc, "s.yaml"), "cpu", 2, over, "s.yaml").data_parallel == 2


def test_plan_differences_name_what_differed():
    plan = plans.build(scenario(), "cpu", 1)
    step = {
        "index": 0,
        "rows": 8,
        "tokens_real": 100,
        "tokens_padded": 400,
        "lr": plan.lr[0],
        "done": {"rows": 7, "tokens_real": 90, "tokens_padded": 350},
    }
    done = {
        "dtypes": {"frozen_params": "fp32", "trainable_params": "fp32", "compute": "bf16", "optimizer_state": "fp32"},
        "distinct_row_shards": 1,
    }
    found = plans.differences(plan, [step], None, done)
    assert "step 0: rows 7 processed, 8 planned" in found
    assert any("tokens_real 90" in f for f in found) and "compute dtype bf16, fp32 planned" in found
    ok = {**step, "done": {"rows": 8, "tokens_real": 100, "tokens_padded": 400}}
    assert plans.differences(plan, [ok], None, {**done, "dtypes": {**done["dtypes"], "compute": "fp32"}}) == []


# --------------------------------------------------------------------------- the CLI
@pytest.mark.parametrize(
    "sets,field",
    [
        (["train.warmup_steps=0"], "train.warmup_steps"),
        (["parallel.devices=2"], "parallel.fsdp"),  # torch: one device, no fsdp
        (["parallel.strategy=fsdp"], "parallel"),  # the old implementation-named field
    ],
)
@pytest.mark.serial
def test_refused_before_any_work_with_one_line(tmp_path, sets, field):
    path = write_scenario(tmp_path, TINY)
    started = time.monotonic()
    done = bench(
        "run",
        str(path),
        "--backend",
        "torch",
        "--results-dir",
        str(tmp_path / "r"),
        *[a for s in sets for a in ("--set", s)],
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and f"{field}" in line and "Traceback" not in line, line
    assert not (tmp_path / "r").exists() and time.monotonic() - started < 60


def test_dry_run_prints_the_plan_and_runs_nothing(tmp_path):
    done = bench(
        "plan",
        "scenarios/padding.yaml",
        "--backend",
        "torch",
        "--profile",
        "none",
        "--set",
        "parallel.devices=1",
        "--json",
        "--results-dir",
        str(tmp_path / "r"),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    resolved = json.loads(done.stdout)
    assert [r["variant"] for r in resolved] == [
        "padding=static",
        "padding=dynamic",
        "padding=bucketed",
        "padding=packed",
    ]
    first = resolved[0]["plan"]
    # micro_batch auto: this host's memory holds a step's 8 rows of the tiny model in one pass
    assert (first["rows_per_forward"], first["accumulation"], first["precision"]["compute"]) == (8, 1, "bf16")
    assert first["micro_batch_how"].startswith("memory model")
    assert not (tmp_path / "r").exists()
    text = bench("run", "scenarios/tiny.yaml", "--backend", "torch", "--dry-run", timeout=120)
    assert text.returncode == 0 and "per optimizer step" in text.stdout and "learning rate" in text.stdout


def test_a_backend_doing_less_than_planned_is_a_failed_record(tmp_path):
    """An injected fault hands the backend one row fewer at step 1; the backend counts
    what it really fed, and the runner refuses the record, naming the difference."""
    path = write_scenario(tmp_path, TINY)
    fault = [{"match": {}, "at": "step", "step": 1, "action": "drop_row"}]
    done = bench(
        "run",
        str(path),
        "--backend",
        "torch",
        "--results-dir",
        str(tmp_path / "r"),
        "--no-progress",
        "--set",
        "train.steps=2",  # the warm-up step, then step 1: the one the fault shortens
        "--set",
        "train.warmup_steps=1",
        "--set",
        "train.window_steps=0",
        env={"BENCH_FAULTS": json.dumps(fault)},
    )
    assert done.returncode == 1
    (record,) = records_in(tmp_path / "r")
    assert record["status"] == "failed" and record["failure"]["kind"] == "plan_mismatch"
    assert "step 1: rows 3 processed, 4 planned" in record["failure"]["reason"]
    assert record["metrics"] is None and record["plan"]["rows_per_step"] == 4
