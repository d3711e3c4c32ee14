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

from backends.jax_common.hlo_collectives import collectives, largest_collectives

# The TPU compiler's out-of-memory messages: "Used 20.5G of 15.75G hbm. Exceeded hbm capacity
# by 4.7G.", or (temporaries alone too big) "the total memory required for HLO temporaries
# (89.23G) exceeds available HBM (15.75G)".
_OOM = (
    re.compile(r"Used ([\d.]+)([KMGT]?) of ([\d.]+)([KMGT]?) hbm"),
    re.compile(r"required for HLO temporaries \(([\d.]+)([KMGT]?)\) exceeds available HBM \(([\d.]+)([KMGT]?)\)"),
)
_UNIT = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def topology_devices(topology: str, host_bounds: tuple[int, int, int], chips: int | None = None) -> list:
    """The devices of a TPU slice described, not attached (e.g. `v5e:2x4`: 8 devices),
    one per chip: a v4 chip's two TensorCores are one device (megacore), as JAX runs
    them on a v4 VM. libtpu's "default" chip config describes v4 as a device per core
    (16 GiB each, twice the devices); v5p's default is already megacore, and v5e / v6e
    have one core a chip. With `chips`, the config whose device count is the slice's
    chips is taken, and a slice neither gives is refused."""
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")  # no metadata server off a TPU VM
    from jax.experimental import topologies

    counts = {}
    for config in ("default", "megacore"):
        try:
            described = topologies.get_topology_desc(
                platform="tpu",
                topology_name=topology,
                chip_config_name=config,
                chips_per_host_bounds=host_bounds,
                num_slices=1,
                wrap=(False, False, False),
            )
        except Exception as exc:  # a generation without that chip config (v5e, v6e: no megacore)
            counts[config] = " ".join(str(exc).split())[:120]
            continue
        counts[config] = len(described.devices)
        if chips is None or len(described.devices) == chips:
            return list(described.devices)
    raise RuntimeError(f"{topology}: no chip config describes one device per chip ({chips} chips): {counts}")


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


def compile_facts(name: str, jitted, args: tuple, runs_per_step: int, resident_outside: int = 0) -> dict[str, Any]:
    """Lower and compile `jitted` for `args` (ShapeDtypeStructs with shardings on the
    topology's mesh); the compiler's facts, or its out-of-memory answer with the bytes.
    `resident_outside`: bytes per device the backend keeps on device across steps that
    this program does not take (the projection adds them to its peak for the fit)."""
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
            "resident_outside_bytes": resident_outside,
        }
    compile_s = time.perf_counter() - begun
    cost, memory = _first_cost(compiled.cost_analysis()), compiled.memory_analysis()
    sizes = {
        key: int(getattr(memory, f"{key}_size_in_bytes", 0) or 0)
        for key in ("argument", "output", "alias", "temp", "generated_code")
    }
    hlo = compiled.as_text()
    return {
        "name": name,
        "runs_per_step": runs_per_step,
        "compile_s": compile_s,
        "flops": float(cost.get("flops", 0.0)),
        "bytes_accessed": float(cost.get("bytes accessed", 0.0)),
        "memory": {**sizes, "total_bytes": program_bytes(sizes)},
        "collectives": collectives(hlo),
        "largest_collectives": largest_collectives(hlo),
        "resident_outside_bytes": resident_outside,
    }


def per_device_bytes(tree) -> int:
    """Bytes one device holds of a tree of sharded ShapeDtypeStructs (its shards)."""
    import math

    import jax

    total = 0
    for leaf in jax.tree_util.tree_leaves(tree):
        shape = leaf.sharding.shard_shape(leaf.shape) if getattr(leaf, "sharding", None) else leaf.shape
        total += math.prod(shape) * leaf.dtype.itemsize
    return total


def program_bytes(sizes: dict[str, int]) -> int:
    """A program's device memory at its peak: its arguments, its outputs that do not
    reuse an argument's buffer (donation: `alias`), its temporaries and its code."""
    return sizes["argument"] + sizes["output"] - sizes["alias"] + sizes["temp"] + sizes["generated_code"]


def sharded(tree, shardings):
    """ShapeDtypeStructs of `tree` (arrays or structs) carrying `shardings` (a tree)."""
    import jax

    return jax.tree_util.tree_map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), tree, shardings)
