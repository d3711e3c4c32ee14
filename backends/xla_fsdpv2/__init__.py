"""Backend `xla-fsdpv2`: PyTorch/XLA with SPMD and FSDPv2 (TPU; also the CPU PJRT device).

W1's three levers as options of one backend: SPMD switched on before the model is built,
FSDPv2 sharding of every decoder layer over the mesh's fsdp axis (gradient checkpointing
through the wrapper), and static shapes (the scenario's padding policy). Compilations are
counted from torch_xla's metrics and attributed to steps.
"""

from __future__ import annotations

from backends.declare import declared_backend
from harness.run.backend import BackendOptions


class XlaOptions(BackendOptions):
    """No options: the plan says everything (on a CPU, parallel.devices virtual devices)."""


BACKEND_INFO = declared_backend(__file__, XlaOptions)
