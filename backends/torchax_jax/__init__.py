"""Backend `torchax`: a Hugging Face PyTorch model whose training step JAX compiles (W5):
the model is built by PyTorch, its tensors become JAX arrays on a (data, fsdp) mesh, and
the step is two XLA programs: forward + loss + gradients per micro-batch (one compile per
micro-batch length), and the optax update per optimizer step. The third path to a TPU
beside PyTorch/XLA and a JAX rewrite."""

from __future__ import annotations

from backends.declare import declared_backend
from harness.backend import BackendOptions


class TorchaxOptions(BackendOptions):
    """No options: the plan says everything (on a CPU, parallel.devices virtual devices)."""


BACKEND_INFO = declared_backend(__file__, TorchaxOptions)
