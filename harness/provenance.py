"""Where a number came from: code revision, machine, interpreter, time."""

from __future__ import annotations

import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from typing import Any

from harness import __version__
from harness.registry import PROJECT_ROOT


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def code_revision() -> dict[str, Any]:
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def host() -> dict[str, Any]:
    return {"hostname": socket.gethostname(), "platform": platform.platform(), "machine": platform.machine(),
            "python": sys.version.split()[0], "bench_version": __version__}


def utc_iso(epoch: float | None = None) -> str:
    moment = datetime.fromtimestamp(epoch, timezone.utc) if epoch is not None else datetime.now(timezone.utc)
    return moment.isoformat(timespec="seconds")


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
