"""The streaming load client for OpenAI-compatible servers (vLLM, vLLM-TPU, transformers
serve, ...). It records raw timestamps only: when each request was sent, when every
streamed token chunk arrived, when the last byte arrived, and the token counts the
server reports in `usage` (chunks are not tokens). `harness.figures.metrics` turns them into
TTFT, TPOT, ITL and throughput with vLLM's meanings.

A token chunk is vLLM's client's (vllm/benchmarks/lib/endpoint_request_func.py): any
streamed event with non-empty `choices`, whatever its text. A model's tokens may decode
to no text at all (special tokens, a random-weight model's): text is not the evidence
that a token came. Where the server sends each chunk's token ids (vLLM's
`return_token_ids`, asked for by serve.token_ids) their count is kept and checked
against `usage`. A request fails only on a transport or HTTP error, an error event in
the stream, a stream without a token chunk, or fewer token ids than `usage` reports.
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
    sent_s: float  # since the benchmark's clock origin: when the request was written
    chunk_s: list[float] = field(default_factory=list)  # arrival of each token chunk (non-empty choices)
    end_s: float | None = None  # last byte
    prompt_tokens: int | None = None  # from the server's usage
    output_tokens: int | None = None  # from the server's usage
    # Prompt tokens the server found in its prefix cache (usage.prompt_tokens_details.
    # cached_tokens); None where the server does not report them.
    cached_tokens: int | None = None
    status: int | None = None
    error: str | None = None
    # When the load meant to send it (its arrival, or the moment its slot freed) and how
    # long it then waited inside this client (a connection, the event loop) before being
    # written: sent_s - due_s. None where no HTTP client sent it (the local engine).
    due_s: float | None = None
    queue_s: float | None = None
    # vLLM's own client's clock (vllm/benchmarks/lib/endpoint_request_func.py and
    # serve.py), kept so both conventions can be computed from the record: when the
    # request was handed to the HTTP client, before any connection (vLLM starts TTFT and
    # E2EL there), when the load scheduled it, before its concurrency cap (the wait
    # between is vLLM's semaphore wait), and when its load's measured phase started
    # (vLLM's duration runs from there). None where no HTTP client sent it.
    posted_s: float | None = None
    arrival_s: float | None = None
    load_start_s: float | None = None
    # Token ids each token chunk carried, where the server sent them (serve.token_ids);
    # None where it sent none (then chunks are counted, never tokens). Last: a plug-in
    # engine builds its records positionally (index, warmup, sent_s, chunk_s, end_s, ...).
    chunk_tokens: list[int] | None = None

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
    if spec.token_ids:  # vLLM's: each chunk's token ids, checked against usage
        body["return_token_ids"] = True
    body.update(spec.extra_body)
    return body


def token_ids_in(choice: dict[str, Any]) -> int | None:
    """How many token ids a streamed choice carries: vLLM's `token_ids`
    (return_token_ids), else its logprobs' tokens (completions: logprobs.tokens; chat:
    logprobs.content, one entry a token; with vLLM's return_tokens_as_token_ids each is
    "token_id:N"); None where it carries neither."""
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return len(ids)
    logprobs = choice.get("logprobs") or {}
    for key in ("tokens", "content"):
        if isinstance(logprobs.get(key), list):
            return len(logprobs[key])
    return None


def stream_error(event: dict[str, Any]) -> str | None:
    """An error the server reported inside a 200 stream (vLLM: `data: {"error": {...}}`)."""
    error = event.get("error")
    if not error:
        return None
    message = error.get("message") if isinstance(error, dict) else error
    return f"server error in the stream: {message}"[:300]


def stream_verdict(record: RequestRecord) -> str | None:
    """Why a stream that ended without a transport or HTTP error still failed, or None:
    no token chunk at all (no TTFT: vLLM's client fails it too), no usage (the output
    tokens unknown), or fewer token ids than usage reports (tokens went missing)."""
    if not record.chunk_s:
        told = f" (usage reports {record.output_tokens} output tokens)" if record.output_tokens else ""
        return f"no token in the stream: no chunk with choices{told}"
    if record.output_tokens is None:
        return "no usage in the stream: output tokens unknown (the server must support include_usage)"
    if record.chunk_tokens is not None and sum(record.chunk_tokens) < record.output_tokens:
        return (
            f"fewer tokens in the stream than usage reports: {sum(record.chunk_tokens)} token ids, "
            f"usage {record.output_tokens}"
        )
    return None


async def send(
    client, url: str, body: dict[str, Any], record: RequestRecord, origin: float, due: float | None = None
) -> None:
    """One streamed request; any failure is written into the record, never raised.
    `sent_s` is stamped when the request's headers are written on its connection
    (httpcore's trace), so time spent waiting for a connection or the event loop is
    the request's client queue time (`queue_s`), never part of its TTFT."""
    record.sent_s = time.perf_counter() - origin
    record.posted_s = record.sent_s
    record.due_s = record.sent_s if due is None else min(due, record.sent_s)

    async def written(name: str, info: dict[str, Any]) -> None:
        if name.endswith("send_request_headers.started"):
            record.sent_s = time.perf_counter() - origin

    try:
        async with client.stream("POST", url, json=body, extensions={"trace": written}) as response:
            record.queue_s = record.sent_s - record.due_s
            record.status = response.status_code
            if response.status_code != 200:
                detail = (await response.aread()).decode(errors="replace")[:200]
                record.error = f"HTTP {response.status_code}: {detail}"
                record.end_s = time.perf_counter() - origin
                return
            async for line in response.aiter_lines():
                _on_line(line, record, origin)
        record.end_s = time.perf_counter() - origin
        if record.error is None:
            record.error = stream_verdict(record)
    except Exception as exc:  # noqa: BLE001 - a dropped connection is a measured outcome
        record.end_s = time.perf_counter() - origin  # a failure ends the request too (duration counts it)
        record.queue_s = record.sent_s - record.due_s
        record.error = f"{type(exc).__name__} after {len(record.chunk_s)} chunks: {exc}"[:300]


def _on_line(line: str, record: RequestRecord, origin: float) -> None:
    if not line.startswith("data:"):
        return
    payload = line[5:].strip()
    if payload == "[DONE]":
        return
    event = json.loads(payload)
    choices = event.get("choices")
    if choices:  # a token event, its text empty or not (vLLM's client)
        record.chunk_s.append(time.perf_counter() - origin)
        count = token_ids_in(choices[0])
        if count is not None:
            record.chunk_tokens = (record.chunk_tokens or [0] * (len(record.chunk_s) - 1)) + [count]
        elif record.chunk_tokens is not None:
            record.chunk_tokens.append(0)
    error = stream_error(event)
    if error and record.error is None:
        record.error = error
    usage = event.get("usage")
    if usage:
        record.prompt_tokens = usage.get("prompt_tokens")
        record.output_tokens = usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details") or {}
        record.cached_tokens = details.get("cached_tokens")


async def run_load(url: str, bodies: list[dict[str, Any]], spec, origin: float, on_done=None) -> list[RequestRecord]:
    """Warm-up requests at the load's concurrency, then the measured ones under the load."""
    async with open_client(spec) as client:
        records = await warm_up(client, url, bodies, spec.warmup_requests, origin, spec.load.in_flight_limit)
        return records + await measure(
            client, url, bodies, spec.load, spec.warmup_requests, spec.num_requests, origin, on_done
        )


def open_client(spec, loads=()):
    """One HTTP client for every load of the run, with no limit on its connections: as
    many as requests in flight (vLLM's client without max-concurrency), so the client
    never queues a request the load meant to send; a load's own cap is its semaphore
    (measure). No pool timeout either: a request's time limit is request_timeout_s."""
    import httpx

    return httpx.AsyncClient(
        timeout=httpx.Timeout(spec.request_timeout_s, pool=None),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
    )


async def warm_up(
    client, url: str, bodies: list[dict[str, Any]], count: int, origin: float, concurrency: int | None = 1
) -> list[RequestRecord]:
    """`count` warm-up requests, `concurrency` of them in flight (the load's: a server
    warmed one request at a time has not met the batch sizes the load brings; None:
    all at once, an uncapped open loop's)."""
    records = [RequestRecord(i, True, 0.0) for i in range(count)]
    gate = asyncio.Semaphore(concurrency) if concurrency else None

    async def one(r: RequestRecord) -> None:
        if gate is None:
            await send(client, url, bodies[r.index % len(bodies)], r, origin)
            return
        async with gate:
            await send(client, url, bodies[r.index % len(bodies)], r, origin)

    await asyncio.gather(*(one(r) for r in records))
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
        arrival = start + delay
        record.arrival_s, record.load_start_s = arrival - origin, start - origin
        await asyncio.sleep(max(0.0, arrival - time.perf_counter()))  # from one start: no drift
        body = bodies[record.index % len(bodies)]
        if gate is None:
            # due at its arrival: a late wake-up of the event loop is client queue time
            await send(client, url, body, record, origin, arrival - origin)
        else:
            full = gate.locked()
            async with gate:
                # due when its slot freed (a closed loop's next request), else at its arrival
                due = time.perf_counter() if full else arrival
                await send(client, url, body, record, origin, due - origin)
        if on_done:
            on_done(record)

    delays = arrival_delays(count, load) if delays is None else delays
    start = time.perf_counter()
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
                r.end_s = now if sent else None  # a request cut short ends now; one never sent, never
    return records


def arrival_delays(count: int, load) -> list[float]:
    """Seconds from the start of the measured phase to each request's arrival: all at
    once for a closed loop; for an open loop, seeded gaps at each request's rate
    (vLLM's `get_request`): exponential for poisson, Gamma(shape B, scale 1/(rate B))
    for gamma with burstiness B (mean 1/rate, coefficient of variation 1/sqrt(B)).
    At a fixed rate the gaps are then scaled so that the last arrival is at
    (count - 1) / rate: the offered rate, (count - 1) / (last - first arrival), is the
    nominal one exactly (vLLM normalises the same way, to count / rate for its first
    request's gap included); otherwise a 16-request draw is off by ~25% either way."""
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
    if load.ramp is None and count > 1 and delays[-1] > 0:
        scale = (count - 1) / load.request_rate / delays[-1]
        delays = [d * scale for d in delays]
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
