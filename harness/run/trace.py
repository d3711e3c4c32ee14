"""Profiler traces on demand (`bench run --trace [STEPS]`, the scenario's `trace:`), and
what the trace says about the harness's own step times.

A window of measured steps (never warm-up) runs under the framework's own profiler,
through a `Capture` the backend supplies (`Backend.trace_capture`): torch.profiler for
torch and gpu-fsdp (Chrome JSON, Perfetto), torch_xla.debug.profiler for xla-fsdpv2 and
jax.profiler for jax-tunix and torchax (XSpace `.xplane.pb`, TensorBoard's profile plugin
/ XProf). Every traced step is a span named `bench.step.N` opened just before the
harness starts its clock and closed right after the device sync: it only says which
events belong to which step. Traced steps have phase `trace`: the profiler's overhead is
in them, so they are not measured steps.

After the run the worker reads its trace back (`collect`). Its times come from events the
framework emits itself, never from our span (which only says which events belong to which
step): the program (or op) events the capture's `Programs` selects. The record's trace
step time (`trace.step_time_s`) is torchprime's: the period from a step's first program
to the next traced step's first (`step_periods`), on the profiler's clock; host work
between programs is in it, as it is in the harness's step, so the ratio trace / harness
checks the harness's clock (docs/measurements/overhead-and-step-loop.md). `trace.busy_s` is how much of each
step the programs cover: first program start to last program end within the step; below
the step time by the host work outside the programs (python dispatch, graph building, the
sync's wake-up). The
framework's compile events are attributed to the step whose span holds them. The record
(`summary`) states each median beside the harness's median over the same steps, their
ratio, and which steps compiled by the trace and by the harness's
counters. Reading needs no framework: Chrome JSON is JSON, and XSpace is decoded here
from the protobuf wire format (tests check it against jax.profiler.ProfileData).

Costs nothing when off: `harness.run.loop.recorder_for` returns the plain StepRecorder, and
this module is not even imported. (The traced recorder, `harness.run.loop.TracedRecorder`,
lives in the loop: this module never imports it back.)
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

SPAN_PREFIX = "bench.step."
TRACE_DIR_SUFFIX = ".trace"


def span_name(index: int) -> str:
    return f"{SPAN_PREFIX}{index}"


@dataclass(frozen=True)
class Programs:
    """Which of the framework's own trace events are its executed programs or ops: an
    event is one when it meets every criterion given (names: exact event names;
    categories: Chrome `cat`; plane_prefix / line: the XSpace plane's and line's names)."""

    names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    plane_prefix: str = ""
    line: str = ""

    def matches(self, event: "Event") -> bool:
        return (
            (not self.names or event.name in self.names)
            and (not self.categories or event.cat in self.categories)
            and (not self.plane_prefix or event.plane.startswith(self.plane_prefix))
            and (not self.line or event.line == self.line)
        )

    def describe(self) -> dict[str, Any]:
        return {
            k: (list(v) if isinstance(v, tuple) else v)
            for k, v in (
                ("names", self.names),
                ("categories", self.categories),
                ("plane_prefix", self.plane_prefix),
                ("line", self.line),
            )
            if v
        }


# XLA's executed programs, as the XLA runtime itself records them. On a TPU or GPU: the
# device plane's "XLA Modules" line (one event per executed module; torchprime's source).
# On the CPU PJRT client there is no device plane: each executable runs as thunks, and
# the runtime records `ThunkExecutor::Execute` on its worker threads (the PjRt client's
# and XLA's Eigen pool), `(wait for completion)` where the caller waits for one to finish.
XLA_DEVICE_MODULES = Programs(plane_prefix="/device:", line="XLA Modules")
XLA_CPU_THUNKS = Programs(
    names=("ThunkExecutor::Execute", "ThunkExecutor::Execute (wait for completion)"), plane_prefix="/host:CPU"
)


class Capture(Protocol):
    """One framework's profiler, as a backend supplies it."""

    tool: str  # e.g. "torch.profiler"
    compile_events: tuple[str, ...]  # names of the events that mark one graph compile
    programs: Programs  # the framework's own events that are its executed programs / ops

    def start(self) -> None: ...
    def step_begin(self, index: int) -> None: ...  # opens span_name(index)
    def step_end(self) -> None: ...  # closes it
    def stop(self) -> None: ...  # ends the trace and writes its files
    def files(self) -> list[Path]: ...  # this process's trace files, once stopped


# --------------------------------------------------------------------------- reading
class SpanCapture:
    """The step spans of a Capture whose framework marks a region with a context
    manager (`open_span`): step_begin enters span_name(index), step_end leaves it."""

    span = None

    def open_span(self, name: str):
        raise NotImplementedError

    def step_begin(self, index: int) -> None:
        self.span = self.open_span(span_name(index))
        self.span.__enter__()

    def step_end(self) -> None:
        self.span.__exit__(None, None, None)
        self.span = None


class XSpaceCapture(SpanCapture):
    """A profiler session that writes XSpace files (jax.profiler, torch_xla's profiler):
    `<dir>/plugins/profile/<run>/<host>.xplane.pb`, which TensorBoard's profile plugin
    (XProf) reads as one run. The executed XLA programs are the CPU PJRT runtime's
    thunk events on a CPU, else a device plane's "XLA Modules"."""

    def __init__(self, directory: Path, on_cpu: bool) -> None:
        self.directory = Path(directory)
        self.programs = XLA_CPU_THUNKS if on_cpu else XLA_DEVICE_MODULES

    def files(self) -> list[Path]:
        return sorted(self.directory.glob("plugins/profile/*/*.xplane.pb"))


@dataclass(frozen=True)
class Event:
    name: str
    start_ns: float  # on the trace's own clock; only differences mean anything
    duration_ns: float
    cat: str = ""  # Chrome JSON: the event's category ("cpu_op", "kernel", ...)
    plane: str = ""  # XSpace: the plane's name ("/host:CPU", "/device:TPU:0", ...)
    line: str = ""  # XSpace: the line's name (a thread, "XLA Modules", ...)

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
    return [
        Event(str(e["name"]), float(e["ts"]) * 1e3, float(e.get("dur", 0.0)) * 1e3, str(e.get("cat", "")))
        for e in rows
        if isinstance(e, dict) and e.get("ph") == "X" and "ts" in e and "name" in e
    ]


# XSpace (tsl/profiler/protobuf/xplane.proto), the fields read here:
#   XSpace.planes = 1; XPlane.name = 2, XPlane.lines = 3, XPlane.event_metadata = 4
#   (map<int64, XEventMetadata>); XLine.name = 2, XLine.timestamp_ns = 3, XLine.events = 4,
#   XLine.display_name = 11; XEvent.metadata_id = 1, offset_ps = 2,
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
            value, pos = data[pos : pos + size], pos + size
        elif wire == 1:
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
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
        plane_name = b"".join(v for k, v in _fields(plane) if k == 2).decode("utf-8", "replace")
        for k, line in _fields(plane):
            if k != 3:
                continue
            origin, raw, line_name, display = 0, [], b"", b""
            for j, value in _fields(line):
                if j == 3:
                    origin = value
                elif j == 4:
                    raw.append(value)
                elif j == 2:
                    line_name = value
                elif j == 11:
                    display = value
            label = (display or line_name).decode("utf-8", "replace")
            for item in raw:
                f = dict(_fields(item))
                events.append(
                    Event(
                        names.get(f.get(1, 0), ""),
                        origin + f.get(2, 0) / 1e3,
                        f.get(3, 0) / 1e3,
                        plane=plane_name,
                        line=label,
                    )
                )
    return events


# --------------------------------------------------------------------------- after the run
def collect(loop, trace_dir: str) -> dict[str, Any]:
    """The raw facts of the run's trace: files (relative to the trace directory), each
    traced step's span, its programs' time and the compile events inside each step.
    `loop` is the run's harness.run.loop.LoopResult, timed by a TracedRecorder."""
    recorder = loop.recorder
    capture = recorder.capture
    directory = Path(trace_dir)
    mine = capture.files()
    if not mine:
        raise RuntimeError(f"trace: {capture.tool} wrote no trace file under {directory}")
    events = [e for path in mine for e in read_events(path)]
    spans = step_spans(events, recorder.traced)
    programs = program_times(events, capture.programs, spans)
    compiles = attribute(events, capture.compile_events, spans)
    return {
        "tool": capture.tool,
        "steps": recorder.traced,
        "files": sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file()),
        "read": [str(p.relative_to(directory)) for p in mine],
        "span_s": {str(i): s.duration_ns / 1e9 for i, s in spans.items()},
        "programs": capture.programs.describe(),
        "program_s": {str(i): programs[i][0] for i in recorder.traced},
        "program_events": {str(i): programs[i][1] for i in recorder.traced},
        "period_s": {str(i): p for i, p in step_periods({i: programs[i][2] for i in recorder.traced}).items()},
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


def program_times(
    events: list[Event], programs: Programs, spans: dict[int, Event]
) -> dict[int, tuple[float, int, float]]:
    """Each traced step's programs' time in seconds, from the start of the first event
    `programs` selects among those starting within the step's span to the end of the
    last; how many such events there were; and the first one's start (ns, profiler
    clock). A step with none is refused: its time would otherwise come from something else."""
    chosen = sorted((e for e in events if programs.matches(e)), key=lambda e: e.start_ns)
    out = {}
    for index, span in spans.items():
        inside = [e for e in chosen if span.start_ns <= e.start_ns <= span.end_ns]
        if not inside:
            raise RuntimeError(f"trace: no program event ({programs.describe()}) in step {index}'s span")
        out[index] = ((max(e.end_ns for e in inside) - inside[0].start_ns) / 1e9, len(inside), inside[0].start_ns)
    return out


def step_periods(first_ns: dict[int, float]) -> dict[int, float]:
    """torchprime's step time: from step i's first program to step i+1's, for each pair of
    consecutive traced steps (keyed by i), in seconds. The host's work between programs
    (dispatch, graph building, the sync's wake-up) is in it, as it is in the harness's."""
    return {i: (first_ns[i + 1] - first_ns[i]) / 1e9 for i in sorted(first_ns) if i + 1 in first_ns}


def attribute(events: list[Event], names: tuple[str, ...], spans: dict[int, Event]) -> list[dict[str, Any]]:
    """Compile events with the traced step whose span holds their start (None: between
    steps), their start from that step's start (from the first span's otherwise)."""
    first = min(spans.values(), key=lambda s: s.start_ns)
    out = []
    for event in sorted((e for e in events if e.name in names), key=lambda e: e.start_ns):
        step = next((i for i, s in spans.items() if s.start_ns <= event.start_ns <= s.end_ns), None)
        origin = spans[step].start_ns if step is not None else first.start_ns
        out.append(
            {
                "step": step,
                "name": event.name,
                "start_s": (event.start_ns - origin) / 1e9,
                "duration_s": event.duration_ns / 1e9,
            }
        )
    return out


def summary(trace: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """The record's `trace` section: the trace's step times (the framework's programs,
    `program_times`) beside the harness's, for the same steps; the ratio trace / harness
    (below 1 by the host time outside the programs); compiles by each."""
    by_index = {s["index"]: s for s in steps}
    traced = trace["steps"]
    trace_s = [trace["program_s"][str(i)] for i in traced]
    harness_s = [by_index[i]["time_s"] for i in traced]
    calm = [s["time_s"] for s in steps if s["phase"] == "measure" and s["num_compiles"] == 0]
    trace_median, harness_median = statistics.median(trace_s), statistics.median(harness_s)
    compiled_trace: dict[str, int] = {}
    for c in trace["compiles"]:
        if c["step"] is not None:
            compiled_trace[str(c["step"])] = compiled_trace.get(str(c["step"]), 0) + 1
    compiled_harness = {str(i): by_index[i]["num_compiles"] for i in traced if by_index[i]["num_compiles"] > 0}
    return {
        "tool": trace["tool"],
        "files": trace["files"],
        "steps": traced,
        # The trace's step time: torchprime's period between consecutive steps' first
        # programs, host time included as in the harness's step (the 10% check).
        "step_time_s": _periods(trace["period_s"], by_index),
        # How much of each step the framework's programs cover (below the step time by the
        # host work outside them).
        "busy_s": {
            "convention": "first framework program event start to last program event end within "
            "the step, on the profiler's clock (events: programs; the step's events: "
            "those starting within its bench.step.N span)",
            "programs": trace["programs"],
            "trace": trace_s,
            "harness": harness_s,
            # The bench.step.N spans (just before the harness's clock starts to
            # right after its sync), and how many program events each step held.
            "span": [trace["span_s"][str(i)] for i in traced],
            "program_events": [trace["program_events"][str(i)] for i in traced],
            "trace_median": trace_median,
            "harness_median": harness_median,
            "ratio": trace_median / harness_median if harness_median > 0 else None,
        },
        # What tracing cost: the traced steps' harness median over the untraced steady one.
        "slowdown": harness_median / statistics.median(calm) if calm else None,
        "compile_events": trace["compile_events"],
        # Compiles per traced step (steps with none left out): the trace's compile events,
        # and the harness's counters.
        "compile_steps": {
            "trace": compiled_trace,
            "harness": compiled_harness,
            "agree": compiled_trace == compiled_harness,
        },
        "compiles": trace["compiles"],
    }


def _periods(period_s: dict[str, float], by_index: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """torchprime's convention (`step_periods`) beside the harness's times of the same
    steps: the profiler's clock on the device program timeline against ours. Two
    consecutive traced steps at least (`trace.steps >= 2`, the spec's bound)."""
    convention = (
        "torchprime's: from the first framework program event of a step to the first of the next "
        "traced step, on the profiler's clock (host time between programs included)"
    )
    if not period_s:
        raise RuntimeError("trace: no two consecutive traced steps, so no step period")
    steps = sorted(int(i) for i in period_s)
    trace_s = [period_s[str(i)] for i in steps]
    harness_s = [by_index[i]["time_s"] for i in steps]
    trace_median, harness_median = statistics.median(trace_s), statistics.median(harness_s)
    return {
        "convention": convention,
        "steps": steps,
        "trace": trace_s,
        "harness": harness_s,
        "trace_median": trace_median,
        "harness_median": harness_median,
        "ratio": trace_median / harness_median if harness_median > 0 else None,
    }


def attach(record, staging: Path, results_dir: Path, filename: str):
    """Move the run's trace directory next to its record (`<record>.trace/`); the record
    (a RunRecord, frozen) comes back with its trace files named relative to its directory."""
    if not staging.is_dir():
        return record
    if not any(staging.iterdir()):
        staging.rmdir()
        return record
    target = Path(results_dir) / (Path(filename).stem + TRACE_DIR_SUFFIX)
    os.replace(staging, target)
    files = sorted(f"{target.name}/{p.relative_to(target)}" for p in target.rglob("*") if p.is_file())
    return record.model_copy(update={"trace": {**(record.trace or {}), "dir": target.name, "files": files}})
