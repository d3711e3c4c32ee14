"""Backend `jax-tunix`: the scenario's Gemma 3 built in Tunix, Qwix LoRA, Tunix's
PeftTrainer on an fsdp x tp mesh (W3's JAX stack; TPU, GPU, or virtual CPU devices)."""

from __future__ import annotations

from pydantic import Field

from backends.declare import declared_backend
from harness.backend import BackendOptions


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


BACKEND_INFO = declared_backend(__file__, JaxTunixOptions)
