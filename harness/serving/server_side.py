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


def around(
    before: dict[str, float] | None, after: dict[str, float] | None, kv_peak: float | None = None
) -> dict[str, Any] | None:
    """The record's server_metrics: both readings, the counters' deltas and the highest
    KV-cache usage sampled during the load (None where the server has no vLLM /metrics)."""
    if before is None or after is None:
        return None
    return {"before": before, "after": after, "delta": deltas(before, after), "kv_cache_usage_peak": kv_peak}


# vLLM's KV-cache usage gauge (a fraction 0..1 despite its name): V1's, and V0's before it.
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
# How often the gauge is read during a load: its peak is the highest reading.
KV_SAMPLE_S = 0.5


def kv_usage(sample: dict[str, float]) -> float | None:
    """The highest KV-cache usage over the reading's series (one per engine or model)."""
    values = [v for k, v in sample.items() if k.split("{", 1)[0] in KV_USAGE and math.isfinite(v)]
    return max(values) if values else None


async def sample_kv_usage(client, root: str, stop, readings: list[float]) -> None:
    """Read the KV-cache gauge every KV_SAMPLE_S until `stop` (an asyncio.Event) is set."""
    import asyncio

    while not stop.is_set():
        sample = await read_metrics(client, root)
        value = kv_usage(sample) if sample else None
        if value is not None:
            readings.append(value)
        try:
            await asyncio.wait_for(stop.wait(), KV_SAMPLE_S)
        except asyncio.TimeoutError:
            continue


def _total(delta: dict[str, float], *names: str) -> float | None:
    """A counter's delta summed over its series, under the first of `names` present."""
    for name in names:
        values = [v for k, v in delta.items() if k.split("{", 1)[0] == name]
        if values:
            return sum(values)
    return None


def server_figures(server_metrics: dict[str, Any] | None) -> dict[str, Any] | None:
    """The server's own figures over the load, from its /metrics: mean time a request
    waited in its queue (s: the queue-time histogram's sum over its count), the KV-cache
    usage peak (fraction, sampled every KV_SAMPLE_S), the prefix-cache hit rate (hit
    over queried tokens) and the requests it preempted. None each where vLLM did not
    report it; None for all where it has no /metrics (another engine, the local one)."""
    if not server_metrics:
        return None
    delta = server_metrics["delta"]
    queued = _total(delta, "vllm:request_queue_time_seconds_count")
    waited = _total(delta, "vllm:request_queue_time_seconds_sum")
    queries = _total(delta, "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
    hits = _total(delta, "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
    return {
        "queue_time_mean_s": waited / queued if queued and waited is not None else None,
        "kv_cache_usage_peak": server_metrics.get("kv_cache_usage_peak"),
        "prefix_cache_hit_rate": hits / queries if queries and hits is not None else None,
        "preemptions": _total(delta, "vllm:num_preemptions_total"),
    }


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
