"""How the PyTorch backends execute the plan's work on their device: the choices an
expert makes (compile, loss kernel, optimizer kernel, input copies), each stated in the
record's `raw.execution`, and dynamo's counters read the same way by torch and gpu-fsdp.

The work itself (rows per optimizer step, their order, lr, precision policy) is the
plan's; nothing here changes it."""

from __future__ import annotations

from typing import Any

import torch

from backends.hf_common.loss import TokenLoss, causal_lm, liger_chunk_tokens, resolve_kernel


def loss_module(model: torch.nn.Module, options, device: torch.device, backend: str, plan=None, scenario=None):
    """The model with its loss (harness field names in refusals); with the plan and
    scenario, the chunked kernel's chunks from the memory model (`loss_chunking`), which
    `auto` weighs Liger against (hf_common/loss.py: `auto_kernel`)."""
    field = f"backend_options.{backend}.loss_kernel"
    if plan is None:
        kernel, why = resolve_kernel(options.loss_kernel, device, field)
        return TokenLoss(model, kernel, why=why)
    tokens = plan.micro_batch * scenario.sequence.max_length
    chunking = loss_chunking(model, plan, scenario, device, tokens)
    config = causal_lm(model).config
    shape = (tokens, config.vocab_size, config.hidden_size)
    kernel, why = resolve_kernel(options.loss_kernel, device, field, shape, chunking)
    if kernel != "chunked":
        return TokenLoss(model, kernel, tokens=tokens, why=why)
    return TokenLoss(model, kernel, chunking, tokens, why)


def loss_budget_bytes(model: torch.nn.Module, plan, scenario, memory: int) -> float:
    """Device memory left to the head and loss (backends/loss_chunks.py:
    `loss_budget_bytes`) for this model, its trainable parameters and the plan's
    micro-batch, FSDP shards and gradient checkpointing."""
    from backends import loss_chunks
    from backends.hf_common.model import architecture_of

    arch = architecture_of(causal_lm(model).config)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    lora = scenario.train.method == "lora"
    seq = scenario.sequence.max_length
    attention = causal_lm(model).config._attn_implementation
    return loss_chunks.loss_budget_bytes(
        memory,
        arch,
        plan.precision,
        trainable if lora else None,
        plan.micro_batch * seq,
        seq,
        attention,
        plan.mesh.get("fsdp", 1),
        plan.gradient_checkpointing,
    )


def loss_chunking(model: torch.nn.Module, plan, scenario, device: torch.device, tokens: int):
    """The chunked loss's chunks for a forward pass of `tokens`: the memory model over
    the GPU's memory on CUDA; on the CPU (no device memory figure) the fixed chunks."""
    from backends import loss_chunks
    from harness.plan.plan import DTYPE_BYTES

    config = causal_lm(model).config
    compute = DTYPE_BYTES.get(plan.precision.compute, 4)
    softcap = bool(getattr(config, "final_logit_softcapping", None))
    if device.type != "cuda":
        return loss_chunks.legacy_chunks(tokens, config.vocab_size, compute, softcap)
    memory = torch.cuda.get_device_properties(device).total_memory
    budget = loss_budget_bytes(model, plan, scenario, memory)
    return loss_chunks.plan_chunks(tokens, config.vocab_size, compute, max(budget, 0.0), softcap)


def compile_on(options, device: torch.device) -> bool:
    """`compile: auto` is on on CUDA, off on the CPU; true/false pin it."""
    return options.compile if isinstance(options.compile, bool) else device.type == "cuda"


def choices(options, scenario) -> dict[str, str]:
    """Which of the run's execution choices the scenario pinned and which `auto` made
    for the device (the record's `raw.execution.choices`)."""
    fields = {
        "compile": options.compile,
        "attention": scenario.model.attention,
        "loss_kernel": options.loss_kernel,
        "sdpa_kernel": options.sdpa_kernel,
        "flex_attention": options.flex_attention,
    }
    return {name: "auto" if value == "auto" else "pinned" for name, value in fields.items()}


def compile_loss(loss: TokenLoss, options):
    """torch.compile of the model's forward and the loss together (the backward is
    compiled by AOT autograd from the same graph). `static` shapes: every new length
    compiles again, as XLA does; `auto`: dynamo's default (the second length compiles
    one dynamic graph)."""
    import torch._dynamo

    if options.compile_shapes == "static":
        torch._dynamo.config.automatic_dynamic_shapes = False
        torch._dynamo.config.recompile_limit = 10_000  # never fall back to eager silently
    dynamic = True if options.compile_shapes == "dynamic" else None
    mode = None if options.compile_mode == "default" else options.compile_mode
    # In place (nn.Module.compile): the module's hooks, FSDP2's included, are traced too.
    loss.compile(backend=options.compile_backend, mode=mode, dynamic=dynamic)
    return loss


def use_fused_optimizer(device: torch.device, scenario) -> bool:
    """AdamW's fused kernel on CUDA (one launch for every tensor); elsewhere PyTorch's
    default (foreach) implementation."""
    return device.type == "cuda" and scenario.train.optimizer.name == "adamw"


def to_device(array, device: torch.device) -> torch.Tensor:
    """A host array onto the device: through pinned memory and without blocking the
    host on CUDA (the copy overlaps the previous micro-batch's kernels)."""
    tensor = torch.from_numpy(array)
    if device.type != "cuda":
        return tensor
    return tensor.pin_memory().to(device, non_blocking=True)


def place(micro, device: torch.device, attention: str = "eager") -> tuple:
    """A micro-batch's ids, attention mask, labels and (packed rows) position ids on the
    device; the mask None where the rows need none (right-padded rows under SDPA:
    backends/torch_common/attention.py)."""
    from backends.torch_common.attention import needs_padding_mask

    positions = None if micro.position_ids is None else to_device(micro.position_ids, device)
    keep = needs_padding_mask(attention, micro.attention_mask, micro.position_ids)
    mask = to_device(micro.attention_mask, device) if keep else None
    return to_device(micro.input_ids, device), mask, to_device(micro.labels, device), positions


def graph_breaks() -> int:
    """Graph breaks dynamo has taken so far (each splits the compiled step in two)."""
    from torch._dynamo.utils import counters

    return int(sum(counters["graph_break"].values()))


def graph_break_reasons() -> list[str]:
    from torch._dynamo.utils import counters

    return sorted(counters["graph_break"])[:10]


def unique_graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def compile_seconds() -> float:
    """Dynamo's own timers: each frame's compilation (`_compile.compile_inner`: tracing,
    AOT autograd, the forward's backend compile and, for a dynamic-shape graph, the
    backward's too) plus each backward compiled lazily at a graph's first backward
    (`backward._backward_impl`, static shapes). Adding every `bw_compiler` timing instead
    would count a dynamic graph's backward twice: it runs inside compile_inner."""
    from torch._dynamo.utils import compilation_time_metrics

    frames = sum(compilation_time_metrics.get("_compile.compile_inner", []))
    return frames + sum(compilation_time_metrics.get("backward._backward_impl", []))


def compile_cache(options, compiled: bool) -> dict[str, Any] | None:
    """Inductor's FX graph and AOT autograd caches persist compiled kernels on disk (on by
    default): a second run on the same machine compiles less, though dynamo still
    traces (and counts) every graph."""
    if not compiled:
        return None
    if options.compile_backend != "inductor":
        return {"persistent": False, "what": f"torch.compile backend {options.compile_backend} (no on-disk cache)"}
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    on = bool(inductor_config.fx_graph_cache or getattr(functorch_config, "enable_autograd_cache", False))
    return {"persistent": on, "what": "inductor FX graph / AOT autograd caches", "dir": cache_dir()}


def liger_chunk(loss: TokenLoss) -> int | None:
    if loss.kernel != "liger" or not loss.tokens:
        return None
    config = causal_lm(loss.model).config
    return liger_chunk_tokens(loss.tokens, config.vocab_size, config.hidden_size)


def execution_facts(
    loss: TokenLoss, options, device: torch.device, fused: bool, compiled: bool, attention: dict[str, Any]
) -> dict[str, Any]:
    """The record's account of how the work was executed (`raw.execution`); `attention`:
    the implementation, the mask and the SDPA kernels seen (backends/torch_common/
    attention.py)."""
    chunked = loss.kernel == "chunked"
    facts = {
        "loss_kernel": loss.kernel,
        "loss_kernel_why": loss.why,
        # Liger's tokens a chunk are its own (liger_chunk_tokens), recorded, not set.
        "loss_chunk_tokens": loss.chunk if chunked else liger_chunk(loss),
        # The head's forward run again in the backward (HFU counts it, harness.figures.metrics).
        "loss_recompute": loss.recompute if chunked else False,
        "loss_memory": (loss.chunking.how if loss.chunking else None) if chunked else None,
        "loss_memory_estimate_bytes": (loss.chunking.estimate_bytes if loss.chunking else None) if chunked else None,
        **attention,
        "optimizer_impl": "fused" if fused else "foreach",
        "input_copies": "pinned, non-blocking" if device.type == "cuda" else "host memory (CPU)",
        "compile": compiled,
    }
    if compiled:
        facts.update(
            compile_mode=options.compile_mode,
            compile_backend=options.compile_backend,
            compile_shapes=options.compile_shapes,
            graph_breaks=graph_breaks(),
            graph_break_reasons=graph_break_reasons(),
            compiled_graphs=unique_graphs(),
        )
    return facts
