"""Backend `jax-tunix`: the scenario's Gemma 3 built in Tunix, Qwix LoRA, Tunix's
PeftTrainer on an fsdp x tp mesh (W3's JAX stack; TPU, GPU, or virtual CPU devices)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from backends.declare import declared_backend
from harness.run.backend import BackendOptions


class JaxTunixOptions(BackendOptions):
    # Tunix's `max_inflight_computations`: how many micro-batch steps the trainer lets run
    # ahead of the host. Per-step timing syncs at every step boundary regardless.
    max_inflight_steps: int = Field(2, ge=1)
    # Tunix's Gemma 3 fuses k and v (and q, where there are as many KV heads as query
    # heads) into one einsum: LoRA there is one adapter with one A for both, not peft's
    # separate k_proj and v_proj adapters, and trains fewer parameters than the plan
    # says. Off: such targets are refused (train.lora.target_modules). On: the fused
    # adapter is trained and the record says so (done.trainable_params_deviation).
    fuse_kv_lora: bool = False
    # A peft adapter directory (adapter_model.safetensors, adapter_config.json) to start
    # the LoRA weights from instead of qwix's init (random A, zero B): the same adapter a
    # PyTorch run can load, for loss parity from identical weights. Targets Tunix adapts
    # one by one only (q, o, gate, up, down); rank and alpha must be the run's.
    lora_init: str | None = None
    # The LM head and cross-entropy (backends/jax_common/loss.py): chunked never holds
    # the full fp32 logits (head and loss a chunk of positions at a time, each chunk
    # recomputed in the backward); plain is the model's own logits (the reference);
    # auto = chunked.
    loss_kernel: Literal["auto", "chunked", "plain"] = "auto"
    # Which activations Tunix's Gemma 3 recomputes when train.gradient_checkpointing is
    # true (Tunix's RematConfig): block = attention and MLP each under nnx.remat (their
    # inputs kept), decoder = the whole decoder layer under one nnx.remat (only the
    # layer's input kept: less memory, the same recompute); auto = block. With
    # gradient checkpointing off nothing is recomputed and only auto or none is valid.
    remat: Literal["auto", "none", "block", "decoder"] = "auto"
    # The attention kernel (backends/jax_common/attention.py): auto = cuDNN flash
    # attention through jax.nn.dot_product_attention where it can run (a CUDA GPU, 16-bit
    # compute), else that function's XLA implementation; cudnn or xla pin one (a pinned
    # kernel that cannot run is refused); masked = Tunix's own einsums with the padding
    # mask (the path before #36). The record says which ran and whether it was pinned.
    attention: Literal["auto", "cudnn", "xla", "masked"] = "auto"


BACKEND_INFO = declared_backend(__file__, JaxTunixOptions)
