"""The one plug-in Registry (harness/basics/plugins.py) that tasks, serving engines and backends
share: names map to "module:attribute", loaded on first use, from `register` or an
entry-point group, and an unknown name is refused with the known ones."""

from __future__ import annotations

import sys

import pytest

from harness import tasks
from harness.basics.errors import BackendUnavailable, BenchError
from harness.basics.plugins import Registry
from harness.run import registry
from harness.serving import engines


def write_module(folder, name: str, text: str) -> None:
    (folder / f"{name}.py").write_text(text)


def test_a_plugin_is_imported_only_when_asked_for(tmp_path, monkeypatch):
    write_module(tmp_path, "plug_lazy", "THING = {'loaded': True}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    things = Registry("thing", "bench.test-things")
    things.register("lazy", "plug_lazy:THING")
    assert things.names() == ("lazy",) and "plug_lazy" not in sys.modules
    assert things.get("lazy") == {"loaded": True} and things.get("lazy") is things.get("lazy")
    assert things.target("lazy") == "plug_lazy:THING"
    things.register("lazy", "plug_lazy:THING")  # the same again: what a worker does
    with pytest.raises(BenchError, match="thing 'lazy' is already registered as plug_lazy:THING"):
        things.register("lazy", "plug_lazy:OTHER")


def test_an_unknown_name_is_refused_with_the_known_ones():
    things = Registry("thing", "bench.test-things")
    things.register("a", "x:A")
    things.register("b", "x:B")
    with pytest.raises(BenchError, match=r"^unknown thing 'c' \(known: a, b\)$"):
        things.get("c")
    strict = Registry("backend", "bench.test-things", error=BackendUnavailable)
    with pytest.raises(BackendUnavailable, match="unknown backend 'c'"):
        strict.target("c")


def test_entry_points_add_plugins_and_built_in_names_win(tmp_path, monkeypatch):
    """An installed package's `[project.entry-points."bench.test-things"]`, as
    importlib.metadata reads it: a dist-info folder on sys.path."""
    dist = tmp_path / "bench_plug-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: bench-plug\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[bench.test-things]\nextra = plug_ep:THING\nbuiltin = plug_ep:OTHER\n")
    write_module(tmp_path, "plug_ep", "THING = 'from an entry point'\nOTHER = 'shadowed'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    things = Registry("thing", "bench.test-things")
    things.register("builtin", "plug_builtin:THING")
    assert things.names() == ("builtin", "extra")
    assert things.get("extra") == "from an entry point" and things.target("builtin") == "plug_builtin:THING"


def test_tasks_engines_and_backends_are_registries_of_the_one_kind():
    assert {type(r) for r in (tasks.TASKS, engines.ENGINES, registry.BACKENDS)} == {Registry}
    assert (tasks.TASKS.entry_point_group, engines.ENGINES.entry_point_group) == ("bench.tasks", "bench.engines")
    assert registry.BACKENDS.entry_point_group == "bench.backends"
    assert set(tasks.names()) >= {"train", "serve"} and set(engines.ENGINES.names()) >= {"local", "endpoint", "launch"}
    assert list(registry.all_backends()) == ["torch", "gpu-fsdp", "xla-fsdpv2", "torchax", "jax-tunix"]
