"""`bench backends`: what runs here, on what, and why the others do not."""

from __future__ import annotations

import json

from conftest import bench


def test_backends_lists_torch_on_cpu_and_says_why_others_are_unavailable():
    done = bench("backends", "--json")
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["torch"]["available"] and rows["torch"]["device_kind"] == "cpu"
    assert rows["gpu-fsdp"]["available"] and "gloo" in rows["gpu-fsdp"]["reason"]
    for name in ("xla-fsdpv2", "jax-tunix", "torchax"):
        assert not rows[name]["available"] and rows[name]["reason"]


def test_a_missing_interpreter_is_a_reason_not_a_crash():
    done = bench("backends", "--json", "--python", "torch=/nonexistent/python")
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert not rows["torch"]["available"] and "not found" in rows["torch"]["reason"]


def test_run_with_an_unavailable_backend_exits_2_with_the_reason():
    done = bench("run", "scenarios/tiny.yaml", "--backend", "torchax")
    assert done.returncode == 2 and "not available" in done.stderr and "Traceback" not in done.stderr
