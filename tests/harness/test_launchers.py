"""Launcher conventions in one place (harness/launchers.py), and the CPU fallback
backend chosen by priority (harness.registry.choose_backend), not by name."""

from __future__ import annotations

from types import SimpleNamespace

from harness import launchers, registry
from harness.backend import Probe


def test_torchrun_ranks_write_beside_rank_0_where_the_runner_reads_them(tmp_path, monkeypatch):
    torchrun = launchers.get("torchrun")
    facts = tmp_path / "facts.json"
    monkeypatch.setenv("RANK", "3")
    assert torchrun.rank() == 3
    assert torchrun.facts_path(facts, 0) == facts
    other = torchrun.facts_path(facts, 3)
    other.write_text("{}")
    assert torchrun.rank_facts(facts) == [other]
    plan = SimpleNamespace(hosts=1, devices=2)
    assert torchrun.command(plan) == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    assert launchers.get("single").command(plan) == [] and launchers.get("single").rank() == 0


def test_the_backends_launchers_are_known():
    for info in registry.all_backends().values():
        launchers.get(info.launcher)
    assert registry.get("gpu-fsdp").launcher == "torchrun" and registry.get("torch").launcher == "single"


def test_on_a_cpu_the_least_specialised_available_backend_runs(monkeypatch):
    def fake_probe(name, python, timeout_s=180.0):
        return registry.ProbeResult(name, python, Probe(name in ("torchax", "jax-tunix"), "", "cpu", "cpu", 1))

    monkeypatch.setattr(registry, "exclusive_accelerator", lambda: True)  # probes one at a time
    monkeypatch.setattr(registry, "probe", fake_probe)
    # torch is not available here: the lowest-priority backend that is (torchax, 10) runs.
    assert registry.choose_backend(None, {}).name == "torchax"
