"""The execution plan: what a scenario means, resolved once, in the core, for every backend.

A scenario says *what* to run; the plan says it in numbers a backend cannot read two
ways: the devices and the mesh, the rows each device takes per forward pass, how many
forward passes make an optimizer step, the dtype of every kind of tensor, the learning
rate of every step, the LoRA targets and how many parameters they train. Every backend
receives the plan and executes it exactly, or the run is refused before any work with
one line naming the field (`refusals`). After the run the backend's own account of what
it did (rows, tokens, lr, dtypes, devices doing distinct work) is compared with the plan
(`differences`): any difference makes the record a failure that says what differed.

    plan = resolve(scenario, device_kind="cpu", device_count=1)

Pure Python: no framework is imported here.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict

from harness.basics.errors import SpecError

AXES = ("data", "fsdp", "tensor")

# train.precision -> the dtype of every kind of tensor. Trained weights keep an fp32
# master copy and fp32 optimizer state in every mixed policy (what AMP, FSDP's
# MixedPrecisionPolicy and Tunix/optax setups do); frozen weights are stored in the
# compute dtype; gradients are reduced across devices in fp32.
PRECISION_POLICIES: dict[str, dict[str, str]] = {
    "fp32": {
        "frozen_params": "fp32",
        "trainable_params": "fp32",
        "compute": "fp32",
        "grad_reduce": "fp32",
        "optimizer_state": "fp32",
    },
    "bf16": {
        "frozen_params": "bf16",
        "trainable_params": "fp32",
        "compute": "bf16",
        "grad_reduce": "fp32",
        "optimizer_state": "fp32",
    },
    "fp16": {
        "frozen_params": "fp16",
        "trainable_params": "fp32",
        "compute": "fp16",
        "grad_reduce": "fp32",
        "optimizer_state": "fp32",
    },
}

# Where a LoRA target sits in a decoder layer: (input features, output features).
_LORA_SHAPES = {
    "q_proj": lambda a: (a["hidden_size"], a["num_heads"] * _head_dim(a)),
    "k_proj": lambda a: (a["hidden_size"], a["num_kv_heads"] * _head_dim(a)),
    "v_proj": lambda a: (a["hidden_size"], a["num_kv_heads"] * _head_dim(a)),
    "o_proj": lambda a: (a["num_heads"] * _head_dim(a), a["hidden_size"]),
    "gate_proj": lambda a: (a["hidden_size"], a["intermediate_size"]),
    "up_proj": lambda a: (a["hidden_size"], a["intermediate_size"]),
    "down_proj": lambda a: (a["intermediate_size"], a["hidden_size"]),
}


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Precision(Frozen):
    """The dtype of each kind of tensor (`-` where there is none, e.g. no frozen weights
    in a full fine-tune). `compute` is the dtype the base model's matmuls run in."""

    name: str
    frozen_params: str
    trainable_params: str
    compute: str
    grad_reduce: str
    optimizer_state: str


class Plan(Frozen):
    """One run's execution plan. `micro_batch` rows per data-parallel shard per forward
    pass; `rows_per_forward` = micro_batch x data_parallel; `accumulation` forward passes
    per optimizer step; `lr[k]` is the learning rate of optimizer step k."""

    device_kind: str
    devices: int  # on all hosts together
    mesh: dict[str, int]  # data, fsdp, tensor
    data_parallel: int  # shards that split the rows: data x fsdp
    micro_batch: int
    rows_per_forward: int
    accumulation: int
    rows_per_step: int
    steps: int
    warmup_steps: int
    window_steps: int
    lr: tuple[float, ...]
    schedule: str
    optimizer: str
    precision: Precision
    sharding: str
    method: str
    lora_targets: tuple[str, ...]
    trainable_params: int | None  # None: not computable from the architecture
    gradient_checkpointing: bool
    hosts: int = 1  # hosts the job spans, devices / hosts each (one JAX process per host)
    # How micro_batch was chosen: "pinned" (the scenario's number) or the memory model's
    # account of `auto`. Execution, not work: the update does not depend on the split.
    micro_batch_how: str = "pinned"
    padding: str = "static"  # sequence.padding: packed puts several examples in a row

    @property
    def total_steps(self) -> int:
        return self.steps + self.window_steps

    def describe(self) -> list[tuple[str, str]]:
        """(field, value) lines for `bench plan` and the run's header."""
        p = self.precision
        lr = self.lr
        mesh = " x ".join(f"{axis} {self.mesh[axis]}" for axis in AXES)
        return [
            (
                "devices",
                f"{self.devices} {self.device_kind} ({mesh})"
                + (f" on {self.hosts} hosts, {self.devices // self.hosts} each" if self.hosts > 1 else ""),
            ),
            (
                "rows",
                f"{self.micro_batch} per shard per forward x {self.data_parallel} shards = "
                f"{self.rows_per_forward} per forward; x {self.accumulation} accumulation = "
                f"{self.rows_per_step} per optimizer step"
                + ("" if self.micro_batch_how == "pinned" else f" (micro_batch auto: {self.micro_batch_how})"),
            ),
            (
                "steps",
                f"{self.warmup_steps} warm-up + {self.steps - self.warmup_steps} measured"
                + (f" + {self.window_steps} window" if self.window_steps else ""),
            ),
            ("learning rate", f"{self.schedule}: step 0 {lr[0]:.4g}, max {max(lr):.4g}, last {lr[-1]:.4g}"),
            ("optimizer", self.optimizer),
            (
                "precision",
                f"{p.name}: frozen {p.frozen_params}, trained {p.trainable_params}, compute {p.compute}, "
                f"grad reduce {p.grad_reduce}, optimizer state {p.optimizer_state}",
            ),
            ("sharding", self.sharding if self.mesh["fsdp"] > 1 else "none (fsdp 1)"),
            (
                "method",
                self.method
                + (f" on {', '.join(self.lora_targets)}" if self.method == "lora" else "")
                + (f", {self.trainable_params:,} trainable" if self.trainable_params else ""),
            ),
            ("gradient checkpointing", "on" if self.gradient_checkpointing else "off"),
        ]


# --------------------------------------------------------------------------- learning rate
def lr_factor(name: str, step: int, warmup: int, total: int, cycles: int = 1) -> float:
    """The schedule's multiplier at optimizer step `step` (Hugging Face's formulas, so
    the PyTorch reference and every other backend apply the same numbers): linear
    warm-up from 0 over `warmup` steps, then constant, linear decay to 0, half a
    cosine, or `cycles` cosines with hard restarts, over the remaining steps."""
    if step < warmup:
        return step / max(1, warmup)
    if name == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    if name == "linear":
        return max(0.0, (total - step) / max(1, total - warmup))
    if name == "cosine":
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))
    if name == "cosine_with_restarts":
        if progress >= 1.0:
            return 0.0
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((cycles * progress) % 1.0))))
    raise ValueError(f"unknown schedule {name!r}")


def learning_rates(train) -> tuple[float, ...]:
    """The lr of every optimizer step the run takes (warm-up, measured and window)."""
    total = train.steps + train.window_steps
    schedule = train.schedule
    warmup = int(schedule.warmup_ratio * total)
    return tuple(train.optimizer.lr * lr_factor(schedule.name, k, warmup, total, schedule.cycles) for k in range(total))


# --------------------------------------------------------------------------- LoRA
def _head_dim(arch: dict[str, Any]) -> int:
    return arch.get("head_dim") or arch["hidden_size"] // arch["num_heads"]


def lora_trainable_params(arch: dict[str, Any], targets: tuple[str, ...], rank: int) -> int | None:
    """Parameters peft's LoRA trains on these targets: rank x (in + out) per adapted
    linear layer per decoder layer. None when a target or a size is unknown here."""
    try:
        per_layer = 0
        for target in targets:
            fan_in, fan_out = _LORA_SHAPES[target](arch)
            per_layer += rank * (fan_in + fan_out)
        return per_layer * arch["num_layers"]
    except (KeyError, TypeError):
        return None


# --------------------------------------------------------------------------- micro-batch
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
# The share of a device's memory `auto` plans to fill: the rest is the allocator's
# fragmentation, the framework's workspace and the loss kernel's one chunk of logits.
MEMORY_HEADROOM = 0.85


def activation_bytes_per_token(arch: dict[str, Any], compute: str, attention: str, seq_len: int) -> float:
    """Activations a decoder keeps for the backward pass, per token, every layer.

    After Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
    Transformer Models", eq. 1), in 16-bit bytes: attention block 11h (QKV input, Q, K,
    V, softmax output x V, projection input), a gated MLP 2h + 8i (input, gate and up
    outputs, activation, product), two norms 4h; eager attention also keeps the score
    and probability matrices, 4 a s (0 with SDPA/flash kernels). Scaled by the compute
    dtype's bytes. The loss kernel is chunked, so no full logits are counted."""
    h, i, a = arch["hidden_size"], arch["intermediate_size"], arch["num_heads"]
    per_layer = 17 * h + 8 * i + (4 * a * seq_len if attention == "eager" else 0)
    return arch["num_layers"] * per_layer * DTYPE_BYTES.get(compute, 4) / 2


def resident_bytes(arch: dict[str, Any], precision: Precision, trainable: int | None) -> float:
    """Weights, gradients and AdamW's two moments, which every micro-batch size pays
    (`trainable` None: full fine-tuning). The embedding counts once (tied head)."""
    h, i, layers = arch["hidden_size"], arch["intermediate_size"], arch["num_layers"]
    q, kv = arch["num_heads"] * _head_dim(arch), arch["num_kv_heads"] * _head_dim(arch)
    params = arch["vocab_size"] * h + layers * (2 * h * q + 2 * h * kv + 3 * h * i)
    trained_bytes = 4 + 4 + 8  # fp32 master weight, fp32 gradient, AdamW's two fp32 moments
    if trainable is None:  # full fine-tuning: every weight is trained
        return params * trained_bytes
    return params * DTYPE_BYTES.get(precision.frozen_params, 4) + trainable * trained_bytes


def auto_micro_batch(rows_per_shard: int, bytes_per_row: float, budget_bytes: float) -> int:
    """The largest divisor of a shard's rows per step whose activations fit the budget
    (at least 1: a single row that does not fit is the device's problem, said by the
    run, not hidden by the plan)."""
    fits = [d for d in range(1, rows_per_shard + 1) if rows_per_shard % d == 0 and d * bytes_per_row <= budget_bytes]
    return max(fits, default=1)


def _micro_batch(
    scenario, shards: int, arch: dict[str, Any], memory: int | None, device_kind: str = ""
) -> tuple[int, str]:
    """The plan's micro_batch: the scenario's number, or `auto` by the memory model."""
    train = scenario.train
    if train.micro_batch != "auto":
        return train.micro_batch, "pinned"
    if not arch:
        raise _refuse("train.micro_batch", "auto needs the architecture (model.arch) to model memory; pin a number")
    if not memory:
        raise _refuse("train.micro_batch", "auto needs the device's memory, which this backend's probe did not report")
    seq = scenario.sequence.max_length
    precision = Precision(name=train.precision, **PRECISION_POLICIES[train.precision])
    trainable = (
        lora_trainable_params(arch, train.lora.target_modules, train.lora.rank) if train.method == "lora" else None
    )
    # `auto` attention is SDPA only on CUDA (backends/torch_common/attention.py); elsewhere
    # it may be eager, whose score matrices count.
    attention = scenario.model.attention
    if attention == "auto":
        attention = "sdpa" if device_kind == "cuda" else "eager"
    per_row = seq * activation_bytes_per_token(arch, precision.compute, attention, seq)
    budget = MEMORY_HEADROOM * memory - resident_bytes(arch, precision, trainable)
    micro = auto_micro_batch(train.global_batch // shards, per_row, budget)
    how = (
        f"memory model: {per_row / 2**30:.3g} GiB of activations a row at length {seq}, "
        f"{max(budget, 0) / 2**30:.3g} GiB free of {memory / 2**30:.3g} GiB a device"
    )
    return micro, how


# --------------------------------------------------------------------------- resolve
def resolve_devices(requested: int | str, device_kind: str, device_count: int) -> int:
    """`all` is every accelerator of this host, and one on a CPU (a CPU is one device;
    more on a CPU must be asked for by number)."""
    if requested == "all":
        return 1 if device_kind == "cpu" else max(1, device_count)
    return int(requested)


def resolve_mesh(parallel, devices: int) -> dict[str, int]:
    sizes = {axis: getattr(parallel, axis) for axis in AXES}
    rest = [axis for axis, size in sizes.items() if size == -1]
    fixed = math.prod(size for size in sizes.values() if size != -1)
    if rest:
        if devices % fixed:
            raise _refuse(
                f"parallel.{rest[0]}", f"-1 takes the devices left over, but {devices} devices do not divide by {fixed}"
            )
        sizes[rest[0]] = devices // fixed
    if math.prod(sizes.values()) != devices:
        shown = " x ".join(f"{axis} {sizes[axis]}" for axis in AXES)
        raise _refuse("parallel.devices", f"{shown} = {math.prod(sizes.values())} does not cover {devices} devices")
    return sizes


class PlanRefusal(Exception):
    """The scenario cannot be executed as stated; `field` names what to change."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def _refuse(field: str, message: str) -> PlanRefusal:
    return PlanRefusal(field, message)


def build(scenario, device_kind: str, device_count: int, device_memory_bytes: int | None = None) -> Plan:
    """The plan of one scenario on a host with `device_count` devices of `device_kind`;
    raises PlanRefusal naming the field when the scenario cannot be executed there."""
    train, parallel = scenario.train, scenario.parallel
    hosts = parallel.hosts
    devices = _all_hosts_devices(parallel, device_kind, device_count)
    mesh = resolve_mesh(parallel, devices)
    shards = mesh["data"] * mesh["fsdp"]
    if train.global_batch % shards:
        raise _refuse(
            "train.global_batch", f"{train.global_batch} rows do not split over {shards} data-parallel shards"
        )
    arch = scenario.model.architecture() if scenario.model.init == "random" or scenario.model.arch else {}
    micro, micro_how = _micro_batch(scenario, shards, arch, device_memory_bytes, device_kind)
    rows_per_forward = micro * shards
    if train.global_batch % rows_per_forward:
        raise _refuse(
            "train.global_batch",
            f"{train.global_batch} rows do not divide into forward passes of "
            f"micro_batch {micro} x {shards} data-parallel shards",
        )
    policy = _precision_policy(train)
    lora = train.method == "lora"
    return Plan(
        device_kind=device_kind,
        devices=devices,
        mesh=mesh,
        data_parallel=shards,
        micro_batch=micro,
        micro_batch_how=micro_how,
        rows_per_forward=rows_per_forward,
        accumulation=train.global_batch // rows_per_forward,
        rows_per_step=train.global_batch,
        steps=train.steps,
        warmup_steps=train.warmup_steps,
        window_steps=train.window_steps,
        lr=learning_rates(train),
        schedule=train.schedule.name,
        optimizer=train.optimizer.name,
        precision=Precision(name=train.precision, **policy),
        sharding=parallel.sharding,
        method=train.method,
        lora_targets=tuple(train.lora.target_modules) if lora else (),
        trainable_params=lora_trainable_params(arch, train.lora.target_modules, train.lora.rank)
        if lora and arch
        else None,
        gradient_checkpointing=train.gradient_checkpointing,
        hosts=hosts,
        padding=scenario.sequence.padding,
    )


def _all_hosts_devices(parallel, device_kind: str, device_count: int) -> int:
    """The devices of every host together; refused when they do not split evenly over
    the hosts or one host would need more than it has."""
    hosts = parallel.hosts
    # `all` is every host's devices; a number counts all hosts' devices together.
    devices = resolve_devices(parallel.devices, device_kind, device_count) * (hosts if parallel.devices == "all" else 1)
    if devices % hosts:
        raise _refuse("parallel.hosts", f"{devices} devices do not divide evenly over {hosts} hosts")
    if device_kind != "cpu" and devices // hosts > device_count:
        raise _refuse(
            "parallel.devices",
            f"{devices // hosts} devices asked for on each of {hosts} host(s); "
            f"this host has {device_count} {device_kind}",
        )
    return devices


def _precision_policy(train) -> dict[str, str]:
    """The precision's dtypes, with '-' for what this method and optimizer do not keep."""
    policy = dict(PRECISION_POLICIES[train.precision])
    if train.method == "full":
        policy["frozen_params"] = "-"
    if train.optimizer.name == "sgd":
        policy["optimizer_state"] = "-"  # plain SGD (no momentum) keeps no state
    return policy


def refusals(plan: Plan, capabilities) -> PlanRefusal | None:
    """The first thing in the plan a backend declares it cannot execute, or None."""
    caps = capabilities
    for axis in AXES:
        if plan.mesh[axis] > 1 and axis not in caps.axes:
            have = ", ".join(caps.axes) or "none: one device"
            return _refuse(
                f"parallel.{axis}",
                f"{plan.mesh[axis]} (of parallel.devices {plan.devices}): this backend "
                f"has no {axis} parallelism (its axes: {have})",
            )
    if plan.hosts > 1 and not caps.multi_host:
        return _refuse("parallel.hosts", f"{plan.hosts}: {caps.single_host_why}")
    if caps.max_devices is not None and plan.devices > caps.max_devices:
        return _refuse("parallel.devices", f"{plan.devices}: this backend runs on at most {caps.max_devices}")
    if plan.device_kind == "cpu" and plan.devices > 1 and not caps.cpu_devices:
        return _refuse("parallel.devices", f"{plan.devices}: this backend cannot run several devices on a CPU")
    if plan.precision.name not in caps.precisions:
        return _refuse("train.precision", f"{plan.precision.name}: this backend runs {', '.join(caps.precisions)}")
    if plan.mesh["fsdp"] > 1 and plan.sharding not in caps.shardings:
        return _refuse("parallel.sharding", f"{plan.sharding}: this backend implements {', '.join(caps.shardings)}")
    if plan.method not in caps.methods:
        return _refuse("train.method", f"{plan.method}: this backend trains {', '.join(caps.methods)}")
    if plan.padding == "packed" and caps.packing_why:
        return _refuse("sequence.padding", f"packed: {caps.packing_why}")
    if plan.padding == "packed" and plan.data_parallel > 1 and not caps.packing_over_shards:
        return _refuse(
            "sequence.padding",
            f"packed: this backend packs a forward pass's examples on one data-parallel shard in this version "
            f"({plan.data_parallel} shards planned)",
        )
    if plan.optimizer not in caps.optimizers:
        return _refuse("train.optimizer.name", f"{plan.optimizer}: this backend has {', '.join(caps.optimizers)}")
    return None


def resolve(
    scenario, device_kind: str, device_count: int, capabilities=None, source: str = "", device_memory_bytes=None
) -> Plan:
    """`build` then `refusals`, as a SpecError (one line, exit 2) naming file and field."""
    try:
        plan = build(scenario, device_kind, device_count, device_memory_bytes)
        refusal = refusals(plan, capabilities) if capabilities is not None else None
    except PlanRefusal as exc:
        refusal = exc
    if refusal is not None:
        raise SpecError(source, refusal.field, refusal.message)
    return plan


# --------------------------------------------------------------------------- plan vs actual
# An applied lr equals the plan's to 1e-9, or to fp32's resolution where a framework
# keeps the lr in fp32 (optax: 0.1 becomes 0.10000000149).
LR_ABS_TOLERANCE = 1e-9
LR_REL_TOLERANCE = 1.2e-7


def same_lr(applied: float | None, planned: float) -> bool:
    return applied is not None and abs(applied - planned) <= LR_ABS_TOLERANCE + LR_REL_TOLERANCE * abs(planned)


def differences(
    plan: Plan, steps: list[dict[str, Any]], window: dict[str, Any] | None, done: dict[str, Any] | None
) -> list[str]:
    """What the backend reported doing that the plan did not say, one phrase each.

    `steps` are the loop's samples: `rows`/`tokens_real`/`tokens_padded` are what the
    plan's batches hold, `done` what the backend counted feeding to its devices, `lr`
    what it applied. `done` (run-level) holds the dtypes in use and the devices that
    did distinct work."""
    found: list[str] = []
    for step in steps:
        actual = step.get("done") or {}
        for key in ("rows", "tokens_real", "tokens_padded"):
            planned = plan.rows_per_step if key == "rows" else step[key]
            if actual.get(key) != planned:
                found.append(f"step {step['index']}: {key} {actual.get(key)} processed, {planned} planned")
        lr = step.get("lr")
        if not same_lr(lr, plan.lr[step["index"]]):
            found.append(f"step {step['index']}: lr {lr} applied, {plan.lr[step['index']]!r} planned")
    if window and window.get("done") is not None:
        for key in ("rows", "tokens_real", "tokens_padded"):
            planned = plan.rows_per_step * window["num_steps"] if key == "rows" else window[key]
            if window["done"].get(key) != planned:
                found.append(f"window: {key} {window['done'].get(key)} processed, {planned} planned")
    done = done or {}
    dtypes = done.get("dtypes") or {}
    for kind, planned in plan.precision.model_dump().items():
        if kind == "name" or planned == "-" or kind not in dtypes:
            continue
        if dtypes[kind] != planned:
            found.append(f"{kind} dtype {dtypes[kind]}, {planned} planned")
    missing = [
        k
        for k in ("frozen_params", "trainable_params", "compute", "optimizer_state")
        if k not in dtypes and getattr(plan.precision, k) != "-"
    ]
    if missing:
        found.append(f"dtypes not reported: {', '.join(missing)}")
    distinct = done.get("distinct_row_shards")
    if distinct != plan.data_parallel:
        found.append(f"{distinct} devices did distinct work on the rows, {plan.data_parallel} planned")
    trainable = done.get("trainable_params")
    # A backend may execute a different LoRA layout only when the scenario opted in
    # explicitly (a backend option) and the record says why (e.g. Tunix's fused k/v).
    if (
        plan.trainable_params is not None
        and trainable is not None
        and trainable != plan.trainable_params
        and not done.get("trainable_params_deviation")
    ):
        found.append(f"{trainable:,} trainable parameters, {plan.trainable_params:,} planned")
    return found
