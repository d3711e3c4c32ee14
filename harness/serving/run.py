"""The serve task inside a worker: reach the model through the scenario's engine
(harness/serving/engines.py), run the load, and hand back raw per-request timestamps and
the server's identity. No statistic is computed here."""

from __future__ import annotations

import sys
import time
from typing import Any

from harness.serving import engines


def declared_accelerator(text: str) -> dict[str, Any]:
    from harness.figures.cost import parse_fleet

    fleet = parse_fleet(text)
    return {"kind": "declared", "name": fleet.accelerator, "count": fleet.chips, "catalog_key": fleet.accelerator}


def execute_serve(scenario, events, choice: dict[str, Any]) -> dict[str, Any]:
    """`choice`: engines.Choice.to_json(), made in the parent (the engine auto chose)."""
    started_at, origin = time.time(), time.perf_counter()
    if choice["vllm_python"] or choice["vllm_executable"]:
        from backends.hf_common.serving import auto_vllm

        scenario = auto_vllm(scenario, choice)
    spec = scenario.serve
    engine = engines.ENGINES.get(choice["engine"])
    events.phase(f"serve ({choice['ran']})")
    result = engine.serve(scenario, events, origin)
    result["server"] = {**result["server"], "chosen": choice}
    measured = result.pop("accelerator", None) or measured_device(engine)
    # Billed: the declared server's (endpoint, launch: spec.py refuses it elsewhere), else
    # the device measured; the measured one is in the record either way.
    accelerator = declared_accelerator(spec.accelerator) if spec.accelerator else choice.get("accelerator") or measured
    if "error" in accelerator:
        raise ValueError(accelerator["error"])
    return {
        "task": "serve",
        "started_at": started_at,
        "engine": choice["engine"],
        **result,
        "accelerator": accelerator,
        "measured_device": measured,
        "versions": {"python": sys.version.split()[0], **result.pop("versions", {})},
        "notes": list(engine.notes),
        "wall_s": time.perf_counter() - origin,
    }


def measured_device(engine) -> dict[str, Any]:
    """What the engine can tell it ran on; its reason where it cannot bill one device
    (a launched server with several visible: the declared accelerator must say)."""
    try:
        return engine.accelerator()
    except ValueError as exc:
        return {"kind": "unknown", "name": "unknown", "count": 0, "error": str(exc)}
