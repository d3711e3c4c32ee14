"""Backend `torch`: PyTorch + transformers + peft on the CPU or one CUDA GPU, eager or
under torch.compile (`backend_options.torch.compile`).

The default anywhere: it needs nothing but PyTorch, and obeys the same timing contract
as the accelerator backends (a CUDA synchronise before the clock stops).
"""

from __future__ import annotations

from typing import Literal

from backends.declare import declared_backend
from backends.torch_common.options import TorchExecutionOptions, runs_eager


class TorchOptions(TorchExecutionOptions):
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # Threads for CPU math; None keeps PyTorch's default (one per core).
    cpu_threads: int | None = None


BACKEND_INFO = declared_backend(__file__, TorchOptions, eager=runs_eager)
