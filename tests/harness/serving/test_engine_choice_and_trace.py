"""`engine: auto` (vLLM where installed, else the local engine, and why), the serve
section's rules for the local engine, trace replay (`prompts: {source: trace}`) and
prefix-cache accounting (usage.prompt_tokens_details.cached_tokens), against the fake
OpenAI server: no model, no framework."""

from __future__ import annotations

import json
import stat
import threading

import pytest

from harness.basics.errors import BenchError, SpecError
from harness.scenario.loader import validate
from harness.serving.engines import LOCAL_LABEL, choose
from harness.serving.trace import BLOCK_TOKENS, read_trace
from harness.tasks.serve.spec import ServeSpec

from conftest import TINY, bench, records_in, write_scenario
from fake_openai import serve as fake_server


@pytest.fixture(autouse=True)
def vllm_answers_yes(monkeypatch):
    """The stand-in interpreters here (/bin/sh) are not vLLM: its own answer (does it
    import, does its registry list the model, its platform the dtype) is stood in for;
    test_serving_tpu_gpu.py tests the asking."""
    from harness.serving import engines

    monkeypatch.setattr(engines, "vllm_probe", lambda python, architecture, dtype: None)


# --------------------------------------------------------------------------- engine: auto
def test_auto_picks_vllms_python_then_vllm_on_path_then_the_local_engine(tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    vllm = bindir / "vllm"
    vllm.write_text("#!/bin/sh\n")
    vllm.chmod(vllm.stat().st_mode | stat.S_IEXEC)
    spec = ServeSpec()
    assert spec.engine == "auto"
    both = choose(spec, {"BENCH_VLLM_PYTHON": str(python), "PATH": str(bindir)})
    assert (both.engine, both.vllm_python, both.vllm_executable) == ("launch", str(python), None)
    assert "BENCH_VLLM_PYTHON" in both.reason and both.label == "vllm (launch)"
    on_path = choose(spec, {"PATH": str(bindir)})
    assert (on_path.engine, on_path.vllm_executable) == ("launch", str(vllm)) and str(vllm) in on_path.reason
    neither = choose(spec, {"PATH": str(tmp_path / "empty")})
    assert neither.engine == "local" and neither.vllm_python is None and neither.vllm_executable is None
    assert "no vLLM here" in neither.reason and LOCAL_LABEL in neither.label
    named = choose(ServeSpec(engine="local"), {"BENCH_VLLM_PYTHON": str(python)})
    assert named.engine == "local" and "the scenario names it" in named.reason


def test_a_vllm_python_that_does_not_exist_is_refused_not_passed_over(tmp_path):
    with pytest.raises(BenchError, match="BENCH_VLLM_PYTHON: .* is not an executable Python"):
        choose(ServeSpec(), {"BENCH_VLLM_PYTHON": str(tmp_path / "missing"), "PATH": ""})


def test_auto_vllm_command_reports_cached_tokens_and_states_its_settings():
    from harness.serving.vllm import server_command

    module = server_command("/v/python", dtype="bfloat16", max_model_len=None, eager=False)
    assert module[:5] == ["/v/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "{model_dir}"]
    assert "--enable-prompt-tokens-details" in module and "--max-model-len" not in module
    assert "--enforce-eager" not in module and module[module.index("--dtype") + 1] == "bfloat16"
    executable = server_command("", launcher=["/bin/vllm", "serve"], prefix_caching=False)
    assert executable[:3] == ["/bin/vllm", "serve", "{model_dir}"] and "--model" not in executable
    assert "--no-enable-prefix-caching" in executable and "--enable-prompt-tokens-details" not in executable


def test_autos_vllm_is_a_launch_section_with_the_precision_and_this_machines_settings():
    """On this CPU: eager, fp32 (the unset precision's CPU meaning; bf16 when stated),
    a 4096-token context, vLLM's CPU environment, cached tokens reported."""
    from backends.hf_common.serving import auto_vllm

    choice = choose(ServeSpec(), {"BENCH_VLLM_PYTHON": "/bin/sh"}).to_json()
    for precision, dtype in ((None, "float32"), ("bf16", "bfloat16")):
        doc = {"name": "x", "tasks": ["serve"], "serve": {"precision": precision} if precision else {}}
        serve = auto_vllm(validate(doc, "s.yaml"), choice).serve
        command = list(serve.launch.command)
        assert serve.engine == "launch" and command[:3] == ["/bin/sh", "-m", "vllm.entrypoints.openai.api_server"]
        assert command[command.index("--dtype") + 1] == dtype and "--enforce-eager" in command
        assert command[command.index("--max-model-len") + 1] == "4096" and "--enable-prompt-tokens-details" in command
        assert serve.launch.env["VLLM_CPU_KVCACHE_SPACE"] == "1" and serve.launch.model == "{model_dir}"


# --------------------------------------------------------------------------- rules
ENDPOINT = {"engine": "endpoint", "endpoint": {"base_url": "http://127.0.0.1:1/v1"}}


@pytest.mark.parametrize(
    "serve, field",
    [
        ({**ENDPOINT, "precision": "bf16"}, "serve.precision: engine endpoint's server sets its own dtype"),
        ({**ENDPOINT, "local": {"max_batch": 4}}, "serve.local: only engine local (or auto)"),
        ({"sweep": {"concurrency": [1, 2]}}, "serve.sweep: engine auto (it may fall back to the local engine)"),
        ({"engine": "local", "slo_search": {"low": 1, "high": 2, "tolerance": 1}}, "serve.slo_search"),
        ({"extra_body": {"top_k": 1}}, "serve.extra_body: engine auto"),
        ({"local": {"compile": True}}, "serve.local.compile: needs cache: static"),
    ],
)
def test_what_the_local_engine_cannot_do_is_refused_for_local_and_auto(serve, field):
    with pytest.raises(SpecError) as err:
        validate({"name": "x", "tasks": ["serve"], "serve": serve}, "s.yaml")
    assert field in str(err.value) and "\n" not in str(err.value)


def test_the_local_engine_takes_requests_in_flight_and_a_precision():
    spec = validate(
        {"name": "x", "serve": {"engine": "local", "precision": "bf16", "load": {"concurrency": 4}}}, "s.yaml"
    ).serve
    assert spec.load.in_flight_limit == 4 and spec.precision == "bf16"
    open_loop = {"load": {"request_rate": 5, "max_concurrency": 8}, "local": {"max_batch": 8, "cache": "static"}}
    assert validate({"name": "x", "serve": open_loop}, "s.yaml").serve.local.cache == "static"


# --------------------------------------------------------------------------- traces
def write_trace(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_a_trace_is_read_with_arrivals_in_seconds_after_its_first_request(tmp_path):
    rows = [
        {"timestamp": 1000, "input_length": 30, "output_length": 4},
        {"timestamp": 1250, "input_length": 600, "output_length": 2, "hash_ids": [7, 8]},
        {"timestamp": 3000.5, "input_length": 5, "output_length": 1},
    ]
    read = read_trace(write_trace(tmp_path / "t.jsonl", rows))
    assert [r.arrival_s for r in read] == [0.0, 0.25, 2.0005]
    assert [(r.input_tokens, r.output_tokens, r.blocks) for r in read] == [(30, 4, ()), (600, 2, (7, 8)), (5, 1, ())]


GOOD = {"timestamp": 0, "input_length": 8, "output_length": 2}


@pytest.mark.parametrize(
    "rows, says",
    [
        ([GOOD, "{not json"], ":2: not JSON"),
        ([GOOD, [1, 2]], ":2: expected a JSON object"),
        ([{"timestamp": 0, "input_length": 8}], ":1: output_length: missing"),
        ([{**GOOD, "prompt": "x"}], ":1: prompt: unknown field"),
        ([{**GOOD, "input_length": 0}], ":1: input_length: a number of tokens > 0 (got 0)"),
        ([{**GOOD, "output_length": 2.5}], ":1: output_length: a number of tokens > 0 (got 2.5)"),
        ([{**GOOD, "timestamp": "soon"}], ":1: timestamp: a time in milliseconds >= 0"),
        ([{**GOOD, "timestamp": 50}, GOOD], ":2: timestamp: 0 ms is before the previous row's 50"),
        ([{**GOOD, "hash_ids": [1, 2]}], f":1: hash_ids: 2 blocks of {BLOCK_TOKENS} tokens for input_length 8"),
        ([{**GOOD, "hash_ids": [-1]}], ":1: hash_ids: a list of block ids"),
        ([], ": the trace has no requests"),
    ],
)
def test_a_bad_trace_is_refused_naming_the_file_line_and_field(tmp_path, rows, says):
    path = write_trace(tmp_path / "bad.jsonl", rows)
    doc = {"name": "x", "tasks": ["serve"], "serve": {"prompts": {"source": "trace", "path": path}}}
    with pytest.raises(SpecError) as err:
        validate(doc, "s.yaml")
    message = str(err.value)
    assert "serve.prompts" in message and f"{path}{says}" in message and "\n" not in message


@pytest.mark.parametrize(
    "serve, field",
    [
        ({"load": {"request_rate": 2}}, "serve.load.request_rate: a trace gives every arrival time"),
        ({"load": {"concurrency": 2}}, "serve.load.concurrency"),
        ({"output_tokens": 8}, "serve.output_tokens: the trace gives each request's output length"),
        ({"num_requests": 3}, "serve.num_requests: 3, but the trace"),
        ({"prompts": {"source": "trace", "path": "PATH", "input_words": 5}}, "serve.prompts.input_words"),
        ({"prompts": {"source": "synthetic", "path": "PATH"}}, "serve.prompts.path: only source: trace"),
    ],
)
def test_what_a_trace_already_says_is_refused_beside_it(tmp_path, serve, field):
    path = write_trace(tmp_path / "t.jsonl", [GOOD, GOOD])
    prompts = {"source": "trace", "path": path}
    serve = json.loads(json.dumps({"prompts": prompts, "num_requests": 2, **serve}).replace("PATH", path))
    with pytest.raises(SpecError) as err:
        validate({"name": "x", "tasks": ["serve"], "serve": {**ENDPOINT, **serve}}, "s.yaml")
    assert field in str(err.value)


def test_trace_prompts_have_the_traces_lengths_to_the_token_and_share_its_blocks(tmp_path):
    from harness.data.tokenizer import load_tokenizer
    from harness.scenario.loader import document_from_text
    from harness.serving.prompts import build_prompts

    rows = [
        {"timestamp": 0, "input_length": 700, "output_length": 3, "hash_ids": [1, 2]},
        {"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [1, 3]},
        {"timestamp": 20, "input_length": 40, "output_length": 2},
    ]
    doc = document_from_text(TINY, "tiny.yaml")
    doc["serve"] = {**ENDPOINT, "prompts": {"source": "trace", "path": write_trace(tmp_path / "t.jsonl", rows)}}
    doc["serve"].update(num_requests=3, warmup_requests=1)
    scenario = validate(doc, "s.yaml")
    prompts = build_prompts(scenario, 4)
    tok = scenario.data.tokenizer
    handle = load_tokenizer(tok.kind, tok.vocab_size, tok.path)
    measured = prompts[1:]
    assert [len(p["token_ids"]) for p in measured] == [700, 600, 40]
    assert [p["output_tokens"] for p in measured] == [3, 5, 2] and prompts[0]["output_tokens"] == 3
    assert [p["arrival_s"] for p in measured] == [0.0, 0.01, 0.02] and prompts[0]["arrival_s"] is None
    # block 1 is the first 512 tokens of both; their second blocks differ
    first, second = measured[0]["token_ids"], measured[1]["token_ids"]
    assert first[:BLOCK_TOKENS] == second[:BLOCK_TOKENS] and first[BLOCK_TOKENS:] != second[BLOCK_TOKENS:600]
    assert prompts[0]["token_ids"][:BLOCK_TOKENS] != first[:BLOCK_TOKENS]  # warm-up primes no cache
    # the text is what a server tokenizes: the same ids, give or take a merge at a cut
    assert abs(len(handle.encode(measured[0]["text"])) - 700) <= 2


@pytest.fixture
def fake_port():
    server = fake_server(
        0, delay=0.001
    )  # port 0: the kernel's free port, bound at once (no race with the other worker)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield port
    server.shutdown()
    server.server_close()


@pytest.mark.serial
def test_a_trace_is_replayed_at_its_recorded_arrival_times(tmp_path, fake_port):
    """20 requests of a bursty trace: each is sent within 50 ms of its recorded arrival
    (measured from the first measured request's send)."""
    gaps = [0, 5, 5, 300, 10, 10, 10, 200, 0, 0, 150, 40, 40, 40, 100, 5, 5, 250, 30, 30]
    times, t = [], 1_000_000
    for gap in gaps:
        t += gap
        times.append(t)
    rows = [{"timestamp": ms, "input_length": 20 + i, "output_length": 3} for i, ms in enumerate(times)]
    path = write_trace(tmp_path / "trace.jsonl", rows)
    serve = {**ENDPOINT, "prompts": {"source": "trace", "path": path}, "num_requests": 20, "warmup_requests": 1}
    serve["endpoint"] = {"base_url": f"http://127.0.0.1:{fake_port}/v1"}
    done = run_serve(tmp_path, serve)
    measured = sorted((r for r in done["raw"]["requests"] if not r["warmup"]), key=lambda r: r["index"])
    start = measured[0]["sent_s"]
    offsets = [r["sent_s"] - start for r in measured]
    expected = [(ms - times[0]) / 1e3 for ms in times]
    assert max(abs(a - b) for a, b in zip(offsets, expected)) < 0.05, list(zip(offsets, expected))
    assert [r["output_tokens"] for r in measured] == [3] * 20


def test_cached_prompt_tokens_are_read_from_usage_per_request_and_summed(tmp_path, fake_port):
    """The fake server's prefix cache (one word a token): with shared-prefix prompts sent
    one at a time, every request's cached tokens are the words it shares at its start
    with an earlier prompt, recomputed here from the prompts."""
    from harness.serving.prompts import build_prompts

    serve = {**ENDPOINT, "endpoint": {"base_url": f"http://127.0.0.1:{fake_port}/v1"}}
    serve.update(
        prompts={"source": "shared-prefix", "prefix_words": 12, "num_prefixes": 2, "input_words": 4},
        output_tokens=2,
        num_requests=6,
        warmup_requests=1,
        load={"concurrency": 1},
    )
    record = run_serve(tmp_path, serve)
    words = [p["text"].split() for p in build_prompts(scenario_of(tmp_path), 7)]

    def shared(a, b):
        n = 0
        while n < min(len(a), len(b)) and a[n] == b[n]:
            n += 1
        return n

    expected = [max(shared(words[i], words[j]) for j in range(i)) for i in range(1, 7)]
    measured = sorted((r for r in record["raw"]["requests"] if not r["warmup"]), key=lambda r: r["index"])
    assert [r["cached_tokens"] for r in measured] == expected
    assert all(n >= 12 for n in expected[1:])  # from the third prompt on, each prefix was seen before
    m = record["metrics"]
    assert m["cached_prompt_tokens"] == sum(expected)
    assert m["cached_prompt_fraction"] == pytest.approx(sum(expected) / sum(len(w) for w in words[1:]))


def run_serve(tmp_path, serve: dict) -> dict:
    import yaml

    path = write_scenario(tmp_path, TINY + yaml.safe_dump({"tasks": ["serve"], "serve": serve}, sort_keys=False))
    done = bench("run", str(path), "--results-dir", str(tmp_path / "r"), "--no-progress")
    assert done.returncode == 0, done.stdout + done.stderr
    (record,) = records_in(tmp_path / "r")
    assert record["status"] == "ok", record["failure"]
    return record


def scenario_of(tmp_path):
    from harness.scenario.loader import read_document

    return validate(read_document(str(tmp_path / "s.yaml")), "s.yaml")
