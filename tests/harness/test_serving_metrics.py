"""Serving metrics against an independent implementation of vLLM's definitions
(benchmarks/serve.py `calculate_metrics`, restated here from its documented behaviour,
not by calling harness.metrics): E2EL to the last content chunk, TPOT over the tokens
after the first and only for requests with more than one, goodput counting a one-token
request's TPOT as 0, every SLO met with <=."""

from __future__ import annotations

import statistics

import pytest

from harness.metrics import serving_metrics


def vllm_like(requests: list[dict], slo: dict) -> dict:
    ttfts, tpots, all_tpots, e2els = [], [], [], []
    for r in requests:
        ttft = r["chunk_s"][0] - r["sent_s"]
        latency = r["chunk_s"][-1] - r["sent_s"]  # most_recent_timestamp - start
        tpot = 0.0
        if r["output_tokens"] > 1:
            tpot = (latency - ttft) / (r["output_tokens"] - 1)
            tpots.append(tpot)
        all_tpots.append(tpot)
        ttfts.append(ttft)
        e2els.append(latency)
    good = 0
    for ttft, tpot, e2el in zip(ttfts, all_tpots, e2els):
        good += all(
            limit is None or value <= limit
            for value, limit in ((ttft, slo["ttft_s"]), (tpot, slo["tpot_s"]), (e2el, slo["e2el_s"]))
        )
    duration = max(r["end_s"] for r in requests) - min(r["sent_s"] for r in requests)
    return {
        "ttft": statistics.median(ttfts),
        "tpot": statistics.median(tpots),
        "e2el": statistics.median(e2els),
        "goodput": good / duration,
    }


def request(index, sent, chunks, tokens, end_extra=0.05):
    # end_s: the stream's last byte (usage chunk, [DONE]) comes after the last content
    return {
        "index": index,
        "warmup": False,
        "sent_s": sent,
        "chunk_s": chunks,
        "end_s": chunks[-1] + end_extra,
        "prompt_tokens": 10,
        "output_tokens": tokens,
        "status": 200,
        "error": None,
    }


REQUESTS = [
    request(0, 0.0, [0.20, 0.25, 0.30, 0.35], 4),
    request(1, 0.1, [0.40], 1),  # one output token: no TPOT, but TPOT 0 for goodput
    request(2, 0.2, [0.90, 1.10, 1.30], 3),  # slow TPOT (0.2 s)
    request(3, 0.3, [0.45], 1),
    request(4, 0.4, [0.50, 0.52, 0.54, 0.56, 0.58], 5),
]


@pytest.mark.parametrize(
    "slo",
    [
        {"ttft_s": 0.5, "tpot_s": 0.1, "e2el_s": None},
        {"ttft_s": None, "tpot_s": 0.05, "e2el_s": None},
        {"ttft_s": None, "tpot_s": None, "e2el_s": 0.3},
    ],
)
def test_serving_metrics_match_vllms_definitions(slo):
    got = serving_metrics({"requests": REQUESTS}, slo)
    expected = vllm_like(REQUESTS, slo)
    assert got["ttft_s"]["median"] == pytest.approx(expected["ttft"])
    assert got["tpot_s"]["median"] == pytest.approx(expected["tpot"])
    assert got["tpot_s"]["n"] == 3  # the one-token requests have no TPOT
    assert got["e2el_s"]["median"] == pytest.approx(expected["e2el"])
    assert got["goodput_req_s"] == pytest.approx(expected["goodput"])


def test_one_token_requests_pass_a_tpot_target():
    slo = {"ttft_s": None, "tpot_s": 0.01, "e2el_s": None}
    got = serving_metrics({"requests": [REQUESTS[1], REQUESTS[3]]}, slo)
    assert got["goodput_req_s"] == pytest.approx(2 / (0.45 + 0.05 - 0.1))
