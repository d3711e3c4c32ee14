"""Backend `xla-fsdpv2`: PyTorch/XLA with SPMD and FSDPv2 (TPU; also the CPU PJRT device).

W1's three levers as options of one backend: SPMD switched on before the model is built,
FSDPv2 sharding of every decoder layer over the mesh's fsdp axis (gradient checkpointing
through the wrapper), and static shapes (the scenario's padding policy). Compilations are
counted from torch_xla's metrics and attributed to steps.
"""

from __future__ import annotations

from harness.backend import BackendInfo, BackendOptions, Capabilities


class XlaOptions(BackendOptions):
    """No options: the plan says everything (on a CPU, parallel.devices virtual devices)."""


def _load():
    from backends.xla_fsdpv2.backend import XlaBackend

    return XlaBackend


BACKEND_INFO = BackendInfo(
    name="xla-fsdpv2",
    summary="PyTorch/XLA, SPMD + FSDPv2 (TPU; CPU PJRT device elsewhere)",
    requires=("torch_xla", "transformers", "peft"),
    install="pip install torch==2.9.0 torch-xla==2.9.0 (torch-xla[tpu] on a TPU VM) and bench's deps, in their own env",
    options=XlaOptions,
    load=_load,
    priority=30,
    # FSDPv2 shards parameters and rows over the fsdp axis; the compiler decides when
    # gathered weights are freed, so there is no shard_grad_op to choose.
    # One host: torch_xla SPMD spans hosts only on a TPU slice's runtime (every host
    # the same program, a mesh over xr.global_runtime_device_count(), each host loading
    # its rows through the input sharding), which nothing here runs or checks; the CPU
    # PJRT client has no multi-process SPMD to try it on.
    capabilities=Capabilities(
        axes=("fsdp",),
        max_devices=None,
        cpu_devices=True,
        single_host_why="xla-fsdpv2 runs on one host in this version: torch_xla SPMD over several hosts needs a "
        "TPU slice's runtime (a mesh over xr.global_runtime_device_count(), rows loaded per host "
        "through the input sharding, one record from process 0), not implemented or tested here "
        "(CPU PJRT has no multi-process SPMD); use jax-tunix or torchax across hosts",
        packing_why="xla-fsdpv2 has no per-example attention kernel: HF eager attention runs under a padding mask, "
        "and transformers finds packed examples by host-side checks of the position ids (a host transfer per step "
        "on XLA); no segment-id (splash/flash varlen) kernel is wired in",
    ),
)
