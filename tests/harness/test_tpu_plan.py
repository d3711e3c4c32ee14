"""`bench plan --compile-for` in-process with the TPU compile replaced by hand-written
compiler facts (harness/tpu_plan.py): what it makes of them, recomputed here. The real
compile: tests/backends/test_tpu_aot.py (slow, needs libtpu)."""

from __future__ import annotations

import json
import subprocess

import pytest

from harness import tpu_plan
from harness.errors import BackendUnavailable, SpecError

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
    from harness.fine_tune import fine_tune_work
    from harness.loader import resolve_runs

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
    compute, hbm, ici = 1e9 * n / 197e12, 2e9 / 819e9, 4_000_000 / 400e9
    assert shape.terms[0].compute_s == pytest.approx(compute) and shape.terms[0].collectives_s == pytest.approx(ici)
    assert shape.step_time_bound_s == pytest.approx(8 * max(compute, hbm, ici) + max(1e6 / 197e12, 1e8 / 819e9))
    assert 0 < shape.real_fraction <= 1
    assert shape.real_tokens_per_s_per_chip_bound == pytest.approx(
        shape.tokens_per_s_per_chip_bound * shape.real_fraction
    )
    assert shape.bench_flops_per_device_per_forward > 0


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
    grad = max(1e9 * 512 / 989e12, 2e9 / 3.35e12, 4_000_000 / 900e9)
    update = max(1e6 / 989e12, 1e8 / 3.35e12)
    assert result["bound_step_s"] == pytest.approx(8 * grad + update)
    assert result["measured_step_s"] == pytest.approx(0.6)  # the mean of the measured steps
    assert result["measured_over_bound"] == pytest.approx((8 * grad + update) / 0.6)
    assert result["nvlink_bytes_per_s"] == 900e9 and result["accelerator"] == "2x h100-sxm"
    unknown = make_record([0.5], backend="torchax", kind="cuda", device="X", catalog_key="a100-80gb")
    assert calibration(unknown, programs, 512)["why_not"] == "no peak or HBM figure for a100-80gb"
