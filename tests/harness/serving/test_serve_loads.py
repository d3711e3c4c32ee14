"""Load profiles (gamma arrivals, ramps, sweeps), the SLO search, their bounds, the new
prompt sets and the serving report, against real servers on 127.0.0.1: the fake one
(whose latency grows with load in a known way) and `transformers serve`."""

from __future__ import annotations

import asyncio
import statistics
import sys
import threading
import time
from pathlib import Path

import pytest

from harness.basics.errors import SpecError
from harness.figures.cost import load_catalog
from harness.figures.metrics import percentile, request_latencies, slo_at_percentile
from harness.scenario.loader import validate
from harness.scenario.spec import Scenario
from harness.serving.client import arrival_delays, rate_of
from harness.serving.loads import drive, prompt_count
from harness.tasks.serve.spec import LoadSpec, ServeSpec

from conftest import TINY, bench, records_in, write_scenario
from fake_openai import serve as fake_server
from test_serve import check_definitions, port_open

TRANSFORMERS_CLI = Path(sys.executable).parent / "transformers"
# The fake server's load model (tests/fake_openai.py --hold): every request lasts HOLD s,
# TTFT = A + B x (requests in flight when it arrived). With arrivals 1/r apart a request
# finds ceil(r HOLD) - 1 others, so TTFT <= A + B K + B/2 holds up to r = (K + 1) / HOLD.
HOLD, A, B, K = 0.4, 0.02, 0.04, 5
TTFT_TARGET = A + B * K + B / 2
TRUE_MAX_RATE = (K + 1) / HOLD  # 15 req/s


@pytest.fixture
def loaded_fake():
    server = fake_server(0, hold=HOLD, ttft_base=A, ttft_per_request=B)  # bound at once: no port race
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield port
    server.shutdown()
    server.server_close()


# --------------------------------------------------------------------------- arrivals
@pytest.mark.parametrize("burstiness", [0.5, 1.0, 4.0])
def test_gamma_inter_arrival_times_have_the_stated_mean_and_cv(burstiness):
    """vLLM's meaning: gaps ~ Gamma(shape B, scale 1/(rate B)): mean 1/rate, CV 1/sqrt(B)."""
    rate, n = 4.0, 20_000
    delays = arrival_delays(n, LoadSpec(request_rate=rate, arrival="gamma", burstiness=burstiness, seed=7))
    gaps = [b - a for a, b in zip(delays, delays[1:])]
    mean, sd = statistics.fmean(gaps), statistics.pstdev(gaps)
    # Standard error of the mean is sd / sqrt(n) (< 1% of the mean here): 4 of them.
    assert abs(mean - 1 / rate) < 4 * sd / n**0.5
    assert sd / mean == pytest.approx(1 / burstiness**0.5, rel=0.05)
    assert delays == arrival_delays(n, LoadSpec(request_rate=rate, arrival="gamma", burstiness=burstiness, seed=7))


def test_poisson_gaps_are_exponential():
    delays = arrival_delays(20_000, LoadSpec(request_rate=10.0, seed=1))
    gaps = [b - a for a, b in zip(delays, delays[1:])]
    assert statistics.fmean(gaps) == pytest.approx(0.1, rel=0.03)
    assert statistics.pstdev(gaps) / statistics.fmean(gaps) == pytest.approx(1.0, rel=0.05)


def test_ramp_rates_follow_vllms_formulas():
    linear = LoadSpec(ramp={"start_rate": 2, "end_rate": 10, "shape": "linear"})
    expo = LoadSpec(ramp={"start_rate": 2, "end_rate": 32, "shape": "exponential"})
    assert [rate_of(linear, i, 5) for i in range(5)] == [2, 4, 6, 8, 10]
    assert [rate_of(expo, i, 5) for i in range(5)] == pytest.approx([2, 4, 8, 16, 32])


@pytest.mark.serial
def test_a_ramps_achieved_rate_rises_as_stated(loaded_fake):
    """Against a real server: the send times' rate over the first and last quarter of the
    requests is the ramp's there (steady gamma gaps keep the noise small; a quarter's 11
    gaps, not a tenth's 5, so one send delayed 40 ms by a busy event loop moves the last
    quarter's rate by about 13%, not 45%, as it once did on CI)."""
    n = 50
    spec = serve_spec(
        loaded_fake,
        num_requests=n,
        warmup_requests=0,
        output_tokens=2,
        load={"ramp": {"start_rate": 5, "end_rate": 40}, "arrival": "gamma", "burstiness": 100},
    )
    facts = asyncio.run(drive(url(loaded_fake), bodies(n), spec, time.perf_counter()))
    sent = sorted(r["sent_s"] for r in facts["requests"])
    achieved = []
    for lo, hi in ((0, 12), (n - 12, n)):
        expected = (hi - lo - 1) / sum(1 / rate_of(spec.load, i, n) for i in range(lo, hi - 1))
        achieved.append((hi - lo - 1) / (sent[hi - 1] - sent[lo]))
        assert achieved[-1] == pytest.approx(expected, rel=0.2)
    assert achieved[1] > 3 * achieved[0]  # about 8 req/s, then about 36
    assert all(r["error"] is None for r in facts["requests"])


# --------------------------------------------------------------------------- in flight
def most_in_flight(requests: list[dict]) -> int:
    """The most requests in flight at once, from their raw send and end timestamps (an
    end at the same instant as a send frees its slot first)."""
    events = sorted([(r["sent_s"], 1) for r in requests] + [(r["end_s"], -1) for r in requests])
    level, most = 0, 0
    for _, step in events:
        level += step
        most = max(most, level)
    return most


@pytest.mark.serial
def test_max_concurrency_caps_an_open_loops_requests_in_flight():
    """Poisson arrivals at 200 req/s against requests held 0.15 s: uncapped, several are
    in flight at once; with max_concurrency 2, never more than 2 (the client's timestamps
    and the server's own count agree), and the cap is reached."""
    server = fake_server(0, hold=0.15)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        seen = {}
        for cap in (None, 2):
            server.stats["peak_in_flight"] = 0
            load = {"request_rate": 200, "seed": 1, **({"max_concurrency": cap} if cap else {})}
            spec = serve_spec(port, num_requests=8, warmup_requests=0, output_tokens=2, load=load)
            facts = asyncio.run(drive(url(port), bodies(8), spec, time.perf_counter()))
            assert all(r["error"] is None for r in facts["requests"])
            seen[cap] = most_in_flight(facts["requests"]), server.stats["peak_in_flight"]
    finally:
        server.shutdown()
        server.server_close()
    assert seen[None][0] > 2 and seen[None][1] > 2  # the rate alone would put more in flight
    assert seen[2] == (2, 2)


@pytest.mark.serial
def test_a_concurrency_sweep_writes_one_record_per_point_with_one_sweep_id(tmp_path, loaded_fake):
    """`sweep: {concurrency: [1, 2, 4]}` against the fake server: three records, one
    sweep id, each point a closed loop that keeps exactly its concurrency in flight."""
    block = (
        f"  engine: endpoint\n  endpoint: {{base_url: '{url(loaded_fake, '')}'}}\n"
        "  output_tokens: 2\n  num_requests: 4\n  warmup_requests: 1\n  sweep: {concurrency: [1, 2, 4]}\n"
    )
    path = write_scenario(tmp_path, TINY + "tasks: [serve]\nserve:\n" + block, "sweep.yaml")
    done = bench("run", str(path), "--results-dir", str(tmp_path / "r"), "--no-progress")
    assert done.returncode == 0, done.stderr + done.stdout
    records = sorted(records_in(tmp_path / "r"), key=lambda r: r["sweep"]["index"])
    assert [r["status"] for r in records] == ["ok"] * 3
    assert len({r["sweep"]["id"] for r in records}) == 1 and records[0]["sweep"]["id"]
    assert len({r["run_key"] for r in records}) == 3
    assert [r["sweep"]["value"] for r in records] == [r["scenario"]["cell"]["serve.load.concurrency"] for r in records]
    assert [r["sweep"]["value"] for r in records] == [1, 2, 4]
    for r in records:
        measured = record_requests(r)
        assert len(measured) == 4 and all(q["error"] is None for q in measured)
        assert most_in_flight(measured) == r["sweep"]["value"]
        check_definitions(r)


# --------------------------------------------------------------------------- bounds
@pytest.mark.serial
def test_sweep_and_search_stop_by_themselves_at_max_duration(loaded_fake):
    """A sweep whose first point alone would take 10 s, and a search, each limited to
    1.5 s: cut short on time, the rest not run, the unfinished requests errors."""
    started = time.perf_counter()
    spec = serve_spec(
        loaded_fake,
        num_requests=20,
        warmup_requests=0,
        output_tokens=2,
        sweep={"request_rate": [2, 4, 8], "max_duration_s": 1.5},
    )
    facts = asyncio.run(drive(url(loaded_fake), bodies(60), spec, time.perf_counter()))
    assert time.perf_counter() - started < 1.5 + HOLD + 1.0
    first, *rest = facts["sweep"]["points"]
    errors = [r["error"] for r in first["requests"] if r["error"]]
    assert errors and all("max_duration_s" in e for e in errors)
    assert all("max_duration_s" in p["not_run"] and "requests" not in p for p in rest)

    started = time.perf_counter()
    spec = serve_spec(
        loaded_fake,
        num_requests=20,
        warmup_requests=0,
        output_tokens=2,
        slo={"ttft_s": TTFT_TARGET, "percentile": 90},
        slo_search={"low": 1, "high": 100, "tolerance": 0.01, "max_steps": 98, "max_duration_s": 1.5},
    )
    facts = asyncio.run(drive(url(loaded_fake), bodies(prompt_count(spec)), spec, time.perf_counter()))
    assert time.perf_counter() - started < 1.5 + HOLD + 1.0
    assert facts["slo_search"]["stopped"] == "max_duration_s"
    # low (1 req/s) cannot send 20 requests in 1.5 s: its probe is cut short, no other runs
    (probe,) = facts["slo_search"]["points"]
    assert probe["rate"] == 1 and probe["met"] is None and len(probe["requests"]) == 20
    assert any(r["error"] and r["error"].startswith("not sent") for r in probe["requests"])


@pytest.mark.serial
def test_a_search_stops_at_max_steps_within_the_requests_it_promises(loaded_fake):
    """(2 + max_steps) x num_requests measured requests at most, each with a prompt of its
    own: low and high, then two bisection steps, though the bracket is still wide."""
    spec = serve_spec(
        loaded_fake,
        num_requests=8,
        warmup_requests=1,
        output_tokens=2,
        load={"arrival": "gamma", "burstiness": 1000},
        slo={"ttft_s": TTFT_TARGET, "percentile": 90},
        slo_search={"low": 10, "high": 100, "tolerance": 0.01, "max_steps": 2},
    )
    assert prompt_count(spec) == 1 + (2 + 2) * 8
    facts = asyncio.run(drive(url(loaded_fake), bodies(prompt_count(spec)), spec, time.perf_counter()))
    search = facts["slo_search"]
    assert search["stopped"] == "max_steps" and search["bisection_steps"] == 2
    assert [p["rate"] for p in search["points"]] == [10, 100, 55, 32.5]  # 10 met, the rest not
    assert [p["met"] for p in search["points"]] == [True, False, False, False]
    indices = [r["index"] for p in search["points"] for r in p["requests"]]
    assert len(indices) == (2 + 2) * 8 and sorted(indices) == list(range(1, prompt_count(spec)))


# --------------------------------------------------------------------------- SLO search
@pytest.mark.serial
@pytest.mark.slow
def test_slo_search_finds_the_known_maximum_rate_within_one_step(tmp_path, loaded_fake):
    block = (
        f"  engine: endpoint\n  endpoint: {{base_url: '{url(loaded_fake, '')}'}}\n  accelerator: h100-sxm:2\n"
        f"  output_tokens: 4\n  num_requests: 16\n  warmup_requests: 1\n"
        f"  load: {{arrival: gamma, burstiness: 1000, seed: 0}}\n"
        f"  slo: {{ttft_s: {TTFT_TARGET}, percentile: 90}}\n"
        f"  slo_search: {{low: 5, high: 29, tolerance: 2, max_steps: 6, max_duration_s: 120}}\n"
    )
    path = write_scenario(tmp_path, TINY + "tasks: [serve]\nserve:\n" + block, "search.yaml")
    done = bench("run", str(path), "--results-dir", str(tmp_path / "r"), "--no-progress")
    assert done.returncode == 0, done.stderr + done.stdout
    (record,) = records_in(tmp_path / "r")
    search = record["metrics"]["slo_search"]
    lo, hi = search["bracket"]
    assert search["stopped"] == "tolerance" and hi - lo <= 2
    assert abs(search["max_rate_req_s"] - TRUE_MAX_RATE) <= hi - lo  # within one search step
    assert len(search["points"]) <= 2 + 6

    # Each probe's verdict, recomputed: p90 TTFT of its requests against the target.
    for point, raw in zip(search["points"], record["raw"]["slo_search"]["points"]):
        ttfts = [request_latencies(r)["ttft_s"] for r in raw["requests"]]
        assert point["met"] == (percentile(ttfts, 90) <= TTFT_TARGET)
        assert raw["rate"] == point["rate_req_s"]

    # The record's metrics, goodput and $ are those measured at the rate found.
    at = next(p for p in record["raw"]["slo_search"]["points"] if p["rate"] == search["max_rate_req_s"])
    at_ttft = [request_latencies(r)["ttft_s"] for r in at["requests"]]
    assert record["metrics"]["num_requests"] == 16
    assert record["metrics"]["ttft_s"]["median"] == pytest.approx(statistics.median(at_ttft))
    good = sum(request_latencies(r)["ttft_s"] <= TTFT_TARGET for r in at["requests"])
    duration = max(r["end_s"] for r in at["requests"]) - min(r["sent_s"] for r in at["requests"])
    assert record["metrics"]["goodput_req_s"] == pytest.approx(good / duration)
    price = load_catalog()["h100-sxm"]["on_demand"]
    output = sum(r["output_tokens"] for r in at["requests"])
    assert record["cost"]["usd_per_1m_output_tokens"] == pytest.approx(2 * price / 3600 * 1e6 / (output / duration))
    assert record["cost"]["price"]["source"] and record["cost"]["price"]["date"]
    assert f"{search['max_rate_req_s']:g} req/s" in record["cost"]["basis"]

    # The report: the rate within the SLO with its $ and price, and the serving plots.
    md = tmp_path / "report.md"
    assert bench("report", str(tmp_path / "r"), "-o", str(md)).returncode == 0
    line = next(x for x in md.read_text().splitlines() if x.startswith("| tiny | 2x h100-sxm | p90"))
    # the nominal rate found, then the rate its requests were actually sent at (#40)
    assert (
        f"| {search['max_rate_req_s']:.4g} (sent at " in line
        and f"{record['cost']['usd_per_1m_output_tokens']:.4g}" in line
    )
    html = tmp_path / "report.html"
    assert bench("report", str(tmp_path / "r"), "-o", str(html)).returncode == 0
    text = html.read_text()
    assert "TTFT percentiles vs request rate, SLO drawn" in text and "Pareto front" in text


def record_requests(record):
    return [r for r in record["raw"]["requests"] if not r["warmup"]]


# --------------------------------------------------------------------------- a real server
@pytest.mark.slow
def test_a_three_point_rate_sweep_on_transformers_serve(tmp_path):
    """`transformers serve` on the tiny model: three records with one sweep id, each
    measured at its own rate, and the launched server's startup times."""
    block = (
        f"  engine: launch\n  launch:\n    command: ['{TRANSFORMERS_CLI}', 'serve', '{{model_dir}}', '--host', "
        f"'127.0.0.1', '--port', '{{port}}', '--device', 'cpu']\n    env: {{HF_HUB_OFFLINE: '1'}}\n"
        f"    model: '{{model_dir}}'\n    health_timeout_s: 180\n  output_tokens: 4\n  num_requests: 3\n"
        f"  warmup_requests: 1\n  sweep: {{request_rate: [2, 4, 8], max_duration_s: 300}}\n"
        f"  force_output_length: false\n  token_ids: false\n"
        f'  extra_body: {{generation_config: \'{{"min_new_tokens": 4, "max_new_tokens": 4}}\'}}\n'
    )
    path = write_scenario(tmp_path, TINY + "tasks: [serve]\nserve:\n" + block, "sweep.yaml")
    done = bench("run", str(path), "--results-dir", str(tmp_path / "r"), "--no-progress")
    assert done.returncode == 0, done.stderr + done.stdout
    records = sorted(records_in(tmp_path / "r"), key=lambda r: r["sweep"]["index"])
    assert [r["status"] for r in records] == ["ok"] * 3
    assert len({r["sweep"]["id"] for r in records}) == 1 and len({r["run_key"] for r in records}) == 3
    assert [r["sweep"]["value"] for r in records] == [2, 4, 8]
    assert [r["scenario"]["cell"]["serve.load.request_rate"] for r in records] == [2, 4, 8]
    indices = [{q["index"] for q in record_requests(r)} for r in records]
    assert all(len(i) == 3 for i in indices) and not (indices[0] & indices[1] or indices[1] & indices[2])
    for r in records:
        check_definitions(r)
    startup = records[0]["server"]["startup"]
    assert 0 < startup["to_healthy_s"] < startup["to_first_token_s"]
    assert not port_open(int(records[0]["server"]["base_url"].split(":")[-1].split("/")[0]))


# --------------------------------------------------------------------------- spec
@pytest.mark.parametrize(
    "serve, field",
    [
        ({"load": {"concurrency": 2, "request_rate": 1}}, "concurrency"),
        ({"load": {"request_rate": 1, "burstiness": 2}}, "burstiness"),
        ({"load": {"request_rate": 1, "arrival": "gamma"}}, "burstiness"),
        ({"load": {"concurrency": 2, "max_concurrency": 4}}, "max_concurrency"),
        ({"load": {"request_rate": 1, "ramp": {"start_rate": 1, "end_rate": 2}}}, "ramp"),
        ({"sweep": {"request_rate": [1, 2]}, "load": {"request_rate": 3}}, "load.request_rate"),
        ({"sweep": {"concurrency": [1, 2]}, "load": {"arrival": "poisson"}}, "load.arrival"),
        ({"sweep": {"request_rate": [1], "concurrency": [1]}}, "request_rate"),
        ({"slo_search": {"low": 1, "high": 4, "tolerance": 1}}, "slo.percentile"),
        ({"slo_search": {"low": 4, "high": 1, "tolerance": 1}, "slo": {"ttft_s": 1, "percentile": 90}}, "high"),
        (
            {
                "slo_search": {"low": 1, "high": 4, "tolerance": 1},
                "sweep": {"request_rate": [1]},
                "slo": {"ttft_s": 1, "percentile": 90},
            },
            "slo_search",
        ),
        ({"slo": {"percentile": 90}}, "percentile"),
        ({"prompts": {"source": "shared-prefix", "num_prefixes": 2}}, "prefix_words"),
        ({"prompts": {"source": "synthetic", "turns": 3}}, "turns"),
        ({"output_tokens": 8, "output_tokens_max": 4}, "output_tokens_max"),
        ({"output_tokens_max": 80, "force_output_length": False}, "output_tokens_max"),
        # a seed where nothing is drawn: a closed loop, the default one, a concurrency sweep
        ({"load": {"concurrency": 4, "seed": 1}}, "load.seed"),
        ({"load": {"seed": 0}}, "load.seed"),
        ({"sweep": {"concurrency": [1, 2]}, "load": {"seed": 3}}, "load.seed"),
        # request fields bench sets itself: extra_body adds fields, never overrides these
        ({"extra_body": {"max_tokens": 8}}, "extra_body.max_tokens: bench owns this request field (output_tokens)"),
        ({"extra_body": {"min_tokens": 8}}, "extra_body.min_tokens"),
        ({"extra_body": {"ignore_eos": False}}, "extra_body.ignore_eos: bench owns this request field (force_"),
        ({"extra_body": {"ignore_eos": True}, "force_output_length": False}, "extra_body.ignore_eos"),
        ({"extra_body": {"stream": False}}, "extra_body.stream"),
        ({"extra_body": {"stream_options": {}}}, "extra_body.stream_options"),
        ({"extra_body": {"model": "m"}}, "extra_body.model: bench owns this request field (endpoint.model"),
        ({"extra_body": {"prompt": "p"}}, "extra_body.prompt"),
        ({"extra_body": {"messages": []}}, "extra_body.messages"),
        ({"extra_body": {"temperature": 0.7, "top_k": 1}}, "extra_body.temperature"),
        ({"engine": "local"}, "endpoint"),  # another engine's section is refused, not ignored
        ({"launch": {"command": ["serve"]}}, "launch"),
    ],
)
def test_invalid_load_combinations_are_refused_naming_the_field(serve, field):
    doc = {
        "name": "x",
        "tasks": ["serve"],
        "serve": {"engine": "endpoint", "endpoint": {"base_url": "http://127.0.0.1:1/v1"}, **serve},
    }
    with pytest.raises(SpecError) as err:
        validate(doc, "s.yaml")
    assert field in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("serve, field", [({"extra_body": {"top_k": 1}}, "extra_body"), ({"api": "chat"}, "api")])
def test_the_local_engine_refuses_what_only_an_http_server_would_use(serve, field):
    with pytest.raises(SpecError) as err:
        validate({"name": "x", "tasks": ["serve"], "serve": {"engine": "local", **serve}}, "s.yaml")
    assert f"serve.{field}:" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "serve",
    [
        {"load": {"request_rate": 2, "seed": 5}},
        {"load": {"ramp": {"start_rate": 1, "end_rate": 2}, "seed": 5}},
        {"sweep": {"request_rate": [1, 2]}, "load": {"seed": 5}},
        {
            "slo_search": {"low": 1, "high": 4, "tolerance": 1},
            "slo": {"ttft_s": 1, "percentile": 90},
            "load": {"seed": 5},
        },
        {"load": {"concurrency": 2}, "extra_body": {"top_k": 1, "repetition_penalty": 1.1}},
    ],
)
def test_seeds_of_open_loops_and_extra_request_fields_are_accepted(serve):
    """The refusals above are narrow: a seed where arrivals are drawn, and extra_body
    fields bench does not set, are taken, and sent."""
    from harness.serving.client import request_body

    doc = {"name": "x", "serve": {"engine": "endpoint", "endpoint": {"base_url": "http://127.0.0.1:1/v1"}, **serve}}
    spec = validate(doc, "s.yaml").serve
    assert spec.load.seed == serve.get("load", {}).get("seed")
    body = request_body("completions", "m", {"text": "hi"}, spec)
    assert {k: body[k] for k in spec.extra_body} == serve.get("extra_body", {})
    assert body["max_tokens"] == spec.output_tokens and body["ignore_eos"] is True


def test_an_open_loops_seed_is_used_and_is_0_when_not_given():
    assert arrival_delays(5, LoadSpec(request_rate=2)) == arrival_delays(5, LoadSpec(request_rate=2, seed=0))
    assert arrival_delays(5, LoadSpec(request_rate=2)) != arrival_delays(5, LoadSpec(request_rate=2, seed=5))


# --------------------------------------------------------------------------- prompts
def scenario_with(prompts: dict) -> Scenario:
    from harness.scenario.loader import document_from_text

    doc = document_from_text(TINY, "tiny.yaml")
    doc["serve"] = {"engine": "endpoint", "endpoint": {"base_url": "http://x/v1"}, "prompts": prompts}
    return Scenario.model_validate(doc)


def test_shared_prefix_prompts_share_their_prefixes_and_lengths_are_as_stated():
    from harness.serving.prompts import build_prompts

    prompts = build_prompts(
        scenario_with(
            {"source": "shared-prefix", "prefix_words": 30, "num_prefixes": 3, "input_words": 5, "input_words_max": 9}
        ),
        12,
    )
    words = [p["text"].split() for p in prompts]
    assert all(35 <= len(w) <= 39 for w in words)
    assert len({len(w) for w in words}) > 1  # lengths drawn, not fixed
    for i, w in enumerate(words):
        assert w[:30] == words[i % 3][:30]
    assert len({tuple(w[:30]) for w in words}) == 3


def test_multi_turn_prompts_grow_turn_by_turn_from_the_function_calling_data():
    from harness.data.batches import load_examples
    from harness.serving.prompts import build_prompts

    scenario = scenario_with({"source": "multi-turn", "turns": 3})
    prompts = build_prompts(scenario, 6)
    examples = load_examples(scenario)
    for i, p in enumerate(prompts):
        conversation, turn = divmod(i, 3)
        roles = [m["role"] for m in p["messages"]]
        assert roles.count("user") == turn + 1 and roles.count("assistant") == turn and roles[-1] == "user"
        question = next(m for m in examples[conversation * 3 + turn][0] if m["role"] == "user")
        assert p["messages"][-1] == question
    # a later turn repeats its conversation's earlier turns: the prefix a cache can reuse
    assert prompts[2]["messages"][: len(prompts[1]["messages"])] == prompts[1]["messages"]
    assert prompts[2]["text"].startswith(prompts[1]["text"].rsplit("<start_of_turn>model", 1)[0])


def test_output_lengths_are_drawn_as_stated_and_each_request_gets_its_own(tmp_path, loaded_fake):
    """`output_tokens_max`: each request asks for (and, forced, gets) its own seeded
    length, uniform over [output_tokens, output_tokens_max]; the record states the spread."""
    from harness.serving.prompts import output_lengths

    drawn = output_lengths(ServeSpec(output_tokens=2, output_tokens_max=9, prompts={"seed": 3}), 4000)
    assert set(drawn) == set(range(2, 10)) and statistics.fmean(drawn) == pytest.approx(5.5, rel=0.03)
    block = (
        f"  engine: endpoint\n  endpoint: {{base_url: 'http://127.0.0.1:{loaded_fake}/v1'}}\n"
        "  output_tokens: 2\n  output_tokens_max: 9\n  prompts: {source: synthetic, input_words: 3, seed: 3}\n"
        "  num_requests: 8\n  warmup_requests: 1\n  load: {concurrency: 4}\n"
    )
    scenario = write_scenario(tmp_path, TINY + "tasks: [serve]\nserve:\n" + block, "lengths.yaml")
    done = bench("run", str(scenario), "--results-dir", str(tmp_path / "r"))
    assert done.returncode == 0, done.stdout + done.stderr
    [record] = records_in(tmp_path / "r")
    requests = sorted(record["raw"]["requests"], key=lambda r: r["index"])
    spec = ServeSpec(output_tokens=2, output_tokens_max=9, prompts={"seed": 3})
    assert [r["output_tokens"] for r in requests] == output_lengths(spec, len(requests))  # from usage
    assert len({r["output_tokens"] for r in requests}) > 1
    assert record["raw"]["prompts"]["output_tokens"]["max"] <= 9


# --------------------------------------------------------------------------- helpers
def url(port: int, path: str = "/completions") -> str:
    return f"http://127.0.0.1:{port}/v1{path}"


def bodies(n: int) -> list[dict]:
    return [
        {
            "model": "fake-model",
            "prompt": f"p {i}",
            "max_tokens": 2,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        for i in range(n)
    ]


def serve_spec(port: int, **fields) -> ServeSpec:
    return ServeSpec(engine="endpoint", endpoint={"base_url": url(port, "")}, **fields)


# --------------------------------------------------------------------------- report
# Serve records as a run writes them: raw requests with known latencies, the metrics and
# $ computed from them by the harness's own functions (tests/records.py for the rest).
REPORT_SLO = {"ttft_s": 0.15, "tpot_s": 0.05, "e2el_s": None, "percentile": 90}
WORKLOAD = {"fine_tunes": 2, "fine_tune_tokens_millions": 0.9, "served_tokens_millions": 100}


def timed_requests(rate: float, first: int, n: int = 10, tokens: int = 5) -> list[dict]:
    """n requests 1/rate apart whose TTFT and TPOT grow with the rate and the request."""
    out = []
    for i in range(n):
        sent, ttft, tpot = i / rate, 0.02 * rate * (1 + i / 2 / n), 0.005 * rate * (1 + i / 2 / n)
        chunks = [sent + ttft + k * tpot for k in range(tokens)]
        out.append(
            {
                "index": first + i,
                "warmup": False,
                "sent_s": sent,
                "chunk_s": chunks,
                "end_s": chunks[-1] + 0.001,
                "prompt_tokens": 10,
                "output_tokens": tokens,
                "status": 200,
                "error": None,
            }
        )
    return out


def serve_record(raw: dict, search: dict | None = None, **kwargs) -> dict:
    import copy

    from harness.figures.cost import price_for, serving_cost
    from harness.figures.metrics import serving_metrics, slo_search_summary

    from records import make_record

    record = make_record([0.5] * 4, **kwargs)
    requests = raw["requests"]
    if search is not None:
        summary_, requests = slo_search_summary({**raw, "slo_search": search}, REPORT_SLO)
        raw = {**raw, "slo_search": search}
    metrics = serving_metrics({**raw, "requests": requests}, REPORT_SLO)
    metrics["output_tok_s_per_chip"] = metrics["output_throughput_tok_s"]
    if search is not None:
        metrics["slo_search"] = summary_
    record.update(task="serve", raw=raw, metrics=metrics)
    record["cost"] = serving_cost(metrics, 1, price_for(record["accelerator"]["catalog_key"], None, load_catalog()))
    record["scenario"]["resolved"]["workload"] = copy.deepcopy(WORKLOAD)
    record["scenario"]["resolved"]["serve"] = {"slo": REPORT_SLO, "slo_search": {"low": 2} if search else None}
    return record


def search_record(rates=(2, 4, 8)) -> dict:
    points, first = [], 0
    for rate in rates:
        requests = timed_requests(rate, first)
        first += len(requests)
        points.append({"rate": rate, "requests": requests, "met": None, "values": {}})
    for p in points:  # the search's own verdicts, as loads.py records them
        p["met"] = slo_at_percentile(p["requests"], REPORT_SLO)["met"]
    search = {"points": points, "stopped": "tolerance", "bracket": [4, 8], "bisection_steps": 0}
    return serve_record({"requests": []}, search, name="tiny")


def test_the_workload_prices_serving_at_the_slo_searchs_rate_and_says_so():
    """A train record, a serve run at one load and an SLO search on the same accelerator:
    the workload's $/1M output tokens is the search's (at the highest rate within the
    SLO), and its basis says so; without the search, the load as run, saying that."""
    from harness.records.result import as_records
    from reports.model import _workloads

    from records import make_record

    train = make_record([0.5] * 4, name="tiny")
    train["scenario"]["resolved"]["workload"] = dict(WORKLOAD)
    plain = serve_record({"requests": timed_requests(20, 0)}, name="tiny")
    search = search_record()
    assert search["metrics"]["slo_search"]["max_rate_req_s"] == 4  # 2 and 4 meet p90 TTFT <= 0.15 s, 8 not
    searched, as_run = search["cost"]["usd_per_1m_output_tokens"], plain["cost"]["usd_per_1m_output_tokens"]
    assert searched != pytest.approx(as_run)  # the two figures can be told apart

    (row,) = _workloads(as_records([train, plain, search]))
    assert row.serve_usd_per_1m == pytest.approx(searched)
    assert row.total_usd == pytest.approx(row.train_usd * 2 + 100 * searched)
    assert row.serve_basis.startswith("SLO search: the highest rate within p90 ttft_s <= 0.15 s, tpot_s <= 0.05 s")
    assert "(4 req/s; median of 1 run)" in row.serve_basis
    from reports.model import build
    from reports.render import markdown, md_cell

    assert md_cell(row.serve_basis) in markdown(build([train, plain, search]))  # the report says which $ it used

    (row,) = _workloads(as_records([train, plain]))
    assert row.serve_usd_per_1m == pytest.approx(as_run)
    assert row.serve_basis.startswith("the serve load as run")


def test_the_serving_plots_draw_ttft_and_tpot_percentiles_with_the_slo_lines():
    """reports.plots.figures on an SLO search's record: TTFT and TPOT against request rate,
    p50/p90/p99 of each probe's requests at its rate, and each SLO target a horizontal line."""
    from html import unescape

    from harness.figures.metrics import percentile as pct
    from reports.model import build
    from reports.plots import figures

    record = search_record()
    plots = dict(figures(build([record]))[""])
    points = record["raw"]["slo_search"]["points"]
    for metric, target in (("ttft_s", 0.15), ("tpot_s", 0.05)):
        fig = plots[f"{metric.removesuffix('_s').upper()} percentiles vs request rate, SLO drawn"]
        traces = {t.name.rsplit(" ", 1)[-1]: t for t in fig.data}
        assert sorted(traces) == ["p50", "p90", "p99"]
        for p, trace in traces.items():
            assert list(trace.x) == [2, 4, 8]
            expected = [pct([request_latencies(r)[metric] for r in q["requests"]], int(p[1:])) for q in points]
            assert list(trace.y) == pytest.approx(expected)
        (line,) = fig.layout.shapes
        assert line.type == "line" and line.y0 == line.y1 == target
        assert line.xref == "x domain" and (line.x0, line.x1) == (0, 1)  # across the whole plot
        (note,) = fig.layout.annotations
        assert unescape(note.text) == f"SLO {metric} <= {target:g} s at p90"  # escaped for plotly
    # no SLO target on a metric: no line
    record["metrics"]["slo"] = {**REPORT_SLO, "tpot_s": None}
    plots = dict(figures(build([record]))[""])
    assert len(plots["TTFT percentiles vs request rate, SLO drawn"].layout.shapes) == 1
    assert len(plots["TPOT percentiles vs request rate, SLO drawn"].layout.shapes) == 0
