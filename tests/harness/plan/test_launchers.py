"""Launcher conventions in one place (harness/plan/launchers.py), and the CPU fallback
backend chosen by priority (harness.run.choice.choose_backend), not by name."""

from __future__ import annotations

import sys
from types import SimpleNamespace

from harness.plan import launchers
from harness.run import choice, registry
from harness.run.backend import Probe


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
    assert choice.choose_backend(None, {}).name == "torchax"


def _results(available: dict[str, str]) -> list:
    """Probe results for every backend: available ones on the named device kind."""
    ranked = [i.name for i in sorted(registry.all_backends().values(), key=lambda i: -i.priority)]
    return [
        registry.ProbeResult(
            n, "py", Probe(n in available, "" if n in available else "no", available.get(n, "cpu"), "d", 1)
        )
        for n in ranked
    ]


def test_a_warm_probe_cache_ranks_and_only_the_chosen_backend_is_probed_afresh(monkeypatch):
    """`bench run` without --backend: the cache's answers rank the backends; the winner
    alone is probed again (a device can be taken since); where it no longer runs, every
    backend is probed afresh."""
    from harness.run import probe_cache

    probed, probed_all = [], []
    monkeypatch.setattr(registry, "exclusive_accelerator", lambda: False)
    monkeypatch.setattr(
        probe_cache, "probe_all", lambda names, interpreters: (_results({"gpu-fsdp": "cuda", "torch": "cpu"}), 5, None)
    )
    now = {"gpu-fsdp": "cuda", "torch": "cpu"}

    def fresh_probe(name, python, timeout_s=180.0):
        probed.append(name)
        return next(r for r in _results(now) if r.name == name)

    def fresh_all(names, interpreters=None):
        probed_all.append(list(names))
        return _results(now)

    monkeypatch.setattr(registry, "probe", fresh_probe)
    monkeypatch.setattr(registry, "probe_all", fresh_all)
    assert choice.choose_backend(None, {}).name == "gpu-fsdp" and probed == ["gpu-fsdp"] and probed_all == []
    now = {"torch": "cpu"}  # the GPU was taken since the cache's answer
    assert choice.choose_backend(None, {}).name == "torch" and len(probed_all) == 1


def test_a_cold_probe_cache_probes_each_backend_once(monkeypatch):
    from harness.run import probe_cache

    probed = []
    monkeypatch.setattr(registry, "exclusive_accelerator", lambda: False)
    monkeypatch.setattr(probe_cache, "probe_all", lambda names, interpreters: (_results({"torch": "cpu"}), 0, None))
    monkeypatch.setattr(registry, "probe", lambda name, python, timeout_s=180.0: probed.append(name))
    assert choice.choose_backend(None, {}).name == "torch" and probed == []


def test_a_run_naming_its_backend_reuses_only_an_available_cpu_answer(monkeypatch, tmp_path):
    """`bench run --backend B`: an available CPU answer in the cache (its key matched) is
    used as it is, with no probe interpreter; an accelerator's answer, an unavailable one
    or a miss is probed afresh and kept."""
    from harness.run import probe_cache

    monkeypatch.setenv("BENCH_CACHE_DIR", str(tmp_path))
    answers = {"torch": ("cpu", True), "gpu-fsdp": ("cuda", True), "torchax": ("cpu", False)}
    probed = []

    def fresh_probe(name, python, timeout_s=180.0):
        probed.append(name)
        kind, available = answers[name]
        return registry.ProbeResult(name, python, Probe(available, "" if available else "no", kind, "d", 1))

    monkeypatch.setattr(registry, "probe", fresh_probe)
    python = sys.executable
    for _ in range(2):
        for name in answers:
            result = probe_cache.probe_one(name, python)
            assert (result.probe.device_kind, result.probe.available) == answers[name]
    # torch once (then from the cache); gpu-fsdp (an accelerator) and torchax (unavailable) each time
    assert sorted(probed) == sorted(["torch", "gpu-fsdp", "gpu-fsdp", "torchax", "torchax"])
    monkeypatch.setattr(probe_cache, "_code", lambda: [("harness/changed.py", 1, 1)])  # the code changed
    probe_cache.probe_one("torch", python)
    assert probed.count("torch") == 2
    assert choice.choose_backend("torch", {}).name == "torch" and probed.count("torch") == 2  # what a run calls
