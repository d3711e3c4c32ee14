"""The fast tier's end-to-end check: one tiny real training run per backend that this
environment (the interpreter running the tests) can run, through the real CLI, ending
in a record whose measured steps are synced and counted. The slow tier (`pytest -m slow`)
holds each backend to much more; this is what a contributor's two-minute `pytest` must
not lose: that every installed backend still runs end to end."""

from __future__ import annotations

import sys

import pytest

from harness.run import registry

from conftest import TINY, bench, records_in, write_scenario


def runnable_here() -> list[str]:
    """The backends whose probe succeeds in this interpreter (not in BENCH_PYTHON_*'s)."""
    names = sorted(registry.all_backends())
    probes = registry.probe_all(names, {name: sys.executable for name in names})
    return [p.name for p in probes if p.probe.available]


RUNNABLE = runnable_here()


def test_the_default_backend_is_runnable_here():
    """The README's environment always has the default backend: a probe that fails here
    is a broken install, not a backend to leave out."""
    assert "torch" in RUNNABLE


@pytest.mark.parametrize("backend", RUNNABLE)
def test_a_tiny_run_ends_in_a_record(tmp_path, backend):
    results = tmp_path / "results"
    scenario = write_scenario(tmp_path, TINY)
    sets = ["train.steps=3", "train.warmup_steps=1", "train.window_steps=0", "data.num_examples=8"]
    done = bench(
        "run",
        str(scenario),
        "--backend",
        backend,
        "--python",
        f"{backend}={sys.executable}",
        "--results-dir",
        str(results),
        "--no-progress",
        *[a for kv in sets for a in ("--set", kv)],
    )
    assert done.returncode == 0, done.stderr + done.stdout
    (record,) = records_in(results)
    assert record["status"] == "ok" and record["backend"]["name"] == backend
    figures = record["metrics"]
    assert figures["measured_steps"] >= 2 and figures["step_time_s"]["median"] > 0
    assert figures["tokens_real"] > 0 and figures["loss_last"] == figures["loss_last"]  # a number, not NaN
