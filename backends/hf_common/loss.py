"""The training loss of the PyTorch-family backends, with the LM head inside it.

The LM head is most of a small model's compute and, at Gemma 3's 262,144-entry
vocabulary, its logits are the largest tensor of the step: [4, 512, 262144] in fp32 is
2 GiB, and plain cross-entropy keeps that, its log-softmax and their gradients alive at
once. So the loss owns the head and picks a kernel (`backend_options.<b>.loss_kernel`):

- `plain`: the whole logits tensor, upcast to fp32, then cross-entropy (the reference).
- `chunked`: the head and the cross-entropy over chunks of tokens, so that at most
  one chunk's fp32 temporaries exist at a time. The chunk size and whether each chunk is
  recomputed in the backward (activation checkpointing) come from the memory model
  (backends/loss_chunks.py: `plan_chunks`) and the device's memory: on an 80 GB GPU the
  whole forward pass is one chunk with no recompute; recompute only where a chunk would
  not fit. Same sum, in any order of chunks, to float rounding.
- `liger`: Liger Kernel's fused linear cross-entropy (Triton, CUDA only), the field's
  standard on GPUs.
- `auto`: the fastest kernel the memory plan allows (`auto_kernel`): bench's chunked
  path with the planned chunk, unless Liger runs here (CUDA, installed) and its own chunk
  is at least the plan's. Liger sizes its chunks itself, next_pow2(ceil(BT / ceil(V/H)))
  for BT tokens, vocabulary V and hidden size H, and re-reads the head's weight once per
  chunk: at W1 (16,384 tokens, 262,144 / 640) that is 64-token chunks, 256 weight reads
  a pass, where the plan runs one or two chunks with no recompute. Liger wins only where
  the plan must recompute chunks smaller than Liger's. The record says which kernel ran
  and why (`loss_kernel_why`).

The value is the SUM of next-token cross-entropy over trained positions (labels shifted
by one, never the logits); the caller divides by the step's loss tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from backends.loss_chunks import LossChunking, chunk_tokens_for
from harness.data.batches import IGNORE_INDEX


def shifted_labels(labels: torch.Tensor) -> torch.Tensor:
    """Position t is trained on token t+1: the labels move left by one, the last
    position of each row gets the ignored index."""
    return F.pad(labels, (0, 1), value=IGNORE_INDEX)[:, 1:]


def liger_chunk_tokens(tokens: int, vocab_size: int, hidden_size: int) -> int:
    """The chunk Liger's fused linear cross-entropy picks for a pass of `tokens`
    (liger_kernel/ops/fused_linear_cross_entropy.py: `inc_factor = cdiv(V, H)`,
    `chunk_size = next_power_of_2(cdiv(BT, inc_factor))`), never more than the pass."""
    inc_factor = -(-vocab_size // hidden_size)
    spread = -(-tokens // inc_factor)
    return min(tokens, 1 << (spread - 1).bit_length())


def auto_kernel(tokens: int, vocab_size: int, hidden_size: int, chunking: LossChunking, liger_runs: bool):
    """`auto`'s pick and the sentence the record carries. The rule: bench's chunked path
    with the plan's chunk wherever Liger's own chunk would be smaller than the plan's
    (more passes over the head's weight for the same tokens); Liger (which never
    recomputes: it takes the gradients in its forward) only where it runs here and its
    chunk is at least the plan's."""
    liger = liger_chunk_tokens(tokens, vocab_size, hidden_size)
    planned = f"the plan's {chunking.chunk_tokens}-token chunks{', recomputed' if chunking.recompute else ''}"
    if not liger_runs:
        return "chunked", f"auto: chunked, {planned} (Liger does not run here)"
    if liger < chunking.chunk_tokens:
        return "chunked", f"auto: chunked, {planned}; Liger's own chunks would be {liger} tokens"
    return "liger", f"auto: liger, its {liger}-token chunks at least {planned}"


def resolve_kernel(wanted: str, device: torch.device, field: str, shape: tuple | None = None, chunking=None):
    """(the loss kernel a run uses, why): `auto` picks by `auto_kernel` from the pass's
    (tokens, vocabulary, hidden size) and the chunked kernel's plan (without them, as
    with no plan: chunked); a named one is executed or refused."""
    liger = device.type == "cuda" and _liger_available()
    if wanted == "auto":
        if shape is None or chunking is None:
            return "chunked", "auto: chunked (no memory plan to weigh Liger against)"
        return auto_kernel(*shape, chunking, liger)
    if wanted == "liger" and not liger:
        why = (
            "needs a CUDA device"
            if device.type != "cuda"
            else "liger-kernel is not installed (pip install liger-kernel)"
        )
        raise ValueError(f"{field}: liger {why}; use chunked or plain")
    return wanted, "pinned"


def _liger_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("liger_kernel") is not None


def causal_lm(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers *ForCausalLM inside a peft wrapper (or the model itself)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


class TokenLoss(torch.nn.Module):
    """forward(ids, mask, labels, positions) -> (sum of token losses, an empty tensor in
    the dtype the head's matmul produced: the measured compute dtype, at no copy).

    `mask` None on unpacked rows: right-padded causal rows (backends/torch_common/
    attention.py), so the decoder gets the causal-only masks. `chunking`: the chunked
    kernel's plan (backends/loss_chunks.py) for a forward pass of up to `tokens` tokens
    (None: the fixed 2^28-byte chunks, recomputed, as before the memory model). With
    `tokens`, the number of chunks is fixed by the plan, not by the tokens of a pass, so
    a compiled graph does not specialise on the row count."""

    def __init__(
        self,
        model: torch.nn.Module,
        kernel: str,
        chunking: LossChunking | None = None,
        tokens: int = 0,
        why: str = "pinned",
    ):
        super().__init__()
        self.model = model  # a submodule: its parameters are this module's (FSDP's root)
        lm = causal_lm(model)
        self.kernel = kernel
        self.why = why  # how the kernel was chosen (resolve_kernel)
        self.tokens = tokens
        self.attention = lm.config._attn_implementation
        self.softcap = getattr(lm.config, "final_logit_softcapping", None)
        self.chunking = chunking
        self.chunk = chunking.chunk_tokens if chunking else chunk_tokens_for(lm.config.vocab_size)
        self.recompute = chunking.recompute if chunking else True
        # Chunks a pass is cut into: the planned tokens over the chunk (0: by each pass).
        self.num_chunks = -(-tokens // self.chunk) if tokens else 0
        self.recomputed_chunks = 0  # chunks run under checkpoint (counted in eager runs)
        if kernel == "liger":
            from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

            self.liger = LigerFusedLinearCrossEntropyLoss(
                ignore_index=IGNORE_INDEX, reduction="sum", softcap=self.softcap
            )
            # Liger reads a count back to the host (`.item()`) inside its forward: run it
            # outside the compiled region, one clean break, not a graph split mid-kernel.
            # Wrapped here, not by a decorator on the class: torch.compiler.disable imports
            # torch._dynamo (~3 s of CPU), which every import of this module (each backend
            # probe's interpreter) would otherwise pay.
            self._liger_outside_compile = torch.compiler.disable(self.liger)

    def forward(self, input_ids, attention_mask, labels, position_ids=None):
        lm = causal_lm(self.model)
        if position_ids is not None:
            # Packed rows: no padding mask, so that transformers builds the per-example
            # (block-diagonal, causal, windowed) mask from the restarting positions.
            attention_mask = None
        elif attention_mask is None and self.attention == "sdpa":
            from backends.torch_common.attention import causal_only_masks

            attention_mask = causal_only_masks(lm.config, input_ids.size(1))
        hidden = lm.model(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state
        targets = shifted_labels(labels).reshape(-1)
        flat = hidden.reshape(-1, hidden.size(-1))
        if self.kernel == "plain":
            logits = self._logits(flat)
            return F.cross_entropy(logits.float(), targets, ignore_index=IGNORE_INDEX, reduction="sum"), logits[:0]
        if self.kernel == "liger":
            weight = lm.lm_head.weight
            return (
                self._liger_outside_compile(weight, flat.to(weight.dtype), targets),
                flat.new_empty(0, dtype=weight.dtype),
            )
        return self._chunked(flat, targets)

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = causal_lm(self.model).lm_head(hidden)
        if self.softcap:  # Gemma 2's final soft cap, as the model's own forward applies it
            logits = torch.tanh(logits / self.softcap) * self.softcap
        return logits

    def _chunk_loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = self._logits(hidden).float()
        return F.cross_entropy(logits, targets, ignore_index=IGNORE_INDEX, reduction="sum")

    def _chunked(self, flat: torch.Tensor, targets: torch.Tensor):
        count = self.num_chunks or -(-flat.size(0) // self.chunk)
        total = flat.new_zeros((), dtype=torch.float32)
        # tensor_split: `count` near-equal chunks whatever the pass's tokens (never more
        # than `chunk` each while a pass holds at most the planned tokens).
        for hidden, wanted in zip(torch.tensor_split(flat, count), torch.tensor_split(targets, count)):
            if self.recompute:
                self.recomputed_chunks += 1
                total = total + checkpoint(self._chunk_loss, hidden, wanted, use_reentrant=False)
            else:
                total = total + self._chunk_loss(hidden, wanted)
        # The head's output dtype without keeping any logits: one row through the head.
        return total, self._logits(flat[:1].detach())[:0]
