"""Is the JAX backends' unmasked attention the masked one's equal? Answer: docs/measurements/device-suite.md, "Attention without a padding mask".
The JAX backends' attention without a padding mask (jax.nn.dot_product_attention,
#36) against their masked path, in the backend's own interpreter (torchax: the
project's; jax-tunix: BENCH_PYTHON_JAX_TUNIX). Run by tests/backends/test_jax_attention.py (through jax_kernels_probe.py).

    PYTHONPATH=. python benchmarks/probes/jax_attention_probe.py torchax|jax-tunix

Prints one JSON line: for a tiny fp32 LoRA Gemma 3 (one sliding-window layer), the
loss and LoRA gradients of the backend's own loss function (the plain kernel: the
model's own logits) with the masked attention (Tunix's einsums + padding mask; HF's
eager attention + padding mask on torchax) and with the dot-product path (XLA
implementation: the CPU's), each from its own jit, in three cases: rows padded to a
fixed length past the longest (static) or to the longest (dynamic) with the sliding
window shorter than the sequence (a local layer), and static rows with a window at least
as long as the sequence (the layer then global: no window passed).

A fourth case, "packed" (#45): the same three examples packed two to a row by the
harness's own `pack` (positions restarting, a tail of padding), through the dot-product
path with segment ids, against the same examples one a row (dynamic padding): the loss
sums and LoRA gradients must agree, since each example attends only to itself either way;
on jax-tunix also Tunix's masked path under the packed block-diagonal mask."""

from __future__ import annotations

import json
import sys

import numpy as np
from jax_loss_probe import (
    TINY_ARCH,
    compared,
    tiny_batch,
    torchax_grad,
    torchax_model,
    torchax_split,
    tunix_batch,
    tunix_grad,
    tunix_model,
)

STATIC_PAD = 4  # static rows: 4 padding columns past the longest row (length 12 -> 16)
CASES = {  # name -> (sliding window, extra padding columns)
    "static, window < sequence": (8, STATIC_PAD),
    "dynamic, window < sequence": (8, 0),
    "static, window >= sequence": (16, STATIC_PAD),
}


def batch(extra: int):
    """tiny_batch (row 0 padded after 9 tokens, the other rows to the longest, 12), with
    `extra` more padding columns on every row."""
    ids, mask, labels = tiny_batch(TINY_ARCH["vocab_size"])
    if extra:
        ids = np.pad(ids, ((0, 0), (0, extra)), constant_values=0)
        mask = np.pad(mask, ((0, 0), (0, extra)))
        labels = np.pad(labels, ((0, 0), (0, extra)), constant_values=-100)
    return ids, mask, labels


PACKED_WINDOW = 8  # shorter than every example but the first (9, 13, 13 tokens)


def examples():
    """tiny_batch's rows as the harness's (tokens, trained) examples: 9, 13 and 13 tokens."""
    ids, mask, labels = tiny_batch(TINY_ARCH["vocab_size"])
    lengths = mask.sum(axis=1)
    return [(ids[r, :n].tolist(), (labels[r, :n] != -100).tolist()) for r, n in enumerate(lengths)]


def packed_and_unpacked():
    """(packed micro-batch: examples 1-2 in one row of 26 and example 3 in another, the
    same examples one a row at the longest's length) by the harness's own pack/collate."""
    from harness.data.batches import collate, pack

    rows = examples()
    packed = pack(rows, 26, 0)
    assert packed.input_ids.shape[0] == 2  # two examples share a row: the case is not vacuous
    return packed, collate(rows, max(len(t) for t, _ in rows), 0)


def packed_vs_unpacked(out: dict) -> dict:
    found = compared(out["unpacked"], out["packed"])
    found["loss"] = {name: case["loss"] for name, case in out.items()}
    found["unsegmented"] = compared(out["unpacked"], out["unsegmented"])
    if "packed_masked" in out:
        found["masked"] = compared(out["unpacked"], out["packed_masked"])
    return found


def masked_vs_dot_product(out: dict) -> dict:
    """jax_loss_probe.compared's figures, the losses named by path."""
    found = compared(out["masked"], out["dot_product"])
    found["loss"] = {"masked": out["masked"]["loss"], "dot_product": out["dot_product"]["loss"]}
    return found


def torchax_case(window: int, extra: int) -> dict:
    from torchax.ops.mappings import t2j

    from backends.torchax_jax.attention import TRACED, use_dot_product_attention

    traced = TRACED["calls"]
    model = torchax_model({**TINY_ARCH, "sliding_window": window})
    weights, buffers = torchax_split(model, t2j)
    ids, mask, labels = batch(extra)
    out = {}
    for path in ("masked", "dot_product"):
        if path == "dot_product":
            use_dot_product_attention(model, "xla")
        loss, grads = torchax_grad(model, "plain")(weights, buffers, ids, mask, labels, np.float32(1.0))
        out[path] = {"loss": float(loss), "grads": grads}
    found = masked_vs_dot_product(out)
    found["dot_product_traced"] = TRACED["calls"] - traced
    return found


def torchax_packed() -> dict:
    from torchax.ops.mappings import t2j

    from backends.torchax_jax.attention import TRACED, use_dot_product_attention

    traced = TRACED["calls"]
    model = torchax_model({**TINY_ARCH, "sliding_window": PACKED_WINDOW})
    weights, buffers = torchax_split(model, t2j)
    packed, unpacked = packed_and_unpacked()
    out = {}
    # "unsegmented": the packed rows without their segment ids (examples see each other)
    for case, micro in (("unpacked", unpacked), ("packed", packed), ("unsegmented", packed)):
        use_dot_product_attention(model, "xla", packed=case == "packed")
        arrays = [micro.input_ids, micro.attention_mask, micro.labels]
        extra = [] if micro.position_ids is None else [micro.position_ids.astype(np.int32)]
        loss, grads = torchax_grad(model, "plain")(weights, buffers, *arrays, np.float32(1.0), *extra)
        out[case] = {"loss": float(loss), "grads": grads}
    found = packed_vs_unpacked(out)
    found["dot_product_traced"] = TRACED["calls"] - traced
    return found


def torchax_probe() -> dict:
    from backends.torchax_jax.backend import configure_jax

    configure_jax(1)
    import torchax

    torchax.default_env()
    return {**{name: torchax_case(*case) for name, case in CASES.items()}, "packed": torchax_packed()}


def tunix_loss_and_grads(model, data) -> dict:
    """The trainer's plain loss and LoRA gradients of `model` on `data`, flattened by path."""
    from flax import nnx

    grad, lora, rest = tunix_grad(model, "plain")
    loss, grads = grad(lora, rest, data)
    return {"loss": float(loss), "grads": {"/".join(map(str, p)): leaf for p, leaf in nnx.to_flat_state(grads)}}


def tunix_case(window: int, extra: int) -> dict:

    from backends.jax_tunix.attention import DotProductAttention, use_dot_product_attention

    traced = DotProductAttention.traced
    model, mesh = tunix_model({**TINY_ARCH, "sliding_window": window})
    data = tunix_batch(*batch(extra))
    out = {}
    with mesh:
        for path in ("masked", "dot_product"):
            if path == "dot_product":
                use_dot_product_attention(model, "xla")
            out[path] = tunix_loss_and_grads(model, data)
    found = masked_vs_dot_product(out)
    found["dot_product_traced"] = DotProductAttention.traced - traced
    return found


def tunix_packed() -> dict:

    from backends.jax_tunix.attention import DotProductAttention, use_dot_product_attention

    traced = DotProductAttention.traced
    model, mesh = tunix_model({**TINY_ARCH, "sliding_window": PACKED_WINDOW})
    packed, unpacked = packed_and_unpacked()
    out = {}
    with mesh:
        # Tunix's own (masked) attention first, before its layers are switched.
        for case, micro, path in (
            ("packed_masked", packed, None),
            ("unpacked", unpacked, "unpacked"),
            ("unsegmented", packed, "unpacked"),  # the packed rows without their segment ids
            ("packed", packed, "packed"),
        ):
            if path:
                use_dot_product_attention(model, "xla", packed=path == "packed")
            data = tunix_batch(micro.input_ids, micro.attention_mask, micro.labels)
            if micro.position_ids is not None:
                data["positions"] = micro.position_ids.astype(np.int32)
            out[case] = tunix_loss_and_grads(model, data)
    found = packed_vs_unpacked(out)
    found["dot_product_traced"] = DotProductAttention.traced - traced
    return found


def tunix_probe() -> dict:
    return {**{name: tunix_case(*case) for name, case in CASES.items()}, "packed": tunix_packed()}


if __name__ == "__main__":
    probe = {"torchax": torchax_probe, "jax-tunix": tunix_probe}[sys.argv[1]]
    print(json.dumps(probe()))
