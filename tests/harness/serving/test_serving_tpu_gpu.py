"""Serving, TPU versus GPU (issue 47): tokens are tokens, not text (a chunk with
`choices` is a token event whatever its text; token ids checked against usage); a
request fails only on a transport or HTTP error, an error in the stream, no token, or
fewer tokens than usage reports."""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import contextmanager

import pytest
from test_serve_loads import serve_spec, url

from harness.metrics import serving_metrics
from harness.serving.client import RequestRecord, request_body, stream_verdict, token_ids_in
from harness.serving.loads import drive

from fake_openai import serve as fake_server

LENGTH = 8  # the fake streams it in chunks of 1, 1, 2, 1, 1, 2 tokens: 6 chunks for 8 tokens
CHUNKS = 6


@contextmanager
def fake(**quirks):
    server = fake_server(0, delay=0.001, quirks=quirks)  # bound at once: no port race
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def measured_requests(port: int, n: int = 3, **fields) -> list[dict]:
    """n requests of LENGTH tokens through bench's own request bodies and load driver."""
    spec = serve_spec(port, num_requests=n, warmup_requests=0, output_tokens=LENGTH, **fields)
    bodies = [request_body("completions", "fake-model", {"text": f"p {i}"}, spec) for i in range(n)]
    facts = asyncio.run(drive(url(port), bodies, spec, time.perf_counter()))
    return [r for r in facts["requests"] if not r["warmup"]]


# --------------------------------------------------------------------------- tokens, not text
def test_tokens_with_empty_text_are_tokens_and_their_ids_match_usage():
    """A model whose tokens decode to no text (the README's random-weight model under
    vLLM): every request succeeds, each chunk with choices is a token event, the token
    ids the server sent add up to usage's count, and TTFT and TPOT exist."""
    with fake(empty_text=True) as port:
        requests = measured_requests(port)
    assert [r["error"] for r in requests] == [None] * 3
    for r in requests:
        assert len(r["chunk_s"]) == CHUNKS and r["chunk_tokens"] == [1, 1, 2, 1, 1, 2]
        assert sum(r["chunk_tokens"]) == r["output_tokens"] == LENGTH
    metrics = serving_metrics({"requests": requests}, {})
    assert metrics["num_completed"] == 3 and metrics["ttft_s"]["n"] == 3 and metrics["tpot_s"]["n"] == 3
    assert metrics["itl_s"]["n"] == 3 * (CHUNKS - 1)  # the gaps between token chunks, empty text or not


def test_without_token_ids_chunks_are_counted_never_tokens():
    """serve.token_ids off (a server that refuses unknown fields): the body does not ask,
    the chunks are still token events, and the tokens come from usage alone."""
    with fake(empty_text=True) as port:
        requests = measured_requests(port, token_ids=False)
    assert [r["error"] for r in requests] == [None] * 3
    assert all(r["chunk_tokens"] is None and len(r["chunk_s"]) == CHUNKS for r in requests)
    assert all(r["output_tokens"] == LENGTH for r in requests)
    spec = serve_spec(port, token_ids=False)
    assert "return_token_ids" not in request_body("completions", "m", {"text": "x"}, spec)
    assert request_body("completions", "m", {"text": "x"}, serve_spec(port))["return_token_ids"] is True


def test_fewer_token_ids_than_usage_reports_fail_the_request():
    """usage says one token more than the stream carried: a token went missing."""
    with fake(usage_extra=1) as port:
        requests = measured_requests(port)
    expected = f"fewer tokens in the stream than usage reports: {LENGTH} token ids, usage {LENGTH + 1}"
    assert [r["error"] for r in requests] == [expected] * 3
    assert serving_metrics({"requests": requests}, {})["num_completed"] == 0


def test_an_error_event_inside_a_200_stream_fails_the_request():
    with fake(error_after=2) as port:
        requests = measured_requests(port)
    assert [r["status"] for r in requests] == [200] * 3
    assert [r["error"] for r in requests] == ["server error in the stream: injected engine failure"] * 3


@pytest.mark.parametrize(
    ("choice", "count"),
    [
        ({"text": "", "token_ids": [1, 2]}, 2),
        ({"text": "", "logprobs": {"tokens": ["token_id:5"]}}, 1),  # completions + return_tokens_as_token_ids
        ({"delta": {"content": ""}, "logprobs": {"content": [{}, {}, {}]}}, 3),  # chat
        ({"text": "a"}, None),
    ],
)
def test_token_ids_are_read_where_a_server_sends_them(choice, count):
    assert token_ids_in(choice) == count


def test_a_stream_verdict_names_what_is_missing():
    """No chunk with choices, however many tokens usage claims; no usage; too few ids."""
    empty = RequestRecord(0, False, 0.0, output_tokens=4)
    assert stream_verdict(empty) == "no token in the stream: no chunk with choices (usage reports 4 output tokens)"
    no_usage = RequestRecord(0, False, 0.0, chunk_s=[0.1])
    assert stream_verdict(no_usage).startswith("no usage in the stream")
    short = RequestRecord(0, False, 0.0, chunk_s=[0.1, 0.2], chunk_tokens=[1, 1], output_tokens=3)
    assert stream_verdict(short).endswith("2 token ids, usage 3")
    whole = RequestRecord(0, False, 0.0, chunk_s=[0.1, 0.2], chunk_tokens=[1, 2], output_tokens=3)
    assert stream_verdict(whole) is None
