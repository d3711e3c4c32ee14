"""The backend interface: how a framework runs a scenario and what it hands back.

A backend builds the model and the step from the scenario and executes steps; it hands
the harness raw facts only (per-step synchronised times, tokens, loss, compile counters,
memory, devices, versions). Statistics, MFU and cost are computed by `harness.metrics`
and `harness.cost`, the same way for every backend.

Most backends implement `setup`, `train_step`, `sync` and the counters, and let the
harness's `harness.loop.run_steps` time them. A backend whose framework owns the loop
(a Trainer) overrides `run` and records steps with `harness.loop.StepRecorder`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict


@dataclass(frozen=True)
class Probe:
    """Whether a backend can run in this environment, and on what."""

    available: bool
    reason: str = ""
    device_kind: str = "cpu"  # cpu | cuda | tpu
    device_name: str = ""
    device_count: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class BackendOptions(BaseModel):
    """Base of a backend's options block (`backend_options.<name>` in a scenario)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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
    # accelerator wins; `torch` (priority 0) is the default anywhere.
    priority: int = 0
    # Environment for the worker; e.g. USE_TORCH_XLA=0 keeps an installed torch_xla
    # from taking over transformers in a non-XLA run (platform-notes.md).
    env: dict[str, str] = field(default_factory=dict)
    # Interpreter arguments that launch the worker module, e.g. torchrun's
    # ["-m", "torch.distributed.run", "--nproc-per-node", "2"]; None: plain python.
    launch: Callable[[Any], list[str]] | None = None


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


@dataclass
class MemoryFacts:
    peak_bytes: int | None
    kind: str  # what was measured: cuda_max_allocated, tpu_peak_bytes_in_use, cpu_peak_rss, ...
    per_rank_bytes: list[int] = field(default_factory=list)
    reserved_bytes: int | None = None


@dataclass
class CompileStats:
    count: int = 0
    seconds: float = 0.0


class Backend(ABC):
    """One run of one scenario on one framework. Created inside the worker process."""

    info: BackendInfo

    def __init__(self, scenario, options: BackendOptions, events) -> None:
        self.scenario = scenario
        self.options = options
        self.events = events  # harness.worker.EventSink
        # harness.data.batches.DataPlan; built by the worker after `setup`, once the
        # data-parallel size is known.
        self.plan = None

    @classmethod
    @abstractmethod
    def probe(cls) -> Probe:
        """Is the framework importable and which devices does it see? Cheap-ish."""

    @abstractmethod
    def setup(self) -> ModelFacts:
        """Build the model, LoRA, optimizer; place and shard them."""

    @abstractmethod
    def train_step(self, batch) -> Any:
        """Run one optimizer step; return the loss as a device value (no host sync)."""

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

    def data_parallel_size(self) -> int:
        """Devices that split each micro-batch's rows (for the data plan)."""
        return 1

    def notes(self) -> list[str]:
        """Anything the user should know about how this run was done."""
        return []

    def extra_facts(self) -> dict[str, Any]:
        """Backend-specific raw facts for the record (sharding, per-rank times...)."""
        return {}

    def run(self):
        """Time the steps with the harness's loop (override if the framework owns it)."""
        from harness.loop import run_steps

        return run_steps(self)

    def teardown(self) -> None:
        """Release what the run holds (process groups, servers). The worker exits without
        interpreter teardown after this (see `harness.worker.exit_now`), so cleanup that
        matters belongs here, not in `atexit` handlers."""
