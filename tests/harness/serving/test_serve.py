"""The serving benchmark against real OpenAI-compatible servers on 127.0.0.1: a fake one
with faults on demand, transformers' own server with a local tiny model, and the
in-process engine. A `bench run` costs a worker's start (most of its time), so each
module-scoped fixture below makes one run whose records several tests read, each test
checking its own figures: a concurrency sweep answers both concurrencies, one launched
faulty server answers the launch and the fault tests, and the gemma270m run answers the
local engine's token-stamp test too."""

from __future__ import annotations

import os
import socket
import sys
import threading
from pathlib import Path

import pytest

from harness.figures.metrics import request_latencies, summary

from conftest import ROOT, TINY, bench, records_in, write_scenario
from fake_openai import serve as fake_server

pytestmark = pytest.mark.slow
FAKE = ROOT / "tests" / "fake_openai.py"
TRANSFORMERS_CLI = Path(sys.executable).parent / "transformers"


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def serve_scenario(tmp_path, serve_block: str, name="serve.yaml") -> Path:
    return write_scenario(tmp_path, TINY + "tasks: [serve]\nserve:\n" + serve_block, name)


def check_definitions(record: dict) -> None:
    """The metric definitions, recomputed from the raw timestamps."""
    requests = [r for r in record["raw"]["requests"] if not r["warmup"] and r["error"] is None]
    assert requests
    for r in requests:
        lat = request_latencies(r)
        assert 0 < lat["ttft_s"] <= lat["e2el_s"]
        assert r["output_tokens"] == record["scenario"]["resolved"]["serve"]["output_tokens"]  # from usage
    m = record["metrics"]
    assert m["itl_s"]["n"] == sum(len(r["chunk_s"]) - 1 for r in requests)
    # vLLM: E2EL to the last content chunk, TPOT over the tokens after the first.
    tpot = [(r["chunk_s"][-1] - r["chunk_s"][0]) / (r["output_tokens"] - 1) for r in requests]
    assert m["tpot_s"] == summary(tpot)
    assert m["output_throughput_tok_s"] == pytest.approx(sum(r["output_tokens"] for r in requests) / m["duration_s"])


@pytest.fixture(scope="module")
def endpoint_sweep(tmp_path_factory) -> dict[int, dict]:
    """One `bench run` against a fake server in this process: a concurrency sweep over 1
    and 4, one record a point, the two points on one worker and one server (each point
    sends its own warm-up and measured requests, and its record is computed alone). One
    run instead of one per concurrency: the worker's start is most of a run's time."""
    tmp_path, server = tmp_path_factory.mktemp("endpoint"), fake_server(0)  # bound at once: no port race
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    block = (
        f"  engine: endpoint\n  endpoint: {{base_url: 'http://127.0.0.1:{port}/v1'}}\n  output_tokens: 12\n"
        "  num_requests: 12\n  warmup_requests: 2\n  sweep: {concurrency: [1, 4]}\n  slo: {ttft_s: 5.0}\n"
    )
    try:
        done = bench("run", str(serve_scenario(tmp_path, block)), "--results-dir", str(tmp_path / "r"), "--no-progress")
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr + done.stdout
    return {r["scenario"]["cell"]["serve.load.concurrency"]: r for r in records_in(tmp_path / "r")}


@pytest.mark.parametrize("concurrency", [1, 4])
def test_endpoint_metrics_follow_the_definitions(endpoint_sweep, concurrency):
    record = endpoint_sweep[concurrency]
    assert record["task"] == "serve" and record["status"] == "ok"
    assert record["server"]["model"] == "fake-model" and record["server"]["version"] == "fake-1.0"
    measured = [r for r in record["raw"]["requests"] if not r["warmup"]]
    assert len(measured) == 12 and all(r["error"] is None for r in measured)
    check_definitions(record)
    # chunks are not tokens: the fake server packs two tokens into every third chunk
    assert all(len(r["chunk_s"]) < r["output_tokens"] for r in record["raw"]["requests"])
    assert record["metrics"]["goodput_req_s"] == record["metrics"]["request_throughput_req_s"]


@pytest.fixture(scope="module")
def launched_faulty_fake(tmp_path_factory) -> dict:
    """One `bench run` that launches the fake server as a subprocess (`engine: launch`)
    with faults on: every 4th request an HTTP 500, every 5th stream dropped. It answers
    both the launch test (started, measured, stopped) and the fault test (errors counted,
    the rest reported): the client and the metrics are the same whether the server was
    launched or named by URL, so one worker start serves both."""
    tmp_path = tmp_path_factory.mktemp("launch")
    block = (
        f"  engine: launch\n  launch:\n    command: ['{{python}}', '{FAKE}', '--port', '{{port}}', "
        "'--fail-every', '4', '--drop-every', '5']\n    health_timeout_s: 30\n  output_tokens: 10\n"
        "  num_requests: 20\n  warmup_requests: 0\n  load: {concurrency: 2}\n"
        "  max_error_rate: 1.0\n"  # the faults are the point: the run stays ok, its errors counted
    )
    done = bench("run", str(serve_scenario(tmp_path, block)), "--results-dir", str(tmp_path / "r"), "--no-progress")
    assert done.returncode == 0, done.stderr + done.stdout
    (record,) = records_in(tmp_path / "r")
    return record


def test_http_500_and_dropped_streams_are_errors_and_the_rest_is_reported(launched_faulty_fake):
    record = launched_faulty_fake
    errors = [r["error"] for r in record["raw"]["requests"] if r["error"]]
    assert any(e.startswith("HTTP 500") for e in errors)
    assert any("RemoteProtocolError" in e or "ReadError" in e for e in errors)
    m = record["metrics"]
    assert m["num_errors"] == len(errors) and m["num_completed"] == 20 - len(errors) > 0
    check_definitions(record)


def test_launch_mode_starts_measures_and_stops_the_server(launched_faulty_fake):
    record = launched_faulty_fake
    port = int(record["server"]["base_url"].split(":")[-1].split("/")[0])
    assert not port_open(port)  # stopped
    assert "fake OpenAI server" in record["server"]["log_tail"]
    check_definitions(record)


def test_a_server_that_never_becomes_healthy_is_a_failed_record_with_its_log(tmp_path):
    block = (
        "  engine: launch\n  launch:\n    command: ['{python}', '-c', \"print('warming up forever', flush=True); "
        'import time; time.sleep(600)"]\n    health_timeout_s: 4\n'
    )
    done = bench(
        "run", str(serve_scenario(tmp_path, block)), "--results-dir", str(tmp_path / "r"), "--no-progress", timeout=120
    )
    assert done.returncode == 1
    (record,) = records_in(tmp_path / "r")
    assert record["status"] == "failed" and "not healthy" in record["failure"]["reason"]
    assert "warming up forever" in record["failure"]["reason"]


@pytest.fixture(scope="module")
def transformers_sweep(tmp_path_factory) -> dict[int, dict]:
    """`transformers serve` on the scenario's tiny model, exported with the project's
    local tokenizer, launched once for a concurrency sweep over 1 and 4 (one record a
    point, the points in order on the same server): one server start instead of two."""
    tmp_path = tmp_path_factory.mktemp("transformers")
    block = (
        f"  engine: launch\n  launch:\n    command: ['{TRANSFORMERS_CLI}', 'serve', '{{model_dir}}', '--host', "
        f"'127.0.0.1', '--port', '{{port}}', '--device', 'cpu']\n    env: {{HF_HUB_OFFLINE: '1'}}\n"
        f"    model: '{{model_dir}}'\n    health_timeout_s: 180\n  output_tokens: 8\n  num_requests: 6\n"
        f"  warmup_requests: 1\n  sweep: {{concurrency: [1, 4]}}\n  force_output_length: false\n  token_ids: false\n"
        f'  extra_body: {{generation_config: \'{{"min_new_tokens": 8, "max_new_tokens": 8}}\'}}\n'
    )
    done = bench("run", str(serve_scenario(tmp_path, block)), "--results-dir", str(tmp_path / "r"), "--no-progress")
    assert done.returncode == 0, done.stderr + done.stdout
    return {r["scenario"]["cell"]["serve.load.concurrency"]: r for r in records_in(tmp_path / "r")}


@pytest.mark.parametrize("concurrency", [1, 4])
def test_transformers_serve_with_the_local_tiny_model(transformers_sweep, concurrency):
    """A real OpenAI-compatible server: `transformers serve` on the scenario's tiny model,
    exported with the project's local tokenizer, at this concurrency."""
    record = transformers_sweep[concurrency]
    assert record["status"] == "ok", record["failure"]
    assert len([r for r in record["raw"]["requests"] if not r["warmup"]]) == 6
    check_definitions(record)
    port = int(record["server"]["base_url"].split(":")[-1].split("/")[0])
    assert not port_open(port)


@pytest.fixture(scope="module")
def gemma270m_serve(tmp_path_factory) -> tuple:
    """`bench run scenarios/gemma270m.yaml` (README's first command), its serve section,
    where vLLM is not installed (BENCH_VLLM_PYTHON unset, no `vllm` on PATH): the run's
    output, its record, its results folder and the environment it ran in. Real 270M
    dimensions, as the README runs it: the only test that serves the shipped scenario."""
    # bench() layers env over os.environ: an empty BENCH_VLLM_PYTHON is how it reads unset
    env = {k: v for k, v in os.environ.items() if k != "BENCH_VLLM_PYTHON"} | {"BENCH_VLLM_PYTHON": ""}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not os.path.exists(f"{p}/vllm"))
    results = tmp_path_factory.mktemp("gemma270m") / "r"
    scenario = "scenarios/gemma270m.yaml"
    done = bench("run", scenario, "--results-dir", str(results), "--no-progress", "--set", "tasks=[serve]", env=env)
    assert done.returncode == 0, done.stderr
    (record,) = records_in(results)
    return done, record, results, env


def test_local_engine_stamps_every_generated_token(gemma270m_serve):
    """The local engine (what engine auto chose in the gemma270m run: the same serving
    code as `engine: local`) streams one chunk a token, each stamped as it is made."""
    _, record, _, _ = gemma270m_serve
    assert record["raw"]["engine"] == "local"
    length = record["scenario"]["resolved"]["serve"]["output_tokens"]
    assert length > 1 and len(record["raw"]["requests"]) > 1
    for r in record["raw"]["requests"]:
        assert r["output_tokens"] == length and len(r["chunk_s"]) == length
        assert r["chunk_s"] == sorted(r["chunk_s"]) and r["sent_s"] < r["chunk_s"][0] <= r["end_s"]
    check_definitions(record)


def test_gemma270m_serve_section_runs_on_a_cpu_without_vllm_and_says_which_engine_and_why(gemma270m_serve):
    """`bench run scenarios/gemma270m.yaml` where vLLM is not installed (BENCH_VLLM_PYTHON
    unset, no `vllm` on PATH): engine auto serves with the local engine and says so, and
    why, in the terminal and the record; its $ is labelled a reference engine's."""
    done, record, results, env = gemma270m_serve
    said = " ".join(done.stdout.split())
    assert "serving via local (reference engine, not a production server): engine auto: no vLLM here" in said
    assert record["status"] == "ok" and record["scenario"]["profile"]["name"] == "cpu"
    assert record["raw"]["engine"] == "local" and record["backend"]["name"] == "serve-local"
    assert record["server"]["chosen"]["ran"] == "local (reference engine, not a production server)"
    assert record["server"]["dtype"] == "fp32" and record["server"]["kv_cache"] == "dynamic"
    assert record["cost"] is None or record["cost"]["label"] == "reference engine, not a production server"
    shown = bench("show", str(results), env={**env, "COLUMNS": "400"})  # no wrapped cells
    assert "engine auto: no vLLM here" in " ".join(shown.stdout.split())
    check_definitions(record)
