"""The scenario spec: what to measure, independent of the backend that measures it.

A scenario is YAML turned into typed, frozen pydantic models; unknown keys are errors.
The same file runs on every backend: backend-specific knobs live in `backend_options`,
validated by that backend's own config model (see `harness.registry`).
"""

from __future__ import annotations

import datetime
import types
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_serializer, model_validator

from harness.presets import MODEL_PRESETS

# Upper bounds. Each is generous (far beyond any run this harness is for) but finite: a
# value past it is a typo or a unit mistake (`steps: 1e9`, `max_length: 5000000`), and
# would otherwise run until the time limit, or exhaust memory, before saying anything.
# A sweep larger than this is almost certainly a typo (and would take weeks).
MAX_RUNS = 1000
# Steps, windows: a million optimizer steps is weeks of pre-training, not a benchmark.
MAX_STEPS = 1_000_000
# Examples to generate or read: 10M synthetic chats would take hours to build alone.
MAX_EXAMPLES = 10_000_000
# Tokens in a sequence: 1M is the longest context any released model takes.
MAX_SEQUENCE = 1 << 20
# Rows per optimizer step (or micro-batch): 64k rows is more than the largest published
# pre-training batches (a few thousand rows of 4k tokens).
MAX_BATCH = 65_536
# Devices (and each parallel axis): a full TPU v5p pod is 8,960 chips.
MAX_DEVICES = 65_536
# A LoRA rank past the widest hidden size is no longer low-rank.
MAX_LORA_RANK = 16_384
# Vocabulary: the largest released tokenizers have ~262k entries.
MAX_VOCAB = 1 << 20
# Model shape fields (hidden, intermediate sizes; layers; heads; head_dim).
MAX_WIDTH = 1 << 18
MAX_LAYERS = 1024
MAX_HEADS = 4096
# Seeds: numpy accepts 0 .. 2**32 - 1 (a negative seed crashes it mid-run).
MAX_SEED = 2**32 - 1
# A learning rate past 10 (SGD included) diverges at the first step.
MAX_LR = 10.0
# Serving: requests, tokens, concurrency and rates a single benchmark can drive.
MAX_REQUESTS = 1_000_000
MAX_OUTPUT_TOKENS = 1 << 20
MAX_CONCURRENCY = 100_000
MAX_REQUEST_RATE = 1_000_000.0
# Seconds: a week, for run time limits, timeouts and SLO targets.
MAX_SECONDS = 7 * 24 * 3600.0
# $ per chip-hour: list prices are $0.05 to ~$15; $1000 is a misplaced decimal point.
MAX_USD_PER_CHIP_HOUR = 1000.0

Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]


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
    # eager is the safe default: sdpa inspects mask values on the host under XLA and
    # gives NaN with padded sliding-window rows under torchax (platform-notes.md).
    attention: Literal["eager", "sdpa"] = "eager"

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


# --------------------------------------------------------------------------- train
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
    # One implementation for every backend (harness.plan.learning_rates): Hugging Face's
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
    # `auto`: the largest that fits the device's memory (harness.plan.auto_micro_batch's
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
    # host it is comes from BENCH_HOST_RANK and BENCH_COORDINATOR (harness/hosts.py), or
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
    # Passes over `data` a fine-tune makes: the projected fine-tune (harness/fine_tune.py)
    # runs every example this many times; the steps and shapes follow from the data.
    epochs: int = Field(1, ge=1, le=1000)


class Budget(Section):
    """An absolute limit on a record metric, used by `bench gate`."""

    metric: str
    max: float | None = None
    min: float | None = None
    backend: str | None = None
    accelerator: str | None = None

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        from harness.gate_metrics import known  # light: no framework

        metrics = known()
        if value not in metrics:
            raise ValueError(f"unknown metric {value!r} (known: {', '.join(metrics)})")
        return value

    @model_validator(mode="after")
    def _one_limit(self) -> "Budget":
        if self.max is None and self.min is None:
            raise ValueError("give max or min")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise ValueError(f"min: {self.min:g} is above max {self.max:g}: no value can pass")
        return self


# --------------------------------------------------------------------------- serve
class PromptSpec(Section):
    # function-calling: the prompts (developer + user turns) of the same data the
    # fine-tune uses; synthetic: random words, `input_words` of them (or a seeded uniform
    # length from input_words to input_words_max); shared-prefix: one of `num_prefixes`
    # prefixes of `prefix_words` words, then a synthetic suffix (a prefix cache's effect);
    # multi-turn: function-calling conversations of `turns` user turns, each turn's
    # prompt the earlier turns with the generator's reference answers, then its question.
    # trace: a JSONL file (`path`) of recorded requests, replayed at their arrival times
    # (harness/serving/trace.py: timestamp in ms, input_length and output_length in tokens).
    source: Literal["function-calling", "synthetic", "shared-prefix", "multi-turn", "trace"] = "function-calling"
    path: str | None = None
    input_words: int = Field(200, gt=0, le=1_000_000)
    input_words_max: int | None = Field(None, gt=0, le=1_000_000)
    prefix_words: int | None = Field(None, gt=0, le=1_000_000)
    num_prefixes: int | None = Field(None, gt=0, le=MAX_REQUESTS)
    turns: int | None = Field(None, ge=2, le=1000)
    seed: Seed = 0

    @model_validator(mode="after")
    def _fields_of_the_source(self) -> "PromptSpec":
        self._trace_fields()
        random_words = self.source in ("synthetic", "shared-prefix")
        if self.input_words_max is not None and not random_words:
            raise ValueError(
                f"input_words_max: only synthetic and shared-prefix prompts have a length (source is {self.source})"
            )
        if self.input_words_max is not None and self.input_words_max < self.input_words:
            raise ValueError(f"input_words_max: {self.input_words_max} is below input_words {self.input_words}")
        shared = self.source == "shared-prefix"
        for name in ("prefix_words", "num_prefixes"):
            if (getattr(self, name) is None) == shared:
                raise ValueError(
                    f"{name}: "
                    + (
                        "source: shared-prefix needs it"
                        if shared
                        else f"only source: shared-prefix has it (source is {self.source})"
                    )
                )
        if (self.turns is None) == (self.source == "multi-turn"):
            raise ValueError(
                "turns: "
                + (
                    "source: multi-turn needs the number of user turns (>= 2)"
                    if self.turns is None
                    else f"only source: multi-turn has turns (source is {self.source})"
                )
            )
        return self

    @model_serializer(mode="wrap")
    def _without_what_a_trace_gives(self, handler):
        """A trace's prompt section has no word counts: dumped without them, so a dumped
        scenario validates again (the worker's, a record's) and says only what ran."""
        data = handler(self)
        if self.source == "trace":
            data.pop("input_words", None)
        return data

    def _trace_fields(self) -> None:
        """A trace gives each request's lengths and arrival: the word-count fields have no
        meaning there; the file is read now, so a bad one is refused before any work."""
        if (self.path is None) == (self.source == "trace"):
            raise ValueError(
                "path: "
                + (
                    "source: trace needs the path of a JSONL trace"
                    if self.path is None
                    else "only source: trace has a path"
                )
            )
        if self.source != "trace":
            return
        given = [n for n in ("input_words", "input_words_max") if n in self.model_fields_set and getattr(self, n)]
        if given:
            raise ValueError(f"{given[0]}: the trace gives each request's input length (source is trace)")
        from harness.serving.trace import read_trace  # standard library only

        try:
            read_trace(self.path)
        except ValueError as exc:  # the message names the file, the line and the trace's field
            raise ValueError(f"path: {exc}") from None


class RampSpec(Section):
    """vLLM's ramp-up: request i of n arrives at the rate start + (end - start) * i / (n - 1)
    (linear) or start * (end / start) ** (i / (n - 1)) (exponential), in requests/s."""

    start_rate: float = Field(gt=0, le=MAX_REQUEST_RATE)
    end_rate: float = Field(gt=0, le=MAX_REQUEST_RATE)
    shape: Literal["linear", "exponential"] = "linear"


class LoadSpec(Section):
    """One load, one meaning per field. Closed loop: `concurrency` requests in flight.
    Open loop: arrivals at `request_rate` requests/s, or a `ramp` of the rate; `arrival`
    poisson (exponential gaps) or gamma with `burstiness` B (vLLM's meaning: gaps drawn
    from Gamma(shape B, scale 1 / (rate * B)), mean 1/rate, coefficient of variation
    1/sqrt(B); B = 1 is Poisson); `max_concurrency` caps requests in flight (a request
    waits for a slot, and is sent, and timed, when it gets one). Nothing given: a closed
    loop of one request at a time. A sweep or search gives the rate or concurrency."""

    concurrency: int | None = Field(None, gt=0, le=MAX_CONCURRENCY)
    request_rate: float | None = Field(None, gt=0, le=MAX_REQUEST_RATE)
    ramp: RampSpec | None = None
    arrival: Literal["poisson", "gamma"] | None = None  # open loop only; poisson when not given
    burstiness: float | None = Field(None, gt=0, le=1e6)
    max_concurrency: int | None = Field(None, gt=0, le=MAX_CONCURRENCY)
    # The arrival times' seed: open loop only (a closed loop draws nothing); 0 when not given.
    seed: Seed | None = None

    @model_validator(mode="after")
    def _one_load(self) -> "LoadSpec":
        if self.concurrency is not None and (self.request_rate is not None or self.ramp is not None):
            raise ValueError(
                "concurrency: a closed loop's requests in flight; it does not combine with request_rate "
                "or ramp (cap an open loop's requests in flight with max_concurrency)"
            )
        if self.request_rate is not None and self.ramp is not None:
            raise ValueError("ramp: gives the rate itself; drop request_rate")
        if (self.burstiness is not None) != (self.arrival == "gamma"):
            raise ValueError(
                "burstiness: "
                + (
                    "arrival: gamma needs it (1 = Poisson, < 1 burstier, > 1 steadier)"
                    if self.burstiness is None
                    else "only arrival: gamma has a burstiness"
                )
            )
        if self.concurrency is not None:
            for name in ("arrival", "max_concurrency"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}: only an open loop (request_rate, ramp) has it, not concurrency")
        return self

    @property
    def open_loop(self) -> bool:
        return self.request_rate is not None or self.ramp is not None

    @property
    def in_flight_limit(self) -> int | None:
        """Most requests in flight: the closed loop's concurrency (1 when nothing is
        given), an open loop's max_concurrency, or None (no limit)."""
        if self.open_loop:
            return self.max_concurrency
        return self.concurrency or 1


class SloSpec(Section):
    """Targets, in seconds, with vLLM's per-request meanings. Goodput counts the requests
    meeting every given target (per request). `percentile` p states when a load meets the
    SLO (what `slo_search` searches for): every given target's p-th percentile over the
    load's completed requests is within it, and no request failed."""

    ttft_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    tpot_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    e2el_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    percentile: float | None = Field(None, gt=0, le=100)

    @property
    def targets(self) -> dict[str, float]:
        return {
            k: v
            for k, v in (("ttft_s", self.ttft_s), ("tpot_s", self.tpot_s), ("e2el_s", self.e2el_s))
            if v is not None
        }

    @model_validator(mode="after")
    def _percentile_of_something(self) -> "SloSpec":
        if self.percentile is not None and not self.targets:
            raise ValueError("percentile: give at least one target (ttft_s, tpot_s, e2el_s) for it to apply to")
        return self


# A sweep or search measures at most this many load points: past it, a typo.
MAX_LOAD_POINTS = 100


class SweepSpec(Section):
    """One load per value, each measured with `serve.num_requests` requests and written as
    its own record, all sharing one sweep id. Points run in order on the same server;
    once `max_duration_s` has passed, the point in flight is cut short (its unfinished
    requests are errors) and the rest are recorded as not run."""

    request_rate: (
        Annotated[
            tuple[Annotated[float, Field(gt=0, le=MAX_REQUEST_RATE)], ...],
            Field(min_length=1, max_length=MAX_LOAD_POINTS),
        ]
        | None
    ) = None
    concurrency: (
        Annotated[
            tuple[Annotated[int, Field(gt=0, le=MAX_CONCURRENCY)], ...], Field(min_length=1, max_length=MAX_LOAD_POINTS)
        ]
        | None
    ) = None
    max_duration_s: float = Field(3600.0, gt=0, le=MAX_SECONDS)

    @model_validator(mode="after")
    def _one_axis(self) -> "SweepSpec":
        if (self.request_rate is None) == (self.concurrency is None):
            raise ValueError("request_rate: a sweep is over request_rate or concurrency (exactly one)")
        return self

    @property
    def axis(self) -> str:
        return "request_rate" if self.request_rate is not None else "concurrency"

    @property
    def values(self) -> tuple:
        return self.request_rate if self.request_rate is not None else self.concurrency


class SloSearchSpec(Section):
    """The highest request rate in [low, high] whose load meets the SLO (serve.slo, at its
    percentile): `low` and `high` first, then bisection until the bracket is at most
    `tolerance` req/s wide, at most `max_steps` bisection steps, or `max_duration_s`
    passed. Every point measures `serve.num_requests` requests, so a search sends at
    most (2 + max_steps) x num_requests. One record: the rate found, with the metrics,
    goodput and $ per 1M output tokens measured there."""

    low: float = Field(gt=0, le=MAX_REQUEST_RATE)
    high: float = Field(gt=0, le=MAX_REQUEST_RATE)
    tolerance: float = Field(gt=0, le=MAX_REQUEST_RATE)
    max_steps: int = Field(8, ge=1, le=MAX_LOAD_POINTS - 2)
    max_duration_s: float = Field(3600.0, gt=0, le=MAX_SECONDS)

    @model_validator(mode="after")
    def _bracket(self) -> "SloSearchSpec":
        if self.low >= self.high:
            raise ValueError(f"high: {self.high:g} is not above low {self.low:g}")
        return self


class EndpointSpec(Section):
    base_url: str  # e.g. http://127.0.0.1:8000/v1
    model: str | None = None  # None: the first model the server lists


class LaunchSpec(Section):
    """A server the harness starts, waits for, measures and stops. `{model_dir}` (the
    scenario's model saved locally), `{port}` (a free port) and `{python}` are filled in."""

    command: Annotated[tuple[str, ...], Field(min_length=1)]
    base_url: str = "http://127.0.0.1:{port}/v1"
    health_url: str = "http://127.0.0.1:{port}/health"
    health_timeout_s: float = Field(300.0, gt=0, le=MAX_SECONDS)
    env: dict[str, str] = Field(default_factory=dict)
    model: str | None = None


# The request body's fields bench sets (harness.serving.client.request_body), and the
# serve field each comes from: extra_body may add fields, never override these.
BENCH_BODY_FIELDS = {
    "model": "endpoint.model / launch.model (the served model)",
    "prompt": "prompts (api: completions)",
    "messages": "prompts (api: chat)",
    "max_tokens": "output_tokens",
    "min_tokens": "output_tokens with force_output_length",
    "ignore_eos": "force_output_length",
    "stream": "bench's streaming client (always true)",
    "stream_options": "bench's streaming client (include_usage, for the token counts)",
    "temperature": "bench's greedy decoding (0)",
}


class LocalEngineSpec(Section):
    """The in-process engine (backends/torch_eager/serve_local.py): the requests in flight
    decoded together through transformers `generate`, KV cache on."""

    max_batch: int = Field(64, gt=0, le=MAX_BATCH)  # most requests decoded in one batch
    # transformers' KV cache: dynamic (grows per token) or static (preallocated, what
    # compile needs); compile: torch.compile of the decoding forward (static cache only).
    cache: Literal["dynamic", "static"] = "dynamic"
    compile: bool = False

    @model_validator(mode="after")
    def _compile_needs_static(self) -> "LocalEngineSpec":
        if self.compile and self.cache != "static":
            raise ValueError("compile: needs cache: static (a growing cache recompiles every token)")
        return self


class ServeSpec(Section):
    # auto: vLLM (launched in its own environment: BENCH_VLLM_PYTHON, or `vllm` on PATH)
    # where installed, else local; the record says which ran and why.
    # local: in-process generation with transformers (the `local` section);
    # endpoint: an existing OpenAI-compatible server; launch: one the harness starts.
    # (harness/serving/engines.py: the registry; a plug-in engine is registered there)
    engine: str = "auto"
    endpoint: EndpointSpec | None = None
    launch: LaunchSpec | None = None
    local: LocalEngineSpec | None = None
    # The weights' and activations' dtype for engines bench starts (local, auto's vLLM).
    # None: bf16 on an accelerator, fp32 on a CPU (bf16 matmuls crawl on most CPUs).
    precision: Literal["fp32", "bf16", "fp16"] | None = None
    api: Literal["completions", "chat"] = "completions"
    prompts: PromptSpec = PromptSpec()
    output_tokens: int = Field(64, gt=0, le=MAX_OUTPUT_TOKENS)
    # With a maximum, each prompt's output length is drawn (seeded by prompts.seed)
    # uniformly from output_tokens to output_tokens_max; forced like a fixed length.
    output_tokens_max: int | None = Field(None, gt=0, le=MAX_OUTPUT_TOKENS)
    # Ask the server to ignore EOS so every request produces output_tokens (vLLM's
    # ignore_eos/min_tokens); server-specific fields go in extra_body.
    force_output_length: bool = True
    extra_body: dict[str, Any] = Field(default_factory=dict)
    load: LoadSpec = LoadSpec()
    # Measured requests of the load (of each point of a sweep or search).
    num_requests: int = Field(16, gt=0, le=MAX_REQUESTS)
    warmup_requests: int = Field(2, ge=0, le=MAX_REQUESTS)
    slo: SloSpec = SloSpec()
    sweep: SweepSpec | None = None
    slo_search: SloSearchSpec | None = None
    request_timeout_s: float = Field(120.0, gt=0, le=MAX_SECONDS)
    # Where the endpoint's model runs, for cost (ACCELERATOR:CHIPS or a TPU slice);
    # local and launch default to this machine's device.
    accelerator: str | None = None

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        from harness.serving import engines  # the registry only: no engine is imported

        if value != "auto" and value not in engines.names():
            raise ValueError(f"unknown engine {value!r} (known: auto, {', '.join(engines.names())})")
        return value

    @model_validator(mode="after")
    def _engine_has_its_section(self) -> "ServeSpec":
        if self.engine == "endpoint" and self.endpoint is None:
            raise ValueError("endpoint: engine: endpoint needs an endpoint section (base_url)")
        if self.engine == "launch" and self.launch is None:
            raise ValueError("launch: engine: launch needs a launch section (command)")
        # Sections and fields another engine would use are refused, not ignored.
        for section in ("endpoint", "launch"):
            if getattr(self, section) is not None and self.engine != section:
                raise ValueError(f"{section}: only engine: {section} uses it (engine is {self.engine})")
        self._local_rules()
        if self.output_tokens_max is not None:
            if self.output_tokens_max < self.output_tokens:
                raise ValueError(
                    f"output_tokens_max: {self.output_tokens_max} is below output_tokens {self.output_tokens}"
                )
            if not self.force_output_length:
                raise ValueError(
                    "output_tokens_max: a length distribution needs force_output_length: true "
                    "(otherwise the model's end-of-sequence decides the lengths)"
                )
        self._loads_fit()
        return self

    @model_serializer(mode="wrap")
    def _without_what_a_trace_gives(self, handler):
        """A trace gives each request's output length: dumped without output_tokens, so a
        dumped scenario validates again and says only what ran."""
        data = handler(self)
        if self.prompts.source == "trace":
            data.pop("output_tokens", None)
        return data

    def _local_rules(self) -> None:
        """What the local engine cannot do is refused for `local`, and for `auto`, which
        falls back to it where vLLM is not installed: the same file must mean the same."""
        local = self.engine in ("local", "auto")
        might = "the local engine" if self.engine == "local" else "engine auto (it may fall back to the local engine)"
        if self.local is not None and not local:
            raise ValueError(f"local: only engine local (or auto) uses it (engine is {self.engine})")
        if self.precision is not None and not local:
            raise ValueError(f"precision: engine {self.engine}'s server sets its own dtype (its command or config)")
        if local and self.extra_body:
            raise ValueError(f"extra_body: {might} sends no HTTP request; name engine: endpoint or launch")
        if local and self.api != "completions":
            raise ValueError(f"api: {might} generates from the prompt text; chat is for endpoint or launch")
        if local and (self.sweep or self.slo_search):
            raise ValueError(
                f"{'sweep' if self.sweep else 'slo_search'}: {might} runs one load; name engine: endpoint or "
                "launch for a sweep or search"
            )
        self._trace_rules()

    def _trace_rules(self) -> None:
        """A replayed trace is its own load: arrivals, lengths and count come from it."""
        if self.prompts.source == "trace":
            load = self.load
            given = [
                n for n in ("concurrency", "request_rate", "ramp", "arrival", "seed") if getattr(load, n) is not None
            ]
            if given:
                raise ValueError(f"load.{given[0]}: a trace gives every arrival time; only max_concurrency applies")
            if "output_tokens" in self.model_fields_set or self.output_tokens_max is not None:
                # (a trace's serve section is dumped without output_tokens: below)
                raise ValueError("output_tokens: the trace gives each request's output length")
            if self.sweep or self.slo_search:
                raise ValueError(
                    f"{'sweep' if self.sweep else 'slo_search'}: a trace is one load, replayed as recorded"
                )
            from harness.serving.trace import read_trace

            rows = len(read_trace(self.prompts.path))
            if self.num_requests > rows:
                raise ValueError(
                    f"num_requests: {self.num_requests}, but the trace {self.prompts.path} has {rows} requests"
                )

    def _loads_fit(self) -> None:
        """A sweep or search gives the load's rate (or concurrency); the load section the
        rest. Each combination either has one meaning or is refused, naming the field."""
        load, sweep, search = self.load, self.sweep, self.slo_search
        if sweep is not None and search is not None:
            raise ValueError("slo_search: a search picks its own rates; it does not combine with a sweep")
        by_rate = search is not None or (sweep is not None and sweep.axis == "request_rate")
        if by_rate and (load.concurrency is not None or load.request_rate is not None or load.ramp is not None):
            given = "concurrency" if load.concurrency is not None else "request_rate" if load.request_rate else "ramp"
            raise ValueError(
                f"load.{given}: the {'slo_search' if search else 'sweep'} gives each point's request "
                "rate; drop it from load"
            )
        if sweep is not None and sweep.axis == "concurrency":
            for name in ("concurrency", "request_rate", "ramp", "arrival", "max_concurrency"):
                if getattr(load, name) is not None:
                    raise ValueError(f"load.{name}: a sweep over concurrency is a closed loop; drop it from load")
        trace = self.prompts.source == "trace"  # its own open loop: the trace's arrivals
        if not by_rate and not load.open_loop and load.max_concurrency is not None and not trace:
            raise ValueError("load.max_concurrency: caps an open loop; give request_rate or ramp")
        if not by_rate and not load.open_loop and load.arrival is not None:
            raise ValueError(
                "load.arrival: only an open loop (request_rate, ramp, a rate sweep or search) has arrivals"
            )
        if not by_rate and not load.open_loop and load.seed is not None:
            raise ValueError(
                "load.seed: seeds an open loop's arrival times (request_rate, ramp, a rate sweep or search); "
                "a closed loop (concurrency) draws nothing"
            )
        owned = sorted(set(self.extra_body) & set(BENCH_BODY_FIELDS))
        if owned:
            raise ValueError(
                f"extra_body.{owned[0]}: bench owns this request field ({BENCH_BODY_FIELDS[owned[0]]}); "
                "drop it from extra_body"
            )
        if search is not None and (not self.slo.targets or self.slo.percentile is None):
            raise ValueError(
                "slo.percentile: slo_search needs SLO targets and the percentile at which they must hold "
                "(e.g. slo: {ttft_s: 0.5, percentile: 90})"
            )


# --------------------------------------------------------------------------- trace
class TraceSpec(Section):
    """A profiler trace of a window of measured steps (harness/trace.py): each
    framework's own profiler, files saved next to the record. Traced steps carry the
    profiler's overhead, so they are not measured steps (phase `trace`)."""

    # How many steps to trace (`bench run --trace [STEPS]`); they must leave at least one
    # measured step untraced, for the step-time statistics.
    # At least 2: the trace's step time is the period between consecutive steps.
    steps: int = Field(3, ge=2, le=MAX_STEPS)
    # The first traced step, counted from the first measured step (0: right after warm-up).
    first: int = Field(0, ge=0, le=MAX_STEPS)


# --------------------------------------------------------------------------- scenario
class Scenario(Section):
    # It names the record files and report rows: one printable word or phrase.
    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    # Which public write-up this reproduces (W1..W5 in reference-workloads.md).
    reference: str | None = None
    backend: str | None = None
    model: ModelSpec = ModelSpec()
    data: DataSpec = DataSpec()
    sequence: SequenceSpec = SequenceSpec()
    train: TrainSpec = TrainSpec()
    parallel: ParallelSpec = ParallelSpec()
    serve: ServeSpec | None = None
    # What to run: train, serve or both (default: train, plus serve if a serve section
    # is given). Each task writes its own record.
    tasks: tuple[str, ...] | None = None
    cost: CostSpec = CostSpec()
    workload: WorkloadSpec | None = None
    budgets: tuple[Budget, ...] = ()
    repeats: int = Field(1, gt=0, le=MAX_RUNS)
    # Per-run time limit for the worker process; None = no limit.
    run_timeout_s: float | None = Field(3600.0, gt=0, le=MAX_SECONDS)
    # Per-backend knobs, validated by the named backend's own config model.
    backend_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # A sweep over dotted keys: one run per combination of values.
    matrix: dict[str, tuple[Any, ...]] = Field(default_factory=dict)
    # Named sets of dotted overrides for a device kind (`cpu`, `cuda`, `tpu`): how a run
    # is fitted to a smaller machine. Applied explicitly and stated in every record.
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # A profiler trace of some measured steps of the train task; None: no profiler.
    trace: TraceSpec | None = None

    @field_validator("tasks")
    @classmethod
    def _known_tasks(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        from harness import tasks  # the registry only: no task module is imported

        unknown = [name for name in value or () if name not in tasks.names()]
        if unknown:
            raise ValueError(f"unknown task {unknown[0]!r} (known: {', '.join(tasks.names())})")
        return value

    @model_validator(mode="after")
    def _trace_fits_steps(self) -> "Scenario":
        if self.trace is None:
            return self
        if "train" not in tasks_of(self):
            raise ValueError("trace: traces the train task's steps, and this scenario trains nothing")
        measured = self.train.measured_steps
        if self.trace.first + self.trace.steps >= measured:
            raise ValueError(
                f"trace.steps: steps {self.trace.first}..{self.trace.first + self.trace.steps - 1} of the "
                f"{measured} measured steps would leave none untraced for the statistics "
                "(raise train.steps, or trace fewer)"
            )
        return self

    @model_validator(mode="after")
    def _sequence_fits_model(self) -> "Scenario":
        max_pos = self.model.architecture().get("max_position_embeddings")
        if max_pos and self.sequence.max_length > max_pos:
            raise ValueError(
                f"sequence.max_length: {self.sequence.max_length} exceeds the model's max_position_embeddings {max_pos}"
            )
        if self.tasks is not None and "serve" in self.tasks and self.serve is None:
            raise ValueError("tasks: serve needs a serve section")
        cells = 1
        for key, values in self.matrix.items():
            if not values:
                raise ValueError(f"matrix.{key}: needs at least one value")
            cells *= len(values)
        if cells * self.repeats > MAX_RUNS:
            raise ValueError(f"matrix: {cells} cells x {self.repeats} repeats exceeds {MAX_RUNS} runs")
        return self


def tasks_of(scenario: Scenario) -> tuple[str, ...]:
    if scenario.tasks is not None:
        return tuple(dict.fromkeys(scenario.tasks))
    return ("train", "serve") if scenario.serve is not None else ("train",)
