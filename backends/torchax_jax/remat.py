"""Activation checkpointing of the torchax step (`train.gradient_checkpointing: true`).

JAX, not torch autograd, differentiates the torchax step, so torch.utils.checkpoint (what
transformers' gradient checkpointing calls) would recompute nothing here. Instead each
decoder layer of the HF model runs under `jax.checkpoint` (torchax.interop's
`gradient_checkpoint`): the backward keeps only each layer's inputs and recomputes the
layer's activations from them, what Tunix's `decoder` remat and torch's per-layer
checkpointing do. Its cost is one more forward of the decoder layers (HFU counts it).

Imported only inside the backend's processes, after torchax is configured.
"""

from __future__ import annotations

import torch

from backends.hf_common.loss import causal_lm


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The HF causal LM's decoder layers (inside a peft wrapper or not)."""
    return list(causal_lm(model).model.layers)


def _is_tensors(value) -> bool:
    """A tensor, or a tuple/list of them (Llama's position_embeddings (cos, sin))."""
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, (tuple, list)) and bool(value) and all(isinstance(v, torch.Tensor) for v in value)


def checkpointed(forward):
    """`forward` (a decoder layer's bound forward) under jax.checkpoint. Tensor
    arguments are the checkpointed function's inputs; every other argument (None, flags,
    a cache object) is bound as it is: JAX traces only arrays."""
    from torchax.interop import gradient_checkpoint

    def layer_forward(hidden_states, *args, **kwargs):
        static_args = [(i, a) for i, a in enumerate(args) if not _is_tensors(a)]
        tensor_args = [a for a in args if _is_tensors(a)]
        static_kwargs = {k: v for k, v in kwargs.items() if not _is_tensors(v)}
        tensor_kwargs = {k: v for k, v in kwargs.items() if _is_tensors(v)}

        def run(hidden_states, tensor_args, tensor_kwargs):
            positional, tensors = [], iter(tensor_args)
            fixed = dict(static_args)
            for i in range(len(args)):
                positional.append(fixed[i] if i in fixed else next(tensors))
            return forward(hidden_states, *positional, **static_kwargs, **tensor_kwargs)

        return gradient_checkpoint(run)(hidden_states, tensor_args, tensor_kwargs)

    return layer_forward


def checkpoint_decoder_layers(model: torch.nn.Module) -> int:
    """Every decoder layer's forward replaced by its checkpointed self; returns how many."""
    layers = decoder_layers(model)
    for layer in layers:
        layer.forward = checkpointed(layer.forward)
    return len(layers)
