"""Backend `torchax`: a Hugging Face PyTorch model whose training step JAX compiles (W5):
the model is built by PyTorch, its tensors become JAX arrays on a (data, fsdp) mesh, and
the step is two XLA programs: forward + loss + gradients per micro-batch (one compile per
micro-batch length), and the optax update per optimizer step. The third path to a TPU
beside PyTorch/XLA and a JAX rewrite."""

from __future__ import annotations

from typing import Literal

from backends.declare import declared_backend
from harness.run.backend import BackendOptions


class TorchaxOptions(BackendOptions):
    """Execution only: the plan says the work (on a CPU, parallel.devices virtual devices)."""

    # The LM head and cross-entropy (backends/jax_common/loss.py): chunked runs the HF
    # model's base, then the head and cross-entropy in JAX a chunk of positions at a
    # time, each chunk recomputed in the backward (never the full fp32 logits); plain is
    # the model's own forward and logits (the reference); auto = chunked.
    loss_kernel: Literal["auto", "chunked", "plain"] = "auto"
    # The attention kernel (backends/jax_common/attention.py): auto = cuDNN flash
    # attention through jax.nn.dot_product_attention where it can run (a CUDA GPU, 16-bit
    # compute), else that function's XLA implementation; cudnn or xla pin one (a pinned
    # kernel that cannot run is refused); masked = HF's `model.attention` with the
    # padding mask, lowered by torchax (the path before #36); splash = Pallas's TPU
    # splash kernel (a TPU only; what MaxText runs at long sequences). The record says
    # which ran and whether it was pinned.
    attention: Literal["auto", "cudnn", "xla", "masked", "splash"] = "auto"


BACKEND_INFO = declared_backend(__file__, TorchaxOptions)
