"""The registry of serving engines: what the serve task loads with requests.

An engine takes the scenario, the worker's event sink and the requests' clock origin,
and hands back raw facts: the per-request timestamps (harness.serving.client's
RequestRecord), the server's identity, and what it ran on when it can tell. Engines
are registered by name and "module:attribute", loaded in the worker on first use (the
way entry points are), so this core imports no backend and no ML framework: the
in-process engine and the model export for a launched server live in backend packages.
Adding an engine is its module plus one line below (or one `register` call, or a
`bench.engines` entry point): the one Registry of harness.plugins.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any, Callable

from harness.errors import BenchError
from harness.plugins import Registry


@dataclass(frozen=True)
class Engine:
    name: str
    # (scenario, events, origin) -> raw facts: "requests", "server", optionally
    # "prompts", "accelerator" (what it measured running on) and "versions".
    serve: Callable[[Any, Any, float], dict[str, Any]]
    # What it runs on when neither the scenario (serve.accelerator) nor its facts say.
    accelerator: Callable[[], dict[str, Any]]
    notes: tuple[str, ...] = ()


ENTRY_POINT_GROUP = "bench.engines"
ENGINES = Registry("serving engine", ENTRY_POINT_GROUP)
ENGINES.register("local", "backends.torch_eager.serve_local:ENGINE")
ENGINES.register("endpoint", "harness.serving.endpoint:ENGINE")
ENGINES.register("launch", "backends.hf_common.serving:LAUNCH_ENGINE")


# ------------------------------------------------------------------ engine: auto
LOCAL_LABEL = "reference engine, not a production server"


def caveat(records) -> str:
    """What the serve figures of `records` (RunRecords) are of where that is not a
    production server's: the local engine's label ("" for none). Shown beside every
    local-engine $ (terminal, report, gate) and the report headline's TTFT."""
    labels = sorted({r.cost.label for r in records if getattr(r, "cost", None) is not None and r.cost.label})
    return "; ".join(labels)


def with_caveat(text: str, label: str) -> str:
    """`text (label)` where a label applies, else `text` unchanged."""
    return f"{text} ({label})" if label else text


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
