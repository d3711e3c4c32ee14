"""Where do v5e's and v6e's missing FLOPs go? Answer: docs/measurements/projections-and-calibration.md, "TPU versus GPU" (#37).
The LM head's matmul and its VJP alone, compiled deviceless for TPU slices: where the
compiler's FLOPs count for W1 goes on the one-TensorCore generations (issue 37).

    PYTHONPATH=$PWD .venv-tpu/bin/python benchmarks/probes/head_matmul_flops.py [--hidden 640 --vocab 262144 --tokens 2048]

W1 (Gemma 3 270M) per device per forward pass: 4 rows x 512 tokens = 2,048 tokens; the
tied 262,144 x 640 embedding is the head's weight, frozen (LoRA), sharded on dim 0 over
every device (torchax places dim 0 over fsdp), tokens sharded over the devices. The head
costs 2 x V x H FLOPs per token forward and the same again for the input gradient (the
weight is frozen: no weight gradient): 2 x 0.687e12 per device. The script compiles
(a) the forward alone and (b) value_and_grad with respect to the hidden states, prints
cost_analysis' FLOPs per device beside that hand count, and lists the compiled HLO's
dot/convolution ops with their shapes and whether they sit inside a while loop, so the
count can be read against the program the compiler actually made.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time

SLICES = {"v5e:2x4": ((2, 4, 1), 8), "v5p:2x2x1": ((2, 2, 1), 4), "v6e:2x4": ((2, 4, 1), 8)}


def main() -> int:
    os.environ["JAX_PLATFORMS"] = "cpu"
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    parser = argparse.ArgumentParser()
    parser.add_argument("--hidden", type=int, default=640)
    parser.add_argument("--vocab", type=int, default=262144)
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per device")
    parser.add_argument("--slices", nargs="+", default=["v5e:2x4", "v5p:2x2x1"])
    parser.add_argument("--hlo-dir", default=None)
    args = parser.parse_args()

    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from backends.jax_common.aot import topology_devices

    hand = 2 * args.vocab * args.hidden * args.tokens
    for topology in args.slices:
        bounds, devices_n = SLICES[topology]
        devices = topology_devices(topology, bounds)[:devices_n]
        mesh = Mesh(devices, ("fsdp",))
        tokens = args.tokens * devices_n
        h = jax.ShapeDtypeStruct(
            (tokens, args.hidden), jnp.bfloat16, sharding=NamedSharding(mesh, PartitionSpec("fsdp"))
        )
        w = jax.ShapeDtypeStruct(
            (args.vocab, args.hidden), jnp.bfloat16, sharding=NamedSharding(mesh, PartitionSpec("fsdp"))
        )
        labels = jax.ShapeDtypeStruct((tokens,), jnp.int32, sharding=NamedSharding(mesh, PartitionSpec("fsdp")))

        def loss(h, w, labels):
            logits = jnp.einsum("th,vh->tv", h, w, preferred_element_type=jnp.float32)
            picked = jnp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
            return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - picked)

        for name, fn in (("forward", loss), ("forward+input-grad", jax.value_and_grad(loss))):
            report(topology, name, fn, mesh, (h, w, labels), hand * (2 if "grad" in name else 1), args.hlo_dir)
    return 0


def report(topology, name, fn, mesh, inputs, expected, hlo_dir) -> None:
    """Compile `fn` for the inputs on the mesh; print its FLOPs per device beside the hand count, and its dots."""
    import jax

    begun = time.perf_counter()
    with mesh:
        compiled = jax.jit(fn).lower(*inputs).compile()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    text = compiled.as_text()
    if hlo_dir:
        os.makedirs(hlo_dir, exist_ok=True)
        with open(os.path.join(hlo_dir, f"{topology.replace(':', '_')}_{name.replace('+', '_')}.hlo.txt"), "w") as out:
            out.write(text)
    print(
        json.dumps(
            {
                "slice": topology,
                "program": name,
                "compile_s": round(time.perf_counter() - begun, 1),
                "flops_per_device": cost.get("flops"),
                "hand_count_per_device": expected,
                "compiled_over_hand": round(cost.get("flops", 0) / expected, 3),
                "dots": dots(text),
            }
        ),
        flush=True,
    )


_COMP = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{\s*$")
_DOT = re.compile(r"=\s*(\S+)\s+(dot|convolution)\((.*?)\)(.*)$")


def dots(text: str) -> list[dict]:
    """Every dot/convolution of the compiled HLO: the computation it is in, its result
    shape, its operands' shapes, and 2 x (result elements x contracted size) when the
    dims can be read."""
    found, computation = [], None
    for line in text.splitlines():
        head = _COMP.match(line.strip())
        if head and "=" not in line.split("{")[0]:
            computation = head.group(1)
            continue
        match = _DOT.search(line)
        if match:
            found.append(
                {"in": computation, "op": match.group(2), "result": match.group(1), "operands": match.group(3)[:160]}
            )
    return found


if __name__ == "__main__":
    raise SystemExit(main())
