"""Multi-host rules that need no job to check (#20): which runs are skipped as already
done, and which backends refuse `parallel.hosts` > 1 and why. The jobs themselves run
in tests/backends/test_multihost.py."""

from __future__ import annotations

import pytest

from harness.plan import plan as plans
from harness.run import registry
from harness.run.runner import done_already
from harness.scenario.loader import validate

from conftest import TINY, bench, write_scenario


def plan_of(hosts: int, backend: str = "jax-tunix"):
    doc = {
        "name": "t",
        "model": {"preset": "tiny-gemma3"},
        "train": {"global_batch": 8, "micro_batch": 1},
        "parallel": {"devices": 4, "hosts": hosts},
    }
    return plans.resolve(validate(doc, "s.yaml"), "cpu", 1, registry.get(backend).capabilities, "s.yaml")


def test_a_multi_host_job_is_never_skipped_as_done_on_any_host():
    """Host 0 holds the record; were it to skip, the other hosts would wait for it at the
    rendezvous forever. So no host skips a job of several hosts, record or not."""
    done = {"key-a": "results/a.json"}
    job, one_host = plan_of(2), plan_of(1)
    assert job.hosts == 2 and one_host.hosts == 1
    assert done_already("train", one_host, ["key-a"], done)  # resume: skipped
    assert not done_already("train", one_host, ["key-b"], done)  # no record: runs
    assert not done_already("train", job, ["key-a"], done)  # host 0, its record there: runs
    assert not done_already("train", job, ["key-b"], done)  # host 1, no record: runs
    # Serving does not join hosts: a finished serve run is skipped as usual.
    assert done_already("serve", job, ["key-a"], done)


@pytest.mark.parametrize("backend", ["jax-tunix", "torchax", "gpu-fsdp"])
def test_the_backends_that_join_hosts_accept_parallel_hosts(backend):
    assert plan_of(2, backend).hosts == 2


def test_xla_fsdpv2_refuses_several_hosts_in_one_line_saying_why():
    with pytest.raises(Exception) as info:
        plan_of(2, "xla-fsdpv2")
    message = str(info.value)
    assert message.startswith("s.yaml: parallel.hosts: 2: ") and "\n" not in message
    assert "TPU slice" in message and "CPU PJRT has no multi-process SPMD" in message
    assert plan_of(1, "xla-fsdpv2").hosts == 1


@pytest.mark.parametrize(
    "rank,coordinator",
    [("2", "127.0.0.1:1234"), ("", "")],  # a rank outside the job; gpu-fsdp's torchrun not told its rendezvous
)
def test_a_host_outside_the_job_is_refused_before_the_probe_naming_the_variable(tmp_path, rank, coordinator):
    two_nodes = write_scenario(tmp_path, TINY + "parallel:\n  devices: 2\n  hosts: 2\n")
    cache = tmp_path / "cache"
    done = bench(
        "run",
        str(two_nodes),
        "--backend",
        "gpu-fsdp",
        "--results-dir",
        str(tmp_path / "r"),
        "--no-progress",
        env={"BENCH_HOST_RANK": rank, "BENCH_COORDINATOR": coordinator, "BENCH_CACHE_DIR": str(cache)},
    )
    assert done.returncode == 2 and "BENCH_HOST_RANK" in done.stderr, done.stderr
    assert not (tmp_path / "r").exists()
    assert not (cache / "probes.json").exists()  # refused before any backend was probed
