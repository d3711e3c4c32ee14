"""A training record's figures, each with its type and unit in one table.

`harness.figures.metrics.training_metrics` computes them and metrics.md defines them; here is
what a record holds and in which unit, so a reader of `RunRecord.metrics` (or of the
JSON schema) never has to guess whether a number is seconds, tokens or a fraction."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, create_model

from harness.records.result import FROZEN, Stats

REQUIRED = ...  # pydantic's marker: a record without the figure is refused

# name: (type, default, unit and convention). Order is the record's field order.
TRAIN_FIGURES: dict[str, tuple[Any, Any, str]] = {
    "step_time_s": (
        Stats | None,
        None,
        "s per optimizer step, device-synchronised, over measured steps that compiled nothing",
    ),
    "steady_state": (str | None, None, "which measured steps the steady-state figures are over, in words"),
    "warmup_time_s": (float, REQUIRED, "s, the warm-up steps together (their compiles included)"),
    "compile_time_s": (float, REQUIRED, "s of tracing, lowering and compiling, over every step"),
    "num_compiles": (int, REQUIRED, "backend graph compilations in the run"),
    "num_recompiles": (int, REQUIRED, "compilations after the warm-up steps"),
    "recompile_steps": (int, REQUIRED, "measured steps that compiled something"),
    "recompile_steps_time_s": (float, REQUIRED, "s, those steps together"),
    "num_setup_compiles": (int, REQUIRED, "compilations before the first step (setup)"),
    "compile_cache": (Any, None, "the persistent compile cache the run used, if any (it hides compiles)"),
    "tokens_per_s_real": (float | None, None, "real (non-pad) tokens/s over steady measured steps, all chips"),
    "tokens_per_s_padded": (float | None, None, "padded tokens/s over steady measured steps, all chips"),
    "tokens_per_s_real_per_chip": (float | None, None, "real tokens/s per chip, steady"),
    "tokens_per_s_padded_per_chip": (float | None, None, "padded tokens/s per chip, steady"),
    "tokens_per_s_real_effective": (float | None, None, "real tokens/s over every measured step, recompiles included"),
    "tokens_per_s_padded_effective": (float | None, None, "padded tokens/s over every measured step"),
    "padding_efficiency": (float | None, None, "fraction: real tokens / padded tokens computed"),
    "window_tokens_per_s_real": (float | None, None, "real tokens/s over the unsynced window (one sync at its end)"),
    "window_tokens_per_s_padded": (float | None, None, "padded tokens/s over the unsynced window"),
    "model_flops_per_token": (float | None, None, "FLOP per real token, model convention (mfu_convention)"),
    "hardware_flops_per_token": (float | None, None, "FLOP per real token with recomputation (hfu_convention)"),
    "model_tflops_per_s": (float | None, None, "TFLOP/s of model FLOPs, all chips"),
    "mfu": (float | None, None, "fraction of peak bf16 FLOP/s, model FLOPs on real tokens"),
    "hfu": (float | None, None, "fraction of peak bf16 FLOP/s, hardware FLOPs on real tokens"),
    "mfu_invalid": (str | None, None, "why MFU is withheld: it computed above 1 (timing not synchronised)"),
    "hfu_invalid": (str | None, None, "why HFU is withheld"),
    "mfu_convention": (str, REQUIRED, "what the model FLOPs count, in words"),
    "hfu_convention": (str, REQUIRED, "what the hardware FLOPs count, in words"),
    "peak_flops_per_chip": (float | None, None, "FLOP/s, the chip's datasheet bf16 dense peak"),
    "peak_memory_gib": (float | None, None, "GiB, peak device memory (peak_memory_kind says which counter)"),
    "peak_memory_kind": (str | None, None, "which counter peak_memory_gib read"),
    "measured_steps": (int, REQUIRED, "steps after warm-up"),
    "measured_time_s": (float, REQUIRED, "s, the measured steps together"),
    "steady_time_s": (float | None, None, "s, the measured steps that compiled nothing, together"),
    "tokens_real": (int, REQUIRED, "real tokens of the measured steps"),
    "tokens_padded": (int, REQUIRED, "padded tokens of the measured steps"),
    "setup_time_s": (float | None, None, "s from the worker's start to the first step"),
    "run_time_s": (float | None, None, "s, the whole run"),
    "loss_first": (float | None, None, "nats per real target token, the first step's loss"),
    "loss_last": (float | None, None, "nats per real target token, the last step's loss"),
}


def figures_model(name: str, figures: dict[str, tuple[Any, Any, str]]) -> type[BaseModel]:
    """A frozen pydantic model with one field per figure, its unit as the description."""
    fields = {key: (kind, Field(default, description=unit)) for key, (kind, default, unit) in figures.items()}
    return create_model(name, __config__=FROZEN, __doc__=__doc__, **fields)


TrainMetrics = figures_model("TrainMetrics", TRAIN_FIGURES)
