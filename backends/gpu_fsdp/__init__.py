"""Backend `gpu-fsdp`: PyTorch FSDP2 (`fully_shard`) with transformers + peft, one
process per GPU through torchrun; NCCL on GPUs, gloo on the CPU (where the tests run it
for real). The GPU side of W3's 2x H100 baseline and W4's 8x H100 FSDP study."""

from __future__ import annotations

from typing import Literal

from backends.torch_common.options import TorchExecutionOptions
from harness.backend import BackendInfo, Capabilities


class FsdpOptions(TorchExecutionOptions):
    # loop: the harness's own timed loop. sft_trainer: trl's SFTTrainer drives the steps
    # (what many users run), timed by a synchronising callback.
    mode: Literal["loop", "sft_trainer"] = "loop"
    device: Literal["auto", "cpu", "cuda"] = "auto"


def _load():
    from backends.gpu_fsdp.backend import FsdpBackend

    return FsdpBackend


BACKEND_INFO = BackendInfo(
    name="gpu-fsdp",
    summary="PyTorch FSDP2 + transformers + peft (+ trl SFTTrainer), torchrun; NCCL or gloo",
    requires=("torch", "transformers", "peft"),
    install="pip install -e '.[torch]' (mode sft_trainer: '.[torch,trl]')",
    options=FsdpOptions,
    load=_load,
    priority=25,
    env={"USE_TORCH_XLA": "0"},
    launcher="torchrun",  # one process per device (harness/launchers.py)
    # fsdp: FSDP2 over the fsdp axis; data with fsdp: HSDP (replicated across data).
    capabilities=Capabilities(
        axes=("data", "fsdp"),
        max_devices=None,
        cpu_devices=True,
        shardings=("full_shard", "shard_grad_op"),
        multi_host=True,
        packing_why=None,
    ),
    eager=lambda options: not options.get("compile", FsdpOptions.model_fields["compile"].default),
)
