"""torchax's micro-batch loss, one function for the real step (backend.py) and its TPU
compile (aot.py): the token-weighted sum of next-token cross-entropy over the step's
loss tokens, by the option `loss_kernel` (backends/jax_common/loss.py):

- plain: the HF model's own forward (`functional_call`), its full logits, upcast to fp32,
  then torch's cross-entropy (hf_common.token_loss_sum): the reference.
- chunked: the HF model's base (`causal_lm(model).model`, as hf_common's TokenLoss runs
  it) for the final hidden states, then the LM head and cross-entropy in JAX a chunk of
  positions at a time (jax_common.loss.chunked_loss_sum). torch's checkpointing does
  nothing here (JAX differentiates the traced step), so the hidden states cross to JAX
  (`torchax.interop.jax_view`: the same arrays, no copy) and the chunks run under
  `jax.lax.scan` with a `jax.checkpoint`ed body: one chunk at a time, its logits
  recomputed in the backward, so only one chunk's fp32 logits ever exist (where one
  chunk holds the whole sequence, it is one pass without the recompute).
"""

from __future__ import annotations

import torch

from backends.hf_common.loss import causal_lm
from backends.hf_common.model import token_loss_sum
from harness.data.batches import IGNORE_INDEX

FIELD = "backend_options.torchax.loss_kernel"


def forward_logits(model, weights, buffers, ids, mask, positions=None):
    """The model's logits with `weights` and `buffers` standing in for its own tensors
    (torch side: torchax tensors, or shapes when compiled ahead of time); packed rows
    with their `positions` (RoPE's, and the attention's segment ids)."""
    kwargs = {"input_ids": ids, "attention_mask": mask, "use_cache": False}
    if positions is not None:
        kwargs["position_ids"] = positions
    return torch.func.functional_call(model, {**weights, **buffers}, args=(), kwargs=kwargs).logits


class FinalHidden(torch.nn.Module):
    """The HF model's base (decoder layers and final norm, no head) as a module whose
    tensors are the model's under a `model.` prefix, so `functional_call` can swap them."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, position_ids=None):
        base = causal_lm(self.model).model
        return base(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
        ).last_hidden_state


def head_weight_name(model: torch.nn.Module) -> str:
    """The name, among the model's parameters, of the LM head's [vocab, hidden] weight (the
    embedding's where they are tied). A head that is not one plain matrix (a LoRA-wrapped
    or biased head) cannot be applied in chunks as one: refused."""
    head = causal_lm(model).get_output_embeddings()
    if type(head) is not torch.nn.Linear or head.bias is not None:
        raise ValueError(
            f"{FIELD}: chunked applies the LM head as one bias-free matrix; this model's head is "
            f"{type(head).__name__}; use plain"
        )
    names = dict(model.named_parameters())  # deduplicated: a tied weight under its first name
    for name, tensor in model.named_parameters(remove_duplicate=False):
        if tensor is head.weight and name in names:
            return name
    raise ValueError(f"{FIELD}: the LM head's weight is not among the model's parameters; use plain")


class ChunkedLoss:
    """The chunked kernel's sum of token losses, torch side in, torch side out."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.hidden = FinalHidden(model)
        self.head = head_weight_name(model)
        self.softcap = getattr(causal_lm(model).config, "final_logit_softcapping", None)

    def __call__(self, weights, buffers, ids, mask, labels, seen: dict, positions=None):
        import jax.numpy as jnp
        from torchax.interop import jax_view, torch_view
        from torchax.ops.mappings import j2t_dtype

        from backends.jax_common.loss import chunked_loss_sum

        tensors = {**weights, **buffers}
        params = {f"model.{name}": tensor for name, tensor in tensors.items()}
        hidden = torch.func.functional_call(self.hidden, params, args=(ids, mask, positions))
        hidden, head = jax_view(hidden), jax_view(tensors[self.head])
        seen["compute"] = j2t_dtype(jnp.result_type(hidden.dtype, head.dtype))  # the head matmul's dtype
        targets, trained = _next_token_targets(jax_view(labels))
        return torch_view(chunked_loss_sum(hidden, head, targets, trained, self.softcap))


def _next_token_targets(labels):
    """Position t is trained on label t+1 where it is not ignored; the last position on
    nothing. Returns (targets, fp32 weights), JAX arrays."""
    import jax.numpy as jnp

    shifted = jnp.pad(labels[:, 1:], ((0, 0), (0, 1)), constant_values=IGNORE_INDEX)
    trained = shifted != IGNORE_INDEX
    return jnp.where(trained, shifted, 0), trained.astype(jnp.float32)


def in_compute_dtype(weights: dict, compute: torch.dtype | None) -> dict:
    """The trained weights as the step's matmuls take them: floating ones cast to the
    plan's compute dtype (bf16 LoRA matmuls over fp32 master weights, as peft runs
    under autocast, #36), inside the differentiated function, so the gradients come
    back in the master weights' dtype. None or an equal dtype: unchanged."""
    if compute is None:
        return weights
    return {n: w.to(compute) if w.is_floating_point() and w.dtype != compute else w for n, w in weights.items()}


def micro_batch_loss(model: torch.nn.Module, kernel: str, seen: dict, compute: torch.dtype | None = None):
    """The torch-side function the step differentiates: (weights, buffers, ids, mask,
    labels, normaliser[, positions of packed rows]) -> sum of token losses / the step's
    loss tokens, so the micro-batches of a step add up to the torch backend's loss. `seen["compute"]` gets
    the logits' dtype while jit traces (static). The trained weights run in `compute`
    (`in_compute_dtype`) where given."""
    chunked = ChunkedLoss(model) if kernel == "chunked" else None

    def loss(weights, buffers, ids, mask, labels, normaliser, positions=None):
        weights = in_compute_dtype(weights, compute)
        seen["trained_weights_compute"] = {w.dtype for w in weights.values() if w.is_floating_point()}
        if chunked is not None:
            return chunked(weights, buffers, ids, mask, labels, seen, positions) / normaliser
        logits = forward_logits(model, weights, buffers, ids, mask, positions)
        seen["compute"] = logits.dtype
        return token_loss_sum(logits, labels) / normaliser

    return loss
