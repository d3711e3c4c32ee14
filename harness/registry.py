"""The explicit registry of backends, plus the `bench.backends` entry-point group.

Registering a backend imports only its light `__init__` (name, requirements, options
model); the framework is imported by `BackendInfo.load()` inside a worker process.
Probing also happens in a worker process, with the interpreter configured for that
backend, because on a TPU VM torch_xla and JAX live in different environments.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from harness.backend import BackendInfo, Probe
from harness.errors import BackendUnavailable, SpecError

ENTRY_POINT_GROUP = "bench.backends"
# Where `harness` and `backends` are importable from: handed to workers run by another
# interpreter so that they import this checkout's code.
PROJECT_ROOT = Path(__file__).resolve().parent.parent


def _builtin() -> list[BackendInfo]:
    from backends.gpu_fsdp import BACKEND_INFO as fsdp_info
    from backends.jax_tunix import BACKEND_INFO as tunix_info
    from backends.torch_eager import BACKEND_INFO as torch_info
    from backends.torchax_jax import BACKEND_INFO as torchax_info
    from backends.xla_fsdpv2 import BACKEND_INFO as xla_info

    return [torch_info, fsdp_info, xla_info, torchax_info, tunix_info]


def all_backends() -> dict[str, BackendInfo]:
    """Built-in backends, then third-party ones from the entry-point group."""
    found = {info.name: info for info in _builtin()}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        info = ep.load()
        found.setdefault(info.name, info)
    return found


def get(name: str) -> BackendInfo:
    backends = all_backends()
    if name not in backends:
        raise BackendUnavailable(f"unknown backend {name!r} (known: {', '.join(sorted(backends))})")
    return backends[name]


def validate_backend_options(scenario, source: str) -> None:
    """Each `backend_options.<name>` block must name a backend and fit its options."""
    from pydantic import ValidationError

    from harness.loader import first_error

    backends = all_backends()
    for name, block in scenario.backend_options.items():
        if name not in backends:
            raise SpecError(source, f"backend_options.{name}", f"unknown backend (known: {', '.join(sorted(backends))})")
        try:
            backends[name].options.model_validate(block)
        except ValidationError as exc:
            err = first_error(exc, source)
            raise SpecError(source, f"backend_options.{name}.{err.field}", err.message) from None
    if scenario.backend and scenario.backend not in backends:
        raise SpecError(source, "backend", f"unknown backend {scenario.backend!r}")


def options_for(info: BackendInfo, scenario):
    return info.options.model_validate(scenario.backend_options.get(info.name, {}))


# --------------------------------------------------------------------------- interpreters
def interpreter_for(name: str, configured: dict[str, str] | None = None) -> str:
    """The Python that runs this backend's workers: --python NAME=PATH, then the
    BENCH_PYTHON_<NAME> environment variable, then this interpreter."""
    if configured and name in configured:
        return configured[name]
    env_key = "BENCH_PYTHON_" + name.upper().replace("-", "_")
    return os.environ.get(env_key) or sys.executable


def worker_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = f"{PROJECT_ROOT}{os.pathsep}{path}" if path else str(PROJECT_ROOT)
    env.update(extra or {})
    return env


# --------------------------------------------------------------------------- probing
@dataclass(frozen=True)
class ProbeResult:
    name: str
    python: str
    probe: Probe


def probe(name: str, python: str, timeout_s: float = 180.0) -> ProbeResult:
    """Ask a worker process of `python` whether `name` can run, and on what."""
    cmd = [python, "-m", "harness.worker", "probe", name]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=worker_env())
    except FileNotFoundError:
        return ProbeResult(name, python, Probe(False, f"interpreter not found: {python}"))
    except subprocess.TimeoutExpired:
        return ProbeResult(name, python, Probe(False, f"probe timed out after {timeout_s:.0f} s"))
    lines = done.stdout.strip().splitlines()
    try:
        return ProbeResult(name, python, Probe(**json.loads(lines[-1])))
    except (IndexError, ValueError, TypeError):
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return ProbeResult(name, python, Probe(False, f"probe failed (exit {done.returncode}): {tail}"))


def choose_backend(requested: str | None, interpreters: dict[str, str] | None) -> ProbeResult:
    """The requested backend if it can run; otherwise the best available one."""
    if requested:
        result = probe(requested, interpreter_for(get(requested).name, interpreters))
        if not result.probe.available:
            raise BackendUnavailable(f"backend {requested!r} is not available: {result.probe.reason}")
        return result
    ranked = sorted(all_backends().values(), key=lambda info: -info.priority)
    fallback = None
    for info in ranked:
        result = probe(info.name, interpreter_for(info.name, interpreters))
        if result.probe.available and result.probe.device_kind != "cpu":
            return result
        if result.probe.available and fallback is None and info.name == "torch":
            fallback = result
    if fallback is None:
        raise BackendUnavailable("no backend is available: install one, e.g. pip install -e '.[torch]'")
    return fallback
