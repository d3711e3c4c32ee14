"""The fast tier's end-to-end check: one tiny real training run per backend that this
environment (the interpreter running the tests) can run, through the real CLI, ending
in a record whose measured steps are synced and counted. The slow tier (`pytest -m slow`)
holds each backend to much more; this is what a contributor's two-minute `pytest` must
not lose: that every installed backend still runs end to end. The same runs check what
any real run must show: its summary in an 80-column log keeps every column, and an
untraced run (tracing is off by default) has no trace and measures every measured step."""

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
        env={"COLUMNS": "80"},
    )
    assert done.returncode == 0, done.stderr + done.stdout
    (record,) = records_in(results)
    assert record["status"] == "ok" and record["backend"]["name"] == backend
    figures = record["metrics"]
    assert figures["measured_steps"] >= 2 and figures["step_time_s"]["median"] > 0
    assert figures["tokens_real"] > 0 and figures["loss_last"] == figures["loss_last"]  # a number, not NaN
    # Untraced by default: no trace section, no trace folder, both phases measured.
    assert record["trace"] is None and not list(results.glob("*.trace"))
    assert {s["phase"] for s in record["raw"]["loop"]["steps"]} == {"warmup", "measure"}
    summary_keeps_every_column_in_80(done.stdout, record, backend)


def summary_keeps_every_column_in_80(stdout: str, record: dict, backend: str) -> None:
    """The run's summary table at COLUMNS=80: no line longer, nothing cut (…), and each
    column's value as the record holds it (a CPU has no datasheet peak: MFU n/a)."""
    m, c = record["metrics"], record["cost"]
    table = stdout[stdout.index("bench results") :]
    assert "…" not in table and all(len(line) <= 80 for line in table.splitlines()), table
    expected = {
        "step med (s)": f"{m['step_time_s']['median']:.4g}",
        "p90 (s)": f"{m['step_time_s']['p90']:.4g}",
        "recomp": str(m["num_recompiles"]),
        "tok/s real": f"{m['tokens_per_s_real']:.4g}",
        "mem (GiB)": f"{m['peak_memory_gib']:.3g}",
        "$/run": f"{c['usd_run']:.2g}",
    }
    for column, value in expected.items():
        assert f"{column} {value}" in table, (column, value, table)
    assert "ok" in table and f"{backend} on cpu" in table and "MFU n/a" in table
