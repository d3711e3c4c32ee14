"""Does the chunked loss match the plain one, with less memory? Answer: docs/measurements/xla-and-jax-backends.md, "Chunked cross-entropy".
The JAX backends' loss kernels probed, in the backend's own interpreter (torchax: the
project's, or BENCH_PYTHON_TORCHAX; jax-tunix: BENCH_PYTHON_JAX_TUNIX). Run by
tests/backends/test_jax_loss_kernels.py (through jax_kernels_probe.py) and by
bench_train_execution.py (memory only).

    PYTHONPATH=. python benchmarks/probes/jax_loss_probe.py torchax|jax-tunix [memory]

Prints one JSON line: for a tiny fp32 LoRA model, the plain and chunked kernels' loss
and LoRA gradients, each from its own jit of the backend's own loss function (plain is
the reference, computed independently of the chunked code); and each kernel's
compile-time temporary bytes for the loss and its gradients at vocabulary 262,144 x
sequence 512 x 4 rows (lowered and compiled, never run)."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import numpy as np

ROWS, SEQ = 3, 13  # 13 positions in chunks of at most 5: 3 chunks of 5, the last padded by 2
BIG_VOCAB, BIG_ROWS, BIG_SEQ = 262_144, 4, 512
TINY_ARCH = {  # one tiny Gemma 3 layer (a sliding-window one), vocabulary 1,000
    "family": "gemma3",
    "vocab_size": 1000,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_layers": 1,
    "num_heads": 2,
    "num_kv_heads": 1,
    "head_dim": 16,
    "max_position_embeddings": 128,
    "sliding_window": 8,
    "query_pre_attn_scalar": 16,
}
BIG_ARCH = {**TINY_ARCH, "vocab_size": BIG_VOCAB, "hidden_size": 16, "intermediate_size": 16}


def several_chunks(vocab: int, rows: int, positions: int) -> None:
    """A chunk budget of `positions` sequence positions for `rows` rows, so the tiny
    model's loss runs in several chunks, the last one padded (the real budget would
    put its whole sequence in one)."""
    from backends import loss_chunks

    loss_chunks.CHUNK_LOGIT_BYTES = 4 * vocab * rows * positions


def kept_chunks(rows: int, positions: int) -> None:
    """A memory plan of `positions`-position chunks for `rows` rows that has room to keep
    every chunk's logits: several chunks, none recomputed (the plan an 80 GB card gives W1)."""
    from backends.jax_common import loss
    from backends.loss_chunks import LossChunking

    loss._CHUNK_PLAN.update(chunking=LossChunking(rows * positions, False, 0, "the probe's"), shards=1)


def planless_chunks() -> None:
    """No memory plan (a CPU): the shared budget, chunks recomputed."""
    from backends.jax_common import loss

    loss._CHUNK_PLAN.update(chunking=None, shards=1)


def use_plan(kernel: str) -> None:
    """`kept`: the chunked kernel under a plan that keeps 5-position chunks; else none."""
    if kernel == "kept":
        kept_chunks(ROWS, 5)
    else:
        planless_chunks()


def real_chunks() -> None:
    """The backends' own chunk budget (256 MiB of fp32 logits), undoing `several_chunks`."""
    from backends import loss_chunks

    loss_chunks.CHUNK_LOGIT_BYTES = 1 << 28


def tiny_batch(vocab: int):
    rng = np.random.default_rng(1)
    ids = rng.integers(3, vocab, (ROWS, SEQ)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[0, 9:] = 0  # a padded row
    labels = ids.astype(np.int64)
    labels[:, :3] = -100  # an untrained prompt
    labels[mask == 0] = -100
    return ids, mask, labels


def compared(plain: dict, chunked: dict) -> dict:
    grads = [
        (np.asarray(plain["grads"][n], np.float64), np.asarray(chunked["grads"][n], np.float64)) for n in plain["grads"]
    ]
    return {
        "loss": {"plain": plain["loss"], "chunked": chunked["loss"]},
        "grad_names": sorted(plain["grads"]) == sorted(chunked["grads"]),
        "grad_count": len(grads),
        "grad_max_abs": max(float(np.abs(p).max()) for p, _ in grads),
        "grad_max_diff": max(float(np.abs(p - c).max()) for p, c in grads),
    }


# ---------------------------------------------------------------- torchax
def torchax_model(arch, meta: bool = False):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from backends.hf_common.model import hf_config

    torch.manual_seed(0)
    with torch.device("meta" if meta else "cpu"):
        model = AutoModelForCausalLM.from_config(hf_config(arch, "eager"), dtype=torch.float32)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], task_type="CAUSAL_LM")
    model = get_peft_model(model, config)
    for name, p in model.named_parameters():  # LoRA's B starts at zero: give it values
        if "lora_B" in name and not meta:
            torch.nn.init.normal_(p, std=0.02)
    return model


def torchax_split(model, convert):
    params = dict(model.named_parameters())
    weights = {n: convert(p.detach()) for n, p in params.items() if p.requires_grad}
    constants = {**{n: p for n, p in params.items() if not p.requires_grad}, **dict(model.named_buffers())}
    return weights, {n: convert(t.detach()) for n, t in constants.items()}


def torchax_grad(model, kernel: str):
    import jax
    from torchax.interop import jax_view

    from backends.torchax_jax.loss import micro_batch_loss

    return jax.jit(jax.value_and_grad(jax_view(micro_batch_loss(model, kernel, {}))))


def torchax_parity() -> dict:
    from torchax.ops.mappings import t2j

    several_chunks(TINY_ARCH["vocab_size"], ROWS, 5)
    model = torchax_model(TINY_ARCH)
    weights, buffers = torchax_split(model, t2j)
    ids, mask, labels = tiny_batch(TINY_ARCH["vocab_size"])
    out = {}
    for kernel in ("plain", "chunked", "kept"):
        use_plan(kernel)
        grad = torchax_grad(model, "chunked" if kernel == "kept" else kernel)
        loss, grads = grad(weights, buffers, ids, mask, labels, np.float32(1.0))
        out[kernel] = {"loss": float(loss), "grads": grads}
    planless_chunks()
    return {**compared(out["plain"], out["chunked"]), "kept": compared(out["plain"], out["kept"])}


def torchax_memory() -> dict:
    import jax
    import jax.numpy as jnp
    from torchax.ops.mappings import t2j_dtype

    real_chunks()
    model = torchax_model(BIG_ARCH, meta=True)
    weights, buffers = torchax_split(model, lambda t: jax.ShapeDtypeStruct(tuple(t.shape), t2j_dtype(t.dtype)))
    rows = jax.ShapeDtypeStruct((BIG_ROWS, BIG_SEQ), jnp.int32)
    scalar = jax.ShapeDtypeStruct((), jnp.float32)
    return {
        kernel: torchax_grad(model, kernel)
        .lower(weights, buffers, rows, rows, rows, scalar)
        .compile()
        .memory_analysis()
        .temp_size_in_bytes
        for kernel in ("plain", "chunked")
    }


def torchax_probe(parity: bool = True) -> dict:
    from backends.torchax_jax.backend import configure_jax

    configure_jax(1)
    import torchax

    torchax.default_env()
    return {"parity": torchax_parity() if parity else None, "temp_bytes": torchax_memory()}


# ---------------------------------------------------------------- jax-tunix
def tunix_model(arch, abstract: bool = False):
    """Tunix's Gemma 3 with Qwix LoRA on q, o and down (fp32), every weight random."""
    import jax
    from flax import nnx
    from tunix.models.gemma3 import model as gemma3

    from backends.jax_common import mesh as make_mesh
    from backends.jax_tunix import model as tunix_model

    mesh = make_mesh(jax.devices()[:1], {"fsdp": 1, "tensor": 1}, {"fsdp": "fsdp", "tensor": "tp"})
    config = tunix_model.tunix_config(arch, "fp32", "none")
    lora = SimpleNamespace(target_modules=("q_proj", "o_proj", "down_proj"), rank=4, alpha=8.0, dropout=0.0)
    train = SimpleNamespace(lora=lora, seed=0)

    def make():
        model = gemma3.Gemma3(config, rngs=nnx.Rngs(params=0))
        return tunix_model.apply_lora(model, train, config, mesh, "fp32")

    with mesh:  # shapes only: Tunix's eager init and Qwix's eager pass would compile op by op
        shapes = nnx.eval_shape(make)
    if abstract:
        return shapes, mesh
    # Every weight N(0, 0.02^2), LoRA's B included (not zero: its A gets gradients), drawn
    # by numpy: JAX's generator compiles a program per shape, tens of seconds on this CPU.
    graphdef, state = nnx.split(shapes)
    leaves, tree = jax.tree.flatten(state)
    rng = np.random.default_rng(2)
    drawn = [jax.numpy.asarray(0.02 * rng.standard_normal(a.shape), a.dtype) for a in leaves]
    return nnx.merge(graphdef, jax.tree.unflatten(tree, drawn)), mesh


def tunix_grad(model, kernel: str):
    """jit of (LoRA state, other state, batch) -> (loss, LoRA gradients) of the trainer's
    own loss function, with the states it takes."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from backends.jax_tunix.trainer import model_input, step_loss_fn

    graphdef, lora, rest = nnx.split(model, nnx.LoRAParam, ...)
    loss_fn = step_loss_fn(jnp.float32, {}, kernel)

    def loss_of(lora_state, rest_state, batch):
        loss, _ = loss_fn(nnx.merge(graphdef, lora_state, rest_state), **model_input(batch))
        return loss

    return jax.jit(jax.value_and_grad(loss_of)), lora, rest


def tunix_batch(ids, mask, labels, rows_scale: float = 1.0):
    return {
        "input_tokens": ids,
        "input_mask": labels != -100,
        "attention_mask": mask.astype(bool),
        "loss_scale": np.full(ids.shape[0], rows_scale, np.float32),
    }


def tunix_parity() -> dict:
    from flax import nnx

    several_chunks(TINY_ARCH["vocab_size"], ROWS, 5)
    model, mesh = tunix_model(TINY_ARCH)
    batch = tunix_batch(*tiny_batch(TINY_ARCH["vocab_size"]))
    out = {}
    with mesh:
        for kernel in ("plain", "chunked", "kept"):
            use_plan(kernel)
            grad, lora, rest = tunix_grad(model, "chunked" if kernel == "kept" else kernel)
            loss, grads = grad(lora, rest, batch)
            flat = {"/".join(map(str, path)): leaf for path, leaf in nnx.to_flat_state(grads)}
            out[kernel] = {"loss": float(loss), "grads": flat}
    planless_chunks()
    return {**compared(out["plain"], out["chunked"]), "kept": compared(out["plain"], out["kept"])}


def tunix_memory() -> dict:
    import jax
    import jax.numpy as jnp

    real_chunks()
    model, mesh = tunix_model(BIG_ARCH, abstract=True)
    rows = jax.ShapeDtypeStruct((BIG_ROWS, BIG_SEQ), jnp.int32)
    flags = jax.ShapeDtypeStruct((BIG_ROWS, BIG_SEQ), jnp.bool_)
    batch = {
        "input_tokens": rows,
        "input_mask": flags,
        "attention_mask": flags,
        "loss_scale": jax.ShapeDtypeStruct((BIG_ROWS,), jnp.float32),
    }
    found = {}
    with mesh:
        for kernel in ("plain", "chunked"):
            grad, lora, rest = tunix_grad(model, kernel)
            found[kernel] = grad.lower(lora, rest, batch).compile().memory_analysis().temp_size_in_bytes
    return found


def tunix_probe(parity: bool = True) -> dict:
    return {"parity": tunix_parity() if parity else None, "temp_bytes": tunix_memory()}


if __name__ == "__main__":
    probe = {"torchax": torchax_probe, "jax-tunix": tunix_probe}[sys.argv[1]]
    print(json.dumps(probe(parity=sys.argv[2:] != ["memory"])))
