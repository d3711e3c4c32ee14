"""The serve task inside a worker: reach the model (local engine, endpoint or launched
server), run the load, and hand back raw per-request timestamps and the server's
identity. No statistic is computed here."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from harness.serving.client import request_body
from harness.serving.loads import drive, prompt_count
from harness.serving.prompts import build_prompts


def server_identity(base_url: str, wanted: str | None) -> dict[str, Any]:
    """The model id (the first listed unless named) and whatever version the server tells."""
    import httpx

    listed = httpx.get(f"{base_url}/models", timeout=10).json().get("data", [])
    model = wanted or (listed[0]["id"] if listed else None)
    if model is None:
        raise RuntimeError(f"{base_url}/models lists no model; name one in the scenario")
    owner = next((m.get("owned_by") for m in listed if m.get("id") == model), None)
    version = None
    try:
        reply = httpx.get(base_url.rsplit("/v1", 1)[0] + "/version", timeout=5)
        version = reply.json().get("version") if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        pass
    return {"base_url": base_url, "model": model, "owned_by": owner, "version": version}


def local_device() -> dict[str, Any]:
    """This machine's accelerator, as far as torch (if installed) can tell."""
    try:
        import torch

        if torch.cuda.is_available():
            return {"kind": "cuda", "name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count()}
    except ImportError:
        pass
    from harness.provenance import cpu_name

    return {"kind": "cpu", "name": cpu_name(), "count": 1}


def launched_device() -> dict[str, Any]:
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


def declared_accelerator(text: str) -> dict[str, Any]:
    from harness.cost import parse_fleet

    fleet = parse_fleet(text)
    return {"kind": "declared", "name": fleet.accelerator, "count": fleet.chips, "catalog_key": fleet.accelerator}


def _over_http(scenario, base_url: str, model: str | None, events, origin: float) -> dict[str, Any]:
    spec = scenario.serve
    server = server_identity(base_url.rstrip("/"), model)
    prompts = build_prompts(scenario, prompt_count(spec))
    bodies = [request_body(spec.api, server["model"], p, spec) for p in prompts]
    url = f"{server['base_url']}/{'chat/completions' if spec.api == 'chat' else 'completions'}"
    done = lambda r: events.emit("request", index=r.index, total=spec.num_requests, error=r.error)  # noqa: E731
    facts = asyncio.run(drive(url, bodies, spec, origin, done))
    return {**facts, "server": server, "prompts": describe_prompts(prompts)}


def describe_prompts(prompts: list[dict[str, Any]]) -> dict[str, Any]:
    """The input length distribution the run drew from, in words (the server's token
    counts per request are in each request's prompt_tokens)."""
    from harness.metrics import summary

    words = [len(p["text"].split()) for p in prompts]
    return {
        "count": len(prompts),
        "words": summary(words),
        "output_tokens": summary([p["output_tokens"] for p in prompts]),
    }


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


def execute_serve(scenario, events) -> dict[str, Any]:
    started_at, origin = time.time(), time.perf_counter()
    spec = scenario.serve
    notes: list[str] = []
    events.phase(f"serve ({spec.engine})")
    if spec.engine == "local":
        from backends.torch_eager.serve_local import serve_locally

        result = serve_locally(scenario, events, origin)
        notes.append("local engine: one request at a time (transformers generate), per-token timestamps")
    elif spec.engine == "endpoint":
        result = _over_http(scenario, spec.endpoint.base_url, spec.endpoint.model, events, origin)
    else:
        from harness.serving.launch import LaunchedServer, launch_workdir, log_tail

        with launch_workdir() as tmp, LaunchedServer(scenario, Path(tmp)) as server:
            model = server.fill(spec.launch.model) if spec.launch.model else None
            result = _over_http(scenario, server.base_url, model, events, origin)
            result["server"].update(
                ready_s=server.ready_s,
                command=[server.fill(p) for p in spec.launch.command],
                startup=startup_times(server, every_request(result), origin),
            )
            server.stop()
            result["server"]["log_tail"] = log_tail(server.log_path)
    accelerator = declared_accelerator(spec.accelerator) if spec.accelerator else result.pop("accelerator", None)
    if accelerator is None:
        accelerator = (
            launched_device() if spec.engine == "launch" else {"kind": "remote", "name": "undeclared", "count": 1}
        )
    return {
        "task": "serve",
        "started_at": started_at,
        "engine": spec.engine,
        **result,
        "accelerator": accelerator,
        "versions": {"python": sys.version.split()[0], **result.pop("versions", {})},
        "notes": notes,
        "wall_s": time.perf_counter() - origin,
    }
