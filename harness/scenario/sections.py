"""The scenario sections every task shares: the Section base, model, data, sequence,
parallel, cost, workload and budgets (harness.scenario.spec.Scenario holds them; each task's own
section lives in its package, harness/tasks/<name>/spec.py).
"""

from __future__ import annotations

import datetime
import types
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from harness.scenario.limits import (
    MAX_DEVICES,
    MAX_EXAMPLES,
    MAX_HEADS,
    MAX_LAYERS,
    MAX_SEQUENCE,
    MAX_USD_PER_CHIP_HOUR,
    MAX_VOCAB,
    MAX_WIDTH,
    Seed,
)
from harness.scenario.presets import MODEL_PRESETS


def _accepts_bool(annotation: Any) -> bool:
    """Whether a field's type takes a boolean as itself: bool, Any, or a union holding one."""
    if annotation is bool or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _accepts_bool(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_accepts_bool(arg) for arg in typing.get_args(annotation))
    return False


class Section(BaseModel):
    """Base of every spec section: immutable, and unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_stray_booleans(cls, data: Any) -> Any:
        """YAML 1.1 reads yes/no/on/off (and true/false) as booleans; pydantic would then
        take `steps: on` as 1 and `lr: yes` as 1.0. A boolean where the field wants a
        number or a string is refused, naming the field."""
        if isinstance(data, dict):
            for name, value in data.items():
                info = cls.model_fields.get(name) if isinstance(name, str) else None
                if isinstance(value, bool) and info is not None and not _accepts_bool(info.annotation):
                    raise ValueError(
                        f"{name}: got the boolean {str(value).lower()}, which this field does not "
                        "take (YAML reads yes/no/on/off/true/false as booleans: quote a text value)"
                    )
        return data


# --------------------------------------------------------------------------- model
class Architecture(Section):
    """Decoder architecture fields; a preset fills them, explicit values override."""

    family: Literal["gemma3", "qwen2", "llama"] = "gemma3"
    vocab_size: int | None = Field(None, gt=0, le=MAX_VOCAB)
    hidden_size: int | None = Field(None, gt=0, le=MAX_WIDTH)
    intermediate_size: int | None = Field(None, gt=0, le=MAX_WIDTH)
    num_layers: int | None = Field(None, gt=0, le=MAX_LAYERS)
    num_heads: int | None = Field(None, gt=0, le=MAX_HEADS)
    num_kv_heads: int | None = Field(None, gt=0, le=MAX_HEADS)
    head_dim: int | None = Field(None, gt=0, le=MAX_WIDTH)
    sliding_window: int | None = Field(None, gt=0, le=MAX_SEQUENCE)
    query_pre_attn_scalar: float | None = Field(None, gt=0, le=1e9)
    max_position_embeddings: int | None = Field(None, gt=0, le=MAX_SEQUENCE)
    # Largest in use: 1e6 to 1e7 (long-context Llama, Qwen); 1e12 is a typo.
    rope_theta: float | None = Field(None, gt=0, le=1e12)
    rope_local_theta: float | None = Field(None, gt=0, le=1e12)
    tie_embeddings: bool | None = None


class ModelSpec(Section):
    preset: str | None = "gemma-3-270m"
    arch: Architecture | None = None
    # random: build from the architecture with random weights (offline; all a step-time
    # benchmark needs). pretrained: load weights from a local directory (`path`).
    init: Literal["random", "pretrained"] = "random"
    path: str | None = None
    # auto: each backend's fastest safe kernel for its device (the torch backends: SDPA on
    # CUDA, eager on the CPU; the XLA ones eager: sdpa inspects mask values on the host
    # under XLA and gives NaN with padded sliding-window rows under torchax,
    # platform-notes.md). eager or sdpa pins it; the record says which.
    attention: Literal["auto", "eager", "sdpa"] = "auto"

    @model_validator(mode="after")
    def _known_preset_or_arch(self) -> "ModelSpec":
        if self.preset is not None and self.preset not in MODEL_PRESETS:
            known = ", ".join(sorted(MODEL_PRESETS))
            raise ValueError(f"preset: unknown model preset {self.preset!r} (known: {known})")
        if self.preset is None and self.arch is None and self.init == "random":
            raise ValueError("give a preset or an arch to build a random-weight model")
        if self.init == "pretrained" and not self.path:
            raise ValueError("path: init: pretrained needs the path of a local model directory")
        return self

    def architecture(self) -> dict[str, Any]:
        """The preset's fields with the explicit `arch` fields laid over them."""
        fields = dict(MODEL_PRESETS[self.preset]) if self.preset else {}
        if self.arch is not None:
            fields.update(self.arch.model_dump(exclude_none=True))
        return fields


# --------------------------------------------------------------------------- data
class TokenizerSpec(Section):
    # local-bpe: a byte-level BPE the project trains on its own corpus and caches, so no
    # hub is needed. hf-dir: a local Hugging Face tokenizer directory (tokenizer.json).
    kind: Literal["local-bpe", "hf-dir"] = "local-bpe"
    vocab_size: int = Field(8192, gt=0, le=MAX_VOCAB)
    path: str | None = None

    @model_validator(mode="after")
    def _path_for_dir(self) -> "TokenizerSpec":
        if self.kind == "hf-dir" and not self.path:
            raise ValueError("path: kind: hf-dir needs the path of a tokenizer directory")
        return self


class CallMix(Section):
    """Shares of the synthetic example kinds (BFCL's categories, as in W4)."""

    single: float = Field(0.55, ge=0, le=1e6)
    multiple: float = Field(0.15, ge=0, le=1e6)
    parallel: float = Field(0.15, ge=0, le=1e6)
    irrelevance: float = Field(0.15, ge=0, le=1e6)

    @model_validator(mode="after")
    def _some_share(self) -> "CallMix":
        if not (self.single or self.multiple or self.parallel or self.irrelevance):
            raise ValueError("single: every share is zero; give at least one kind a share")
        return self


class DataSpec(Section):
    source: Literal["function-calling", "jsonl"] = "function-calling"
    path: str | None = None
    num_examples: int = Field(512, gt=0, le=MAX_EXAMPLES)
    seed: Seed = 0
    mix: CallMix = CallMix()
    chat_format: Literal["gemma", "chatml"] = "gemma"
    tokenizer: TokenizerSpec = TokenizerSpec()
    # Loss on assistant tokens only (what SFT on chat data does); `all` for plain LM.
    loss_on: Literal["assistant", "all"] = "assistant"

    @model_validator(mode="after")
    def _path_for_jsonl(self) -> "DataSpec":
        if self.source == "jsonl" and not self.path:
            raise ValueError("path: source: jsonl needs the path of a JSONL file")
        return self


# --------------------------------------------------------------------------- sequence
class SequenceSpec(Section):
    max_length: int = Field(512, gt=0, le=MAX_SEQUENCE)
    # static: every batch padded to max_length (one shape: what XLA wants).
    # dynamic: padded to the longest row of the micro-batch (a new shape per length).
    # bucketed: padded to the smallest bucket that fits (a few shapes).
    # packed: a forward pass's examples packed into as few max_length rows as hold them,
    # positions restarting per example, attention masked per example (one row length;
    # the row count follows the lengths). The same examples, tokens and loss.
    padding: Literal["static", "dynamic", "bucketed", "packed"] = "static"
    buckets: tuple[PositiveInt, ...] | None = None

    @model_validator(mode="after")
    def _buckets_fit(self) -> "SequenceSpec":
        if self.buckets is not None:
            if list(self.buckets) != sorted(set(self.buckets)):
                raise ValueError("buckets: must be strictly increasing")
            if self.buckets[-1] != self.max_length:
                raise ValueError(f"buckets: the last bucket must equal max_length ({self.max_length})")
        return self

    def bucket_lengths(self) -> tuple[int, ...]:
        """Explicit buckets, or quarter/half/full max_length."""
        if self.buckets:
            return self.buckets
        m = self.max_length
        return tuple(sorted({max(1, m // 4), max(1, m // 2), m}))


# --------------------------------------------------------------------------- parallel
# Keys of the old, implementation-named parallel section, and what replaced them.
_REMOVED_PARALLEL_KEYS = {
    "strategy": "state degrees instead: parallel.devices, fsdp, tensor, data (each backend maps them)",
    "mesh": "the axis sizes are parallel.fsdp, parallel.tensor and parallel.data",
    "num_processes": "use parallel.devices (gpu-fsdp starts one process per device)",
    "mixed_precision": "train.precision sets the whole precision policy (see `bench plan`)",
}


class ParallelSpec(Section):
    """How many devices, and the sharding degrees over them: what, never how. Every
    backend maps the same degrees to its own mechanism (FSDP2, SPMD FSDPv2, a JAX mesh)
    or refuses the run before any work, naming the field."""

    # Devices the run uses: a number, or `all` of this host's accelerators (one on a
    # CPU). On a CPU, backends that can (XLA, JAX, gloo ranks) run N virtual devices.
    devices: Annotated[int, Field(gt=0, le=MAX_DEVICES)] | Literal["all"] = 1
    # Hosts the job spans (a TPU slice's VMs, GPU nodes): `devices` counts all of them,
    # devices / hosts on each. Every host runs `bench run` of the same scenario; which
    # host it is comes from BENCH_HOST_RANK and BENCH_COORDINATOR (harness/plan/hosts.py), or
    # a TPU slice's own metadata; host 0 writes the job's one record.
    hosts: int = Field(1, ge=1, le=MAX_DEVICES)
    # Axis sizes; their product is `devices`; -1 on one axis takes the devices left over.
    # fsdp: rows split AND parameters, gradients and optimizer state sharded (ZeRO-3);
    # data: rows split, everything replicated; tensor: each layer's matmuls split.
    fsdp: int = Field(-1, ge=-1, le=MAX_DEVICES)
    tensor: int = Field(1, ge=-1, le=MAX_DEVICES)
    data: int = Field(1, ge=-1, le=MAX_DEVICES)
    # full_shard: parameters re-sharded after forward (ZeRO-3); shard_grad_op: kept
    # gathered until backward (ZeRO-2). Meaningful where the fsdp axis is > 1.
    sharding: Literal["full_shard", "shard_grad_op"] = "full_shard"

    @model_validator(mode="before")
    @classmethod
    def _removed_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, instead in _REMOVED_PARALLEL_KEYS.items():
                if key in data:
                    raise ValueError(f"{key}: no longer a field: {instead}")
        return data

    @model_validator(mode="after")
    def _one_rest_axis(self) -> "ParallelSpec":
        axes = {"fsdp": self.fsdp, "tensor": self.tensor, "data": self.data}
        rest = [name for name, size in axes.items() if size == -1]
        if len(rest) > 1:
            raise ValueError(f"{rest[1]}: only one axis may be -1 (the rest); {', '.join(rest)} are")
        for name, size in axes.items():
            if size == 0:
                raise ValueError(f"{name}: an axis size is >= 1, or -1 for the rest")
        return self


# --------------------------------------------------------------------------- cost, budgets
class PriceOverride(Section):
    usd_per_chip_hour: float = Field(gt=0, le=MAX_USD_PER_CHIP_HOUR)
    source: str = Field(min_length=1)
    date: str = Field(min_length=1)

    @field_validator("date", mode="before")
    @classmethod
    def _date_as_text(cls, value: Any) -> Any:
        """YAML reads `date: 2026-11-01` as a date: it is the date the user meant."""
        return value.isoformat() if isinstance(value, datetime.date) else value


class CostSpec(Section):
    # The user's own prices (negotiated, spot...), keyed by accelerator catalog key.
    prices: dict[str, PriceOverride] = Field(default_factory=dict)
    pricing: Literal["on_demand", "spot"] = "on_demand"


class WorkloadSpec(Section):
    """A train-plus-serve workload to price: `fine_tunes` real fine-tunes of
    `fine_tune_tokens_millions` million real (non-pad) tokens each (examples x epochs x
    tokens per example), priced at the train task's steady-state $/1M real tokens plus its
    one-off setup and warm-up (compile) cost, plus `served_tokens_millions` million output
    tokens at the serve task's $/1M tokens. Not the benchmark run's own $: a 30-step
    benchmark is not a fine-tune."""

    fine_tunes: float = Field(1.0, ge=0, le=1e6)
    fine_tune_tokens_millions: float = Field(gt=0, le=1e9)
    served_tokens_millions: float = Field(0.0, ge=0, le=1e9)  # a billion million: 1e15 tokens
    # Passes over `data` a fine-tune makes: the projected fine-tune (harness/projection/fine_tune.py)
    # runs every example this many times; the steps and shapes follow from the data.
    epochs: int = Field(1, ge=1, le=1000)


class Budget(Section):
    """An absolute limit on a record metric, used by `bench gate`. A limit is a number in
    the metric's unit or a quantity with its unit (`max: 500 ms`, `max: 2 GiB`, `min: 10 %`:
    harness.scenario.budget_units), converted to the metric's unit; `written` keeps the text."""

    metric: str
    max: float | None = None
    min: float | None = None
    backend: str | None = None
    accelerator: str | None = None
    # The limits as written where they carried a unit ({"max": "500 ms"}): shown as written.
    written: dict[Literal["max", "min"], str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _keep_written(cls, data: Any) -> Any:
        if isinstance(data, dict):
            texts = {side: data[side] for side in ("max", "min") if isinstance(data.get(side), str)}
            if texts:
                data = {**data, "written": {**(data.get("written") or {}), **texts}}
        return data

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        from harness.scenario.gate_metrics import known  # light: no framework

        metrics = known()
        if value not in metrics:
            raise ValueError(f"unknown metric {value!r} (known: {', '.join(metrics)})")
        return value

    @field_validator("max", "min", mode="before")
    @classmethod
    def _in_metric_unit(cls, value: Any, info) -> Any:
        """`500 ms` -> 0.5 for a metric in seconds; a bare number stays as it is."""
        if not isinstance(value, str):
            return value
        from harness.scenario.budget_units import to_metric_unit
        from harness.scenario.gate_metrics import known

        metric = known().get(info.data.get("metric") or "")
        if metric is None:
            raise ValueError("a limit with a unit needs a known metric")
        return to_metric_unit(value, metric.unit)

    @model_validator(mode="after")
    def _one_limit(self) -> "Budget":
        if self.max is None and self.min is None:
            raise ValueError("give max or min")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise ValueError(f"min: {self.min:g} is above max {self.max:g}: no value can pass")
        return self
