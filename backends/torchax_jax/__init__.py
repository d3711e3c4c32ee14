"""Backend `torchax`: a Hugging Face PyTorch model whose training step JAX compiles (W5):
the model is built by PyTorch, its tensors become JAX arrays on a (data, fsdp) mesh, and
the step is two XLA programs: forward + loss + gradients per micro-batch (one compile per
micro-batch length), and the optax update per optimizer step. The third path to a TPU
beside PyTorch/XLA and a JAX rewrite."""

from __future__ import annotations

from harness.backend import BackendInfo, BackendOptions, Capabilities


class TorchaxOptions(BackendOptions):
    """No options: the plan says everything (on a CPU, parallel.devices virtual devices)."""


def _load():
    from backends.torchax_jax.backend import TorchaxBackend

    return TorchaxBackend


BACKEND_INFO = BackendInfo(
    name="torchax",
    summary="a PyTorch model trained by JAX (torchax + optax): a gradient and an update program",
    requires=("torchax", "jax", "optax", "transformers", "peft"),
    install="pip install torchax jax optax (with torch 2.9: the xla-fsdpv2 environment works)",
    options=TorchaxOptions,
    load=_load,
    priority=10,
    # A (data, fsdp) mesh: rows split over both axes, weights sharded over fsdp. bf16
    # and fp16 for LoRA only: torchax has no autocast to run a full fine-tune's fp32
    # master weights in bf16 (refused in setup, naming train.precision); no gradient
    # checkpointing (refused in setup, naming train.gradient_checkpointing).
    # Over several hosts (parallel.hosts) JAX's distributed runtime joins them, as for
    # jax-tunix: one mesh over every host's devices, each host placing its own blocks.
    capabilities=Capabilities(
        axes=("data", "fsdp"),
        max_devices=None,
        cpu_devices=True,
        multi_host=True,
        packing_why="torchax has no per-example attention kernel: transformers builds the packed mask from "
        "data-dependent checks of the position ids, which jax.jit cannot trace, and no segment-id kernel is wired in",
    ),
)
