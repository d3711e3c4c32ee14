"""Driving the serve section's load inside the worker: one load, a sweep (one point per
value, each its own record, one sweep id) or the SLO search (the highest request rate
meeting the SLO at its percentile). Every point runs on the same client and server,
after the same warm-up. Raw timestamps only, plus the search's decisions; statistics
are recomputed by the parent (harness.records.record).

Bounds: a sweep sends at most len(values) x num_requests measured requests, a search
at most (2 + max_steps) x num_requests, and both stop at max_duration_s (the point in
flight is cut short at that moment, see client.measure).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from harness.figures.metrics import slo_at_percentile
from harness.serving import server_side
from harness.serving.client import measure, open_client, warm_up


def prompt_count(spec) -> int:
    """How many distinct prompts the run can use: warm-up plus every point's requests
    (indices keep counting across points, so a later point reuses no earlier prompt
    and a prefix cache sees the same workload at every point)."""
    points = len(spec.sweep.values) if spec.sweep else (2 + spec.slo_search.max_steps) if spec.slo_search else 1
    return spec.warmup_requests + points * spec.num_requests


def point_load(spec, value):
    """The load of one sweep point or search rate: the load section with the value set."""
    axis = "request_rate" if spec.slo_search else spec.sweep.axis
    return spec.load.model_copy(update={axis: value})


async def drive(
    url: str, bodies: list[dict[str, Any]], spec, origin: float, on_done=None, delays: list[float] | None = None
) -> dict[str, Any]:
    """`delays`: a trace's arrival times for the measured requests (else the load's)."""
    loads = [point_load(spec, v) for v in spec.sweep.values] if spec.sweep else []
    if spec.slo_search:
        loads = [point_load(spec, spec.slo_search.high)]
    async with open_client(spec, loads) as client:
        first_load = loads[0] if loads else spec.load
        warm = await warm_up(client, url, bodies, spec.warmup_requests, origin, first_load.in_flight_limit)
        facts: dict[str, Any] = {"requests": [r.to_json() for r in warm]}
        if spec.sweep:
            facts["sweep"] = await _sweep(client, url, bodies, spec, origin, on_done)
        elif spec.slo_search:
            facts["slo_search"] = await _search(client, url, bodies, spec, origin, on_done)
        else:
            around = await _before_point(client, url, spec)
            measured = await measure(
                client, url, bodies, spec.load, spec.warmup_requests, spec.num_requests, origin, on_done, None, delays
            )
            facts["requests"] += [r.to_json() for r in measured]
            facts.update(await _after_point(client, url, around))
        return facts


async def _before_point(client, url: str, spec) -> dict[str, Any]:
    """Before a measured load: the prefix cache reset (serve.reset_prefix_cache) and the
    server's /metrics read."""
    root = server_side.root_of(url)
    reset = await server_side.reset_prefix_cache(client, root) if spec.reset_prefix_cache else None
    before = await server_side.read_metrics(client, root)
    sampling = None
    if before is not None:  # a server with vLLM's /metrics: its KV-cache gauge sampled through the load
        stop, readings = asyncio.Event(), []
        task = asyncio.create_task(server_side.sample_kv_usage(client, root, stop, readings))
        sampling = (stop, readings, task)
    return {"prefix_cache_reset": reset, "before": before, "sampling": sampling}


async def _after_point(client, url: str, before: dict[str, Any]) -> dict[str, Any]:
    peak = None
    if before["sampling"] is not None:
        stop, readings, task = before["sampling"]
        stop.set()
        await task
        peak = max(readings, default=None)
    after = await server_side.read_metrics(client, server_side.root_of(url))
    if after is not None and server_side.kv_usage(after) is not None:
        peak = max(peak or 0.0, server_side.kv_usage(after))
    return {
        "prefix_cache_reset": before["prefix_cache_reset"],
        "server_metrics": server_side.around(before["before"], after, peak),
    }


async def _sweep(client, url, bodies, spec, origin, on_done) -> dict[str, Any]:
    sweep = spec.sweep
    deadline = time.perf_counter() - origin + sweep.max_duration_s
    points: list[dict[str, Any]] = []
    first = spec.warmup_requests
    for i, value in enumerate(sweep.values):
        point = {"index": i, "value": value, "load": point_load(spec, value).model_dump(mode="json")}
        if time.perf_counter() - origin >= deadline:
            point["not_run"] = f"the sweep's max_duration_s ({sweep.max_duration_s:g} s) was reached before this point"
        else:
            around = await _before_point(client, url, spec)
            records = await measure(
                client, url, bodies, point_load(spec, value), first, spec.num_requests, origin, on_done, deadline
            )
            point["requests"] = [r.to_json() for r in records]
            point.update(await _after_point(client, url, around))
        first += spec.num_requests
        points.append(point)
    return {
        "id": uuid.uuid4().hex[:16],
        "axis": sweep.axis,
        "values": list(sweep.values),
        "max_duration_s": sweep.max_duration_s,
        "points": points,
    }


async def _search(client, url, bodies, spec, origin, on_done) -> dict[str, Any]:
    """low, then high, then bisection of [highest met, lowest not met]."""
    search, slo = spec.slo_search, spec.slo.model_dump()
    deadline = time.perf_counter() - origin + search.max_duration_s
    points: list[dict[str, Any]] = []
    state = {"first": spec.warmup_requests}

    async def probe(rate: float) -> bool | None:
        """Measure one rate; whether it met the SLO (None: cut short by the deadline)."""
        around = await _before_point(client, url, spec)
        records = await measure(
            client, url, bodies, point_load(spec, rate), state["first"], spec.num_requests, origin, on_done, deadline
        )
        server = await _after_point(client, url, around)
        state["first"] += spec.num_requests
        requests = [r.to_json() for r in records]
        verdict = slo_at_percentile(requests, slo)
        cut = any((r["error"] or "").endswith("(max_duration_s) was reached") for r in requests)
        points.append(
            {
                "rate": rate,
                "requests": requests,
                "met": None if cut else verdict["met"],
                "values": verdict["values"],
                **server,
            }
        )
        return None if cut else verdict["met"]

    def out_of_time() -> bool:
        return time.perf_counter() - origin >= deadline

    low_met = await probe(search.low)
    if low_met is not True:
        stopped = "max_duration_s" if low_met is None else "low did not meet the SLO"
        return _found(search, points, None, (None, search.low), stopped, 0)
    if out_of_time():
        return _found(search, points, search.low, (search.low, None), "max_duration_s", 0)
    high_met = await probe(search.high)
    if high_met is True:
        return _found(search, points, search.high, (search.high, None), "high met the SLO (raise slo_search.high)", 0)
    if high_met is None:
        return _found(search, points, search.low, (search.low, None), "max_duration_s", 0)
    good, bad, steps, stopped = search.low, search.high, 0, "tolerance"
    while bad - good > search.tolerance:
        if steps >= search.max_steps:
            stopped = "max_steps"
            break
        if out_of_time():
            stopped = "max_duration_s"
            break
        mid = (good + bad) / 2
        met = await probe(mid)
        steps += 1
        if met is None:
            stopped = "max_duration_s"
            break
        good, bad = (mid, bad) if met else (good, mid)
    return _found(search, points, good, (good, bad), stopped, steps)


def _found(search, points, rate, bracket, stopped: str, steps: int) -> dict[str, Any]:
    return {
        "max_rate_req_s": rate,
        "bracket": list(bracket),
        "stopped": stopped,
        "bisection_steps": steps,
        "low": search.low,
        "high": search.high,
        "tolerance": search.tolerance,
        "max_steps": search.max_steps,
        "max_duration_s": search.max_duration_s,
        "points": points,
    }
