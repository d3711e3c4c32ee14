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
    # Prompt tokens the server found in its prefix cache (usage.prompt_tokens_details.
    # cached_tokens); None where the server does not report them.
    cached_tokens: int | None = None
    status: int | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def request_body(api: str, model: str, prompt: dict[str, Any], spec) -> dict[str, Any]:
    length = prompt.get("output_tokens", spec.output_tokens)
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": length,
        "stream": True,
        "stream_options": {"include_usage": True},
        "temperature": 0.0,
    }
    if api == "chat":
        body["messages"] = prompt["messages"]
    else:
        body["prompt"] = prompt["text"]
    if spec.force_output_length:  # vLLM's names; other servers take theirs via extra_body
        body.update(ignore_eos=True, min_tokens=length)
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
        details = usage.get("prompt_tokens_details") or {}
        record.cached_tokens = details.get("cached_tokens")


async def run_load(url: str, bodies: list[dict[str, Any]], spec, origin: float, on_done=None) -> list[RequestRecord]:
    """Warm-up requests one by one, then the measured ones under the scenario's load."""
    async with open_client(spec) as client:
        records = await warm_up(client, url, bodies, spec.warmup_requests, origin)
        return records + await measure(
            client, url, bodies, spec.load, spec.warmup_requests, spec.num_requests, origin, on_done
        )


def open_client(spec, loads=()):
    """One HTTP client for every load of the run: enough connections for the most
    requests any of them keeps in flight (64 for an uncapped open loop)."""
    import httpx

    limits = [load.in_flight_limit or 64 for load in (spec.load, *loads)]
    return httpx.AsyncClient(
        timeout=httpx.Timeout(spec.request_timeout_s), limits=httpx.Limits(max_connections=max(8, *limits))
    )


async def warm_up(client, url: str, bodies: list[dict[str, Any]], count: int, origin: float) -> list[RequestRecord]:
    records = [RequestRecord(i, True, 0.0) for i in range(count)]
    for r in records:
        await send(client, url, bodies[r.index % len(bodies)], r, origin)
    return records


async def measure(
    client,
    url: str,
    bodies: list[dict[str, Any]],
    load,
    first: int,
    count: int,
    origin: float,
    on_done=None,
    deadline: float | None = None,
    delays: list[float] | None = None,
) -> list[RequestRecord]:
    """`count` measured requests (indices from `first`) under `load`, or at `delays` (a
    trace's arrivals; `load.max_concurrency` still caps them). With a deadline (seconds
    on the `origin` clock), requests still unfinished then are cut short and those not
    yet sent are not sent: both are errors that say so."""
    records = [RequestRecord(first + i, False, 0.0) for i in range(count)]
    limit = load.max_concurrency if delays is not None else load.in_flight_limit
    gate = asyncio.Semaphore(limit) if limit else None

    async def one(record: RequestRecord, delay: float) -> None:
        await asyncio.sleep(delay)
        body = bodies[record.index % len(bodies)]
        if gate is None:
            await send(client, url, body, record, origin)
        else:
            async with gate:
                await send(client, url, body, record, origin)
        if on_done:
            on_done(record)

    delays = arrival_delays(count, load) if delays is None else delays
    work = asyncio.gather(*(one(r, d) for r, d in zip(records, delays)))
    if deadline is None:
        await work
        return records
    try:
        await asyncio.wait_for(work, max(0.0, deadline - (time.perf_counter() - origin)))
    except asyncio.TimeoutError:
        now = time.perf_counter() - origin
        for r in records:
            if r.end_s is None and r.error is None:
                sent = bool(r.chunk_s) or r.status is not None or r.sent_s > 0
                r.error = (
                    "cut short: the time limit (max_duration_s) was reached"
                    if sent
                    else "not sent: the time limit (max_duration_s) was reached"
                )
                r.sent_s = r.sent_s if sent else now
    return records


def arrival_delays(count: int, load) -> list[float]:
    """Seconds from the start of the measured phase to each request's arrival: all at
    once for a closed loop; for an open loop, seeded gaps at each request's rate
    (vLLM's `get_request`): exponential for poisson, Gamma(shape B, scale 1/(rate B))
    for gamma with burstiness B (mean 1/rate, coefficient of variation 1/sqrt(B))."""
    if not load.open_loop:
        return [0.0] * count
    rng = random.Random(load.seed or 0)  # 0 when not given
    delays, t = [], 0.0
    for i in range(count):
        delays.append(t)
        rate = rate_of(load, i, count)
        if load.arrival == "gamma":
            t += rng.gammavariate(load.burstiness, 1.0 / (rate * load.burstiness))
        else:
            t += rng.expovariate(rate)
    return delays


def rate_of(load, index: int, count: int) -> float:
    """Request `index` of `count`'s arrival rate (req/s): the load's rate, or a ramp's
    at that request, linear or exponential in the request's position (vLLM's ramp-up)."""
    ramp = load.ramp
    if ramp is None:
        return load.request_rate
    progress = index / (count - 1) if count > 1 else 0.0
    if ramp.shape == "linear":
        return ramp.start_rate + (ramp.end_rate - ramp.start_rate) * progress
    return ramp.start_rate * (ramp.end_rate / ramp.start_rate) ** progress
