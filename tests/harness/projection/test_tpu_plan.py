"""`bench plan --compile-for` in-process with the TPU compile replaced by hand-written
compiler facts (harness/projection/tpu_plan.py): what it makes of them, recomputed here. The real
compile: tests/backends/test_tpu_aot.py (slow, needs libtpu)."""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.basics.errors import BackendUnavailable, SpecError
from harness.projection import tpu_plan

GIB = 1024**3


def _facts(seq_lens):
    """Two programs per length, as the torchax worker writes them."""
    shapes = []
    for n in seq_lens:
        grad = {
            "name": "bench_grad_step",
            "runs_per_step": 8,
            "compile_s": 30.0 + n / 64,
            "flops": 1e9 * n,
            "bytes_accessed": 2e9,
            "memory": {"total_bytes": GIB, "argument": 1},
            "collectives": {"all-gather": {"count": 2, "bytes": 4_000_000}},
            "resident_outside_bytes": 3 * 1024**2,
        }
        update = {
            "name": "bench_apply_step",
            "runs_per_step": 1,
            "compile_s": 5.0,
            "flops": 1e6,
            "bytes_accessed": 1e8,
            "memory": {"total_bytes": GIB // 2},
        }
        shapes.append([grad, update])
    return {"shapes": shapes, "libraries": {"jax": "0.0"}}


@pytest.fixture
def projected(tmp_path, monkeypatch):
    asked = {}

    def fake_compile(request, run, plan, chip, lengths, backend):
        asked.update(lengths=lengths, backend=backend, chip=chip.name, devices=plan.devices)
        return _facts(lengths)

    monkeypatch.setattr(tpu_plan, "_compile", fake_compile)
    request = tpu_plan.CompileRequest(
        "scenarios/padding.yaml",
        "torchax",
        ["tpu-v5e-8"],
        overrides={"model.preset": "tiny-gemma3", "data.num_examples": 48, "sequence.padding": "dynamic"},
        profile="none",
        results_dir=tmp_path,
        max_compiles=2,
    )
    (record,) = tpu_plan.project(request)
    return record, asked, tmp_path


def test_the_longest_lengths_are_compiled_and_every_length_gets_a_bound(projected):
    from harness.projection.fine_tune import fine_tune_work
    from harness.scenario.loader import resolve_runs

    record, asked, tmp_path = projected
    run = resolve_runs(
        "scenarios/padding.yaml",
        {"model.preset": "tiny-gemma3", "data.num_examples": 48, "sequence.padding": "dynamic"},
        None,
    )[0]
    work = fine_tune_work(run.scenario, record.plan["rows_per_forward"])
    assert asked["lengths"] == sorted(set(work.shapes), reverse=True)[:2]
    assert asked["backend"] == "torchax" and asked["chip"] == "tpu-v5e-8" and asked["devices"] == 8
    assert [s.seq_len for s in record.shapes] == asked["lengths"]
    ft = record.fine_tune
    assert sorted(ft.length_bounds) == sorted(work.shapes)
    assert {ft.length_basis[n] for n in asked["lengths"]} == {"compiled"}
    # the whole fine-tune by hand: each micro-batch at its length's bound + one update a step
    update = max(1e6 / 197e12, 1e8 / 819e9)
    expected = sum(count * ft.length_bounds[n] for n, count in work.micro_batches.items()) + work.steps * update
    assert ft.time_s == pytest.approx(expected)
    assert ft.setup_s is None and not ft.compile_in_time
    compile_mean = sum(s.compile_s for s in record.shapes) / 2
    assert ft.compile_s_per_shape == pytest.approx(compile_mean)
    assert f"{len(work.shapes)} shapes x {compile_mean:.0f} s per shape on" in ft.basis
    assert record.provenance["compiled_lengths"] == asked["lengths"]
    assert record.price is not None and ft.usd == pytest.approx(
        8 * ft.time_s / 3600 * record.price["usd_per_chip_hour"]
    )
    stored = json.loads(next(tmp_path.glob("*.projection.json")).read_text())
    assert stored["slice"]["ici_bytes_per_s"] == 400e9


def test_each_shape_carries_its_terms_fit_and_real_token_rate(projected):
    record, _, _ = projected
    shape = record.shapes[0]
    grad, update = shape.programs
    assert grad.resident_outside_bytes == 3 * 1024**2
    assert shape.fit_bytes_per_device == GIB + 3 * 1024**2
    n = shape.seq_len
    # the worker's facts here carry no wire bytes: their result bytes over a ring's 2 of v5e's 4 ports
    compute, hbm, ici = 1e9 * n / 197e12, 2e9 / 819e9, 4_000_000 / (400e9 / 4)
    assert shape.terms[0].compute_s == pytest.approx(compute) and shape.terms[0].collectives_s == pytest.approx(ici)
    assert shape.step_time_bound_s == pytest.approx(8 * max(compute, hbm, ici) + max(1e6 / 197e12, 1e8 / 819e9))
    assert 0 < shape.real_fraction <= 1
    assert shape.real_tokens_per_s_per_chip_bound == pytest.approx(
        shape.tokens_per_s_per_chip_bound * shape.real_fraction
    )
    assert shape.bench_flops_per_device_per_forward > 0
    # the HBM bytes check's floor: bench's count of the same micro-batch (harness.projection.gpu_projection)
    from harness.plan.plan import Plan
    from harness.projection.gpu_projection import micro_batch_work, shape_of_plan
    from harness.scenario.loader import validate

    scenario = validate(record.scenario["resolved"], "t")
    floor = micro_batch_work(shape_of_plan(Plan.model_validate(record.plan), scenario.model.architecture()), n)
    assert shape.bench_bytes_per_device_per_forward == pytest.approx(floor.memory_bytes)
    assert shape.bytes_ratio == pytest.approx(2e9 / floor.memory_bytes) and shape.bytes_flag is None


def test_only_the_jax_backends_compile_and_at_least_one_shape(tmp_path):
    with pytest.raises(SpecError, match="--backend: torch"):
        tpu_plan._aot_backend("torch")
    assert tpu_plan._aot_backend("jax-tunix") == "jax-tunix"
    request = tpu_plan.CompileRequest("scenarios/tiny.yaml", "torchax", ["tpu-v5e-8"], max_compiles=0)
    with pytest.raises(SpecError, match="--max-compiles: 0: compile at least one shape"):
        tpu_plan.project(request)


def test_the_tpu_interpreter_and_the_workers_failures_say_why(monkeypatch):
    monkeypatch.setenv("BENCH_PYTHON_TPU", "/opt/tpu/python")
    assert tpu_plan.tpu_python() == "/opt/tpu/python"
    monkeypatch.delenv("BENCH_PYTHON_TPU")
    import sys

    assert tpu_plan.tpu_python() == sys.executable
    chip = type("Chip", (), {"name": "tpu-v5e-8"})()
    missing = subprocess.CompletedProcess([], 1, "", "ModuleNotFoundError: No module named 'libtpu'\n")
    assert tpu_plan._worker_failure(missing, chip).startswith("cannot compile for tpu-v5e-8 here: ModuleNotFoundError")
    other = subprocess.CompletedProcess([], 3, "", "boom\n\nValueError: bad shape\n")
    assert tpu_plan._worker_failure(other, chip) == "the compile for tpu-v5e-8 failed: ValueError: bad shape"
    # each sign of a missing libtpu alone says so
    for stderr in (
        "No module named 'libtpu' while importing\nRuntimeError: x\n",
        "no TPU platform found\nRuntimeError: x\n",
        "RuntimeError: libtpu init\n",
    ):
        said = tpu_plan._worker_failure(subprocess.CompletedProcess([], 1, "", stderr), chip)
        assert said.startswith("cannot compile for tpu-v5e-8 here: RuntimeError"), stderr
    # a second compile while one runs: libtpu's lock, not a missing install
    locked = subprocess.CompletedProcess(
        [],
        1,
        "",
        "jax.errors.JaxRuntimeError: ABORTED: Internal error when accessing libtpu multi-process "
        'lockfile. Run "$ sudo rm /tmp/libtpu_lockfile".\n',
    )
    said = tpu_plan._worker_failure(locked, chip)
    assert said.startswith("cannot compile for tpu-v5e-8 now: another process holds libtpu (/tmp/libtpu_lockfile)")
    assert "install" not in said
    silent = subprocess.CompletedProcess([], 9, "", "")
    assert tpu_plan._worker_failure(silent, chip) == "the compile for tpu-v5e-8 failed: exit 9"
    assert issubclass(BackendUnavailable, Exception)


def test_the_compile_host_is_named_and_is_not_a_tpu_vm():
    import os
    import platform

    host = tpu_plan.compile_host()
    assert host.startswith(platform.node()) and f"{os.cpu_count()} CPUs" in host and host.endswith("not a TPU VM)")


# --------------------------------------------------------------------------- the GPU calibration's arithmetic
def test_gpu_calibration_puts_the_bound_beside_the_measured_step():
    from benchmarks.gpu_calibration import calibration

    from records import make_record

    record = make_record(
        [0.5, 0.7], backend="torchax", kind="cuda", device="NVIDIA H100 80GB HBM3", catalog_key="h100-sxm", chips=2
    )
    programs = _facts([512])["shapes"][0]
    result = calibration(record, programs, 512)
    grad = max(1e9 * 512 / 989e12, 2e9 / 3.35e12, 4_000_000 / (900e9 / 2))  # one direction of NVLink
    update = max(1e6 / 989e12, 1e8 / 3.35e12)
    assert result["bound_step_s"] == pytest.approx(8 * grad + update)
    assert result["measured_step_s"] == pytest.approx(0.6)  # the mean of the measured steps
    assert result["measured_over_bound"] == pytest.approx((8 * grad + update) / 0.6)
    assert result["nvlink_bytes_per_s"] == 900e9 and result["accelerator"] == "2x h100-sxm"
    unknown = make_record([0.5], backend="torchax", kind="cuda", device="X", catalog_key="a100-80gb")
    assert calibration(unknown, programs, 512)["why_not"] == "no peak or HBM figure for a100-80gb"


# --------------------------------------------------------------------------- the record and the worker's call
def test_the_record_names_its_scenario_backend_slice_plan_and_provenance(projected):
    from harness.figures.metrics import FlopsModel
    from harness.scenario.loader import resolve_runs

    record, asked, tmp_path = projected
    run = resolve_runs(
        "scenarios/padding.yaml",
        {"model.preset": "tiny-gemma3", "data.num_examples": 48, "sequence.padding": "dynamic"},
        None,
    )[0]
    assert record.scenario == {
        "name": run.scenario.name,
        "file": "scenarios/padding.yaml",
        "variant": run.variant,
        "hash": run.scenario_hash,
        "profile": None,
        "resolved": run.scenario.model_dump(mode="json"),
    }
    assert record.backend == "torchax" and record.slice["name"] == "tpu-v5e-8" and record.plan["devices"] == 8
    assert record.provenance["libraries"] == {"jax": "0.0"} and record.provenance["command"] == []
    assert record.provenance["python"] == tpu_plan.tpu_python() and record.provenance["created_at"].endswith("Z")
    assert record.path and record.path.endswith(".projection.json")
    plan = record.plan
    # bench's count: every row of the forward padded to the length, LoRA's adapters, split over the devices
    model = FlopsModel(run.scenario.model.architecture(), lora=True, adapter_params=plan["trainable_params"])
    for shape in record.shapes:
        by_hand = model.executed_flops([shape.seq_len] * plan["rows_per_forward"]) / 8
        assert shape.bench_flops_per_device_per_forward == pytest.approx(by_hand)
    # micro_batch auto plans against one chip's HBM (the slice's datasheet figure)
    assert plan["rows_per_forward"] * plan["accumulation"] == plan["rows_per_step"]


FAKE_WORKER = """#!/bin/sh
# a stand-in for the TPU interpreter: `-m backends.jax_common.aot_worker JOB FACTS`
case "$MODE" in
  ok) python3 -c "import json,sys; job=json.load(open(sys.argv[1])); json.dump({'shapes': [], 'job': job}, open(sys.argv[2], 'w'))" "$3" "$4" ;;
  fail) echo "Traceback" >&2; echo "ValueError: no good" >&2; exit 3 ;;
  libtpu) echo "ModuleNotFoundError: No module named 'libtpu'" >&2; exit 1 ;;
  slow) sleep 30 ;;
esac
"""


@pytest.mark.parametrize("mode", ["ok", "fail", "libtpu", "slow", "missing"])
def test_the_worker_is_called_with_the_job_and_its_failures_are_said(tmp_path, monkeypatch, mode):
    from harness.plan import plan as plans
    from harness.projection.projection import tpu_slice
    from harness.run import registry
    from harness.scenario.loader import resolve_runs

    fake = tmp_path / "python"
    fake.write_text(FAKE_WORKER)
    fake.chmod(0o755)
    monkeypatch.setenv("BENCH_PYTHON_TPU", str(fake if mode != "missing" else tmp_path / "nowhere"))
    monkeypatch.setenv("MODE", mode)
    run = resolve_runs("scenarios/tiny.yaml", {}, None)[0]
    chip = tpu_slice("tpu-v5e-8")
    info = registry.get("torchax")
    plan = plans.resolve(run.scenario, "tpu", 8, info.capabilities, "t", device_memory_bytes=chip.hbm_bytes)
    limit = 1 if mode == "slow" else 120
    request = tpu_plan.CompileRequest("scenarios/tiny.yaml", "torchax", ["tpu-v5e-8"], timeout_s=limit)
    call = lambda: tpu_plan._compile(request, run, plan, chip, [256, 128], "torchax")  # noqa: E731
    if mode == "ok":
        job = call()["job"]
        assert job["seq_lens"] == [256, 128] and job["backend"] == "torchax" and job["source"] == run.source
        assert job["slice"] == chip.to_json() and job["plan"] == plan.model_dump(mode="json")
        assert job["scenario"] == run.document
        return
    with pytest.raises(BackendUnavailable) as raised:
        call()
    said = {
        "fail": "the compile for tpu-v5e-8 failed: ValueError: no good",
        "libtpu": "cannot compile for tpu-v5e-8 here: ModuleNotFoundError: No module named 'libtpu' (install the tpu "
        "extra: pip install -e '.[tpu]'; BENCH_PYTHON_TPU)",
        "slow": "the compile for tpu-v5e-8 took longer than 1 s (--timeout)",
        "missing": f"BENCH_PYTHON_TPU={tmp_path / 'nowhere'}: no such interpreter",
    }[mode]
    assert str(raised.value) == said


def test_one_compile_is_enough_and_the_profile_is_the_requests(tmp_path, monkeypatch):
    monkeypatch.setattr(tpu_plan, "_compile", lambda request, run, plan, chip, lengths, backend: _facts(lengths))
    request = tpu_plan.CompileRequest(
        "scenarios/gemma270m.yaml",
        "torchax",
        ["tpu-v5p-8"],
        overrides={"model.preset": "tiny-gemma3"},
        profile="cpu",
        results_dir=tmp_path,
        max_compiles=1,
        command=["bench", "plan"],
    )
    (record,) = tpu_plan.project(request)
    assert record.scenario["profile"]["name"] == "cpu" and len(record.shapes) == 1
    assert record.scenario["resolved"]["sequence"]["max_length"] == 256  # the cpu profile's sequence
    assert record.provenance["command"] == ["bench", "plan"]
    assert record.price["accelerator"] == "tpu-v5p"


def test_a_shape_that_does_not_fit_leaves_no_fine_tune():
    from harness.projection.projection import Program, shape_projection, tpu_slice

    chip = tpu_slice("tpu-v5e-8")
    plan = {"rows_per_step": 8, "rows_per_forward": 8, "accumulation": 1, "devices": 8}
    fits = shape_projection(
        256,
        plan,
        [Program(name="g", runs_per_step=1, compile_s=1.0, memory_bytes=GIB, flops=1e9, bytes_accessed=1e9)],
        chip,
        1.0,
        1e9,
    )
    too_big = shape_projection(
        512,
        plan,
        [Program(name="g", runs_per_step=1, compile_s=1.0, memory_bytes=20 * GIB, flops=1e9, bytes_accessed=1e9)],
        chip,
        1.0,
        1e9,
    )
    assert tpu_plan._tpu_fine_tune(None, [fits, too_big], chip, 1.0) is None
    assert tpu_plan._tpu_fine_tune(None, [], chip, 1.0) is None


def test_a_workers_program_facts_become_a_programs_fields():
    refused = tpu_plan._program(
        {"name": "g", "runs_per_step": 2, "compile_s": 3.0, "out_of_memory": "Used 20G of 15.75G hbm", "memory": {}}
    )
    assert refused["memory_bytes"] == 0 and refused["out_of_memory"] == "Used 20G of 15.75G hbm"
    assert refused["resident_outside_bytes"] == 0 and refused["collectives"] == {} and refused["flops"] is None
    bare = tpu_plan._program({"name": "g", "runs_per_step": 1, "compile_s": 1.0})
    assert bare["memory"] == {} and bare["memory_bytes"] == 0 and bare["out_of_memory"] is None
