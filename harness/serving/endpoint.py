"""The `endpoint` engine: an OpenAI-compatible server that is already running (vLLM,
vLLM-TPU, any other), reached over HTTP. Also the client half of `launch`."""

from __future__ import annotations

import asyncio
from typing import Any

from harness.serving.client import request_body
from harness.serving.engines import Engine
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


def over_http(scenario, base_url: str, model: str | None, events, origin: float) -> dict[str, Any]:
    spec = scenario.serve
    server = server_identity(base_url.rstrip("/"), model)
    prompts = build_prompts(scenario, prompt_count(spec))
    bodies = [request_body(spec.api, server["model"], p, spec) for p in prompts]
    url = f"{server['base_url']}/{'chat/completions' if spec.api == 'chat' else 'completions'}"
    done = lambda r: events.emit("request", index=r.index, total=spec.num_requests, error=r.error)  # noqa: E731
    facts = asyncio.run(drive(url, bodies, spec, origin, done, trace_delays(prompts, spec.warmup_requests)))
    return {**facts, "server": server, "prompts": describe_prompts(prompts)}


def trace_delays(prompts: list[dict[str, Any]], warmup: int) -> list[float] | None:
    """A replayed trace's arrivals for the measured requests (None: the load decides)."""
    if not prompts or "arrival_s" not in prompts[-1]:
        return None
    return [p["arrival_s"] for p in prompts[warmup:]]


def describe_prompts(prompts: list[dict[str, Any]]) -> dict[str, Any]:
    """The input length distribution the run drew from, in words (the server's token
    counts per request are in each request's prompt_tokens)."""
    from harness.figures.metrics import summary

    words = [len(p["text"].split()) for p in prompts]
    return {
        "count": len(prompts),
        "words": summary(words),
        "output_tokens": summary([p["output_tokens"] for p in prompts]),
    }


def serve_endpoint(scenario, events, origin: float) -> dict[str, Any]:
    endpoint = scenario.serve.endpoint
    return over_http(scenario, endpoint.base_url, endpoint.model, events, origin)


def undeclared() -> dict[str, Any]:
    """A remote server's chips cannot be seen from here: billed only when declared."""
    return {"kind": "remote", "name": "undeclared", "count": 1}


ENGINE = Engine("endpoint", serve_endpoint, undeclared)
