"""Multi-host jobs for real, as several processes on this machine: every "host" is its
own `bench run` of the same scenario, told its place by BENCH_HOST_RANK and
BENCH_COORDINATOR (127.0.0.1), joined by the framework's own runtime (torchrun's static
rendezvous over gloo; JAX's distributed runtime with gloo CPU collectives). The job must
compute what the same devices on one host compute, and write exactly one record (host
0's) that states hosts, processes and devices and bills every host."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from conftest import ROOT, TINY, failures_in, records_in, stack_or_skip, write_scenario

pytestmark = pytest.mark.slow

SHORT = ["--no-progress", "--set", "train.steps=4", "--set", "train.window_steps=0"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(scenario, results, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    """`bench run` started, not awaited."""
    return subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "run", str(scenario), "--results-dir", str(results), *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def start_hosts(scenario, results, hosts: int, *args: str) -> list[subprocess.Popen]:
    """`bench run` once per host, all at once, as a job's hosts would."""
    coordinator = f"127.0.0.1:{free_port()}"
    return [
        start(scenario, results, *args, env={"BENCH_HOST_RANK": str(rank), "BENCH_COORDINATOR": coordinator})
        for rank in range(hosts)
    ]


def finish(procs: list[subprocess.Popen], timeout: float) -> list[subprocess.CompletedProcess]:
    """Every process awaited (all killed if one overruns); their outputs."""
    done = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def run_hosts(scenario, results, hosts: int, *args: str, timeout: float = 600) -> list[subprocess.CompletedProcess]:
    """`bench run` once per host, all at once, as a job's hosts would; their outputs."""
    return finish(start_hosts(scenario, results, hosts, *args), timeout)


def reference_and_job(
    one_scenario, one_results, job_scenario, job_results, hosts: int, one_args, job_args, timeout: float = 600
):
    """The one-host reference and the job's hosts started together (the runs are largely
    waiting on imports, compiles and each other, so on a small CI machine this saves
    most of the reference's time); (the reference's output, the hosts' outputs)."""
    single, *done = finish(
        [start(one_scenario, one_results, *one_args), *start_hosts(job_scenario, job_results, hosts, *job_args)],
        timeout,
    )
    assert single.returncode == 0, failures_in(one_results) or single.stderr[-3000:]
    assert [d.returncode for d in done] == [0] * hosts, [d.stderr[-3000:] for d in done]
    assert "host 1 of 2" in done[1].stderr and "written by host 0" in done[1].stderr
    return one_ok_record(one_results, [single]), one_ok_record(job_results, done)


def losses(record) -> list[float]:
    return [s["loss"] for s in record["raw"]["loop"]["steps"]]


def tokens(record) -> list[int]:
    return [s["tokens_real"] for s in record["raw"]["loop"]["steps"]]


def one_ok_record(directory, done) -> dict:
    records = records_in(directory)
    assert len(records) == 1, (failures_in(directory), [d.stderr[-3000:] for d in done])
    assert records[0]["status"] == "ok", failures_in(directory)
    return records[0]


# --------------------------------------------------------------------------- gpu-fsdp
def test_gpu_fsdp_two_nodes_of_one_rank_match_one_node_of_two(tmp_path):
    one_node = write_scenario(tmp_path, TINY + "parallel:\n  devices: 2\n", "one.yaml")
    two_nodes = write_scenario(tmp_path, TINY + "parallel:\n  devices: 2\n  hosts: 2\n", "two.yaml")
    args = ["--backend", "gpu-fsdp", *SHORT]
    reference, job = reference_and_job(one_node, tmp_path / "one", two_nodes, tmp_path / "two", 2, args, args)
    assert losses(job) == pytest.approx(losses(reference), rel=1e-6)
    assert tokens(job) == tokens(reference)
    assert job["plan"]["hosts"] == 2 and reference["plan"]["hosts"] == 1
    # Stated: 2 hosts, 2 processes, 2 devices; billed: one CPU machine per host.
    assert {k: job["accelerator"][k] for k in ("hosts", "processes", "devices", "count")} == {
        "hosts": 2,
        "processes": 2,
        "devices": 2,
        "count": 2,
    }
    assert reference["accelerator"]["count"] == 1
    assert len(job["raw"]["extra"]["per_rank_host"]) == 2
    assert len(job["raw"]["memory"]["per_rank_bytes"]) == 2


# --------------------------------------------------------------------------- jax-tunix
# A 2 x 2 (fsdp x tp) mesh: on one host 4 virtual CPU devices; over 2 hosts 2 each, the
# fsdp axis across the hosts (each host feeds its half of the rows). Peft's targets
# that Tunix adapts one by one (k/v are fused in Tunix: refused otherwise).
TUNIX = [
    "--backend",
    "jax-tunix",
    *SHORT,
    "--set",
    "parallel.devices=4",
    "--set",
    "parallel.tensor=2",
    "--set",
    "train.lora.target_modules=[q_proj,o_proj,gate_proj,up_proj,down_proj]",
]


def test_jax_tunix_two_processes_of_two_devices_match_one_process_of_four(tmp_path):
    stack_or_skip("jax-tunix", "tunix", ".ci/run builds .venv-jax")
    scenario = write_scenario(tmp_path, TINY)
    reference, job = reference_and_job(
        scenario,
        tmp_path / "one",
        scenario,
        tmp_path / "two",
        2,
        TUNIX,
        [*TUNIX, "--set", "parallel.hosts=2"],
        timeout=900,
    )
    assert losses(job) == pytest.approx(losses(reference), rel=1e-5)
    assert tokens(job) == tokens(reference)
    extra = job["raw"]["extra"]
    assert extra["process_index"] == 0 and extra["process_count"] == 2 and extra["local_devices"] == 2
    assert len(extra["per_process_host"]) == 2 and extra["mesh"] == {"fsdp": 2, "tp": 2}
    # The plan's check passed: both fsdp shards (one per host) fed distinct rows.
    assert job["raw"]["done"]["distinct_row_shards"] == 2
    assert {k: job["accelerator"][k] for k in ("hosts", "processes", "devices", "count")} == {
        "hosts": 2,
        "processes": 2,
        "devices": 4,
        "count": 2,
    }
    assert len(job["raw"]["memory"]["per_rank_bytes"]) == 2


# --------------------------------------------------------------------------- torchax
# A (data, fsdp) = (1, 4) mesh: over 2 hosts the fsdp axis (weights and rows) spans
# them. 8 rows a step as 2 micro-batches of 4, so the donated gradient carry is
# accumulated across hosts too.
TORCHAX = [
    "--backend",
    "torchax",
    *SHORT,
    "--set",
    "parallel.devices=4",
    "--set",
    "train.global_batch=8",
    "--set",
    "train.micro_batch=1",
]


def test_torchax_two_processes_of_two_devices_match_one_process_of_four(tmp_path):
    stack_or_skip("torchax", "torchax", "pip install -e '.[torchax]'")
    scenario = write_scenario(tmp_path, TINY)
    reference, job = reference_and_job(
        scenario,
        tmp_path / "one",
        scenario,
        tmp_path / "two",
        2,
        TORCHAX,
        [*TORCHAX, "--set", "parallel.hosts=2"],
        timeout=900,
    )
    assert losses(job) == pytest.approx(losses(reference), rel=1e-5)
    assert tokens(job) == tokens(reference)
    assert all(len(s["seq_lens"]) == 2 for s in job["raw"]["loop"]["steps"])
    extra = job["raw"]["extra"]
    assert extra["process_index"] == 0 and extra["process_count"] == 2 and extra["local_devices"] == 2
    assert len(extra["per_process_host"]) == 2 and extra["mesh"] == {"data": 1, "fsdp": 4}
    # Weights sharded over the fsdp axis that spans both hosts, as on one host.
    assert extra["num_params_sharded"] == reference["raw"]["extra"]["num_params_sharded"] > 0
    # Counted over both hosts' devices: 4 distinct row blocks (the plan check passed).
    assert job["raw"]["done"]["distinct_row_shards"] == 4
    assert {k: job["accelerator"][k] for k in ("hosts", "processes", "devices", "count")} == {
        "hosts": 2,
        "processes": 2,
        "devices": 4,
        "count": 2,
    }
    assert reference["accelerator"]["count"] == 1 and "hosts" not in reference["accelerator"]
    assert len(job["raw"]["memory"]["per_rank_bytes"]) == 2
