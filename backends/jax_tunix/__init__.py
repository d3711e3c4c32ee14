"""Backend `jax-tunix`: the scenario's Gemma 3 built in Tunix, Qwix LoRA, Tunix's
PeftTrainer on an fsdp x tp mesh (W3's JAX stack; TPU, GPU, or virtual CPU devices)."""

from __future__ import annotations

from pydantic import Field

from harness.backend import BackendInfo, BackendOptions


class JaxTunixOptions(BackendOptions):
    # Virtual JAX devices on the CPU (tests, laptops); ignored on a TPU or GPU.
    cpu_devices: int = Field(4, ge=1)
    # Tunix's `max_inflight_computations`: how many micro-batch steps the trainer lets run
    # ahead of the host. Per-step timing syncs at every step boundary regardless.
    max_inflight_steps: int = Field(2, ge=1)


def _load():
    from backends.jax_tunix.backend import JaxTunixBackend

    return JaxTunixBackend


BACKEND_INFO = BackendInfo(
    name="jax-tunix",
    summary="JAX + Tunix PeftTrainer + Qwix LoRA on an fsdp x tp mesh (TPU, GPU)",
    requires=("jax", "flax", "optax", "qwix", "tunix"),
    install="pip install -e '.[jax]' (on a TPU VM: its own environment, apart from torch_xla's)",
    options=JaxTunixOptions,
    load=_load,
    priority=20,
)
