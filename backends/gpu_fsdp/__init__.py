"""Backend `gpu-fsdp`: PyTorch FSDP2 (`fully_shard`) with transformers + peft, one
process per GPU through torchrun; NCCL on GPUs, gloo on the CPU (where the tests run it
for real). The GPU side of W3's 2x H100 baseline and W4's 8x H100 FSDP study."""

from __future__ import annotations

from typing import Literal

from backends.declare import declared_backend
from backends.torch_common.options import TorchExecutionOptions, runs_eager


class FsdpOptions(TorchExecutionOptions):
    # loop: the harness's own timed loop. sft_trainer: trl's SFTTrainer drives the steps
    # (what many users run), timed by a synchronising callback.
    mode: Literal["loop", "sft_trainer"] = "loop"
    device: Literal["auto", "cpu", "cuda"] = "auto"


BACKEND_INFO = declared_backend(__file__, FsdpOptions, eager=runs_eager)
