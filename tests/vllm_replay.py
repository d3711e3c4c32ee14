"""Runs vLLM's own request function (async_request_openai_completions) on a recorded
stream (tests/fixtures/serving/vllm_stream.json) and prints what it reports, as JSON.
Run by vLLM's interpreter (CI's .venv-vllm): no bench import, no network. The HTTP
session is a stand-in that replays the stream's events, and the module's clock reads
each event's recorded arrival, so vLLM's figures come from the same timestamps bench's
are computed from.

    python tests/vllm_replay.py FIXTURE
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import sys

MODULES = ("vllm.benchmarks.lib.endpoint_request_func", "vllm.benchmarks.endpoint_request_func")


class Clock:
    now = 0.0

    def perf_counter(self) -> float:
        return self.now

    def __getattr__(self, name):  # the rest of `time` (time.time, sleep) as it is
        import time

        return getattr(time, name)


class Content:
    def __init__(self, events, clock):
        self.events, self.clock = events, clock

    async def _chunks(self):
        for event in self.events:
            self.clock.now = event["t"]
            yield b"data: [DONE]\n\n" if event.get("done") else f"data: {json.dumps(event['data'])}\n\n".encode()

    def iter_any(self):
        return self._chunks()

    def iter_chunked(self, n):
        return self._chunks()

    def __aiter__(self):
        return self._chunks()


class Response:
    status = 200
    reason = "OK"

    def __init__(self, content):
        self.content = content

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


class Session:
    def __init__(self, events, clock):
        self.events, self.clock = events, clock

    def post(self, *args, **kwargs):
        return Response(Content(self.events, self.clock))


def request_input(module, output_len: int):
    values = {"prompt": "x", "api_url": "http://127.0.0.1:1/v1/completions", "prompt_len": 3}
    values |= {"output_len": output_len, "model": "m", "model_name": "m"}
    fields = {f.name for f in dataclasses.fields(module.RequestFuncInput)}
    return module.RequestFuncInput(**{k: v for k, v in values.items() if k in fields})


def main(path: str) -> None:
    fixture = json.loads(open(path).read())
    for name in MODULES:
        try:
            module = importlib.import_module(name)
            break
        except ImportError:
            continue
    else:
        raise SystemExit(f"none of {MODULES} imports")
    clock = Clock()
    clock.now = fixture["posted_s"]
    module.time = clock  # the module's `time.perf_counter()` reads the recorded arrivals
    session = Session(fixture["events"], clock)
    output = asyncio.run(module.async_request_openai_completions(request_input(module, 5), session))
    keys = ("success", "ttft", "itl", "latency", "output_tokens")
    print(json.dumps({k: getattr(output, k) for k in keys} | {"module": module.__name__}))


if __name__ == "__main__":
    main(sys.argv[1])
