"""A serving engine defined outside bench's core, for tests/harness/tasks/test_tasks.py: it "serves"
each request with a fixed, known timeline, so its metrics are known exactly."""

from __future__ import annotations

from typing import Any

from harness.serving.client import RequestRecord
from harness.serving.engines import Engine


def serve(scenario, events, origin: float) -> dict[str, Any]:
    spec = scenario.serve
    requests = []
    for index in range(spec.warmup_requests + spec.num_requests):
        sent = float(index)  # one request a second, each: first token after 0.25 s, then 0.125 s a token
        chunks = [sent + 0.25 + 0.125 * i for i in range(spec.output_tokens)]
        record = RequestRecord(
            index, index < spec.warmup_requests, sent, chunks, chunks[-1], 5, spec.output_tokens, 200
        )
        requests.append(record.to_json())
    return {"requests": requests, "server": {"engine": "fake", "model": "none"}}


ENGINE = Engine("fake", serve, lambda: {"kind": "cpu", "name": "fake", "count": 1})
