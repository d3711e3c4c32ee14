"""The streaming load client for OpenAI-compatible servers (vLLM, vLLM-TPU, transformers
serve, ...). It records raw timestamps only: when each request was sent, when every
streamed chunk with content arrived, when the last byte arrived, and the token counts
the server reports in `usage` (chunks are not tokens). `harness.metrics` turns them into
TTFT, TPOT, ITL and throughput with vLLM's meanings.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RequestRecord:
    index: int
    warmup: bool
    sent_s: float  # since the benchmark's clock origin
    chunk_s: list[float] = field(default_factory=list)  # arrival of each chunk with content
    end_s: float | None = None  # last byte
    prompt_tokens: int | None = None  # from the server's usage
    output_tokens: int | None = None  # from the server's usage
    status: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def request_body(api: str, model: str, prompt: dict[str, Any], spec) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "max_tokens": spec.output_tokens, "stream": True,
                            "stream_options": {"include_usage": True}, "temperature": 0.0}
    if api == "chat":
        body["messages"] = prompt["messages"]
    else:
        body["prompt"] = prompt["text"]
    if spec.force_output_length:  # vLLM's names; other servers take theirs via extra_body
        body.update(ignore_eos=True, min_tokens=spec.output_tokens)
    body.update(spec.extra_body)
    return body


def _content(event: dict[str, Any]) -> str:
    choices = event.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    return choice.get("text") or (choice.get("delta") or {}).get("content") or ""


async def send(client, url: str, body: dict[str, Any], record: RequestRecord, origin: float) -> None:
    """One streamed request; any failure is written into the record, never raised."""
    record.sent_s = time.perf_counter() - origin
    try:
        async with client.stream("POST", url, json=body) as response:
            record.status = response.status_code
            if response.status_code != 200:
                detail = (await response.aread()).decode(errors="replace")[:200]
                record.error = f"HTTP {response.status_code}: {detail}"
                return
            async for line in response.aiter_lines():
                _on_line(line, record, origin)
        record.end_s = time.perf_counter() - origin
        if record.output_tokens is None and record.error is None:
            record.error = "no usage in the stream: output tokens unknown (the server must support include_usage)"
    except Exception as exc:  # noqa: BLE001 - a dropped connection is a measured outcome
        record.error = f"{type(exc).__name__} after {len(record.chunk_s)} chunks: {exc}"[:300]


def _on_line(line: str, record: RequestRecord, origin: float) -> None:
    if not line.startswith("data:"):
        return
    payload = line[5:].strip()
    if payload == "[DONE]":
        return
    event = json.loads(payload)
    if _content(event):
        record.chunk_s.append(time.perf_counter() - origin)
    usage = event.get("usage")
    if usage:
        record.prompt_tokens = usage.get("prompt_tokens")
        record.output_tokens = usage.get("completion_tokens")


async def run_load(url: str, bodies: list[dict[str, Any]], spec, origin: float, on_done=None) -> list[RequestRecord]:
    """Warm-up requests one by one, then the measured ones under the scenario's load."""
    import httpx

    warm, measured = spec.warmup_requests, spec.num_requests
    records = [RequestRecord(i, i < warm, 0.0) for i in range(warm + measured)]
    limits = httpx.Limits(max_connections=max(8, spec.load.concurrency or 64))
    async with httpx.AsyncClient(timeout=httpx.Timeout(spec.request_timeout_s), limits=limits) as client:
        for r in records[:warm]:
            await send(client, url, bodies[r.index % len(bodies)], r, origin)
        await _measured(client, url, bodies, records[warm:], spec, origin, on_done)
    return records


async def _measured(client, url, bodies, records, spec, origin, on_done) -> None:
    gate = asyncio.Semaphore(spec.load.concurrency) if spec.load.concurrency else None

    async def one(record: RequestRecord, delay: float) -> None:
        await asyncio.sleep(delay)
        if gate is None:
            await send(client, url, bodies[record.index % len(bodies)], record, origin)
        else:
            async with gate:
                await send(client, url, bodies[record.index % len(bodies)], record, origin)
        if on_done:
            on_done(record)

    await asyncio.gather(*(one(r, d) for r, d in zip(records, arrival_delays(len(records), spec.load))))


def arrival_delays(count: int, load) -> list[float]:
    """Seconds from the start of the measured phase to each request's arrival: all at
    once for a closed loop, a seeded Poisson process for a request rate."""
    if load.request_rate is None:
        return [0.0] * count
    rng = random.Random(load.seed)
    delays, t = [], 0.0
    for _ in range(count):
        delays.append(t)
        t += rng.expovariate(load.request_rate)
    return delays
