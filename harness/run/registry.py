"""The registry of backends (harness.basics.plugins.Registry), plus the `bench.backends` entry-point group.

Registering a backend imports only its light `__init__` (name, requirements, options
model); the framework is imported by `BackendInfo.load()` inside a worker process.
Probing also happens in a worker process, with the interpreter configured for that
backend, because on a TPU VM torch_xla and JAX live in different environments.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness.basics.errors import BackendUnavailable, SpecError
from harness.basics.paths import PROJECT_ROOT
from harness.basics.plugins import Registry
from harness.run.backend import BackendInfo, Probe
from harness.scenario.loader import ResolvedRun, resolve_runs

ENTRY_POINT_GROUP = "bench.backends"
# Importing a backend's package is light (its `__init__`: name, requirements, options).
BACKENDS = Registry("backend", ENTRY_POINT_GROUP, error=BackendUnavailable)
BACKENDS.register("torch", "backends.torch_eager:BACKEND_INFO")
BACKENDS.register("gpu-fsdp", "backends.gpu_fsdp:BACKEND_INFO")
BACKENDS.register("xla-fsdpv2", "backends.xla_fsdpv2:BACKEND_INFO")
BACKENDS.register("torchax", "backends.torchax_jax:BACKEND_INFO")
BACKENDS.register("jax-tunix", "backends.jax_tunix:BACKEND_INFO")


def all_backends() -> dict[str, BackendInfo]:
    """Built-in backends, then third-party ones from the entry-point group."""
    return {info.name: info for info in BACKENDS.loaded()}


def get(name: str) -> BackendInfo:
    return BACKENDS.get(name)


def compiles_nothing(record) -> bool:
    """A run (a RunRecord) of a backend that compiles nothing by design (its
    BackendInfo.eager says so for these options: torch, or gpu-fsdp without `compile`)
    that compiled nothing: its compile figures read "n/a (eager)" (report, `bench show`)."""
    return _eager(record.backend.name, record.backend.options) and not (
        record.metrics.num_compiles if record.metrics is not None else 0
    )


def _eager(backend: str, options: dict) -> bool:
    info = _known_backend(backend)
    return info is not None and info.eager is not None and info.eager(options)


@functools.cache  # the registry scans installed entry points: once per backend name
def _known_backend(backend: str) -> BackendInfo | None:
    return all_backends().get(backend)  # unknown here: figures shown as they are


def validate_backend_options(scenario, source: str) -> None:
    """Each `backend_options.<name>` block must name a backend and fit its options."""
    from pydantic import ValidationError

    from harness.basics.yaml_io import first_error

    backends = all_backends()
    for name, block in scenario.backend_options.items():
        if name not in backends:
            raise SpecError(
                source, f"backend_options.{name}", f"unknown backend (known: {', '.join(sorted(backends))})"
            )
        try:
            backends[name].options.model_validate(block)
        except ValidationError as exc:
            err = first_error(exc, source)
            raise SpecError(source, f"backend_options.{name}.{err.field}", err.message) from None
    if scenario.backend and scenario.backend not in backends:
        raise SpecError(source, "backend", f"unknown backend {scenario.backend!r}")


def validate_file(path: str | Path) -> int:
    """Validate a file, every profile and every matrix cell; returns the number of runs."""
    return len(validate_runs(path))


def validate_runs(path: str | Path) -> list[ResolvedRun]:
    """Validate a file, every profile and every matrix cell; returns its runs (no profile)."""
    runs = resolve_runs(path)
    for name in runs[0].scenario.profiles:
        runs_with_profile = resolve_runs(path, profile=name)
        for run in runs_with_profile:
            validate_backend_options(run.scenario, f"{path} (profile {name})")
    for run in runs:
        validate_backend_options(run.scenario, str(path))
    return runs


def options_for(info: BackendInfo, scenario):
    return info.options.model_validate(scenario.backend_options.get(info.name, {}))


# --------------------------------------------------------------------------- interpreters
def interpreter_for(name: str, configured: dict[str, str] | None = None) -> str:
    """The Python that runs this backend's workers: --python NAME=PATH, then the
    BENCH_PYTHON_<NAME> environment variable, then this interpreter."""
    if configured and name in configured:
        return configured[name]
    return os.environ.get(_env_key(name)) or sys.executable


def _env_key(name: str) -> str:
    return "BENCH_PYTHON_" + name.upper().replace("-", "_")


def check_interpreters(configured: dict[str, str], names: list[str] | None = None) -> None:
    """Before any work: every `--python NAME=PATH` names a known backend, and (for the
    backends in `names`) the interpreter that would run its workers exists. A SpecError
    naming the flag or variable and the path, instead of a probe's vaguer failure."""
    backends = all_backends()
    for name, path in configured.items():
        if name not in backends:
            raise SpecError(
                f"--python {name}={path}", "", f"unknown backend {name!r} (known: {', '.join(sorted(backends))})"
            )
    for name in names or []:
        path = interpreter_for(name, configured)
        if path == sys.executable or shutil.which(path):
            continue
        where = f"--python {name}={path}" if name in configured else f"{_env_key(name)}={path}"
        what = "not executable" if Path(path).exists() else "no such file"
        raise SpecError(where, "", f"the interpreter for backend {name!r} cannot be run ({what})")


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
    cmd = [python, "-m", "harness.run.worker", "probe", name]
    try:
        # A probe needs no device memory; JAX would otherwise grab 75% of each GPU, and
        # probes run side by side (probe_all).
        done = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=worker_env({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}),
        )
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


def exclusive_accelerator() -> bool:
    """Whether this host has an accelerator that only one process may open at a time (a
    TPU VM: /dev/accel*, or VFIO-bound TPU chips): probes there must take turns, or all
    but the first would read 'in use' and say the backend is unavailable."""
    from harness.figures.accelerators import on_tpu_vm

    return on_tpu_vm()


def probe_all(names: list[str], interpreters: dict[str, str] | None = None) -> list[ProbeResult]:
    """Probe every named backend, in the given order. Each probe is a worker process
    (seconds: it imports a framework), so they run side by side, except on a host whose
    accelerator admits one process at a time, where they take turns."""
    jobs = [(name, interpreter_for(name, interpreters)) for name in names]
    if exclusive_accelerator() or len(jobs) < 2:
        return [probe(name, python) for name, python in jobs]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return list(pool.map(lambda job: probe(*job), jobs))
