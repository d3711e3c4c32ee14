"""A server the harness starts itself (`engine: launch`): fill in the command, start it
in its own process group, wait for health within a time limit, and stop it afterwards,
keeping its log. A server that never becomes healthy is an error with its log tail.
Framework-free: the `launch` engine is made by `engine(export, local_device)` in a
backend package that can save the scenario's model (backends/hf_common/serving.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from harness.serving.endpoint import over_http
from harness.serving.engines import Engine

LOG_TAIL_LINES = 40
# Servers this process started and has not stopped yet: a SIGTERM to the worker (the
# runner's time limit, Ctrl-C) or its parent's death must stop them too, since each
# runs in its own session, out of reach of the kill that ends the worker's group.
_RUNNING: set["LaunchedServer"] = set()


def stop_all() -> None:
    for server in list(_RUNNING):
        server.stop(grace_s=5.0)


def _on_sigterm(signum, frame) -> None:
    stop_all()
    raise SystemExit(128 + signum)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tail(path: Path) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:])
    except OSError:
        return ""


def error_line(tail: str) -> str:
    """`: <the log's last error line>` (an exception's message), or "" where none."""
    lines = [line.strip() for line in tail.splitlines() if "Error" in line or "Exception" in line]
    return f": {lines[-1][:500]}" if lines else ""


class LaunchedServer:
    """Context manager: a started, healthy server; stopped on exit whatever happened."""

    def __init__(self, scenario, workdir: Path, export: Callable[[Any, Path], Path]) -> None:
        self.spec = scenario.serve.launch
        self.export = export  # the scenario's model saved for the server: a backend's (engines.py)
        self.scenario = scenario
        self.workdir = workdir
        self.port = free_port()
        self.log_path = workdir / "server.log"
        self.proc: subprocess.Popen | None = None

    def fill(self, text: str) -> str:
        values = {"port": str(self.port), "python": sys.executable, "model_dir": str(self.workdir / "model")}
        for key, value in values.items():
            text = text.replace("{" + key + "}", value)
        return text

    def __enter__(self) -> "LaunchedServer":
        command = [self.fill(part) for part in self.spec.command]
        if any("{model_dir}" in part for part in self.spec.command):
            self.export(self.scenario, self.workdir / "model")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.spec.env},
                start_new_session=True,
            )
        _RUNNING.add(self)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _on_sigterm)
        self.started = time.perf_counter()
        try:
            self._wait_healthy()
        except BaseException:
            self.stop()
            raise
        self.ready_s = time.perf_counter() - self.started
        return self

    def _wait_healthy(self) -> None:
        import httpx

        url, deadline = self.fill(self.spec.health_url), time.perf_counter() + self.spec.health_timeout_s
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                tail = log_tail(self.log_path)
                raise RuntimeError(
                    f"server exited with status {self.proc.returncode} before becoming healthy"
                    f"{error_line(tail)}; log tail:\n{tail}"
                )
            try:
                if httpx.get(url, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise TimeoutError(
            f"server not healthy at {url} after {self.spec.health_timeout_s:g} s; log tail:\n{log_tail(self.log_path)}"
        )

    @property
    def base_url(self) -> str:
        return self.fill(self.spec.base_url)

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM the server's process group (vLLM's engine processes included), then
        SIGKILL it after `grace_s`."""
        _RUNNING.discard(self)
        if self.proc is None:
            return
        # The whole group, even when its leader already exited: an orphaned engine
        # process would keep the port, the memory and the chip.
        for sig, grace in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            if _group_gone(self.proc, grace):
                break
        if self.proc.poll() is None:
            self.proc.wait(timeout=5.0)

    def __exit__(self, *exc) -> None:
        self.stop()


def _group_gone(proc: subprocess.Popen, within_s: float) -> bool:
    """Whether every process of the server's group has exited within `within_s`."""
    deadline = time.perf_counter() + within_s
    while time.perf_counter() < deadline:
        proc.poll()  # reap the leader: a zombie still counts as a member
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def launch_workdir() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="bench-serve-")


def every_request(facts: dict[str, Any]) -> list[dict[str, Any]]:
    """Warm-up and measured requests, a sweep's or search's points included."""
    points = (facts.get("sweep") or facts.get("slo_search") or {}).get("points", [])
    return facts["requests"] + [r for p in points for r in p.get("requests", [])]


def startup_times(server, requests: list[dict[str, Any]], origin: float) -> dict[str, Any]:
    """Launch mode's startup (vLLM bench sweep's): from the server process's start to
    its health URL answering 200, and to the first streamed token of the first request,
    which is sent as soon as the server is healthy (after one GET /v1/models)."""
    first = min((r for r in requests if r["error"] is None), key=lambda r: r["sent_s"], default=None)
    token = first["chunk_s"][0] if first and first["chunk_s"] else None
    started = server.started - origin  # on the requests' clock
    return {
        "to_healthy_s": server.ready_s,
        "to_first_token_s": token - started if token is not None else None,
        "first_request_sent_after_healthy_s": first["sent_s"] - started - server.ready_s if first else None,
    }


def serve_launched(scenario, events, origin: float, export: Callable[[Any, Path], Path]) -> dict[str, Any]:
    """Start the server, load it over HTTP, stop it; its startup and log tail kept."""
    spec = scenario.serve.launch
    with launch_workdir() as tmp, LaunchedServer(scenario, Path(tmp), export) as server:
        model = server.fill(spec.model) if spec.model else None
        result = over_http(scenario, server.base_url, model, events, origin)
        result["server"].update(
            ready_s=server.ready_s,
            command=[server.fill(p) for p in spec.command],
            startup=startup_times(server, every_request(result), origin),
        )
        server.stop()
        result["server"]["log_tail"] = log_tail(server.log_path)
    return result


def launched_device(local_device: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """What a launched server runs on when the scenario does not say: this machine's one
    device. With several visible, which of them the server uses is the command's business
    (tensor parallelism, CUDA_VISIBLE_DEVICES): billing them all would be a guess."""
    device = local_device()
    if device["count"] > 1:
        raise ValueError(
            f"serve.accelerator: {device['count']} {device['name']} devices are visible; declare the "
            "ones the launched server uses (e.g. h100-sxm:2), so cost bills exactly those"
        )
    return device


def engine(export: Callable[[Any, Path], Path], local_device: Callable[[], dict[str, Any]]) -> Engine:
    """The `launch` engine, given a backend's model export and device probe."""
    return Engine(
        "launch",
        lambda scenario, events, origin: serve_launched(scenario, events, origin, export),
        lambda: launched_device(local_device),
    )
