"""JAX over several hosts (`parallel.hosts` > 1): one process per host joined by JAX's
own distributed runtime, a mesh over every process's devices, each process putting only
its addressable devices' rows on them, and the facts the job's record needs gathered
from every process. Imports JAX only inside functions.

    initialize(plan)            before the first jax.devices(): joins the job
    rows_to_devices(x, mesh)    a host array (the whole batch, the same on every host)
                                as a global array; each process transfers its own rows
    gather(values)              one list per process, on every process
"""

from __future__ import annotations

import os
import socket
from typing import Any

from backends import jax_common
from harness.figures.accelerators import on_tpu_vm
from harness.plan import hosts


def local_device_count(plan) -> int:
    return plan.devices // plan.hosts


def initialize(plan) -> None:
    """Join the job's processes (nothing to do on one host). On a TPU VM of a slice with
    no BENCH_* variables JAX reads the slice's metadata itself; elsewhere host 0's
    address, the process count and this process's id come from the environment
    (harness/plan/hosts.py). On CPUs the cross-process collectives are gloo's, which JAX's
    CPU client does not use unless told."""
    if plan.hosts == 1:
        return
    jax_common.request_cpu_devices(local_device_count(plan))
    import jax

    me = hosts.role(plan.hosts)
    if me.rank is None:
        if not on_tpu_vm():
            raise ValueError(
                f"parallel.hosts: {plan.hosts} hosts need {hosts.RANK_ENV} and {hosts.COORDINATOR_ENV} "
                "off a TPU slice (where JAX reads the slice's metadata itself)"
            )
        jax.distributed.initialize()
    else:
        if not on_tpu_vm():
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(coordinator_address=me.coordinator, num_processes=plan.hosts, process_id=me.rank)
    if jax.process_count() != plan.hosts:
        raise ValueError(f"parallel.hosts: {plan.hosts} planned, JAX's runtime joined {jax.process_count()} processes")
    if len(jax.local_devices()) != local_device_count(plan):
        raise ValueError(
            f"parallel.devices: {local_device_count(plan)} per host planned, this host has {len(jax.local_devices())}"
        )


def rows_to_devices(example: dict[str, Any], mesh, axes: tuple[str, ...]) -> dict[str, Any]:
    """Each host array split over `axes` of `mesh` by rows, as one global array: every
    process builds the same batch from the same data and seed, and transfers only the
    rows of its own (addressable) devices. Rows that do not divide the axes are
    refused rather than replicated."""
    from jax.sharding import NamedSharding, PartitionSpec

    sharding = NamedSharding(mesh, PartitionSpec(*axes))  # as Tunix's shard_input names it
    split = 1
    for axis in axes:
        split *= mesh.shape[axis]
    arrays = {}
    for name, array in example.items():
        if array.shape[0] % split:
            raise ValueError(f"train.micro_batch: {array.shape[0]} rows do not split over {split} devices")
        arrays[name] = put(array, sharding)
    return arrays


def put(array, sharding):
    """A host array (the same on every process) as one global array with `sharding`:
    this process transfers only the blocks of its own (addressable) devices. What
    `jax.device_put` does on one host, without sending anything between hosts. An
    array already spread over the job's devices (computed from global arrays, e.g. an
    optimizer's state) is resharded by `jax.device_put`, which can move it."""
    import jax
    import numpy as np

    if isinstance(array, jax.Array) and not array.is_fully_addressable:
        return jax.device_put(array, sharding)
    host = np.asarray(array)
    return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def gather(values: list[float]) -> list[list[float]]:
    """Every process's `values` (the same length on all), on every process."""
    import numpy as np
    from jax.experimental import multihost_utils

    stacked = multihost_utils.process_allgather(np.asarray(values, dtype=np.float64))
    return np.asarray(stacked).reshape(-1, len(values)).tolist()


def job_facts() -> dict[str, Any]:
    """Hosts, processes and devices of the job, and each process's host name."""
    import jax
    import numpy as np
    from jax.experimental import multihost_utils

    name = socket.gethostname().encode()[:64].ljust(64, b"\0")  # fixed width: gathered as bytes
    names = multihost_utils.process_allgather(np.frombuffer(name, dtype=np.uint8))
    per_process = [bytes(row).rstrip(b"\0").decode(errors="replace") for row in np.asarray(names).reshape(-1, 64)]
    return {
        "process_index": jax.process_index(),
        "process_count": jax.process_count(),
        "local_devices": len(jax.local_devices()),
        "per_process_host": per_process,
        "pid": os.getpid(),
    }


def accelerator(plan, devices) -> dict[str, Any]:
    """The job's accelerator facts: all hosts' devices counted (cost bills `count`); on
    CPUs one machine per host."""
    import jax

    acc = jax_common.accelerator(devices)
    acc.update(hosts=plan.hosts, processes=jax.process_count(), devices=len(devices))
    if acc["kind"] == "cpu":
        acc["count"] = plan.hosts
    return acc


def memory(devices):
    """Peak memory of every process: the devices' allocator stats where there are some
    (the addressable ones, gathered), else each process's peak RSS, gathered."""
    import jax

    from harness.run.backend import MemoryFacts

    mine = jax_common.memory([d for d in devices if d.process_index == jax.process_index()])
    per_process = [int(row[0]) for row in gather([float(mine.peak_bytes)])]
    return MemoryFacts(max(per_process), mine.kind, per_rank_bytes=per_process)
