"""What the JAX-based backends (torchax, jax-tunix) share: virtual CPU devices, the
optax optimizer built from the scenario, compile counting from JAX's monitoring events,
and the device facts (accelerator, memory). Imports JAX only inside functions."""

from __future__ import annotations

import os
import resource
from pathlib import Path
from typing import Any

from harness.backend import CompileStats, MemoryFacts, Probe

# jax.monitoring's event for one XLA compilation; its `fun_name` says which function.
COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def on_tpu_vm() -> bool:
    return Path("/dev/accel0").exists() or Path("/dev/vfio/0").exists()


def request_cpu_devices(count: int) -> None:
    """Virtual CPU devices for meshes on a machine without an accelerator. XLA reads the
    flag once, when JAX initialises, so this must run before the first `import jax`."""
    flags = os.environ.get("XLA_FLAGS", "")
    if not on_tpu_vm() and "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()


def device_kind(devices) -> str:
    return {"tpu": "tpu", "gpu": "cuda"}.get(devices[0].platform, "cpu")


def probe_devices() -> Probe:
    import jax

    from harness.provenance import cpu_name

    devices = jax.devices()
    kind = device_kind(devices)
    name = devices[0].device_kind if kind != "cpu" else cpu_name()
    return Probe(True, "" if kind != "cpu" else "no accelerator: JAX on the CPU", kind, name, len(devices))


def accelerator(devices) -> dict[str, Any]:
    """{kind, name, count}. A TPU's device_kind names its generation (e.g. 'TPU v5 lite');
    virtual CPU devices are one CPU, so the price counts one machine."""
    from harness.provenance import cpu_name

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
    return MemoryFacts(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "cpu_peak_rss")


def optax_optimizer(train) -> Any:
    """The scenario's optimizer, schedule and clipping, as one optax transformation
    (the same choices `hf_common.model.build_optimizer` makes for PyTorch)."""
    import optax

    opt = train.optimizer
    total = train.steps + train.window_steps
    warmup = int(train.schedule.warmup_ratio * total)
    if train.schedule.name == "constant":
        schedule = optax.constant_schedule(opt.lr)
    elif train.schedule.name == "linear":
        schedule = optax.join_schedules([optax.linear_schedule(0.0, opt.lr, max(warmup, 1)),
                                         optax.linear_schedule(opt.lr, 0.0, max(total - warmup, 1))], [warmup])
    else:
        schedule = optax.warmup_cosine_decay_schedule(0.0, opt.lr, max(warmup, 1), max(total, 2))
    if opt.name == "adafactor":
        update = optax.adafactor(schedule)
    elif opt.name == "sgd":
        update = optax.sgd(schedule)
    else:
        update = optax.adamw(schedule, b1=opt.betas[0], b2=opt.betas[1], eps=opt.eps, weight_decay=opt.weight_decay)
    clip = [optax.clip_by_global_norm(train.grad_clip)] if train.grad_clip else []
    return optax.chain(*clip, update)


class CompileCounter:
    """Counts XLA compilations of one function, by the `fun_name` JAX reports
    (`jit(<name>)`): setup does many small eager compiles that are not the step's.

    Some libraries clear every monitoring listener (Tunix's PeftTrainer does, at the end
    of `train()`), so `ensure_listening()` re-registers after them; it never registers
    twice, which would count every compilation twice.
    """

    def __init__(self, function_name: str) -> None:
        self.marker = f"({function_name})"
        self.stats = CompileStats()
        self.other = 0  # every other compilation, for the record

    def on_event(self, event: str, duration: float, **kwargs) -> None:
        if event != COMPILE_EVENT:
            return
        if self.marker in str(kwargs.get("fun_name", "")):
            self.stats.count += 1
            self.stats.seconds += duration
        else:
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
    `self.devices` (jax.devices()) and `self.compiles` (a CompileCounter)."""

    devices: list
    compiles: CompileCounter

    def compile_stats(self) -> CompileStats:
        return self.compiles.snapshot()

    def memory(self) -> MemoryFacts:
        return memory(self.devices)

    def accelerator(self) -> dict[str, Any]:
        return accelerator(self.devices)
