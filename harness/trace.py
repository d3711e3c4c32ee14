"""Profiler traces on demand (`bench run --trace [STEPS]`, the scenario's `trace:`), and
what the trace says about the harness's own step times.

A window of measured steps (never warm-up) runs under the framework's own profiler,
through a `Capture` the backend supplies (`Backend.trace_capture`): torch.profiler for
torch and gpu-fsdp (Chrome JSON, Perfetto), torch_xla.debug.profiler for xla-fsdpv2 and
jax.profiler for jax-tunix and torchax (XSpace `.xplane.pb`, TensorBoard's profile plugin
/ XProf). Every traced step is a span named `bench.step.N` opened just before the
harness starts its clock and closed right after the device sync, so the span's duration
on the profiler's clock is the harness's step on an independent clock. Traced steps have
phase `trace`: the profiler's overhead is in them, so they are not measured steps.

After the run the worker reads its trace back (`collect`): each step's span, and the
framework's compile events attributed to the step whose span holds them. The record
(`summary`) then states the trace's median step time beside the harness's median over
the same steps, their ratio, and which steps compiled by the trace and by the harness's
counters. Reading needs no framework: Chrome JSON is JSON, and XSpace is decoded here
from the protobuf wire format (tests check it against jax.profiler.ProfileData).

Costs nothing when off: `harness.loop.recorder_for` returns the plain StepRecorder, and
this module is not even imported.
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from harness.loop import StepRecorder

SPAN_PREFIX = "bench.step."
TRACE_DIR_SUFFIX = ".trace"


def span_name(index: int) -> str:
    return f"{SPAN_PREFIX}{index}"


class Capture(Protocol):
    """One framework's profiler, as a backend supplies it."""

    tool: str  # e.g. "torch.profiler"
    compile_events: tuple[str, ...]  # names of the events that mark one graph compile

    def start(self) -> None: ...
    def step_begin(self, index: int) -> None: ...  # opens span_name(index)
    def step_end(self) -> None: ...  # closes it
    def stop(self) -> None: ...  # ends the trace and writes its files
    def files(self) -> list[Path]: ...  # this process's trace files, once stopped


# --------------------------------------------------------------------------- capture
class TracedRecorder(StepRecorder):
    """A StepRecorder that runs steps warmup + first .. + steps - 1 under the profiler."""

    def __init__(self, backend, clock_origin: float) -> None:
        super().__init__(backend, clock_origin)
        spec = backend.scenario.trace
        self.first = self.warmup_steps + spec.first
        self.last = self.first + spec.steps - 1
        directory = getattr(backend, "trace_dir", None)
        if directory is None:
            raise RuntimeError("trace: the worker gave this run no trace directory")
        self.capture = backend.trace_capture(Path(directory))
        self.open = False
        self.sync = self._sync_then_close
        backend.trace_recorder = self  # harness.trace.collect reads it after the run

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


# --------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class Event:
    name: str
    start_ns: float  # on the trace's own clock; only differences mean anything
    duration_ns: float

    @property
    def end_ns(self) -> float:
        return self.start_ns + self.duration_ns


def read_events(path: Path) -> list[Event]:
    """Every complete (timed) event of a trace file: Chrome JSON (`.json`, `.json.gz`)
    or XSpace (`.xplane.pb`)."""
    name = path.name
    if name.endswith(".xplane.pb"):
        return xspace_events(path.read_bytes())
    if name.endswith(".json.gz") or name.endswith(".json"):
        opener = gzip.open if name.endswith(".gz") else open
        with opener(path, "rt") as stream:
            doc = json.load(stream)
        return chrome_events(doc)
    raise ValueError(f"{path}: not a trace file this harness reads (.json, .json.gz, .xplane.pb)")


def chrome_events(doc: dict[str, Any] | list) -> list[Event]:
    """Complete events ("ph": "X") of a Chrome trace; `ts` and `dur` are microseconds."""
    rows = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    return [Event(str(e["name"]), float(e["ts"]) * 1e3, float(e.get("dur", 0.0)) * 1e3)
            for e in rows if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e and "name" in e]


# XSpace (tsl/profiler/protobuf/xplane.proto), the fields read here:
#   XSpace.planes = 1; XPlane.lines = 3, XPlane.event_metadata = 4 (map<int64, XEventMetadata>);
#   XLine.timestamp_ns = 3, XLine.events = 4; XEvent.metadata_id = 1, offset_ps = 2,
#   duration_ps = 3; XEventMetadata.id = 1, name = 2, display_name = 4.
def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes):
    """(field number, value) of a protobuf message: ints for varints, bytes otherwise."""
    pos, end = 0, len(data)
    while pos < end:
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos:pos + size], pos + size
        elif wire == 1:
            value, pos = int.from_bytes(data[pos:pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(data[pos:pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"XSpace: unsupported protobuf wire type {wire}")
        yield number, value


def _metadata_names(plane: bytes) -> dict[int, str]:
    names: dict[int, str] = {}
    for number, entry in _fields(plane):
        if number != 4:
            continue
        meta = next((v for k, v in _fields(entry) if k == 2), b"")
        fields = dict(_fields(meta))
        names[fields.get(1, 0)] = (fields.get(4) or fields.get(2) or b"").decode("utf-8", "replace")
    return names


def xspace_events(data: bytes) -> list[Event]:
    """Every event of every line of every plane of a serialised XSpace."""
    events = []
    for number, plane in _fields(data):
        if number != 1:
            continue
        names = _metadata_names(plane)
        for k, line in _fields(plane):
            if k != 3:
                continue
            origin, raw = 0, []
            for j, value in _fields(line):
                if j == 3:
                    origin = value
                elif j == 4:
                    raw.append(value)
            for item in raw:
                f = dict(_fields(item))
                events.append(Event(names.get(f.get(1, 0), ""), origin + f.get(2, 0) / 1e3, f.get(3, 0) / 1e3))
    return events


# --------------------------------------------------------------------------- after the run
def collect(backend) -> dict[str, Any]:
    """The raw facts of the run's trace: files (relative to the trace directory), each
    traced step's span and the compile events inside each step."""
    recorder: TracedRecorder = backend.trace_recorder
    capture = recorder.capture
    directory = Path(backend.trace_dir)
    mine = capture.files()
    if not mine:
        raise RuntimeError(f"trace: {capture.tool} wrote no trace file under {directory}")
    events = [e for path in mine for e in read_events(path)]
    spans = step_spans(events, recorder.traced)
    compiles = attribute(events, capture.compile_events, spans)
    return {
        "tool": capture.tool, "steps": recorder.traced,
        "files": sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()),
        "read": [str(p.relative_to(directory)) for p in mine],
        "span_s": {str(i): s.duration_ns / 1e9 for i, s in spans.items()},
        "compile_events": list(capture.compile_events),
        "compiles": compiles,
    }


def step_spans(events: list[Event], steps: list[int]) -> dict[int, Event]:
    """Each traced step's span: the longest event named `bench.step.N` (a device may
    repeat the annotation over its own, shorter, part of the step)."""
    spans: dict[int, Event] = {}
    for index in steps:
        named = [e for e in events if e.name == span_name(index)]
        if not named:
            raise RuntimeError(f"trace: no {span_name(index)} span in the trace")
        spans[index] = max(named, key=lambda e: e.duration_ns)
    return spans


def attribute(events: list[Event], names: tuple[str, ...], spans: dict[int, Event]) -> list[dict[str, Any]]:
    """Compile events with the traced step whose span holds their start (None: between
    steps), their start from that step's start (from the first span's otherwise)."""
    first = min(spans.values(), key=lambda s: s.start_ns)
    out = []
    for event in sorted((e for e in events if e.name in names), key=lambda e: e.start_ns):
        step = next((i for i, s in spans.items() if s.start_ns <= event.start_ns <= s.end_ns), None)
        origin = spans[step].start_ns if step is not None else first.start_ns
        out.append({"step": step, "name": event.name, "start_s": (event.start_ns - origin) / 1e9,
                    "duration_s": event.duration_ns / 1e9})
    return out


def summary(trace: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The record's `trace` section: the trace's step times beside the harness's, for the
    same steps; the ratio trace / harness (1 when both clocks agree); compiles by each."""
    by_index = {s["index"]: s for s in steps}
    traced = trace["steps"]
    trace_s = [trace["span_s"][str(i)] for i in traced]
    harness_s = [by_index[i]["time_s"] for i in traced]
    calm = [s["time_s"] for s in steps if s["phase"] == "measure" and s["num_compiles"] == 0]
    trace_median, harness_median = statistics.median(trace_s), statistics.median(harness_s)
    compiled_trace: dict[str, int] = {}
    for c in trace["compiles"]:
        if c["step"] is not None:
            compiled_trace[str(c["step"])] = compiled_trace.get(str(c["step"]), 0) + 1
    compiled_harness = {str(i): by_index[i]["num_compiles"] for i in traced if by_index[i]["num_compiles"] > 0}
    return {
        "tool": trace["tool"], "files": trace["files"], "steps": traced,
        "step_time_s": {"convention": "each traced step's span bench.step.N on the profiler's clock: from just "
                                      "before the harness starts its clock to right after the device sync",
                        "trace": trace_s, "harness": harness_s,
                        "trace_median": trace_median, "harness_median": harness_median,
                        "ratio": trace_median / harness_median if harness_median > 0 else None},
        # What tracing cost: the traced steps' harness median over the untraced steady one.
        "slowdown": harness_median / statistics.median(calm) if calm else None,
        "compile_events": trace["compile_events"],
        # Compiles per traced step (steps with none left out): the trace's compile events,
        # and the harness's counters.
        "compile_steps": {"trace": compiled_trace, "harness": compiled_harness,
                          "agree": compiled_trace == compiled_harness},
        "compiles": trace["compiles"],
    }


def attach(record: dict[str, Any], staging: Path, results_dir: Path, filename: str) -> None:
    """Move the run's trace directory next to its record (`<record>.trace/`) and name its
    files relative to the record's directory."""
    if not staging.is_dir():
        return
    if not any(staging.iterdir()):
        staging.rmdir()
        return
    target = Path(results_dir) / (Path(filename).stem + TRACE_DIR_SUFFIX)
    os.replace(staging, target)
    section = record.setdefault("trace", {})
    section["dir"] = target.name
    section["files"] = sorted(f"{target.name}/{p.relative_to(target)}" for p in target.rglob("*") if p.is_file())
