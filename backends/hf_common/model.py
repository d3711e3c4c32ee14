"""Shared by the PyTorch-family backends: a transformers model from the scenario, LoRA
through peft, the optimizer and schedule, and the token-weighted loss.

Sharing this is what makes backend-vs-backend comparisons fair: the same seed gives
the same initial weights, and the loss is the same function everywhere.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from backends.hf_common.config_names import from_hf, to_hf
from harness.data.batches import IGNORE_INDEX
from harness.run.backend import ModelFacts, Probe

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}


def cuda_or_cpu_probe(cpu_note: str) -> Probe:
    """What a torch backend finds here: every CUDA GPU (the first one's name and memory),
    else the CPU, with `cpu_note` saying what running there means."""
    from harness.records.provenance import cpu_name

    if torch.cuda.is_available():
        memory = torch.cuda.get_device_properties(0).total_memory
        return Probe(True, "", "cuda", torch.cuda.get_device_name(0), torch.cuda.device_count(), memory)
    return Probe(True, cpu_note, "cpu", cpu_name(), 1)


def cuda_versions() -> dict[str, str]:
    """CUDA runtime, driver, cuDNN and NCCL versions when a GPU is in use."""
    if not torch.cuda.is_available():
        return {}
    found = {"cuda": str(torch.version.cuda), "cudnn": str(torch.backends.cudnn.version())}
    try:
        found["cuda_driver"] = str(torch._C._cuda_getDriverVersion())
    except (AttributeError, RuntimeError):
        pass
    try:
        found["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except (AttributeError, RuntimeError):
        pass
    return found


def dtype_name(dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def hf_config(arch: dict[str, Any], attention: str):
    """A transformers config for the architecture fields of `harness.scenario.presets`."""
    family = arch.get("family", "gemma3")
    common = dict(
        **to_hf(arch),
        max_position_embeddings=arch["max_position_embeddings"],
        tie_word_embeddings=arch.get("tie_embeddings", True),
        use_cache=False,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
    )
    if family == "gemma3":
        from transformers import Gemma3TextConfig

        rope = {
            "full_attention": {"rope_type": "default", "rope_theta": arch.get("rope_theta", 1e6)},
            "sliding_attention": {"rope_type": "default", "rope_theta": arch.get("rope_local_theta", 1e4)},
        }
        config = Gemma3TextConfig(
            **common,
            head_dim=arch["head_dim"],
            sliding_window=arch.get("sliding_window", 512),
            query_pre_attn_scalar=arch.get("query_pre_attn_scalar", arch["head_dim"]),
            rope_parameters=rope,
        )
    elif family == "qwen2":
        from transformers import Qwen2Config

        config = Qwen2Config(
            **common, rope_parameters={"rope_type": "default", "rope_theta": arch.get("rope_theta", 1e6)}
        )
    else:
        from transformers import LlamaConfig

        config = LlamaConfig(
            **common,
            head_dim=arch.get("head_dim"),
            rope_parameters={"rope_type": "default", "rope_theta": arch.get("rope_theta", 5e5)},
        )
    config._attn_implementation = attention
    return config


def build_model(scenario, attention: str | None = None) -> torch.nn.Module:
    """Random weights from the architecture (seeded), or a local pretrained model, with
    `attention` (the backend's resolution of `model.attention`; without one, `auto` is
    eager, the implementation every backend runs)."""
    from transformers import AutoModelForCausalLM

    spec = scenario.model
    attention = attention or ("eager" if spec.attention == "auto" else spec.attention)
    torch.manual_seed(scenario.train.seed)
    if spec.init == "pretrained":
        model = AutoModelForCausalLM.from_pretrained(
            spec.path, local_files_only=True, attn_implementation=attention, dtype=torch.float32
        )
    else:
        model = AutoModelForCausalLM.from_config(hf_config(spec.architecture(), attention), dtype=torch.float32)
    model.config.use_cache = False  # training: the cache only costs memory (and breaks XLA)
    return model


def apply_lora(model: torch.nn.Module, scenario) -> torch.nn.Module:
    """peft LoRA on the scenario's target modules; full fine-tuning leaves all trainable."""
    if scenario.train.method != "lora":
        return model
    from peft import LoraConfig, get_peft_model

    lora = scenario.train.lora
    torch.manual_seed(scenario.train.seed + 1)  # identical adapter init across backends
    config = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=list(lora.target_modules),
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def model_facts(model: torch.nn.Module) -> ModelFacts:
    config = model.config
    embedding = model.get_input_embeddings()
    seen: set[int] = set()
    total = trainable = 0
    for p in model.parameters():  # tied weights appear once
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    return ModelFacts(
        num_params=total,
        num_embedding_params=embedding.weight.numel(),
        num_trainable_params=trainable,
        num_layers=config.num_hidden_layers,
        num_heads=config.num_attention_heads,
        head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
        hidden_size=config.hidden_size,
        vocab_size=config.vocab_size,
        architecture=architecture_of(config),
    )


def architecture_of(config) -> dict[str, Any]:
    """The built model's architecture, for the FLOPs convention (harness.figures.metrics)."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    return {
        **from_hf(config),
        "head_dim": getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
        "layer_windows": [window if kind == "sliding_attention" else None for kind in types],
    }


def cast_to_plan(model: torch.nn.Module, precision) -> torch.nn.Module:
    """Each parameter stored in the plan's dtype for its kind: frozen weights in
    `frozen_params`, trained ones in `trainable_params` (the fp32 master copy)."""
    for p in model.parameters():
        name = precision.trainable_params if p.requires_grad else precision.frozen_params
        p.data = p.data.to(DTYPES[name])
    for b in model.buffers():  # e.g. rotary inverse frequencies: computed in fp32
        if b.is_floating_point() and b.dtype != torch.float32:
            b.data = b.data.float()
    return model


def parameter_dtypes(model: torch.nn.Module) -> dict[str, str]:
    """The dtypes the parameters are really stored in, by kind (several joined by '+')."""
    kinds: dict[str, set[str]] = {"frozen_params": set(), "trainable_params": set()}
    for p in model.parameters():
        local = p.to_local() if hasattr(p, "to_local") else p
        kinds["trainable_params" if p.requires_grad else "frozen_params"].add(dtype_name(local.dtype))
    return {kind: "+".join(sorted(names)) for kind, names in kinds.items() if names}


def optimizer_state_dtype(optimizer) -> str | None:
    """The dtype of the optimizer's state tensors (moments), once a step has made them."""
    names = set()
    for state in optimizer.state.values():
        for value in state.values():
            if torch.is_tensor(value) and value.is_floating_point() and value.dim() > 0:
                local = value.to_local() if hasattr(value, "to_local") else value
                names.add(dtype_name(local.dtype))
    return "+".join(sorted(names)) or None


def run_dtypes(model: torch.nn.Module, optimizer, compute_dtype) -> dict[str, str]:
    """The record's `done.dtypes`: parameters by kind, optimizer state and the compute
    dtype measured from the logits; kinds with nothing to report are left out."""
    dtypes = {
        **parameter_dtypes(model),
        "optimizer_state": optimizer_state_dtype(optimizer),
        "compute": dtype_name(compute_dtype) if compute_dtype else None,
    }
    return {k: v for k, v in dtypes.items() if v}


def build_optimizer(model: torch.nn.Module, scenario, fused: bool = False):
    """The scenario's optimizer over trainable parameters (the plan sets its lr).
    `fused`: AdamW's single-kernel implementation (CUDA), the same update in one launch
    per step instead of one per tensor."""
    opt = scenario.train.optimizer
    params = [p for p in model.parameters() if p.requires_grad]
    if opt.name == "adamw":
        optimizer = torch.optim.AdamW(
            params,
            lr=opt.lr,
            betas=opt.betas,
            eps=opt.eps,
            weight_decay=opt.weight_decay,
            **({"fused": True} if fused else {}),
        )
    elif opt.name == "adafactor":
        from transformers.optimization import Adafactor

        optimizer = Adafactor(
            params,
            lr=opt.lr,
            scale_parameter=False,
            relative_step=False,
            warmup_init=False,
            weight_decay=opt.weight_decay,
        )
    else:
        optimizer = torch.optim.SGD(params, lr=opt.lr, weight_decay=opt.weight_decay)
    return optimizer


class PlannedSteps:
    """Optimizer steps at the plan's learning rates: before step k every parameter group
    gets `plan.lr[k]` (the one schedule implementation, harness.plan.plan), and the backend's
    work log records the lr applied."""

    def __init__(self, optimizer, plan, work) -> None:
        self.optimizer, self.plan, self.work = optimizer, plan, work
        self.index = 0

    def set_lr(self) -> float:
        lr = self.plan.lr[min(self.index, len(self.plan.lr) - 1)]
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.work.applied_lr(lr)
        self.index += 1
        return lr

    def step(self, model: torch.nn.Module, clip: float | None, keep_grads: bool = False) -> None:
        """Clip the global gradient norm, step at the plan's lr, clear the gradients
        (zeroed in place with `keep_grads`, so a compiled graph sees the same inputs)."""
        self.set_lr()
        if clip:
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=not keep_grads)


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum of next-token cross-entropy over trained positions.

    The labels are shifted (padded by one ignored position), not the logits: slicing
    the [rows, length, vocab] logits would copy the largest tensor of the step."""
    shifted = F.pad(labels, (0, 1), value=IGNORE_INDEX)[:, 1:]
    return F.cross_entropy(
        logits.float().reshape(-1, logits.size(-1)), shifted.reshape(-1), ignore_index=IGNORE_INDEX, reduction="sum"
    )


def plain_loss_sum(model):
    """The model's own forward, then cross-entropy on its full logits: (token loss sum,
    the logits' dtype as an empty tensor). For backends that keep the model's forward."""

    def loss_sum(i: int, ids, mask, labels):
        logits = model(input_ids=ids, attention_mask=mask, use_cache=False).logits
        return token_loss_sum(logits, labels), logits[:0]

    return loss_sum


def micro_batch_loss(backend, batch, place, loss_sum=None, backward=None, after=None) -> torch.Tensor:
    """One step's forward and backward passes over its micro-batches, gradients
    accumulated: each micro-batch's loss is its token loss sum over the step's loss
    tokens, so the step's loss is the token-weighted mean whatever the split (the same
    on every torch backend). Returns the step's loss, on the device (no host sync).

    The backend supplies what differs: `place(i, micro)` -> (the attention mask it
    feeds, as a host array, then the tensors on its devices: ids, mask, labels, and
    position ids where it takes packed rows); `loss_sum(i, *those tensors)` -> (the
    micro-batch's token loss sum, an empty tensor in the dtype the head's matmul
    produced), by default the model's forward and plain cross-entropy;
    `backward(i, loss)`; `after(i)` once a micro-batch is done."""
    backend.model.train()
    loss_sum = loss_sum or plain_loss_sum(backend.model)
    normaliser = max(batch.num_loss_tokens, 1)
    total = torch.zeros((), device=backend.device)
    for i, micro in enumerate(batch.micro_batches):
        fed, *tensors = place(i, micro)
        backend.work.fed(fed, micro.position_ids)
        summed, made = loss_sum(i, *tensors)
        backend.compute_dtype = backend.compute_dtype or made.dtype  # what the matmuls produced
        loss = summed / normaliser
        backward(i, loss) if backward is not None else loss.backward()
        total += loss.detach()
        if after is not None:
            after(i)
    return total
