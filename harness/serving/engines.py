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
import os
import shutil
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


# ------------------------------------------------------------------ engine: auto
LOCAL_LABEL = "reference engine, not a production server"


@dataclass(frozen=True)
class Choice:
    """The engine that serves a scenario, and why: `engine: auto` resolved on this machine
    (vLLM launched in its own environment where installed, else the local engine)."""

    engine: str  # a registered engine's name
    reason: str
    # auto's vLLM: the Python that has it, or the `vllm` executable; else both None.
    vllm_python: str | None = None
    vllm_executable: str | None = None

    @property
    def label(self) -> str:
        """How the engine that ran is named in records and reports."""
        if self.vllm_python or self.vllm_executable:
            return "vllm (launch)"
        return f"local ({LOCAL_LABEL})" if self.engine == "local" else self.engine

    def to_json(self) -> dict[str, object]:
        return {
            "engine": self.engine,
            "ran": self.label,
            "reason": self.reason,
            "vllm_python": self.vllm_python,
            "vllm_executable": self.vllm_executable,
        }


def choose(spec, environ=None) -> Choice:
    """The engine for a serve section. `auto`: BENCH_VLLM_PYTHON (a Python with vLLM),
    then `vllm` on PATH, else the local engine; a BENCH_VLLM_PYTHON that does not exist
    is refused, never passed over."""
    if spec.engine != "auto":
        return Choice(spec.engine, f"engine: {spec.engine} (the scenario names it)")
    environ = os.environ if environ is None else environ
    python = environ.get("BENCH_VLLM_PYTHON")
    if python:
        if not os.access(python, os.X_OK):
            raise BenchError(f"BENCH_VLLM_PYTHON: {python} is not an executable Python (engine auto would launch vLLM)")
        return Choice("launch", f"engine auto: vLLM's Python BENCH_VLLM_PYTHON={python}", vllm_python=python)
    found = shutil.which("vllm", path=environ.get("PATH"))
    if found:
        return Choice("launch", f"engine auto: vLLM on PATH ({found})", vllm_executable=found)
    return Choice("local", "engine auto: no vLLM here (BENCH_VLLM_PYTHON unset, no `vllm` on PATH)")
