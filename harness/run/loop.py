"""The timed step loop: the timing contract of metrics.md, in one place.

Every step is timed from just before it is issued to just after `backend.sync()`
returns, so the figure is the executed step, never the asynchronous dispatch. Compile
counters are read around each step to attribute compilations to the step that caused
them. The loss is read on the host only after the clock has stopped. After the measured
steps, an optional window runs `window_steps` more steps with a single sync at its end
(metrics.md `window_throughput`): the difference is what per-step syncs cost.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class StepSample:
    index: int
    phase: str  # warmup | measure | trace (after warm-up, under the profiler: not a measured step)
    start_s: float  # since the run's clock origin
    time_s: float  # device-synchronised wall time of the step
    tokens_real: int
    tokens_padded: int
    seq_len: int  # the longest padded length among the step's micro-batches
    seq_lens: list[int]  # every micro-batch's padded length (each is a shape to compile)
    num_compiles: int  # compilations that happened during this step
    compile_s: float
    rows: int = 0  # rows the plan's batch holds
    row_tokens: list[int] = field(default_factory=list)  # each row's real tokens (attention FLOPs per row)
    loss: float | None = None
    lr: float | None = None  # the learning rate the backend applied in this step
    done: dict[str, int] | None = None  # rows and tokens the backend counted feeding its devices
    # Host waits for the device inside the issued step, before the timing sync (the
    # backend's `host_sync_counter`); None where the backend does not count them.
    host_syncs: int | None = None


@dataclass
class WindowSample:
    num_steps: int
    time_s: float  # one sync at the end of the window
    tokens_real: int
    tokens_padded: int
    num_compiles: int
    losses: list[float] = field(default_factory=list)
    done: dict[str, int] | None = None  # rows and tokens the backend counted feeding its devices
    host_syncs: int | None = None  # host waits inside the window's steps, before its one sync


@dataclass
class LoopResult:
    steps: list[StepSample]
    window: WindowSample | None
    setup_compiles: int = 0  # compilations before the first step (model build, sharding)
    # The recorder that timed the steps; a TracedRecorder knows the traced steps and its
    # capture (harness.run.trace.collect). Not part of the facts.
    recorder: "StepRecorder | None" = None

    def to_json(self) -> dict[str, Any]:
        return {
            "steps": [asdict(s) for s in self.steps],
            "window": asdict(self.window) if self.window else None,
            "setup_compiles": self.setup_compiles,
        }


class StepRecorder:
    """Records synchronised step samples; usable from a framework's own loop."""

    def __init__(self, backend, clock_origin: float) -> None:
        self.backend = backend
        self.origin = clock_origin
        self.samples: list[StepSample] = []
        self.warmup_steps = backend.plan.warmup_steps
        self.setup_compiles = backend.compile_stats().count
        # Bound once, so that tracing (TracedRecorder, below) can close its step
        # span right after the sync at no cost to an untraced step.
        self.sync = backend.sync
        self.phase = "measure"

    def begin(self) -> tuple[float, Any]:
        return time.perf_counter(), self.backend.compile_stats()

    def end(self, begun: tuple[float, Any], batch, loss: Any) -> StepSample:
        """Call after the step was issued: syncs, stops the clock, then reads the loss
        (None when the framework reports it later, e.g. through a Trainer's logs)."""
        self.sync()
        stop = time.perf_counter()
        start, before = begun
        after = self.backend.compile_stats()
        index = len(self.samples)
        sample = StepSample(
            index=index,
            phase="warmup" if index < self.warmup_steps else self.phase,
            start_s=start - self.origin,
            time_s=stop - start,
            tokens_real=batch.tokens_real,
            tokens_padded=batch.tokens_padded,
            seq_len=max(batch.seq_lens),
            seq_lens=list(batch.seq_lens),
            num_compiles=after.count - before.count,
            compile_s=after.seconds - before.seconds,
            rows=batch.rows,
            row_tokens=batch.row_tokens,
        )
        sample.done, sample.lr = self.backend.work.take()
        sample.loss = None if loss is None else self.backend.loss_value(loss)  # after the clock
        self.samples.append(sample)
        self.backend.events.step(sample, self.backend.plan.steps)
        return sample


class TracedRecorder(StepRecorder):
    """A StepRecorder that runs steps warmup + first .. + steps - 1 under the framework's
    profiler (the backend's `trace_capture`, harness/run/trace.py reads what it wrote). It
    lives here, not in harness.run.trace, so that the trace reader never imports the loop."""

    def __init__(self, backend, clock_origin: float) -> None:
        super().__init__(backend, clock_origin)
        spec = backend.scenario.trace
        self.first = self.warmup_steps + spec.first
        self.last = self.first + spec.steps - 1
        if backend.trace_dir is None:
            raise RuntimeError("trace: the worker gave this run no trace directory")
        self.capture = backend.trace_capture(Path(backend.trace_dir))
        self.open = False
        self.sync = self._sync_then_close

    def begin(self):
        index = len(self.samples)
        traced = self.first <= index <= self.last
        if index == self.first:
            self.capture.start()  # before the clock starts: its cost is in no step
        self.phase = "trace" if traced else "measure"
        if traced:
            self.capture.step_begin(index)
            self.open = True
        return super().begin()

    def _sync_then_close(self) -> None:
        self.backend.sync()
        if self.open:
            self.capture.step_end()
            self.open = False

    def end(self, begun, batch, loss):
        sample = super().end(begun, batch, loss)
        if sample.index == self.last:
            self.capture.stop()  # writing the files is in no step either
        return sample

    @property
    def traced(self) -> list[int]:
        return list(range(self.first, self.last + 1))


def recorder_for(backend, clock_origin: float) -> StepRecorder:
    """A StepRecorder; one that also traces a window of steps when the scenario asks."""
    if backend.scenario.trace is None:
        return StepRecorder(backend, clock_origin)
    return TracedRecorder(backend, clock_origin)


def run_steps(backend) -> LoopResult:
    """Time `train.steps` synchronised steps, then the unsynchronised window."""
    plan = backend.plan
    recorder = recorder_for(backend, backend.events.origin)
    counter = backend.host_sync_counter()
    for batch in backend.batches.steps[: plan.steps]:
        begun = recorder.begin()
        with counting(counter):
            loss = backend.step(batch)
        sample = recorder.end(begun, batch, loss)
        sample.host_syncs = counter.take() if counter else None
    window = run_window(backend, backend.batches.steps[plan.steps : plan.total_steps], counter)
    return LoopResult(recorder.samples, window, recorder.setup_compiles, recorder)


def counting(counter):
    """The counter's counting block, or nothing where the backend does not count."""
    return counter.counting() if counter is not None else contextlib.nullcontext()


def run_window(backend, batches, counter=None) -> WindowSample | None:
    """Issue every step, sync once: the throughput the device sustains unobserved."""
    if not batches:
        return None
    backend.sync()
    before = backend.compile_stats().count
    start = time.perf_counter()
    with counting(counter):
        losses = [backend.step(batch) for batch in batches]
    syncs = counter.take() if counter else None
    backend.sync()
    elapsed = time.perf_counter() - start
    done, _ = backend.work.take()
    return WindowSample(
        num_steps=len(batches),
        time_s=elapsed,
        tokens_real=sum(b.tokens_real for b in batches),
        tokens_padded=sum(b.tokens_padded for b in batches),
        num_compiles=backend.compile_stats().count - before,
        losses=[backend.loss_value(loss) for loss in losses],
        done=done,
        host_syncs=syncs,
    )
