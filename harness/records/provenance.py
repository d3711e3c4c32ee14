"""Where a number came from: code revision, machine, interpreter, time."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from typing import Any

from harness import __version__
from harness.basics.paths import PROJECT_ROOT


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def code_revision() -> dict[str, Any]:
    """The commit, and whether the tree differs from it: modified or untracked files
    (a new, uncommitted module changes what runs as much as an edited one)."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=normal")
    changed = [line[3:] for line in (status or "").splitlines() if line.strip()]
    return {"commit": commit, "dirty": bool(changed) if status is not None else None, "dirty_files": changed[:20]}


# Environment variables that change how fast (or on what) a run executes.
PERFORMANCE_ENV = (
    "XLA_FLAGS",
    "LIBTPU_INIT_ARGS",
    "PJRT_DEVICE",
    "CPU_NUM_DEVICES",
    "TPU_ACCELERATOR_TYPE",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "OPENBLAS_CORETYPE",
    "CUDA_VISIBLE_DEVICES",
    "PYTORCH_CUDA_ALLOC_CONF",
    "TORCHINDUCTOR_CACHE_DIR",
    "JAX_COMPILATION_CACHE_DIR",
    "JAX_ENABLE_X64",
    "JAX_PLATFORMS",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "USE_TORCH_XLA",
    "BENCH_FAULTS",
)
PERFORMANCE_ENV_PREFIXES = ("NCCL_", "TPU_", "XLA_", "LIBTPU_")
# Runtime libraries whose version shapes accelerator numbers, when installed as packages.
RUNTIME_PACKAGES = (
    "libtpu",
    "libtpu-nightly",
    "jax-cuda12-plugin",
    "jax-cuda13-plugin",
    "jax-cuda12-pjrt",
    "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13",
    "nvidia-nccl-cu12",
    "nvidia-nccl-cu13",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cuda-runtime-cu13",
)


def performance_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {k: env[k] for k in sorted(env) if k in PERFORMANCE_ENV or k.startswith(PERFORMANCE_ENV_PREFIXES)}


def runtime_packages() -> dict[str, str]:
    from importlib import metadata

    found = {}
    for name in RUNTIME_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def module_versions(*modules: str) -> dict[str, str]:
    """Python's version and each named module's `__version__`, keyed by module name, in
    the order given: the versions a backend's worker really imported (not what pip lists)."""
    import importlib

    return {"python": sys.version.split()[0], **{m: importlib.import_module(m).__version__ for m in modules}}


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine_state(load_before: list[float] | None) -> dict[str, Any]:
    """How busy the machine was: load averages (1, 5, 15 min) when the run started and
    ended, the cores it has, the environment that tunes it; a warning when the load
    exceeded the cores (other work competed for them: the figures are slower than the
    machine is)."""
    after, cores = load_average(), os.cpu_count()
    state: dict[str, Any] = {
        "load_before": load_before,
        "load_after": after,
        "cpu_count": cores,
        "environment": performance_environment(),
        "runtime_packages": runtime_packages(),
    }
    busiest = max([(load_before or [0.0])[0], (after or [0.0])[0]])
    if cores and busiest > cores:
        state["warning"] = (
            f"the machine was busy: load average {busiest:.2f} over its {cores} cores during the "
            "run; other work competed for them, so these figures understate the machine"
        )
    return state


def host() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "bench_version": __version__,
    }


def utc_iso(epoch: float | None = None) -> str:
    moment = datetime.fromtimestamp(epoch, timezone.utc) if epoch is not None else datetime.now(timezone.utc)
    return moment.isoformat(timespec="seconds")


def host_available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (Linux): what a new process can still
    allocate without swapping; None where the file is not there."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def cpu_name() -> str:
    """The CPU's model name (what a record calls a CPU device)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
