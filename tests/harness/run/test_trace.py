"""Profiler traces (`bench run --trace`): files each tool's reader opens, the trace's step
times beside the harness's, and compile events at the steps the record says compiled.

Each check recomputes from the trace file itself (json for torch.profiler's Chrome
trace, jax.profiler.ProfileData for XSpace), never from the record's own summary."""

from __future__ import annotations

import gzip
import json
import re
import statistics
from pathlib import Path

import pytest

from harness.run import trace

from conftest import TINY, bench, failures_in, records_in, stack_or_skip, write_scenario

# Every test but the refusal runs real traced steps: slow (marked one by one).

SHORT = ("--set", "train.steps=6", "--set", "train.window_steps=0", "--set", "data.num_examples=16")


def traced_run(tmp_path, *args: str) -> tuple[dict, Path]:
    out = tmp_path / "r"
    done = bench("run", *args, "--results-dir", str(out), "--no-progress", timeout=900)
    assert done.returncode == 0, done.stderr + failures_in(out)
    (record,) = records_in(out)
    return record, out


def check_common(record: dict, out: Path, traced: list[int]) -> None:
    """Traced steps are marked and kept out of the statistics; both medians are there."""
    steps = record["raw"]["loop"]["steps"]
    assert [s["index"] for s in steps if s["phase"] == "trace"] == traced
    untraced = [s for s in steps if s["phase"] == "measure" and s["num_compiles"] == 0]
    if untraced:
        assert record["metrics"]["step_time_s"]["n"] == len(untraced)
    else:  # every untraced measured step recompiled: no steady statistics, and it says so
        assert record["metrics"]["step_time_s"] is None
    section = record["trace"]
    assert section["steps"] == traced
    # The trace's step time, torchprime's: first program of a step to the next traced step's first.
    period = section["step_time_s"]
    assert period["steps"] == traced[:-1] and len(period["trace"]) == len(traced) - 1
    assert all(p > 0 for p in period["trace"]) and period["trace_median"] > 0 and period["harness_median"] > 0
    assert period["harness"] == [steps[i]["time_s"] for i in traced[:-1]]
    assert period["ratio"] == pytest.approx(period["trace_median"] / period["harness_median"])
    busy = section["busy_s"]
    assert busy["trace_median"] > 0 and busy["harness_median"] > 0 and busy["ratio"] > 0
    assert busy["harness"] == [steps[i]["time_s"] for i in traced]
    for name in section["files"]:  # relative to the record's directory
        assert (out / name).is_file(), name


def xplane_spans(path: Path, names: tuple[str, ...]) -> list[tuple[str, float, float]]:
    """(name, start_ns, duration_ns) of the named events, read by JAX's own reader."""
    return [(n, s, d) for n, s, d, _, _ in xplane_events(path, names)]


def xplane_events(path: Path, names: tuple[str, ...]) -> list[tuple[str, float, float, str, str]]:
    """(name, start_ns, duration_ns, plane, line) of the named events, by JAX's reader."""
    from jax.profiler import ProfileData

    data = ProfileData.from_file(str(path))
    return [
        (e.name, e.start_ns, e.duration_ns, plane.name, line.name)
        for plane in data.planes
        for line in plane.lines
        for e in line.events
        if e.name in names
    ]


def first_to_last(programs: list[tuple[float, float]], start: float, end: float) -> float:
    """First program start to last program end among the programs starting in [start, end]."""
    inside = [(s, s + d) for s, d in programs if start <= s <= end]
    assert inside, "no program event in the step"
    return max(e for _, e in inside) - min(s for s, _ in inside)


def check_programs_inside_spans(record: dict) -> None:
    """The trace's busy time is the framework's programs, not our span: never longer
    than the span holding them, and it is what its ratio is made of."""
    times = record["trace"]["busy_s"]
    assert all(0 < t <= s for t, s in zip(times["trace"], times["span"], strict=True))
    assert all(n > 0 for n in times["program_events"])
    assert times["ratio"] == pytest.approx(statistics.median(times["trace"]) / statistics.median(times["harness"]))


@pytest.mark.slow
def test_torch_trace_is_a_chrome_trace_with_one_span_per_traced_step(tmp_path):
    scenario = str(write_scenario(tmp_path, TINY))
    record, out = traced_run(tmp_path, scenario, "--backend", "torch", *SHORT, "--trace", "2")
    check_common(record, out, [2, 3])
    (name,) = record["trace"]["files"]
    with gzip.open(out / name, "rt") as stream:
        events = json.load(stream)["traceEvents"]
    spans = {
        e["name"]: (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("ph") == "X" and e["name"].startswith("bench.step.")
    }
    assert sorted(spans) == ["bench.step.2", "bench.step.3"]
    # The step time: the profiler's own op events (cpu_op on a CPU), first start to last end.
    assert record["trace"]["busy_s"]["programs"] == {"categories": ["cpu_op"]}
    ops = [(e["ts"], e["dur"]) for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    expected = [first_to_last(ops, *spans[f"bench.step.{i}"]) / 1e6 for i in (2, 3)]
    assert record["trace"]["busy_s"]["trace"] == pytest.approx(expected, rel=1e-6, abs=2e-6)  # whole µs
    check_programs_inside_spans(record)
    assert any(e.get("ph") == "X" and e["name"].startswith("aten::") for e in events)  # the step's ops are in it
    # The report links the run's trace file, relative to the report.
    page = tmp_path / "report" / "index.html"
    assert bench("report", str(out), "-o", str(page)).returncode == 0
    (href,) = re.findall(r'<a href="([^"]+\.pt\.trace\.json\.gz)"', page.read_text())
    assert (page.parent / href).resolve() == (out / name).resolve()


# Fast: refused before any work (an untraced run: tests/test_smoke.py).
def test_a_window_leaving_no_measured_step_is_refused(tmp_path):
    path = write_scenario(tmp_path, TINY)
    torch = ("--backend", "torch")  # one backend probed, not every one
    refused = bench("run", str(path), *torch, "--dry-run", "--trace", "6")
    assert refused.returncode == 2 and "trace.steps" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    one = bench("run", str(path), *torch, "--dry-run", "--trace", "1")  # no period between two steps
    assert one.returncode == 2 and one.stderr.startswith("bench: --trace"), one.stderr


@pytest.mark.slow
def test_torchax_trace_is_an_xspace_jax_reads_with_the_same_spans(tmp_path):
    stack_or_skip("torchax", "torchax", "pip install -e '.[torchax]'")
    record, out = traced_run(
        tmp_path,
        "scenarios/padding.yaml",
        "--backend",
        "torchax",
        "--set",
        "model.preset=tiny-gemma3",
        "--set",
        "sequence.padding=static",
        *SHORT,
        "--trace",
        "2",
    )
    check_common(record, out, [2, 3])
    (xplane,) = [out / f for f in record["trace"]["files"] if f.endswith(".xplane.pb")]
    spans = {name: (s, s + d) for name, s, d in xplane_spans(xplane, ("bench.step.2", "bench.step.3"))}
    # The step time: XLA's CPU runtime's own thunk-execution events, first start to last end.
    thunks = ("ThunkExecutor::Execute", "ThunkExecutor::Execute (wait for completion)")
    found = xplane_events(xplane, thunks)
    assert found and {plane for *_, plane, _ in found} == {"/host:CPU"}
    expected = [first_to_last([(s, d) for _, s, d, _, _ in found], *spans[f"bench.step.{i}"]) / 1e9 for i in (2, 3)]
    assert record["trace"]["busy_s"]["trace"] == pytest.approx(expected)
    assert record["trace"]["busy_s"]["programs"]["names"] == list(thunks)
    check_programs_inside_spans(record)
    # The harness's own XSpace decoder reads the same events as JAX's reader, planes and lines too.
    ours = sorted((e.name, e.duration_ns, e.plane, e.line) for e in trace.read_events(xplane) if e.name in thunks)
    theirs = sorted((n, d, p, line) for n, _, d, p, line in found)
    assert [o[2:] for o in ours] == [t[2:] for t in theirs]
    assert [o[1] for o in ours] == pytest.approx([t[1] for t in theirs])


@pytest.mark.slow
def test_xla_dynamic_padding_recompiles_are_compile_events_in_the_steps_that_recompiled(tmp_path):
    stack_or_skip("xla-fsdpv2", "torch_xla", ".ci/run builds .venv-xla")
    record, out = traced_run(
        tmp_path,
        "scenarios/padding.yaml",
        "--backend",
        "xla-fsdpv2",
        "--set",
        "model.preset=tiny-gemma3",
        "--set",
        "sequence.padding=dynamic",
        *SHORT,
        "--trace",
        "3",
    )
    check_common(record, out, [2, 3, 4])
    (xplane,) = [out / f for f in record["trace"]["files"] if f.endswith(".xplane.pb")]
    names = ("bench.step.2", "bench.step.3", "bench.step.4", "XLAGraphExecutor::Compile")
    events = xplane_spans(xplane, names)
    spans = {n: (s, s + d) for n, s, d in events if n.startswith("bench.step.")}
    compiles = [s for n, s, _ in events if n == "XLAGraphExecutor::Compile"]
    steps = record["raw"]["loop"]["steps"]
    recompiled = {i: steps[i]["num_compiles"] for i in (2, 3, 4)}
    assert sum(recompiled.values()) > 0  # dynamic padding: new lengths after warm-up
    for i, expected in recompiled.items():
        start, end = spans[f"bench.step.{i}"]
        assert sum(start <= c <= end for c in compiles) == expected, i
    assert record["trace"]["compile_steps"]["agree"]
    check_programs_inside_spans(record)  # torch_xla's programs: the same XLA CPU runtime events
