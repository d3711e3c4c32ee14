"""`bench suite`: the accelerator suite resolves on this CPU (every entry's scenario,
overrides and plan on its backend), a small suite really runs and writes one report,
and mistakes are refused naming the suite's field before any work."""

from __future__ import annotations

import json
import os

import pytest

from conftest import TINY, bench, records_in, write_scenario

SUITE = "scenarios/suites/accelerator.yaml"


def test_the_accelerator_suite_resolves_every_entry_here():
    if not os.environ.get("BENCH_PYTHON_JAX_TUNIX") and os.environ.get("CI"):
        pytest.fail("CI must provide jax-tunix (BENCH_PYTHON_JAX_TUNIX) for the suite's dry run")
    done = bench("suite", SUITE, "--dry-run", "--json", timeout=600)
    assert done.returncode == 0, done.stderr
    entries = json.loads(done.stdout)
    assert [e["backend"] for e in entries] == [  # in order of value (#36): W1 on every backend first
        "torchax",
        "torch",
        "gpu-fsdp",
        "jax-tunix",
        "torch",
        "torch",
        "torch",
        "gpu-fsdp",
        "jax-tunix",
    ]
    if os.environ.get("CI"):  # every stack is installed there: nothing may be skipped
        assert [e["label"] for e in entries if e["skipped"]] == []
    for entry in entries:
        if entry["skipped"]:
            assert entry["backend"] in ("torchax", "jax-tunix") and "not available here" in entry["skipped"]
            continue
        plans = [run["plan"] for run in entry["runs"]]
        if entry["label"].startswith("W1 serve"):
            assert plans == [None]  # serving alone: nothing to plan
            continue
        levels = ["padding=static", "padding=dynamic", "padding=bucketed"]
        # packed rows where the backend has per-example attention (the JAX backends' segment
        # ids since #45; xla-fsdpv2, not in this suite, refuses that cell)
        packed = ["padding=packed"] if entry["backend"] in ("torch", "gpu-fsdp", "jax-tunix", "torchax") else []
        expected = levels + packed if "padding" in entry["label"] else ["default"]
        assert [run["variant"] for run in entry["runs"]] == expected
        for plan in plans:
            # W1 at full shape: no CPU profile, bf16 compute, one device, every step of the file
            assert plan["precision"]["compute"] == "bf16" and plan["devices"] == 1, plan
        if entry["label"].startswith("W1 "):  # the file's shape, not the cpu profile's (6 + 4 window steps)
            assert (plans[0]["steps"], plans[0]["window_steps"], plans[0]["rows_per_step"]) == (30, 10, 32)
            assert plans[0]["micro_batch_how"].startswith("memory model")  # auto, the new default


def test_the_tpu_suite_resolves_every_entry_here():
    """The TPU VM's suite plans on this CPU too: with the xla and JAX stacks' environments
    (CI) every entry on its own backend; without them (a fresh clone's one environment) a
    preview, each entry whose stack is missing saying so, its plan shown all the same."""
    installed = bool(os.environ.get("BENCH_PYTHON_JAX_TUNIX") and os.environ.get("BENCH_PYTHON_XLA_FSDPV2"))
    if os.environ.get("CI") and not installed:
        pytest.fail("CI must provide xla-fsdpv2 and jax-tunix for the TPU suite's dry run")
    done = bench("suite", "scenarios/suites/tpu.yaml", "--dry-run", "--json", timeout=600)
    assert done.returncode == 0, done.stderr
    entries = json.loads(done.stdout)
    assert [e["backend"] for e in entries] == ["xla-fsdpv2", "torchax", "jax-tunix", "xla-fsdpv2", "jax-tunix"]
    if installed:
        assert not any(e["skipped"] or e["not_installed"] for e in entries if e["backend"] != "torchax")
    for entry in entries:
        why_not = entry["not_installed"] or entry["skipped"]
        assert why_not is None or why_not.startswith(f"{entry['backend']} is not available here: ")
        assert entry["runs"], entry  # planned, installed or not
        for run in entry["runs"]:
            assert run["plan"]["precision"]["compute"] == "bf16", run["plan"]
        if entry["label"].startswith("W1 "):
            assert entry["runs"][0]["plan"]["devices"] == 1 and entry["runs"][0]["plan"]["rows_per_step"] == 32


def test_a_small_suite_runs_every_entry_then_writes_one_report(tmp_path):
    write_scenario(
        tmp_path, TINY + "serve: {engine: local, output_tokens: 4, num_requests: 2, warmup_requests: 0}\n", "tiny.yaml"
    )
    suite = write_scenario(
        tmp_path,
        f"""name: small
report: {tmp_path / "report.md"}
runs:
  - {{scenario: tiny.yaml, backend: torch, set: {{tasks: [train], train.steps: 3, train.window_steps: 0}}}}
  - {{scenario: tiny.yaml, backend: torch, label: serving, set: {{tasks: [serve]}}}}
""",
        "suite.yaml",
    )
    done = bench("suite", str(suite), "--results-dir", str(tmp_path / "r"), "--no-progress")
    assert done.returncode == 0, done.stderr + done.stdout
    records = records_in(tmp_path / "r")
    assert sorted(r["task"] for r in records) == ["serve", "train"] and all(r["status"] == "ok" for r in records)
    assert (tmp_path / "report.md").read_text().count("tiny") >= 1
    assert "wrote the suite's report" in done.stdout


@pytest.mark.parametrize(
    "body, field",
    [
        ("runs:\n  - {scenario: ../../scenarios/tiny.yaml, backend: nope}\n", "runs.0.backend"),
        ("runs:\n  - {scenario: missing.yaml, backend: torch}\n", "runs.0.scenario"),
        ("report: out.pdf\nruns:\n  - {scenario: x.yaml, backend: torch}\n", "report"),
        ("runs:\n  - {scenario: x.yaml, backend: torch, sett: {}}\n", "runs.0.sett"),
        ("runs: []\n", "runs"),
    ],
)
def test_suite_mistakes_are_refused_naming_the_field(tmp_path, body, field):
    suite = write_scenario(tmp_path, "name: bad\n" + body, "suite.yaml")
    done = bench("suite", str(suite), "--dry-run")
    assert done.returncode == 2 and f"{field}:" in done.stderr and len(done.stderr.strip().splitlines()) == 1, (
        done.stderr
    )
