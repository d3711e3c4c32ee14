"""Backend `torch`: PyTorch + transformers + peft on the CPU or one CUDA GPU, eager or
under torch.compile (`backend_options.torch.compile`).

The default anywhere: it needs nothing but PyTorch, and obeys the same timing contract
as the accelerator backends (a CUDA synchronise before the clock stops).
"""

from __future__ import annotations

from typing import Literal

from backends.torch_common.options import TorchExecutionOptions
from harness.backend import BackendInfo, Capabilities


class TorchOptions(TorchExecutionOptions):
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # Threads for CPU math; None keeps PyTorch's default (one per core).
    cpu_threads: int | None = None


def _load():
    from backends.torch_eager.backend import TorchBackend

    return TorchBackend


BACKEND_INFO = BackendInfo(
    name="torch",
    summary="eager PyTorch + transformers + peft (CPU or one CUDA GPU)",
    requires=("torch", "transformers", "peft"),
    install="pip install -e '.[torch]'",
    options=TorchOptions,
    load=_load,
    priority=0,
    env={"USE_TORCH_XLA": "0"},
    # One device, no parallelism; packed rows through transformers' per-example masks.
    capabilities=Capabilities(axes=(), max_devices=1, packing_why=None),
    eager=lambda options: not options.get("compile", TorchOptions.model_fields["compile"].default),
)
