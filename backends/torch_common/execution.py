"""How the PyTorch backends execute the plan's work on their device: the choices an
expert makes (compile, loss kernel, optimizer kernel, input copies), each stated in the
record's `raw.execution`, and dynamo's counters read the same way by torch and gpu-fsdp.

The work itself (rows per optimizer step, their order, lr, precision policy) is the
plan's; nothing here changes it."""

from __future__ import annotations

from typing import Any

import torch

from backends.hf_common.loss import TokenLoss, resolve_kernel


def loss_module(model: torch.nn.Module, options, device: torch.device, backend: str) -> TokenLoss:
    """The model with its loss (harness field names in refusals)."""
    kernel = resolve_kernel(options.loss_kernel, device, f"backend_options.{backend}.loss_kernel")
    return TokenLoss(model, kernel)


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


def place(micro, device: torch.device) -> tuple:
    """A micro-batch's ids, attention mask, labels and (packed rows) position ids on the
    device."""
    positions = None if micro.position_ids is None else to_device(micro.position_ids, device)
    arrays = (micro.input_ids, micro.attention_mask, micro.labels)
    return (*(to_device(a, device) for a in arrays), positions)


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


def compile_cache(options) -> dict[str, Any] | None:
    """Inductor's FX graph and AOT autograd caches persist compiled kernels on disk (on by
    default): a second run on the same machine compiles less, though dynamo still
    traces (and counts) every graph."""
    if not options.compile:
        return None
    if options.compile_backend != "inductor":
        return {"persistent": False, "what": f"torch.compile backend {options.compile_backend} (no on-disk cache)"}
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    on = bool(inductor_config.fx_graph_cache or getattr(functorch_config, "enable_autograd_cache", False))
    return {"persistent": on, "what": "inductor FX graph / AOT autograd caches", "dir": cache_dir()}


def execution_facts(loss: TokenLoss, options, device: torch.device, fused: bool, attention: str) -> dict[str, Any]:
    """The record's account of how the work was executed (`raw.execution`)."""
    facts = {
        "loss_kernel": loss.kernel,
        "loss_chunk_tokens": loss.chunk if loss.kernel == "chunked" else None,
        "attention": attention,
        "optimizer_impl": "fused" if fused else "foreach",
        "input_copies": "pinned, non-blocking" if device.type == "cuda" else "host memory (CPU)",
        "compile": options.compile,
    }
    if options.compile:
        facts.update(
            compile_mode=options.compile_mode,
            compile_backend=options.compile_backend,
            compile_shapes=options.compile_shapes,
            graph_breaks=graph_breaks(),
            graph_break_reasons=graph_break_reasons(),
            compiled_graphs=unique_graphs(),
        )
    return facts
