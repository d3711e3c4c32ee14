"""The backend interface: how a framework runs a scenario and what it hands back.

A backend builds the model and the step from the scenario and executes steps; it hands
the harness raw facts only (per-step synchronised times, tokens, loss, compile counters,
memory, devices, versions). Statistics, MFU and cost are computed by `harness.figures.metrics`
and `harness.figures.cost`, the same way for every backend.

A backend executes the run's `harness.plan.plan.Plan` exactly (rows per device, accumulation,
dtypes, the lr of every step) and says so: it logs what it hands its devices and the lr
it applies (`self.work`), and reports the dtypes in use and how many devices did
distinct work (`done`). The runner compares that with the plan. What a backend cannot
execute it declares in `Capabilities`, so the run is refused before any work.

Two kinds, because frameworks differ in who owns the loop:
- `StepBackend` (torch, gpu-fsdp, xla-fsdpv2, torchax): implements `train_step`; the
  harness's `harness.run.loop.run_steps` issues and times every step.
- `LoopBackend` (jax-tunix): the framework's trainer owns the loop; `run` drives it and
  reports each step boundary to a `harness.run.loop.StepRecorder` from the trainer's hooks.
Everything a run needs comes in through the constructor (scenario, plan, options, event
sink, trace directory, faults) or `use_batches`; nothing is set on a backend from outside.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

from harness.data.examples import count_examples  # noqa: F401  (part of the interface: backends count with it)


@dataclass(frozen=True)
class Probe:
    """Whether a backend can run in this environment, and on what."""

    available: bool
    reason: str = ""
    device_kind: str = "cpu"  # cpu | cuda | tpu
    device_name: str = ""
    device_count: int = 0
    # One accelerator's memory (what `train.micro_batch: auto` plans against); None on
    # a CPU, whose memory the planner reads from the host when it plans.
    memory_bytes: int | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class BackendOptions(BaseModel):
    """Base of a backend's options block (`backend_options.<name>` in a scenario)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class Capabilities:
    """What a backend can execute; a plan asking for more is refused before any work
    (`harness.plan.plan.refusals`), with one line naming the field."""

    axes: tuple[str, ...] = ()  # mesh axes that may be larger than 1 (data, fsdp, tensor)
    max_devices: int | None = 1  # None: as many as the host has
    cpu_devices: bool = False  # can run several (virtual) devices or ranks on a CPU host
    multi_host: bool = False  # can run one job over several hosts (parallel.hosts > 1)
    # Why not, where it cannot: the refusal of parallel.hosts > 1 says this.
    single_host_why: str = "this backend runs on one host in this version"
    precisions: tuple[str, ...] = ("fp32", "bf16", "fp16")
    shardings: tuple[str, ...] = ("full_shard",)  # parallel.sharding values, when fsdp > 1
    methods: tuple[str, ...] = ("lora", "full")
    optimizers: tuple[str, ...] = ("adamw", "adafactor", "sgd")
    # sequence.padding: packed needs attention masked per example; where the backend has
    # no such kernel, `packing_why` names what is missing (the refusal's one line).
    packing_why: str | None = "this backend has no per-example (segment-masked) attention in this version"
    # Packed rows over several data-parallel shards: each shard takes an equal block of a
    # pass's packed rows (harness/data/batches.py rounds their count to the shards).
    # False: packing runs on one shard only, refused beyond it.
    packing_over_shards: bool = False


@dataclass(frozen=True)
class BackendInfo:
    """What the registry knows about a backend without importing its framework."""

    name: str
    summary: str
    requires: tuple[str, ...]  # importable modules the backend needs
    install: str  # how to get them, e.g. "pip install -e '.[torch]'"
    options: type[BackendOptions]
    load: Callable[[], type["Backend"]]  # imports the framework; call only in a worker
    # Auto-selection: the available backend with the highest priority on an
    # accelerator wins; where none has one, the available backend with the lowest
    # priority (the least specialised: `torch`, 0) runs on the CPU.
    priority: int = 0
    # Environment for the worker; e.g. USE_TORCH_XLA=0 keeps an installed torch_xla
    # from taking over transformers in a non-XLA run (platform-notes.md).
    env: dict[str, str] = field(default_factory=dict)
    # How its workers are started (harness/plan/launchers.py): "single" (one process) or
    # "torchrun" (one per device).
    launcher: str = "single"
    capabilities: Capabilities = field(default_factory=Capabilities)
    # Whether a run with these options (the record's `backend.options`, a mapping)
    # compiles nothing by design, so the report prints "n/a (eager)" in compile columns
    # rather than a 0 that reads as a perfect compiler. None: it compiles.
    eager: Callable[[dict[str, Any]], bool] | None = None


@dataclass
class ModelFacts:
    """Sizes the metrics module needs for FLOPs (PaLM appendix B)."""

    num_params: int
    num_embedding_params: int
    num_trainable_params: int
    num_layers: int
    num_heads: int
    head_dim: int
    hidden_size: int
    vocab_size: int
    # What the FLOPs convention needs, as built: vocab_size, hidden_size,
    # intermediate_size, num_layers, num_heads, num_kv_heads, head_dim and every
    # layer's attention window (None: full). None: the scenario's architecture is used.
    architecture: dict | None = None


@dataclass
class MemoryFacts:
    peak_bytes: int | None
    kind: str  # what was measured: cuda_max_allocated, tpu_peak_bytes_in_use, cpu_peak_rss, ...
    per_rank_bytes: list[int] = field(default_factory=list)
    reserved_bytes: int | None = None


def cpu_peak_memory() -> MemoryFacts:
    """The process's peak resident set (model build included), where a device keeps no
    allocator statistics (a CPU run): ru_maxrss is KiB on Linux."""
    import resource

    return MemoryFacts(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "cpu_peak_rss")


@dataclass
class CompileStats:
    count: int = 0
    seconds: float = 0.0


class WorkLog:
    """What a backend really handed its devices in the current step, and the lr it
    applied: counted from the arrays it feeds (each row once, however many devices
    hold a copy), never copied from the plan. `take()` ends the step's account."""

    def __init__(self) -> None:
        self._reset()
        self.lr: float | None = None

    def _reset(self) -> None:
        self.rows = self.tokens_real = self.tokens_padded = 0

    def fed(self, attention_mask, position_ids=None) -> None:
        """One forward pass's rows, from the attention mask (a host numpy array, 1 =
        real token) of exactly the rows handed to the device; packed rows count each
        example they hold (from their restarting positions)."""
        self.rows += count_examples(attention_mask, position_ids)
        self.tokens_real += int(attention_mask.sum())
        self.tokens_padded += int(attention_mask.size)

    def applied_lr(self, lr: float) -> None:
        self.lr = float(lr)

    def take(self) -> tuple[dict[str, int], float | None]:
        done = {"rows": self.rows, "tokens_real": self.tokens_real, "tokens_padded": self.tokens_padded}
        lr, self.lr = self.lr, None
        self._reset()
        return done, lr


class Backend(ABC):
    """One run of one scenario on one framework. Created inside the worker process."""

    def __init__(
        self, scenario, plan, options: BackendOptions, events, *, trace_dir: str | None = None, faults=None
    ) -> None:
        self.scenario = scenario
        self.plan = plan  # harness.plan.plan.Plan: what to execute, exactly
        self.options = options
        self.events = events  # harness.run.worker.EventSink
        self.work = WorkLog()
        # harness.data.batches.Batches: every step's micro-batches, cut by the plan;
        # handed over by `use_batches` after `setup` (the tokenizer is checked against
        # the model it built).
        self.batches = None
        self.trace_dir = trace_dir  # where a traced run's profiler writes (harness.run.trace)
        self.faults = faults  # harness.run.faults.Faults: test-only injected failures, or None

    def use_batches(self, batches) -> None:
        self.batches = batches

    @classmethod
    @abstractmethod
    def probe(cls) -> Probe:
        """Is the framework importable and which devices does it see? Cheap-ish."""

    @abstractmethod
    def setup(self) -> ModelFacts:
        """Build the model, LoRA, optimizer; place and shard them."""

    @abstractmethod
    def sync(self) -> None:
        """Block until the device has finished all work issued so far."""

    def loss_value(self, loss: Any) -> float:
        return float(loss)

    def compile_stats(self) -> CompileStats:
        """Cumulative graph compilations so far; eager backends compile nothing."""
        return CompileStats()

    @abstractmethod
    def memory(self) -> MemoryFacts:
        """Peak memory of the run so far."""

    @abstractmethod
    def accelerator(self) -> dict[str, Any]:
        """{kind, name, count}: the devices this run used."""

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """Versions of the libraries that shaped the numbers."""

    def done(self) -> dict[str, Any]:
        """What this run really executed, measured from its tensors: `dtypes` (frozen
        and trainable parameters, compute = the dtype the base model's matmuls produced,
        optimizer state) and `distinct_row_shards` (devices that got different rows)."""
        return {}

    def host_sync_counter(self):
        """A counter of the host's waits for the device inside a step (a HostWaitCounter),
        or None where this backend does not count them."""
        return None

    def compile_cache(self) -> dict[str, Any] | None:
        """Whether a persistent compilation cache was on: a cache hit compiles nothing, so
        compile counts and times would hide what a fresh machine pays. None: the backend
        compiles nothing (eager)."""
        return None

    def notes(self) -> list[str]:
        """Anything the user should know about how this run was done."""
        return []

    def execution(self) -> dict[str, Any]:
        """How this backend executed the plan's work, beyond the plan's own micro-batch:
        its expert choices (loss kernel, attention, compile mode, optimizer kernel,
        remat), stated in the record's `raw.execution`. Execution, never work."""
        return {}

    def extra_facts(self) -> dict[str, Any]:
        """Backend-specific raw facts for the record (sharding, per-rank times...)."""
        return {}

    def trace_capture(self, directory):
        """This framework's profiler for a traced run (a `harness.run.trace.Capture` writing
        under `directory`)."""
        raise NotImplementedError(f"trace: the {type(self).__name__} backend has no profiler capture")

    @abstractmethod
    def run(self):
        """Execute the plan's steps; a `harness.run.loop.LoopResult`."""

    def teardown(self) -> None:
        """Release what the run holds (process groups, servers). The worker exits without
        interpreter teardown after this (see `harness.run.worker.exit_now`), so cleanup that
        matters belongs here, not in `atexit` handlers."""


class StepBackend(Backend):
    """A backend whose steps the harness issues and times (`harness.run.loop.run_steps`)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # What the loop calls: the step itself, or wrapped by injected faults (tests),
        # so an untested run's timed region holds nothing but the step.
        self.step = self.faults.wrap_step(self.train_step) if self.faults else self.train_step

    @abstractmethod
    def train_step(self, batch) -> Any:
        """Run one optimizer step; return the loss as a device value (no host sync)."""

    def run(self):
        """Time the steps with the harness's loop."""
        from harness.run.loop import run_steps

        return run_steps(self)


class LoopBackend(Backend):
    """A backend whose framework owns the training loop (a Trainer): `run` drives it and
    reports every step boundary to a `harness.run.loop.StepRecorder` (`recorder_for`) from
    the trainer's hooks, so its steps are timed by the same contract."""


class HostWaitCounter:
    """Counts the host's waits for the device inside its `counting()` block; a
    framework's subclass adds 1 to `count` per wait it sees while `active`
    (backends/torch_common/syncs.py, backends/jax_common/syncs.py)."""

    def __init__(self) -> None:
        self.count = 0
        self.active = False

    @contextlib.contextmanager
    def counting(self):
        """Count inside the block; `take()` then returns the count and resets it."""
        self.active = True
        try:
            yield self
        finally:
            self.active = False

    def take(self) -> int:
        found, self.count = self.count, 0
        return found
