"""Backend `jax-tunix`: the scenario's Gemma 3 built in Tunix, Qwix LoRA, Tunix's
PeftTrainer on an fsdp x tp mesh (W3's JAX stack; TPU, GPU, or virtual CPU devices)."""

from __future__ import annotations

from pydantic import Field

from harness.backend import BackendInfo, BackendOptions, Capabilities


class JaxTunixOptions(BackendOptions):
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
    # Tunix's fsdp and tp mesh axes; the trainer splits rows over fsdp.
    capabilities=Capabilities(axes=("fsdp", "tensor"), max_devices=None, cpu_devices=True),
)
