"""What a server says about itself around a measured load: vLLM's Prometheus `/metrics`
read before and after it (the server's own KV-cache usage, queue depth, token counts and
TTFT histogram beside the client's figures), and its prefix cache reset before it
(vLLM's `POST /reset_prefix_cache`, offered when the server runs with
VLLM_SERVER_DEV_MODE=1), so a repeated run measures the cold cache its first run did.
A server without them (another engine, a production vLLM) is recorded as such."""

from __future__ import annotations

import math
from typing import Any

# vLLM's samples kept (its process and Python collector samples are not the load's).
PREFIX = "vllm:"


def root_of(url: str) -> str:
    """The server's root from its OpenAI URL (http://host:port/v1/completions)."""
    return url.split("/v1/", 1)[0].split("/v1", 1)[0]


def parse_prometheus(text: str) -> dict[str, float]:
    """`name{labels}` -> value for every vllm: sample of Prometheus' text format (the
    labels kept as written, so each series is its own key)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith(PREFIX):
            continue
        key, _, value = line.rpartition(" ")
        if "}" not in key and " " in key:  # a sample with a timestamp: name value ts
            key, _, value = key.rpartition(" ")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            continue
    return out


def is_counter(key: str) -> bool:
    """Counters and histogram/summary parts only grow: their delta is the load's share."""
    name = key.split("{", 1)[0]
    return name.endswith(("_total", "_sum", "_count", "_bucket"))


def deltas(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """after - before for every counter series (a series new after the load counts from
    0); gauges are the `after` reading's (KV-cache usage, requests waiting, running)."""
    return {k: v - before.get(k, 0.0) for k, v in after.items() if is_counter(k) and math.isfinite(v)}


async def read_metrics(client, root: str) -> dict[str, float] | None:
    try:
        reply = await client.get(f"{root}/metrics", timeout=10)
    except Exception:  # noqa: BLE001 - a server without /metrics is recorded as such
        return None
    if reply.status_code != 200:
        return None
    return parse_prometheus(reply.text) or None


def around(before: dict[str, float] | None, after: dict[str, float] | None) -> dict[str, Any] | None:
    """The record's server_metrics: both readings and the counters' deltas (None where
    the server has no vLLM /metrics)."""
    if before is None or after is None:
        return None
    return {"before": before, "after": after, "delta": deltas(before, after)}


async def reset_prefix_cache(client, root: str) -> dict[str, Any]:
    """POST /reset_prefix_cache: {"done": bool, "detail": what the server said}."""
    try:
        reply = await client.post(f"{root}/reset_prefix_cache", timeout=30)
    except Exception as exc:  # noqa: BLE001 - recorded, not raised: the run can go on warm
        return {"done": False, "detail": f"{type(exc).__name__}: {exc}"[:200]}
    if reply.status_code == 200:
        return {"done": True, "detail": "POST /reset_prefix_cache: 200"}
    return {
        "done": False,
        "detail": f"POST /reset_prefix_cache: HTTP {reply.status_code} (vLLM offers it with VLLM_SERVER_DEV_MODE=1)",
    }
