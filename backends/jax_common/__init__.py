"""What the JAX-based backends (torchax, jax-tunix) share: virtual CPU devices, the
optax optimizer built from the scenario and the plan's learning rates (and the lr it
applied, read back), compile counting from JAX's monitoring events,
and the device facts (accelerator, memory). Imports JAX only inside functions."""

from __future__ import annotations

import os
from typing import Any

from harness.figures.accelerators import on_tpu_vm
from harness.run.backend import CompileStats, MemoryFacts, Probe, cpu_peak_memory

# jax.monitoring's event for one XLA compilation; its `fun_name` says which function.
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
# The stages before it, timed too: compile time is tracing + lowering + XLA compile
# (metrics.md). Tracing reports the bare function name, the others `jit(<name>)`.
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"


def request_cpu_devices(count: int) -> None:
    """Virtual CPU devices for meshes on a machine without an accelerator. XLA reads the
    flag once, when JAX initialises, so this must run before the first `import jax`."""
    flags = os.environ.get("XLA_FLAGS", "")
    if not on_tpu_vm() and "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()


def dtype_name(dtype) -> str:
    """A JAX dtype as the plan names it (fp32, bf16, fp16), else JAX's own name."""
    name = str(getattr(dtype, "name", dtype))
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(name, name)


def device_kind(devices) -> str:
    return {"tpu": "tpu", "gpu": "cuda"}.get(devices[0].platform, "cpu")


def probe_devices() -> Probe:
    import jax

    from harness.records.provenance import cpu_name

    devices = jax.devices()
    kind = device_kind(devices)
    name = devices[0].device_kind if kind != "cpu" else cpu_name()
    memory = (devices[0].memory_stats() or {}).get("bytes_limit") if kind != "cpu" else None
    return Probe(True, "" if kind != "cpu" else "no accelerator: JAX on the CPU", kind, name, len(devices), memory)


def accelerator(devices) -> dict[str, Any]:
    """{kind, name, count}. A TPU's device_kind names its generation (e.g. 'TPU v5 lite');
    virtual CPU devices are one CPU, so the price counts one machine."""
    from harness.records.provenance import cpu_name

    kind = device_kind(devices)
    if kind == "cpu":
        return {"kind": "cpu", "name": cpu_name(), "count": 1, "virtual_devices": len(devices)}
    return {"kind": kind, "name": devices[0].device_kind, "count": len(devices)}


def memory(devices) -> MemoryFacts:
    """Peak device memory from the devices' allocator stats (TPU, GPU); the CPU backend
    keeps none, so there the process's peak RSS stands in and says so."""
    stats = [d.memory_stats() for d in devices] if device_kind(devices) != "cpu" else []
    peaks = [int(s["peak_bytes_in_use"]) for s in stats if s and "peak_bytes_in_use" in s]
    if peaks:
        return MemoryFacts(max(peaks), f"{devices[0].platform}_peak_bytes_in_use", per_rank_bytes=peaks)
    return cpu_peak_memory()


def optax_optimizer(train, lrs) -> Any:
    """The scenario's optimizer and clipping as one optax transformation, stepping
    through the plan's learning rates `lrs` (`plan.lr`: the one schedule
    implementation every backend applies; past its end the last lr holds).

    The same choices `hf_common.model.build_optimizer` makes for PyTorch: AdamW with
    decoupled decay; SGD with PyTorch's coupled decay (decay added to the gradient
    before the step); Adafactor as HF's with relative_step=False and
    scale_parameter=False. Global-norm clipping comes first, as PyTorch clips before
    the optimizer. `optax.inject_hyperparams` keeps the lr each update used in the
    state, so `applied_lr` reads back what was really applied."""
    import jax.numpy as jnp
    import optax

    if not lrs:
        raise ValueError("optax_optimizer: no learning rates (the plan has no steps)")
    table = tuple(float(lr) for lr in lrs)

    def schedule(count):
        return jnp.asarray(table, jnp.float32)[jnp.minimum(count, len(table) - 1)]

    def build(learning_rate):
        clip = [optax.clip_by_global_norm(train.grad_clip)] if train.grad_clip else []
        return optax.chain(*clip, _update_rule(train.optimizer, learning_rate))

    return optax.inject_hyperparams(build, hyperparam_dtype=jnp.float32)(learning_rate=schedule)


def _update_rule(opt, learning_rate) -> Any:
    import optax

    if opt.name == "adafactor":
        return optax.adafactor(
            learning_rate,
            decay_rate=0.8,
            multiply_by_parameter_scale=False,
            clipping_threshold=1.0,
            weight_decay_rate=opt.weight_decay,
        )
    if opt.name == "sgd":
        return optax.chain(optax.add_decayed_weights(opt.weight_decay), optax.sgd(learning_rate))
    if opt.name == "adamw":
        return optax.adamw(learning_rate, b1=opt.betas[0], b2=opt.betas[1], eps=opt.eps, weight_decay=opt.weight_decay)
    raise ValueError(f"train.optimizer.name: {opt.name!r} has no optax counterpart here")


def applied_lr_array(opt_state) -> Any:
    """The lr the last update applied, as a device scalar (no host sync): what
    `optax_optimizer`'s inject_hyperparams recorded (before any update: step 0's)."""
    import optax

    def recorded(path, value) -> bool:  # hyperparams["learning_rate"], not its schedule's state
        return any(getattr(key, "name", getattr(key, "key", None)) == "hyperparams" for key in path)

    lr = optax.tree_utils.tree_get(opt_state, "learning_rate", filtering=recorded)
    if lr is None:
        raise KeyError("no learning_rate in the optimizer state: not built by optax_optimizer")
    return lr


def applied_lr(opt_state) -> float:
    """`applied_lr_array` on the host (a device->host read: call it outside a timed step)."""
    return float(applied_lr_array(opt_state))


class CompileCounter:
    """Counts XLA compilations of the step's functions, by the `fun_name` JAX reports
    (`jit(<name>)`): setup does many small eager compiles that are not the step's. A
    step made of several jitted functions (per-micro-batch gradients, the optimizer
    update) names them all; their compilations add up.

    Some libraries clear every monitoring listener (Tunix's PeftTrainer does, at the end
    of `train()`), so `ensure_listening()` re-registers after them; it never registers
    twice, which would count every compilation twice.
    """

    def __init__(self, *function_names: str) -> None:
        if not function_names:
            raise ValueError("CompileCounter: name at least one jitted function to count")
        self.names = tuple(function_names)
        self.markers = tuple(f"({name})" for name in function_names)
        self.stats = CompileStats()
        self.other = 0  # every other compilation, for the record

    def _ours(self, fun_name: str) -> bool:
        return fun_name in self.names or any(marker in fun_name for marker in self.markers)

    def on_event(self, event: str, duration: float, **kwargs) -> None:
        ours = self._ours(str(kwargs.get("fun_name", "")))
        if event in (TRACE_EVENT, LOWER_EVENT) and ours:
            self.stats.seconds += duration
        elif event == COMPILE_EVENT and ours:
            self.stats.count += 1
            self.stats.seconds += duration
        elif event == COMPILE_EVENT:
            self.other += 1

    def ensure_listening(self) -> None:
        import jax

        self._forget()
        jax.monitoring.register_event_duration_secs_listener(self.on_event)

    def _forget(self) -> None:
        """Unregister if registered; after a library cleared the listeners we are gone
        already, and jax says so with an error we can ignore."""
        import jax

        try:
            jax.monitoring.unregister_event_duration_listener(self.on_event)
        except (AssertionError, ValueError, KeyError):
            pass

    def snapshot(self) -> CompileStats:
        return CompileStats(self.stats.count, self.stats.seconds)


class JaxDeviceFacts:
    """The device facts of a JAX backend (mixed in before `Backend`): it sets
    `self.devices` (jax.devices()) and `self.compiles` (a CompileCounter). Over several
    hosts (`plan.hosts` > 1) the facts are the whole job's (`distributed`), and teardown
    leaves the job together."""

    devices: list
    compiles: CompileCounter

    def compile_stats(self) -> CompileStats:
        return self.compiles.snapshot()

    def memory(self) -> MemoryFacts:
        if self.plan.hosts > 1:
            from backends.jax_common import distributed

            return distributed.memory(self.devices)
        return memory(self.devices)

    def accelerator(self) -> dict[str, Any]:
        if self.plan.hosts > 1:
            from backends.jax_common import distributed

            return distributed.accelerator(self.plan, self.devices)
        return accelerator(self.devices)

    def job_facts(self) -> dict[str, Any]:
        """Processes and hosts of a multi-host job (none on one host)."""
        if self.plan.hosts > 1:
            from backends.jax_common import distributed

            return distributed.job_facts()
        return {}

    def teardown(self) -> None:
        """Leave the job together: a host that exits while others still talk to its
        coordination service would take them down."""
        if self.plan.hosts > 1:
            import jax

            jax.distributed.shutdown()

    def compile_cache(self) -> dict[str, Any]:
        """JAX's persistent compilation cache (jax_compilation_cache_dir); a hit emits no
        compile event, so the count would hide it."""
        import jax

        directory = jax.config.jax_compilation_cache_dir
        return {"persistent": bool(directory), "what": "JAX compilation cache", "dir": directory}


def mesh(devices: list, degrees: dict[str, int], axes: dict[str, str]):
    """A JAX mesh over `devices` with the plan's degrees (harness.plan.plan's `mesh`), its axes
    in the order and under the names the framework's sharding annotations use
    ({plan axis: mesh axis name}). The one mesh resolution of the JAX backends."""
    import numpy as np
    from jax.sharding import Mesh

    shape = tuple(degrees[axis] for axis in axes)
    return Mesh(np.array(devices).reshape(shape), tuple(axes.values()))
