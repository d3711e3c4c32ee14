"""Serving metrics against an independent implementation of vLLM's definitions
(benchmarks/serve.py `calculate_metrics`, restated here from its documented behaviour,
not by calling harness.metrics): E2EL to the last content chunk, TPOT over the tokens
after the first and only for requests with more than one, goodput counting a one-token
request's TPOT as 0, every SLO met with <=."""

from __future__ import annotations

import statistics

import numpy as np
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


def test_goodput_counts_a_request_that_misses_only_the_ttft_target_as_bad():
    """TTFT 0.25 s alone: requests 1 (0.3 s) and 2 (0.7 s) miss it, so 3 of 5 are good;
    with a TPOT target too, request 0 (TTFT 0.2 s, TPOT 0.05 s) is good, 4 good of 5 is
    wrong: request 1 misses only TTFT, its TPOT counts as 0."""
    duration = 1.30 + 0.05 - 0.0
    got = serving_metrics({"requests": REQUESTS}, {"ttft_s": 0.25, "tpot_s": None, "e2el_s": None})
    assert got["goodput_req_s"] == pytest.approx(3 / duration)
    both = serving_metrics({"requests": REQUESTS}, {"ttft_s": 0.25, "tpot_s": 0.1, "e2el_s": None})
    assert both["goodput_req_s"] == pytest.approx(3 / duration)
    assert both["goodput_req_s"] == pytest.approx(
        vllm_like(REQUESTS, {"ttft_s": 0.25, "tpot_s": 0.1, "e2el_s": None})["goodput"]
    )


def test_inter_token_latencies_are_every_gap_between_content_chunks():
    """ITL pooled over requests, each gap recomputed by hand (numpy on the chunk times):
    a shifted or mis-paired gap changes the values even when their count stays."""
    gaps = np.concatenate([np.diff(r["chunk_s"]) for r in REQUESTS])
    itl = serving_metrics({"requests": REQUESTS}, {"ttft_s": None, "tpot_s": None, "e2el_s": None})["itl_s"]
    assert itl["n"] == len(gaps) == 9
    assert (itl["min"], itl["max"]) == pytest.approx((gaps.min(), gaps.max()))  # 0.02 and 0.2
    assert itl["mean"] == pytest.approx(gaps.mean()) and itl["median"] == pytest.approx(np.median(gaps))
    assert itl["p90"] == pytest.approx(np.percentile(gaps, 90))


def test_throughputs_and_counts_are_over_the_measured_window():
    """Warm-up requests are left out; a failed request counts as sent, not completed;
    throughput is over first send to last stream end."""
    warm = {**request(9, -1.0, [-0.5, -0.4], 2), "warmup": True}
    failed = {**request(5, 0.5, [0.6], 1), "error": "HTTPError: 500", "output_tokens": None}
    got = serving_metrics({"requests": [warm, *REQUESTS, failed]}, {"ttft_s": None, "tpot_s": None, "e2el_s": None})
    duration = 1.35  # first send 0.0, last end 1.30 + 0.05 (the failed request's end does not count)
    output, prompt = 4 + 1 + 3 + 1 + 5, 5 * 10
    assert (got["num_requests"], got["num_completed"], got["num_errors"]) == (6, 5, 1)
    assert got["errors"] == ["HTTPError"] and got["duration_s"] == pytest.approx(duration)
    assert got["output_throughput_tok_s"] == pytest.approx(output / duration)
    assert got["total_throughput_tok_s"] == pytest.approx((output + prompt) / duration)
    assert got["request_throughput_req_s"] == pytest.approx(5 / duration)
    assert got["goodput_req_s"] is None  # no target: no goodput
    tpots = [(0.35 - 0.20) / 3, (1.30 - 0.90) / 2, (0.58 - 0.50) / 4]
    assert got["output_tok_s_per_user"] == pytest.approx(1 / np.median(tpots))
