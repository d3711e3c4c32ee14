"""The registry of serving engines: what the serve task loads with requests.

An engine takes the scenario, the worker's event sink and the requests' clock origin,
and hands back raw facts: the per-request timestamps (harness.serving.client's
RequestRecord), the server's identity, and what it ran on when it can tell. Engines
are registered by name and "module:attribute", loaded in the worker on first use (the
way entry points are), so this core imports no backend and no ML framework: the
in-process engine and the model export for a launched server live in backend packages.
Adding an engine is its module plus one line below (or one `register` call).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Callable

from harness.errors import BenchError


@dataclass(frozen=True)
class Engine:
    name: str
    # (scenario, events, origin) -> raw facts: "requests", "server", optionally
    # "prompts", "accelerator" (what it measured running on) and "versions".
    serve: Callable[[Any, Any, float], dict[str, Any]]
    # What it runs on when neither the scenario (serve.accelerator) nor its facts say.
    accelerator: Callable[[], dict[str, Any]]
    notes: tuple[str, ...] = ()


_TARGETS: dict[str, str] = {}
_LOADED: dict[str, Engine] = {}


def register(name: str, target: str) -> None:
    """Make engine `name` known; `target` is "module:attribute" of its Engine."""
    if _TARGETS.get(name, target) != target:
        raise BenchError(f"serving engine {name!r} is already registered as {_TARGETS[name]}")
    _TARGETS[name] = target


register("local", "backends.torch_eager.serve_local:ENGINE")
register("endpoint", "harness.serving.endpoint:ENGINE")
register("launch", "backends.hf_common.serving:LAUNCH_ENGINE")


ENTRY_POINT_GROUP = "bench.engines"


@functools.cache  # once per process: scanning installed packages takes milliseconds
def _from_entry_points() -> None:
    """Plug-ins installed by other packages: `[project.entry-points."bench.engines"]
    NAME = "module:attribute"`. Built-in names win."""
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        _TARGETS.setdefault(ep.name, ep.value)


def names() -> tuple[str, ...]:
    _from_entry_points()
    return tuple(_TARGETS)


def target(name: str) -> str:
    """Where engine `name` is defined: a worker process registers it from this."""
    _known(name)
    return _TARGETS[name]


def _known(name: str) -> None:
    if name not in _TARGETS:
        _from_entry_points()
    if name not in _TARGETS:
        raise BenchError(f"unknown serving engine {name!r} (known: {', '.join(_TARGETS)})")


def get(name: str) -> Engine:
    _known(name)
    if name not in _LOADED:
        module, _, attribute = _TARGETS[name].partition(":")
        _LOADED[name] = getattr(importlib.import_module(module), attribute)
    return _LOADED[name]
