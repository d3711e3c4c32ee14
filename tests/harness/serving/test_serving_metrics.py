"""Serving metrics against an independent implementation of vLLM's definitions
(benchmarks/serve.py `calculate_metrics`, restated here from its documented behaviour,
not by calling harness.figures.metrics): E2EL to the last content chunk, TPOT over the tokens
after the first and only for requests with more than one, goodput counting a one-token
request's TPOT as 0, every SLO met with <=."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from harness.figures.metrics import serving_metrics


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
    duration = 1.35  # first send 0.0, last end 1.30 + 0.05 (the failed request ended earlier, at 0.65)
    output, prompt = 4 + 1 + 3 + 1 + 5, 5 * 10
    assert (got["num_requests"], got["num_completed"], got["num_errors"]) == (6, 5, 1)
    assert got["errors"] == ["HTTPError"] and got["duration_s"] == pytest.approx(duration)
    assert got["output_throughput_tok_s"] == pytest.approx(output / duration)
    assert got["total_throughput_tok_s"] == pytest.approx((output + prompt) / duration)
    assert got["request_throughput_req_s"] == pytest.approx(5 / duration)
    assert got["goodput_req_s"] is None  # no target: no goodput
    tpots = [(0.35 - 0.20) / 3, (1.30 - 0.90) / 2, (0.58 - 0.50) / 4]
    assert got["output_tok_s_per_user"] == pytest.approx(1 / np.median(tpots))


def _timed(index, sent, ttft, tokens, tpot, error=None, warmup=False):
    chunks = [sent + ttft + i * tpot for i in range(tokens)]
    return {**request(index, sent, chunks, tokens), "error": error, "warmup": warmup}


def test_slo_at_a_percentile_is_numpys_percentile_of_each_target():
    from harness.figures.metrics import slo_at_percentile

    requests = [_timed(i, 0.1 * i, ttft, 3, 0.01 * (i + 1)) for i, ttft in enumerate([0.1, 0.3, 0.2, 0.5, 0.4])]
    requests.append(_timed(9, 0.0, 0.05, 1, 0.0))  # one token: TPOT 0 for the SLO
    requests.append(_timed(10, 0.0, 9.0, 3, 1.0, warmup=True))  # warm-up: not counted
    slo = {"percentile": 90, "ttft_s": 0.46, "tpot_s": 0.05, "e2el_s": None}
    got = slo_at_percentile(requests, slo)
    ttfts = [0.1, 0.3, 0.2, 0.5, 0.4, 0.05]
    tpots = [0.01, 0.02, 0.03, 0.04, 0.05, 0.0]
    assert got["values"] == pytest.approx({"ttft_s": np.percentile(ttfts, 90), "tpot_s": np.percentile(tpots, 90)})
    assert got["percentile"] == 90 and got["failed"] == 0
    assert got["met"] is True  # p90s 0.45 s and 0.045 s, within 0.46 and 0.05
    assert slo_at_percentile(requests, {**slo, "ttft_s": 0.44})["met"] is False
    assert slo_at_percentile(requests, {**slo, "tpot_s": 0.044})["met"] is False
    assert slo_at_percentile(requests, {**slo, "percentile": None}) is None
    failed = [*requests, _timed(11, 0.0, 0.1, 2, 0.01, error="timeout")]
    assert slo_at_percentile(failed, slo)["failed"] == 1 and slo_at_percentile(failed, slo)["met"] is False
    assert slo_at_percentile([requests[-1]], slo)["met"] is False  # nothing measured completed


def test_achieved_rate_is_requests_over_the_span_of_sends():
    from harness.figures.metrics import achieved_rate

    sends = [{"sent_s": t} for t in (3.0, 0.5, 1.0, 2.0)]
    assert achieved_rate(sends) == pytest.approx(3 / 2.5)
    assert achieved_rate(sends[:1]) is None and achieved_rate([{"sent_s": 1.0}, {"sent_s": 1.0}]) is None
    assert achieved_rate(sends[1:3]) == pytest.approx(1 / 0.5)  # two sends
    for times in ([0.0, 0.0, 1.0], [0.0, 1.0, 1.0]):  # ties at either end
        assert achieved_rate([{"sent_s": t} for t in times]) == 2.0


def test_the_slo_search_answer_is_the_highest_rate_that_met():
    from harness.figures.metrics import slo_search_summary

    slo = {"percentile": 50, "ttft_s": 0.25, "tpot_s": None, "e2el_s": None}

    def point(rate, ttft, met=True):
        reqs = [_timed(i, i / rate, ttft, 2, 0.01) for i in range(3)]
        return {"rate": rate, "met": met, "requests": reqs}

    points = [point(1.0, 0.1), point(8.0, 0.5), point(4.0, 0.2), point(6.0, 0.3, met=None)]
    raw = {
        "requests": [_timed(0, 0.0, 0.1, 2, 0.01, warmup=True)],
        "slo_search": {"points": points, "stopped": "tolerance", "bracket": [4.0, 6.0], "bisection_steps": 2},
    }
    summary, requests = slo_search_summary(raw, slo)
    assert summary["max_rate_req_s"] == 4.0 and summary["measured_at"] == "the highest rate meeting the SLO"
    assert [(p["rate_req_s"], p["met"], p["cut_short"]) for p in summary["points"]] == [
        (1.0, True, False),
        (8.0, False, False),
        (4.0, True, False),
        (6.0, None, True),  # cut short: no verdict whatever its values
    ]
    assert summary["points"][2]["values"] == {"ttft_s": pytest.approx(0.2)}
    assert summary["points"][0]["achieved_rate_req_s"] == pytest.approx(1.0)
    assert [p["failed"] for p in summary["points"]] == [0, 0, 0, 0]
    assert summary["targets"] == {"ttft_s": 0.25} and summary["percentile"] == 50
    assert (summary["stopped"], summary["bracket"], summary["bisection_steps"]) == ("tolerance", [4.0, 6.0], 2)
    assert requests == raw["requests"] + points[2]["requests"]
    raw["slo_search"]["points"] = [point(2.0, 0.6), point(1.0, 0.5)]
    summary, requests = slo_search_summary(raw, slo)
    assert summary["max_rate_req_s"] is None and requests[1:] == raw["slo_search"]["points"][1]["requests"]
    assert summary["measured_at"] == "the lowest rate measured (no rate met the SLO)"


def test_request_latencies_follow_vllms_definitions():
    from harness.figures.metrics import meets_slo, request_latencies

    lat = request_latencies({"sent_s": 1.0, "chunk_s": [1.25, 1.5, 2.0], "output_tokens": 3})
    assert lat == pytest.approx({"ttft_s": 0.25, "e2el_s": 1.0, "tpot_s": 0.375, "output_tokens": 3})
    one = request_latencies({"sent_s": 1.0, "chunk_s": [1.25], "output_tokens": 1})
    assert one["tpot_s"] is None and meets_slo(one, {"tpot_s": 0.0}) and not meets_slo(one, {"ttft_s": 0.2})
    empty = request_latencies({"sent_s": 1.0, "chunk_s": [], "output_tokens": None})
    assert empty == {"ttft_s": None, "e2el_s": None, "tpot_s": None, "output_tokens": None}
    assert not meets_slo(empty, {"ttft_s": 1.0}) and meets_slo(empty, {"ttft_s": None})
    assert meets_slo(lat, {"ttft_s": 0.25, "tpot_s": 0.375, "e2el_s": 1.0})  # targets are met with <=
    assert not meets_slo(lat, {"e2el_s": 0.99})


@pytest.mark.parametrize("tokens, met", [(None, True), (0, True), (1, True), (2, False), (5, False)])
def test_a_missing_tpot_counts_as_0_only_for_a_request_of_at_most_one_token(tokens, met):
    from harness.figures.metrics import meets_slo

    assert meets_slo({"tpot_s": None, "output_tokens": tokens}, {"tpot_s": 0.1}) is met


def test_a_load_with_nothing_measured_or_completed_has_no_rates():
    warm = [{**request(0, 0.0, [0.1, 0.2], 2), "warmup": True}]
    nothing = serving_metrics({"requests": warm}, {"ttft_s": 0.5, "tpot_s": None, "e2el_s": None})
    assert nothing["duration_s"] == 0.0 and nothing["num_requests"] == 0
    for key in ("output_throughput_tok_s", "total_throughput_tok_s", "request_throughput_req_s", "goodput_req_s"):
        assert nothing[key] is None, key
    failed = [{**request(i, 0.5 * i, [0.5 * i + 0.1], 1), "error": "timeout"} for i in range(3)]
    all_failed = serving_metrics({"requests": failed}, {"ttft_s": None, "tpot_s": None, "e2el_s": None})
    # vLLM's duration: first send to the last request's end, failed ones included
    assert all_failed["duration_s"] == pytest.approx(1.0 + 0.1 + 0.05) and all_failed["num_errors"] == 3
    assert all_failed["output_throughput_tok_s"] is None and all_failed["ttft_s"] is None


def test_duration_runs_to_the_last_requests_end_failed_ones_included():
    """vLLM's benchmark_duration ends when every request has ended: a failing tail (here
    a request that fails 2 s after the last success) is time the load took, so the
    throughput is over it, not over the successes' span alone. A request a deadline
    stopped before it was sent has no end and does not count."""
    ok = [request(0, 0.0, [0.1, 0.2], 2), request(1, 0.1, [0.3, 0.4], 2)]  # ends 0.25, 0.45
    tail = {**request(2, 0.2, [0.5], 1), "error": "ReadTimeout after 1 chunks", "end_s": 2.45, "output_tokens": None}
    unsent = {**request(3, 3.0, [3.1], 1), "error": "not sent: the time limit", "end_s": None, "chunk_s": []}
    got = serving_metrics({"requests": [*ok, tail, unsent]}, {"ttft_s": None, "tpot_s": None, "e2el_s": None})
    assert got["duration_s"] == pytest.approx(2.45 - 0.0)
    assert got["output_throughput_tok_s"] == pytest.approx(4 / 2.45)
    assert got["request_throughput_req_s"] == pytest.approx(2 / 2.45)
    assert got["achieved_rate_req_s"] == pytest.approx(2 / 0.2)  # three sent over 0.2 s; the unsent one not


def test_a_percentile_the_sample_cannot_support_is_named_and_asked_ones_are_reported():
    """p90 needs 10 samples and p99 100 (one beyond the percentile); serve.percentiles
    adds p95 etc., recomputed here with numpy's linear interpolation."""
    many = [request(i, 0.01 * i, [0.01 * i + 0.1 + 0.001 * i, 0.01 * i + 0.3], 2) for i in range(20)]
    got = serving_metrics({"requests": many}, {"ttft_s": None, "tpot_s": None, "e2el_s": None}, (95, 99.9))
    ttfts = [0.1 + 0.001 * i for i in range(20)]
    assert got["percentiles"]["ttft_s"]["p95"] == pytest.approx(np.percentile(ttfts, 95))
    assert got["percentiles"]["ttft_s"]["p99.9"] == pytest.approx(np.percentile(ttfts, 99.9))
    thin = " | ".join(got["thin_percentiles"])
    assert "ttft_s p99 (20 samples; needs 100)" in thin and "ttft_s p99.9 (20 samples; needs 1000)" in thin
    assert "ttft_s p95" not in thin and "ttft_s p90" not in thin  # 20 samples support both
    plain = serving_metrics({"requests": many}, {"ttft_s": None, "tpot_s": None, "e2el_s": None})
    assert plain["percentiles"] is None


def test_token_counts_a_server_did_not_report_count_as_none():
    unreported = {**request(1, 0.0, [0.2, 0.3], 2), "output_tokens": None, "prompt_tokens": None}
    slo = {"ttft_s": None, "tpot_s": None, "e2el_s": None, "percentile": 50}
    got = serving_metrics({"requests": [REQUESTS[0], unreported]}, slo)
    assert (got["output_tokens"], got["prompt_tokens"]) == (4, 10)
    assert got["slo"] == slo and got["slo_at_percentile"] == {"percentile": 50, "values": {}, "failed": 0, "met": True}


def test_tpot_needs_two_tokens():
    from harness.figures.metrics import request_latencies

    assert request_latencies({"sent_s": 0.0, "chunk_s": [0.5, 1.25], "output_tokens": 2})["tpot_s"] == 0.75


def test_slo_at_a_percentile_edges():
    from harness.figures.metrics import slo_at_percentile

    two = [_timed(0, 0.0, 0.25, 2, 0.1), _timed(1, 0.0, 0.75, 2, 0.3)]
    only_tpot = slo_at_percentile(two, {"percentile": 50, "ttft_s": None, "tpot_s": 0.2, "e2el_s": None})
    assert only_tpot["values"] == {"tpot_s": pytest.approx(0.2)}
    at_target = slo_at_percentile(two, {"percentile": 50, "ttft_s": 0.5, "tpot_s": None, "e2el_s": None})
    assert at_target["values"] == {"ttft_s": 0.5} and at_target["met"] is True  # met with <=
    one_token = [*two, _timed(2, 0.0, 0.05, 1, 0.0)]
    lowest = slo_at_percentile(one_token, {"percentile": 0, "ttft_s": 1.0, "tpot_s": None, "e2el_s": None})
    assert lowest["values"] == {"ttft_s": pytest.approx(0.05)}  # a one-token request's TTFT is its own
    silent = [*two, {**request(3, 0.0, [0.1], 2), "chunk_s": []}, {**request(4, 0.0, [0.1], 3), "chunk_s": []}]
    tpot = slo_at_percentile(silent, {"percentile": 0, "ttft_s": None, "tpot_s": 1.0, "e2el_s": None})
    assert tpot["values"] == {"tpot_s": pytest.approx(0.1)}  # no content chunk, 2 or 3 tokens: no TPOT, not 0


def test_a_reset_cache_warns_only_when_the_first_measured_request_found_cached_tokens():
    from harness.serving.figures import warm_cache_warning

    def req(sent, cached):
        return {"sent_s": sent, "cached_tokens": cached, "warmup": False, "error": None}

    reset = {"done": True}
    shared_prefix = [req(0.0, 0), req(0.1, 64), req(0.2, 64)]
    assert warm_cache_warning(reset, shared_prefix) == []
    leaked = [req(0.1, 0), req(0.0, 128)]  # the earliest sent found a cache: the reset did not take
    (line,) = warm_cache_warning(reset, leaked)
    assert "128 cached prompt tokens" in line and "did not take" in line
    assert warm_cache_warning({"done": False}, leaked) == []
    assert warm_cache_warning(None, leaked) == []
