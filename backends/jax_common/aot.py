"""Deviceless ahead-of-time compilation for a TPU topology, shared by the JAX backends.

With libtpu installed (the `tpu` extra), JAX can describe a TPU slice that is not there
(`jax.experimental.topologies`) and compile a program for its devices on any host, the
way MaxText's `train_compile` checks that a model fits before anyone rents the chips.
Nothing runs and no weight is in memory: the program is lowered from
`jax.ShapeDtypeStruct`s carrying their shardings. What the compiler says about it is the
projection's raw material: per-device memory (`memory_analysis`), FLOPs and bytes
accessed (`cost_analysis`: the compiler's cost model), the collectives in the compiled
HLO, and how long the compile took on this host.

Imported only in a worker of the TPU environment (JAX_PLATFORMS=cpu there: the host's
own runtime is the CPU; the topology is only described).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

# Collectives counted in the compiled HLO; async pairs are counted once, at `-start`.
COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
DTYPE_BYTES = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "bf16": 2,
    "f16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
}
_SHAPE = re.compile(r"\b(pred|[suf]\d+|bf16)\[([\d,]*)\]")
_OP = re.compile(r"=\s*(.*?)\s+(" + "|".join(COLLECTIVES) + r")(-start)?\(")
# The TPU compiler's out-of-memory messages: "Used 20.5G of 15.75G hbm. Exceeded hbm capacity
# by 4.7G.", or (temporaries alone too big) "the total memory required for HLO temporaries
# (89.23G) exceeds available HBM (15.75G)".
_OOM = (
    re.compile(r"Used ([\d.]+)([KMGT]?) of ([\d.]+)([KMGT]?) hbm"),
    re.compile(r"required for HLO temporaries \(([\d.]+)([KMGT]?)\) exceeds available HBM \(([\d.]+)([KMGT]?)\)"),
)
_UNIT = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def topology_devices(topology: str, host_bounds: tuple[int, int, int]) -> list:
    """The devices of a TPU slice described, not attached (e.g. `v5e:2x4`: 8 devices)."""
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")  # no metadata server off a TPU VM
    from jax.experimental import topologies

    described = topologies.get_topology_desc(
        platform="tpu",
        topology_name=topology,
        chip_config_name="default",
        chips_per_host_bounds=host_bounds,
        num_slices=1,
        wrap=(False, False, False),
    )
    return list(described.devices)


def shape_bytes(text: str) -> int:
    """Bytes of every array shape in an HLO result type (`bf16[4,640]`, or a tuple)."""
    total = 0
    for dtype, dims in _SHAPE.findall(text):
        count = 1
        for d in filter(None, dims.split(",")):
            count *= int(d)
        total += count * DTYPE_BYTES.get(dtype, 4)
    return total


def collectives(hlo_text: str) -> dict[str, dict[str, int]]:
    """{kind: {count, bytes}} of the collectives in compiled HLO text; bytes are each
    op's result size on one device (an all-gather's gathered array, an all-reduce's
    reduced one). Async `-done` halves are not counted again."""
    found = {kind: {"count": 0, "bytes": 0} for kind in COLLECTIVES}
    for line in hlo_text.splitlines():
        match = _OP.search(line)
        if match is None:
            continue
        kind = found[match.group(2)]
        kind["count"] += 1
        kind["bytes"] += shape_bytes(match.group(1))
    return {kind: counts for kind, counts in found.items() if counts["count"]}


def out_of_memory_bytes(message: str) -> tuple[int, int] | None:
    """(bytes needed, bytes the compiler had) from the TPU compiler's HBM error."""
    match = next((m for m in (pattern.search(message) for pattern in _OOM) if m), None)
    if match is None:
        return None
    used = float(match.group(1)) * _UNIT[match.group(2)]
    have = float(match.group(3)) * _UNIT[match.group(4)]
    return int(used), int(have)


def _first_cost(cost: Any) -> dict[str, float]:
    """cost_analysis() is a dict (newer JAX) or a list of one per program (older)."""
    if isinstance(cost, (list, tuple)):
        cost = cost[0] if cost else {}
    return dict(cost or {})


def compile_facts(name: str, jitted, args: tuple, runs_per_step: int) -> dict[str, Any]:
    """Lower and compile `jitted` for `args` (ShapeDtypeStructs with shardings on the
    topology's mesh); the compiler's facts, or its out-of-memory answer with the bytes."""
    begun = time.perf_counter()
    try:
        compiled = jitted.lower(*args).compile()
    except Exception as exc:  # the TPU compiler refuses a program that does not fit HBM
        oom = out_of_memory_bytes(str(exc))
        if oom is None:
            raise
        return {
            "name": name,
            "runs_per_step": runs_per_step,
            "compile_s": time.perf_counter() - begun,
            "out_of_memory": " ".join(str(exc).split())[:400],
            "memory": {"total_bytes": oom[0], "compiler_hbm_bytes": oom[1]},
        }
    compile_s = time.perf_counter() - begun
    cost, memory = _first_cost(compiled.cost_analysis()), compiled.memory_analysis()
    sizes = {
        key: int(getattr(memory, f"{key}_size_in_bytes", 0) or 0)
        for key in ("argument", "output", "alias", "temp", "generated_code")
    }
    return {
        "name": name,
        "runs_per_step": runs_per_step,
        "compile_s": compile_s,
        "flops": float(cost.get("flops", 0.0)),
        "bytes_accessed": float(cost.get("bytes accessed", 0.0)),
        "memory": {**sizes, "total_bytes": program_bytes(sizes)},
        "collectives": collectives(compiled.as_text()),
    }


def program_bytes(sizes: dict[str, int]) -> int:
    """A program's device memory at its peak: its arguments, its outputs that do not
    reuse an argument's buffer (donation: `alias`), its temporaries and its code."""
    return sizes["argument"] + sizes["output"] - sizes["alias"] + sizes["temp"] + sizes["generated_code"]


def sharded(tree, shardings):
    """ShapeDtypeStructs of `tree` (arrays or structs) carrying `shardings` (a tree)."""
    import jax

    return jax.tree_util.tree_map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings)
