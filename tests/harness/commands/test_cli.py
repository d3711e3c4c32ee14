"""`bench backends`: what runs here, on what, and why the others do not."""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest

from harness.run import registry

from conftest import bench


def test_backends_lists_torch_on_cpu_and_says_why_others_are_unavailable():
    done = bench("backends", "--json")
    assert done.returncode == 0, done.stderr
    # It says what it is doing (a worker process per backend, side by side), on stderr,
    # and lists the backends in the registry's order however the probes finish.
    assert "probing 5 backends" in done.stderr
    assert [row["name"] for row in json.loads(done.stdout)] == list(registry.all_backends())
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["torch"]["available"] and rows["torch"]["device_kind"] == "cpu"
    assert rows["gpu-fsdp"]["available"] and "gloo" in rows["gpu-fsdp"]["reason"]
    if os.environ.get("BENCH_PYTHON_XLA_FSDPV2"):  # CI's torch_xla environment
        assert rows["xla-fsdpv2"]["available"] and rows["xla-fsdpv2"]["device_kind"] == "cpu"
        # A CPU is one device; a run asks for virtual ones with parallel.devices.
        assert (
            rows["xla-fsdpv2"]["device_count"] == 1
            and rows["xla-fsdpv2"]["python"] == os.environ["BENCH_PYTHON_XLA_FSDPV2"]
        )
    else:
        assert not rows["xla-fsdpv2"]["available"] and "torch_xla" in rows["xla-fsdpv2"]["reason"]
    assert rows["torchax"]["available"] and rows["torchax"]["device_count"] == 1  # the test extra has it
    if os.environ.get("BENCH_PYTHON_JAX_TUNIX"):  # CI's Tunix environment
        assert rows["jax-tunix"]["available"] and rows["jax-tunix"]["device_count"] == 1
    elif importlib.util.find_spec("tunix") is None:
        assert not rows["jax-tunix"]["available"] and "tunix not installed" in rows["jax-tunix"]["reason"]


def test_a_missing_interpreter_is_a_reason_not_a_crash():
    done = bench("backends", "--json", "--python", "torch=/nonexistent/python")
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert not rows["torch"]["available"] and "not found" in rows["torch"]["reason"]


def test_run_with_an_unavailable_backend_exits_2_with_the_reason():
    # This environment has JAX (the test extra) but not Tunix: jax-tunix cannot run here.
    done = bench("run", "scenarios/tiny.yaml", "--backend", "jax-tunix", "--python", f"jax-tunix={sys.executable}")
    assert done.returncode == 2 and "not available" in done.stderr and "Traceback" not in done.stderr
    assert "tunix" in done.stderr


@pytest.mark.serial
def test_probes_run_side_by_side_unless_the_accelerator_admits_one_process(monkeypatch):
    """Each probe is a worker process of seconds; on a TPU VM the chip admits one
    process at a time, so there they take turns (in parallel, all but one would read
    'in use' and call the backend unavailable)."""
    import threading
    import time

    from harness.run.backend import Probe

    active, peak = [0], [0]
    lock = threading.Lock()

    def fake_probe(name, python, timeout_s=180.0):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.2)
        with lock:
            active[0] -= 1
        return registry.ProbeResult(name, python, Probe(True, "", "cpu", "x", 1))

    monkeypatch.setattr(registry, "probe", fake_probe)
    names = list(registry.all_backends())
    monkeypatch.setattr(registry, "exclusive_accelerator", lambda: False)
    assert [r.name for r in registry.probe_all(names)] == names and peak[0] > 1
    peak[0] = 0
    monkeypatch.setattr(registry, "exclusive_accelerator", lambda: True)
    assert [r.name for r in registry.probe_all(names)] == names and peak[0] == 1
