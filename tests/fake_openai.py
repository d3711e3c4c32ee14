"""A small OpenAI-compatible streaming server for tests, with faults on demand.

Streams `max_tokens` tokens as server-sent events over chunked HTTP/1.1, some chunks
carrying two tokens (chunks are not tokens), then a usage event and [DONE]. Every
--fail-every'th request gets HTTP 500; every --drop-every'th request loses its
connection after two chunks (no terminating chunk: a protocol error for the client).

Latency that grows with load in a known way (--hold S): every request ends exactly S
seconds after it arrives, its first token after TTFT = --ttft-base + --ttft-per-request
x (requests in flight when it arrived, itself not counted), the other tokens spread
evenly up to S. A request's duration does not depend on the load, so with arrivals 1/r
apart a request finds ceil(r S) - 1 others in flight: the SLO TTFT <= a + b K holds up
to the rate (K + 1) / S, which a test can know exactly. GET /stats reports the most
requests held at once (peak_in_flight) and the most client connections open at once
(peak_connections), the server's own view of a load's concurrency; in process,
server.stats["arrivals"] maps each completion prompt to when its request was read.

Quirks on demand (`quirks` in serve(); --empty-text, --usage-extra N, --error-after N):
tokens whose text is empty (a random-weight model's, special tokens: still tokens),
usage reporting N more tokens than were streamed, and an error event
(`data: {"error": {...}}`, vLLM's) after N chunks of a 200 stream. A request with
`return_token_ids` gets each chunk's token ids (vLLM's `token_ids`).

A prefix cache, one word a token: usage.prompt_tokens_details.cached_tokens is the
longest run of leading words a request shares with any earlier request's prompt.

    python tests/fake_openai.py --port 8000 [--delay 0.005] [--fail-every 0] [--drop-every 0]
                                [--hold S --ttft-base A --ttft-per-request B]
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "fake-model"


def make_handler(
    delay: float,
    fail_every: int,
    drop_every: int,
    hold: float | None = None,
    ttft_base: float = 0.0,
    ttft_per_request: float = 0.0,
    stats: dict | None = None,
    quirks: dict | None = None,
):
    counter, lock = itertools.count(1), threading.Lock()
    quirks = quirks or {}
    text = "" if quirks.get("empty_text") else "tok "

    def token_event(take: int, ids: bool) -> bytes:
        choice = {"index": 0, "text": text * take, **({"token_ids": [7] * take} if ids else {})}
        return f"data: {json.dumps({'choices': [choice]})}\n\n".encode()

    seen: list[list[str]] = []  # every prompt so far, as words: the fake's prefix cache

    def usage_of(prompt: str, tokens: int) -> dict:
        words = prompt.split()
        with lock:
            cached = max((_shared(words, earlier) for earlier in seen), default=0)
            seen.append(words)
        details = {"cached_tokens": cached}
        reported = tokens + quirks.get("usage_extra", 0)
        return {"prompt_tokens": len(words), "completion_tokens": reported, "prompt_tokens_details": details}

    in_flight, connections = [0], [0]
    stats = stats if stats is not None else {}
    stats["peak_in_flight"] = 0  # the most requests held at once (--hold), for tests
    stats["peak_connections"] = 0  # the most client connections open at once

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):  # quiet
            pass

        def handle(self):
            """One client connection (its keep-alive requests included): counted while open."""
            with lock:
                connections[0] += 1
                stats["peak_connections"] = max(stats["peak_connections"], connections[0])
            try:
                super().handle()
            finally:
                with lock:
                    connections[0] -= 1

        def _json(self, code: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/health":
                self._json(200, {"status": "ok"})
            elif self.path == "/v1/models":
                self._json(200, {"data": [{"id": MODEL, "owned_by": "fake-engine"}]})
            elif self.path == "/stats":
                with lock:
                    self._json(200, dict(stats))
            elif self.path == "/metrics" and quirks.get("metrics"):
                self._prometheus()
            elif self.path == "/version":
                self._json(200, {"version": "fake-1.0"})
            else:
                self._json(404, {"error": "not found"})

        def _prometheus(self) -> None:
            """vLLM's /metrics in miniature (quirks: metrics): the KV-cache gauge at a
            tenth per request held, each completed request 0.25 s in the queue, one
            preemption and 3 of 4 prefix tokens hit per completed request."""
            with lock:
                held, done = in_flight[0], stats.get("completed", 0)
            text = (
                f'vllm:kv_cache_usage_perc{{model_name="{MODEL}"}} {held / 10}\n'
                f'vllm:request_queue_time_seconds_sum{{model_name="{MODEL}"}} {0.25 * done}\n'
                f'vllm:request_queue_time_seconds_count{{model_name="{MODEL}"}} {done}\n'
                f'vllm:num_preemptions_total{{model_name="{MODEL}"}} {done}\n'
                f'vllm:prefix_cache_queries_total{{model_name="{MODEL}"}} {4 * done}\n'
                f'vllm:prefix_cache_hits_total{{model_name="{MODEL}"}} {3 * done}\n'
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/completions" and self.path != "/v1/chat/completions":
                self._json(404, {"error": "not found"})  # no /reset_prefix_cache: not vLLM's dev mode
                return
            body = json.loads(body)
            prompt_text = body.get("prompt") or ""
            with lock:  # when each prompt's request was read: tests compare the client's send stamp
                stats.setdefault("arrivals", {})[prompt_text] = time.perf_counter()
            with lock:
                number = next(counter)
            if fail_every and number % fail_every == 0:
                self._json(500, {"error": "injected failure"})
                return
            tokens = int(body.get("max_tokens", 16))
            prompt = body.get("prompt") or " ".join(m["content"] for m in body.get("messages", []))
            ids = bool(body.get("return_token_ids"))
            if hold is not None:
                self._held(tokens, prompt, ids)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            sent, chunk = 0, 0
            while sent < tokens:
                take = 2 if chunk % 3 == 2 and tokens - sent >= 2 else 1
                self._chunk(token_event(take, ids))
                sent, chunk = sent + take, chunk + 1
                if chunk == quirks.get("error_after"):
                    error = {"error": {"object": "error", "message": "injected engine failure", "code": 500}}
                    self._chunk(f"data: {json.dumps(error)}\n\n".encode())
                    break
                if drop_every and number % drop_every == 0 and chunk == 2:
                    self.close_connection = True
                    self.connection.shutdown(2)  # mid-stream, no terminating chunk
                    return
                time.sleep(delay)
            usage = {"choices": [], "usage": usage_of(prompt, tokens)}
            self._chunk(f"data: {json.dumps(usage)}\n\n".encode())
            self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

        def _held(self, tokens: int, prompt: str, ids: bool) -> None:
            """One token per chunk: the first at TTFT, the last `hold` s after arrival."""
            arrived = time.perf_counter()
            with lock:
                others = in_flight[0]
                in_flight[0] += 1
                stats["peak_in_flight"] = max(stats["peak_in_flight"], in_flight[0])
            try:
                ttft = ttft_base + ttft_per_request * others
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(tokens):
                    at = ttft + (hold - ttft) * i / max(1, tokens - 1)
                    time.sleep(max(0.0, arrived + at - time.perf_counter()))
                    self._chunk(token_event(1, ids))
            finally:
                with lock:
                    in_flight[0] -= 1
                    stats["completed"] = stats.get("completed", 0) + 1
            usage = {"choices": [], "usage": usage_of(prompt, tokens)}
            self._chunk(f"data: {json.dumps(usage)}\n\n".encode())
            self._chunk(b"data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()

    return Handler


def _shared(a: list[str], b: list[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # a burst of new connections is not refused by the listen backlog


def serve(
    port: int,
    delay: float = 0.005,
    fail_every: int = 0,
    drop_every: int = 0,
    hold: float | None = None,
    ttft_base: float = 0.0,
    ttft_per_request: float = 0.0,
    quirks: dict | None = None,
) -> ThreadingHTTPServer:
    stats: dict = {}
    handler = make_handler(delay, fail_every, drop_every, hold, ttft_base, ttft_per_request, stats, quirks)
    server = _Server(("127.0.0.1", port), handler)
    server.daemon_threads = True
    server.stats = stats  # peak_in_flight: the most requests held at once (also GET /stats)
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.005)
    parser.add_argument("--fail-every", type=int, default=0)
    parser.add_argument("--drop-every", type=int, default=0)
    parser.add_argument("--hold", type=float, default=None)
    parser.add_argument("--ttft-base", type=float, default=0.0)
    parser.add_argument("--ttft-per-request", type=float, default=0.0)
    parser.add_argument("--empty-text", action="store_true")
    parser.add_argument("--usage-extra", type=int, default=0)
    parser.add_argument("--error-after", type=int, default=0)
    args = parser.parse_args()
    quirks = {"empty_text": args.empty_text, "usage_extra": args.usage_extra, "error_after": args.error_after}
    print(f"fake OpenAI server on 127.0.0.1:{args.port}", flush=True)
    serve(
        args.port,
        args.delay,
        args.fail_every,
        args.drop_every,
        args.hold,
        args.ttft_base,
        args.ttft_per_request,
        quirks,
    ).serve_forever()


if __name__ == "__main__":
    main()
