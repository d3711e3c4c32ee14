"""The train task's scenario sections: `train:` (method, LoRA, optimizer, schedule,
batches, steps) and `trace:` (a profiler trace of some of its measured steps)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from harness.scenario.limits import MAX_BATCH, MAX_LORA_RANK, MAX_LR, MAX_STEPS, Seed
from harness.scenario.sections import Section


class LoraSpec(Section):
    rank: int = Field(8, gt=0, le=MAX_LORA_RANK)
    alpha: float = Field(16.0, gt=0, le=1e6)
    dropout: float = Field(0.0, ge=0, lt=1)
    # At least one: LoRA on no module trains nothing.
    target_modules: Annotated[tuple[str, ...], Field(min_length=1)] = (
        "q_proj",
        "k_proj",
        "v_proj",
        "o_proj",
        "gate_proj",
        "up_proj",
        "down_proj",
    )


class OptimizerSpec(Section):
    name: Literal["adamw", "adafactor", "sgd"] = "adamw"
    lr: float = Field(2e-5, gt=0, le=MAX_LR)
    weight_decay: float = Field(0.0, ge=0, le=10)
    # Adam's moment decays: 0 <= beta < 1 (beta = 1 never forgets: a division by zero).
    betas: tuple[Annotated[float, Field(ge=0, lt=1)], Annotated[float, Field(ge=0, lt=1)]] = (0.9, 0.999)
    eps: float = Field(1e-8, gt=0, le=1)


class ScheduleSpec(Section):
    # One implementation for every backend (harness.plan.plan.learning_rates): Hugging Face's
    # formulas, the lr of optimizer step k being the schedule's value at k.
    name: Literal["constant", "linear", "cosine", "cosine_with_restarts"] = "cosine"
    # Learning-rate warm-up as a fraction of the steps (W4: 10%). Not the benchmark's
    # warm-up steps, which are `train.warmup_steps`.
    warmup_ratio: float = Field(0.0, ge=0, le=1)
    # cosine_with_restarts: how many cosine cycles (hard restarts) over the steps.
    cycles: int = Field(1, ge=1, le=1000)

    @model_validator(mode="after")
    def _cycles_for_restarts(self) -> "ScheduleSpec":
        if self.cycles != 1 and self.name != "cosine_with_restarts":
            raise ValueError(f"cycles: only cosine_with_restarts has cycles (name is {self.name})")
        return self


class TrainSpec(Section):
    method: Literal["lora", "full"] = "lora"
    lora: LoraSpec = LoraSpec()
    optimizer: OptimizerSpec = OptimizerSpec()
    schedule: ScheduleSpec = ScheduleSpec()
    grad_clip: float | None = Field(1.0, gt=0, le=1e6)
    # Rows (samples) per optimizer step, across all devices: the work. micro_batch is how
    # it is executed: rows per data-parallel shard (per device when tensor = 1) per
    # forward pass; accumulation = global / (micro x shards), shards = fsdp x data. The
    # loss is the step's token-weighted sum, so the update does not depend on the split.
    # `auto`: the largest that fits the device's memory (harness.plan.plan.auto_micro_batch's
    # memory model); a number pins it.
    global_batch: int = Field(8, gt=0, le=MAX_BATCH)
    micro_batch: Annotated[int, Field(gt=0, le=MAX_BATCH)] | Literal["auto"] = "auto"
    steps: int = Field(20, gt=0, le=MAX_STEPS)
    # Benchmark warm-up: the first steps (compilation, allocator warm-up) are timed and
    # kept, but excluded from step-time statistics. At least one: the first step always
    # compiles or warms something, and must never count as a measured (re)compile.
    warmup_steps: int = Field(2, ge=1, le=MAX_STEPS)
    # Extra steps after the measured ones, synchronised once at the end: what per-step
    # synchronisation costs (metrics.md, window_throughput). 0 = skip.
    window_steps: int = Field(0, ge=0, le=MAX_STEPS)
    precision: Literal["fp32", "bf16", "fp16"] = "bf16"
    gradient_checkpointing: bool = False
    seed: Seed = 0

    @model_validator(mode="after")
    def _batches_divide(self) -> "TrainSpec":
        if self.micro_batch != "auto" and self.global_batch % self.micro_batch:
            raise ValueError(f"global_batch: {self.global_batch} is not a multiple of micro_batch {self.micro_batch}")
        if self.warmup_steps >= self.steps:
            raise ValueError(f"warmup_steps: {self.warmup_steps} leaves no measured step of {self.steps}")
        return self

    @property
    def measured_steps(self) -> int:
        return self.steps - self.warmup_steps


class TraceSpec(Section):
    """A profiler trace of a window of measured steps (harness/run/trace.py): each
    framework's own profiler, files saved next to the record. Traced steps carry the
    profiler's overhead, so they are not measured steps (phase `trace`)."""

    # How many steps to trace (`bench run --trace [STEPS]`); they must leave at least one
    # measured step untraced, for the step-time statistics.
    # At least 2: the trace's step time is the period between consecutive steps.
    steps: int = Field(3, ge=2, le=MAX_STEPS)
    # The first traced step, counted from the first measured step (0: right after warm-up).
    first: int = Field(0, ge=0, le=MAX_STEPS)
