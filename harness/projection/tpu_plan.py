"""`bench plan SCENARIO --backend B --compile-for tpu-v5e-8`: the scenario's train step
compiled ahead of time for a TPU slice nobody rented, stored as a projection.

For every matrix cell and slice: the plan on the slice's chips (refused as `bench run`
would refuse it), the distinct padded lengths the whole fine-tune meets
(harness/projection/fine_tune.py), the longest `max_compiles` of them compiled by the backend's AOT
module in a worker of the TPU environment (BENCH_PYTHON_TPU: jax[tpu] with libtpu), and
the compiler's facts turned into a ProjectionRecord (harness/projection/projection.py), written as
`<results>/<...>.projection.json`. A configuration too big for the chips is an answer
(fits: no, with the bytes), not an error.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.basics.errors import SpecError
from harness.projection.projection import (
    Program,
    ProjectionRecord,
    ShapeProjection,
    TpuSlice,
    fine_tune,
    shape_projection,
)
from harness.projection.projection import length_bounds as projection_length_bounds

TPU_PYTHON_ENV = "BENCH_PYTHON_TPU"
LIBTPU_LOCKFILE = "/tmp/libtpu_lockfile"
AOT_BACKENDS = ("jax-tunix", "torchax")


@dataclass(frozen=True)
class CompileRequest:
    scenario_path: str
    backend: str | None
    slices: list[str]
    overrides: dict[str, Any] = field(default_factory=dict)
    profile: str = "auto"
    results_dir: Path = Path("results")
    prices_file: str | None = None
    max_compiles: int = 4
    timeout_s: float | None = None
    command: list[str] = field(default_factory=list)


def tpu_python() -> str:
    """The interpreter with libtpu: BENCH_PYTHON_TPU, else this one."""
    return os.environ.get(TPU_PYTHON_ENV) or sys.executable


def project(request: CompileRequest) -> list[ProjectionRecord]:
    """Every matrix cell of the scenario on every slice, compiled and stored."""
    from harness.figures.cost import load_catalog
    from harness.projection.projection import tpu_slice
    from harness.run import registry
    from harness.run.runner import pick_profile
    from harness.scenario.loader import read_document, resolve_runs, validate

    backend = _aot_backend(request.backend)
    chips = [tpu_slice(text) for text in request.slices]
    if request.max_compiles < 1:
        raise SpecError("--max-compiles", str(request.max_compiles), "compile at least one shape")
    base = validate(read_document(request.scenario_path), request.scenario_path)
    runs = resolve_runs(request.scenario_path, request.overrides, pick_profile(request.profile, base.profiles, "tpu"))
    catalog = load_catalog(request.prices_file)
    info = registry.get(backend)
    records = []
    for run in [r for r in runs if r.repeat == 0]:  # a compile does not vary between repeats
        for chip in chips:
            records.append(_project_run(request, run, chip, info, catalog))
    return records


def _aot_backend(name: str | None) -> str:
    if name not in AOT_BACKENDS:
        raise SpecError(
            "--backend", str(name), f"--compile-for compiles the JAX backends' step: {', '.join(AOT_BACKENDS)}"
        )
    return name


def _project_run(request: CompileRequest, run, chip: TpuSlice, info, catalog) -> ProjectionRecord:
    from harness.basics.files import write_json_atomic
    from harness.figures.cost import price_for
    from harness.plan import plan as plans
    from harness.projection.fine_tune import fine_tune_work

    source = f"{request.scenario_path} [{run.variant}] on {chip.name}"
    _refuse_packed_rows(run.scenario, source)
    # micro_batch auto plans against one chip's HBM, as on the slice itself.
    plan = plans.resolve(run.scenario, "tpu", chip.chips, info.capabilities, source, device_memory_bytes=chip.hbm_bytes)
    work = fine_tune_work(run.scenario, plan.rows_per_forward)
    lengths = sorted(set(work.shapes), reverse=True)[: request.max_compiles]
    facts = _compile(request, run, plan, chip, lengths, info.name)
    price = price_for(chip.catalog_key, run.scenario.cost, catalog)
    rate = price.usd_per_chip_hour if price else None
    plan_json = plan.model_dump(mode="json")
    shapes = [
        shape_projection(
            n,
            plan_json,
            [Program.model_validate(_program(p)) for p in programs],
            chip,
            rate,
            _bench_flops(run.scenario, plan, n),
            work.real_fraction.get(n),
            _bench_bytes(run.scenario, plan, n),
        )
        for n, programs in zip(lengths, facts["shapes"])
    ]
    record = ProjectionRecord(
        scenario={
            "name": run.scenario.name,
            "file": run.source,
            "variant": run.variant,
            "hash": run.scenario_hash,
            "profile": run.profile,
            "resolved": run.scenario.model_dump(mode="json"),
        },
        backend=info.name,
        slice=chip.to_json(),
        price=price.to_json() if price else None,
        plan=plan_json,
        shapes=shapes,
        fine_tune=_tpu_fine_tune(work, shapes, chip, rate),
        provenance={
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": request.command,
            "libraries": facts.get("libraries", {}),
            "python": tpu_python(),
            "compiled_lengths": lengths,
        },
    )
    path = write_json_atomic(Path(request.results_dir) / _filename(record), record.to_json())
    return record.model_copy(update={"path": str(path)})


def _filename(record: ProjectionRecord) -> str:
    from harness.projection.projection import projection_filename

    return projection_filename(record)


def _program(facts: dict[str, Any]) -> dict[str, Any]:
    """A worker's program facts as a Program's fields."""
    memory = facts.get("memory", {})
    return {
        "name": facts["name"],
        "runs_per_step": facts["runs_per_step"],
        "compile_s": facts["compile_s"],
        "memory_bytes": memory.get("total_bytes", 0),
        "out_of_memory": facts.get("out_of_memory"),
        "flops": facts.get("flops"),
        "bytes_accessed": facts.get("bytes_accessed"),
        "collectives": facts.get("collectives", {}),
        "largest_collectives": facts.get("largest_collectives", []),
        "memory": memory,
        "resident_outside_bytes": facts.get("resident_outside_bytes", 0),
    }


def _bench_flops(scenario, plan, seq_len: int) -> float | None:
    """harness.figures.metrics' executed FLOPs of one micro-batch program, per device: every
    row of the forward pass padded to `seq_len`, split over the devices."""
    from harness.figures.metrics import FlopsModel

    arch = scenario.model.architecture() if scenario.model.init == "random" or scenario.model.arch else None
    if not arch:
        return None
    lora = plan.method == "lora"
    model = FlopsModel(arch, lora=lora, adapter_params=(plan.trainable_params or 0) if lora else 0)
    return model.executed_flops([seq_len] * plan.rows_per_forward) / plan.devices


def _bench_bytes(scenario, plan, seq_len: int) -> float | None:
    """bench's floor of one micro-batch program's HBM traffic per device
    (harness.projection.gpu_projection.micro_batch_work: weights per pass, gradients, activations),
    for the bytes check; None without the architecture."""
    from harness.projection.gpu_projection import micro_batch_work, shape_of_plan

    arch = scenario.model.architecture() if scenario.model.init == "random" or scenario.model.arch else None
    if not arch:
        return None
    return micro_batch_work(shape_of_plan(plan, arch), seq_len).memory_bytes


def compile_host() -> str:
    """The machine whose compile seconds a projection reports: this one, not a TPU VM."""
    import platform

    return f"{platform.node() or 'this host'} ({os.cpu_count()} CPUs, {platform.machine()}; not a TPU VM)"


def _tpu_fine_tune(work, shapes: list[ShapeProjection], chip: TpuSlice, rate: float | None):
    """The whole fine-tune on the slice, at the roofline bound: for every padded length
    the data meets, its micro-batches x one micro-batch's bound at that length
    (harness.projection.projection.length_bounds: compiled, else interpolated), plus every step's
    update (the other programs, once a step). Setup is not projected (None); the
    compiles are shown apart, N shapes x this host's mean seconds per shape, naming this
    host, never added to the TPU time. None when a shape does not fit."""
    if not shapes or not all(s.fits and s.step_time_bound_s and s.terms for s in shapes):
        return None
    micro = {s.seq_len: s.terms[0].bound_s for s in shapes}
    per_step = statistics.fmean(sum(t.runs_per_step * t.bound_s for t in s.terms[1:]) for s in shapes)
    bounds, basis = projection_length_bounds(micro, work.shapes)
    steps_s = sum(count * bounds[n] for n, count in work.micro_batches.items()) + work.steps * per_step
    per_shape = statistics.fmean(s.compile_s for s in shapes)
    host = compile_host()
    return fine_tune(
        examples=work.examples,
        epochs=work.epochs,
        steps=work.steps,
        shapes=work.shapes,
        setup_s=None,
        compile_s_per_shape=per_shape,
        step_time_s=steps_s / work.steps,
        basis=(
            f"projected on {chip.name}: per padded length met, its micro-batches x one micro-batch's roofline bound "
            f"({len(micro)} compiled, {len(bounds) - len(micro)} interpolated), + the update's bound per step; setup "
            f"not projected; compile apart: {len(work.shapes)} shapes x {per_shape:.0f} s per shape on {host}, not "
            "in the time"
        ),
        chips=chip.chips,
        usd_per_chip_hour=rate,
        compile_host=host,
        compile_in_time=False,
        length_bounds=bounds,
        length_basis=basis,
    )


def _refuse_packed_rows(scenario, source: str) -> None:
    """The programs are compiled at plan.rows_per_forward rows a pass; packed passes hold
    fewer rows, as many as the data packs into: not a shape known before the data."""
    if scenario.sequence.padding == "packed":
        raise SpecError(
            source,
            "sequence.padding",
            "packed: --compile-for compiles a pass of one example a row; packed rows are not projected yet "
            "(use static or bucketed padding)",
        )


def _compile(request: CompileRequest, run, plan, chip: TpuSlice, lengths: list[int], backend: str) -> dict[str, Any]:
    """The worker's facts (backends/jax_common/aot_worker.py), or a BenchError saying why not."""
    from harness.basics.errors import BackendUnavailable
    from harness.run.registry import worker_env

    job = {
        "scenario": run.document,
        "source": run.source,
        "plan": plan.model_dump(mode="json"),
        "backend": backend,
        "slice": chip.to_json(),
        "seq_lens": lengths,
    }
    timeout = request.timeout_s or run.scenario.run_timeout_s
    with tempfile.TemporaryDirectory(prefix="bench-aot-") as tmp:
        job_path, facts_path = Path(tmp) / "job.json", Path(tmp) / "facts.json"
        job_path.write_text(json.dumps(job))
        cmd = [tpu_python(), "-m", "backends.jax_common.aot_worker", str(job_path), str(facts_path)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=worker_env())
        except FileNotFoundError:
            raise BackendUnavailable(f"{TPU_PYTHON_ENV}={tpu_python()}: no such interpreter") from None
        except subprocess.TimeoutExpired:
            raise BackendUnavailable(
                f"the compile for {chip.name} took longer than {timeout:g} s (--timeout)"
            ) from None
        if done.returncode != 0 or not facts_path.exists():
            raise BackendUnavailable(_worker_failure(done, chip))
        return json.loads(facts_path.read_text())


def _worker_failure(done, chip: TpuSlice) -> str:
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    tail = lines[-1] if lines else f"exit {done.returncode}"
    if "libtpu_lockfile" in done.stderr or "multi-process lockfile" in done.stderr:
        # libtpu lets one process per host hold it, even for a deviceless compile.
        return (
            f"cannot compile for {chip.name} now: another process holds libtpu ({LIBTPU_LOCKFILE}), most likely "
            "another `bench plan --compile-for` still running; wait for it, or remove the file if none is"
        )
    if "No module named 'libtpu'" in done.stderr or "TPU platform" in done.stderr or "libtpu" in tail:
        return f"cannot compile for {chip.name} here: {tail} (install the tpu extra: pip install -e '.[tpu]'; {TPU_PYTHON_ENV})"
    missing = re.search(r"No module named '([\w.]+)'", done.stderr)
    if missing:  # the stack is not in the interpreter the compile ran in: say which, and how to get one
        return (
            f"cannot compile for {chip.name} here: {tpu_python()} has no {missing[1]}. The compile needs JAX with "
            f"libtpu and the backend's stack in one environment: python3 -m venv .venv-tpu && .venv-tpu/bin/pip "
            f"install -e '.[tpu,jax,torchax,torch]' (as .ci/run builds it), then {TPU_PYTHON_ENV}=.venv-tpu/bin/python"
        )
    return f"the compile for {chip.name} failed: {tail}"
