"""Serving, TPU versus GPU (issue 47): tokens are tokens, not text (a chunk with
`choices` is a token event whatever its text; token ids checked against usage); a
request fails only on a transport or HTTP error, an error in the stream, no token, or
fewer tokens than usage reports."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from contextlib import contextmanager

import pytest
from test_serve_loads import serve_spec, url

from harness.figures.metrics import serving_metrics
from harness.serving.client import RequestRecord, request_body, stream_verdict, token_ids_in
from harness.serving.loads import drive

from conftest import ROOT
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


# --------------------------------------------------------------------------- bill what serves
def scenario_of(preset: str, serve: dict | None = None):
    from harness.scenario.loader import validate

    doc = {"name": "x", "model": {"preset": preset}, "tasks": ["serve"], "serve": serve or {}}
    return validate(doc, "s.yaml")


def auto_command(preset: str, platform: str, environ: dict, monkeypatch, serve: dict | None = None):
    """auto's choice for `preset` on a faked platform, and the vLLM command it launches."""
    from backends.hf_common.serving import auto_vllm
    from harness.serving import engines

    monkeypatch.setattr(engines, "vllm_probe", lambda python, architecture, dtype: None)
    scenario = scenario_of(preset, serve)
    model = engines.serving_model(scenario, need=False)
    choice = engines.choose(scenario.serve, {"BENCH_VLLM_PYTHON": "/bin/sh", **environ}, model, platform=platform)
    if choice.engine != "launch":
        return choice, None
    return choice, list(auto_vllm(scenario, choice.to_json()).serve.launch.command)


def flag(command: list[str], name: str) -> int | None:
    return int(command[command.index(name) + 1]) if name in command else None


def expected_tensor(params: int, memory: int, count: int, heads: int) -> int:
    """The fewest chips dividing the count and the heads whose memory the bf16 weights
    fill at most half of: recomputed here from the datasheet figures."""
    return next(t for t in range(1, count + 1) if count % t == 0 and heads % t == 0 and 2 * params / t <= memory / 2)


def gemma_params(preset: str) -> int:
    """Parameters counted from the preset's dimensions by hand (tied embedding)."""
    from harness.scenario.presets import MODEL_PRESETS as PRESETS

    a = PRESETS[preset]
    attention = a["hidden_size"] * a["head_dim"] * 2 * (a["num_heads"] + a["num_kv_heads"])
    return (
        a["num_layers"] * (attention + 3 * a["hidden_size"] * a["intermediate_size"])
        + a["vocab_size"] * a["hidden_size"]
    )


@pytest.mark.parametrize(
    ("preset", "slice_name", "chips", "memory"),
    [
        ("gemma-3-270m", "v6e-8", 8, int(31.25 * 2**30)),  # usable HBM: the compiler's limits
        ("gemma-3-27b", "v6e-8", 8, int(31.25 * 2**30)),
        ("gemma-3-270m", "v5litepod-4", 4, int(15.75 * 2**30)),
    ],
)
def test_auto_vllm_on_a_tpu_slice_serves_from_every_chip_it_bills(monkeypatch, preset, slice_name, chips, memory):
    """A v6e-8 bills 8 chips, a v5e-4 4: the vLLM command shards the weights over the
    fewest chips they fit (tensor parallel) and replicates over the rest (data
    parallel), so tensor x data = the billed chips."""
    from harness.scenario.presets import MODEL_PRESETS as PRESETS

    choice, command = auto_command(preset, "tpu", {"TPU_ACCELERATOR_TYPE": slice_name}, monkeypatch)
    tensor = expected_tensor(gemma_params(preset), memory, chips, PRESETS[preset]["num_heads"])
    assert (flag(command, "--tensor-parallel-size") or 1) == tensor
    assert (flag(command, "--data-parallel-size") or 1) == chips // tensor
    assert choice.accelerator["count"] == chips and choice.tensor_parallel * choice.data_parallel == chips
    assert f"--tensor-parallel-size {tensor}" in choice.reason
    if preset == "gemma-3-27b":
        assert tensor == 4  # 54 GB of bf16 weights: 13.5 GB a chip on 4, above half of 31.25 GiB on 2


def test_one_replica_bills_only_its_chips_and_says_so(monkeypatch):
    choice, command = auto_command(
        "gemma-3-27b", "tpu", {"TPU_ACCELERATOR_TYPE": "v6e-8"}, monkeypatch, {"auto_replicas": "one"}
    )
    assert flag(command, "--tensor-parallel-size") == 4 and "--data-parallel-size" not in command
    assert choice.accelerator["count"] == 4 and "billed 4 of the 8 chips" in choice.reason


def fake_gpus(tmp_path, names: list[str]):
    for i, name in enumerate(names):
        board = tmp_path / f"0000:0{i}:00.0"
        board.mkdir(parents=True)
        (board / "information").write_text(f"Model: \t\t {name}\nIRQ:   \t\t 42\n")
    return tmp_path


def test_auto_vllm_on_a_two_gpu_host_is_billed_both_before_any_load(monkeypatch, tmp_path):
    """Two H100s listed by the driver: billed h100-sxm x 2 at choice time (not asked for
    after the load); the 27B model needs both (tensor parallel 2), the 270M one runs a
    replica on each (data parallel 2). CUDA_VISIBLE_DEVICES narrows what is billed."""
    from harness.serving import engines

    monkeypatch.setattr(engines, "NVIDIA_PROC", str(fake_gpus(tmp_path, ["NVIDIA H100 80GB HBM3"] * 2)))
    big, command = auto_command("gemma-3-27b", "cuda", {}, monkeypatch)
    assert big.accelerator == {"kind": "cuda", "name": "NVIDIA H100 80GB HBM3", "count": 2, "catalog_key": "h100-sxm"}
    assert expected_tensor(gemma_params("gemma-3-27b"), 80 * 10**9, 2, 32) == 2
    assert flag(command, "--tensor-parallel-size") == 2 and "--data-parallel-size" not in command
    small, command = auto_command("gemma-3-270m", "cuda", {}, monkeypatch)
    assert "--tensor-parallel-size" not in command and flag(command, "--data-parallel-size") == 2
    assert small.accelerator["count"] == 2
    one, command = auto_command("gemma-3-270m", "cuda", {"CUDA_VISIBLE_DEVICES": "1"}, monkeypatch)
    assert one.accelerator["count"] == 1 and "--data-parallel-size" not in command


def test_a_gpu_host_that_does_not_say_its_gpus_or_a_model_too_big_is_refused_or_served_locally(monkeypatch, tmp_path):
    from harness.basics.errors import BenchError
    from harness.serving import engines

    monkeypatch.setattr(engines, "NVIDIA_PROC", str(tmp_path / "none"))
    with pytest.raises(BenchError, match="which GPUs vLLM would serve on is unknown"):
        auto_command("gemma-3-270m", "cuda", {}, monkeypatch)
    monkeypatch.setattr(engines, "NVIDIA_PROC", str(fake_gpus(tmp_path / "l4", ["NVIDIA L4"])))
    choice, _ = auto_command("gemma-3-27b", "cuda", {}, monkeypatch)
    assert choice.engine == "local" and "need more than 1 l4 chips" in choice.reason


def test_auto_replicas_is_for_engine_auto_only():
    from harness.basics.errors import SpecError
    from harness.scenario.loader import validate

    doc = {"name": "x", "serve": {"engine": "local", "auto_replicas": "one"}}
    with pytest.raises(SpecError, match="auto_replicas: only engine auto"):
        validate(doc, "s.yaml")


# --------------------------------------------------------------------------- auto asks vLLM
def fake_vllm_python(tmp_path, archs=("Gemma3ForCausalLM",), dtypes=("float32", "bfloat16"), broken=False):
    """An interpreter whose `vllm` answers like vLLM's (ModelRegistry.get_supported_archs,
    current_platform.supported_dtypes, with a stand-in torch's dtypes), or fails to import."""
    import stat
    import sys

    root = tmp_path / "site"
    for package in ("vllm/model_executor/models", "vllm/platforms", "torch"):
        (root / package).mkdir(parents=True, exist_ok=True)
    (root / "torch/__init__.py").write_text("float32, bfloat16, float16 = 'f32', 'bf16', 'f16'\n")
    (root / "vllm/__init__.py").write_text(
        "raise ImportError('libcudart.so.12: cannot open shared object file')\n" if broken else "__version__ = '9.9'\n"
    )
    (root / "vllm/model_executor/__init__.py").write_text("")
    (root / "vllm/model_executor/models/__init__.py").write_text(
        f"class ModelRegistry:\n    @staticmethod\n    def get_supported_archs():\n        return {list(archs)!r}\n"
    )
    (root / "vllm/platforms/__init__.py").write_text(
        "import torch\nclass _Platform:\n    device_type = 'cpu'\n"
        f"    supported_dtypes = [{', '.join(f'torch.{d}' for d in dtypes)}]\ncurrent_platform = _Platform()\n"
    )
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={root} exec {sys.executable} "$@"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return str(python)


def choose_with(python: str, preset: str = "tiny-gemma3", environ: dict | None = None):
    from harness.serving import engines

    scenario = scenario_of(preset)
    model = engines.serving_model(scenario, need=False)
    return engines.choose(scenario.serve, environ or {"BENCH_VLLM_PYTHON": python}, model, platform="cpu")


def test_auto_launches_vllm_only_where_vllm_itself_says_it_serves_the_model(tmp_path):
    """vLLM imports, its registry lists Gemma3ForCausalLM, its platform serves float32
    (a CPU's dtype): vLLM. (tiny-gemma3's head_dim 16 is its CPU attention's limit; the
    64 below passes it.)"""
    python = fake_vllm_python(tmp_path)
    choice = choose_with(python, "gemma-3-270m")
    assert choice.engine == "launch" and choice.vllm_python == python


@pytest.mark.parametrize(
    ("fake", "preset", "reason"),
    [
        ({"broken": True}, "gemma-3-270m", "vLLM does not import in {python} (ImportError: libcudart.so.12"),
        ({}, "qwen2.5-3b", "vLLM 9.9's model registry does not list Qwen2ForCausalLM"),
        ({"dtypes": ("bfloat16",)}, "gemma-3-270m", "vLLM 9.9 on cpu does not serve float32"),
    ],
)
def test_auto_serves_locally_where_vllm_cannot_and_vllm_says_why(tmp_path, fake, preset, reason):
    python = fake_vllm_python(tmp_path, **fake)
    choice = choose_with(python, preset)
    assert choice.engine == "local" and reason.format(python=python) in choice.reason
    assert choice.reason.endswith("the local engine serves instead")


def test_a_vllm_script_on_path_is_asked_through_the_python_of_its_first_line(tmp_path):
    import stat

    python = fake_vllm_python(tmp_path, archs=())
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "vllm"
    script.write_text(f"#!{python}\nimport sys\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    choice = choose_with(python, "gemma-3-270m", {"PATH": str(bindir)})
    assert choice.engine == "local" and "does not list Gemma3ForCausalLM" in choice.reason


def test_the_probes_answer_is_read_strictly():
    from harness.serving.vllm import interpreter_of, probe_verdict

    assert probe_verdict("/p", "A", "float32", "", "Traceback\nSyntaxError: bad") == (
        "vLLM could not be asked in /p (SyntaxError: bad)"
    )
    answer = '{"version": "1", "architecture": true, "dtype_error": "AttributeError: supported_dtypes"}'
    assert "could not say which dtypes" in probe_verdict("/p", "A", "float32", answer)
    ok = '{"version": "1", "architecture": true, "platform": "tpu", "dtype": true}'
    assert probe_verdict("/p", "A", "bfloat16", "log line\n" + ok) is None
    assert interpreter_of("/nonexistent/vllm") is None


# --------------------------------------------------------------------------- comparable with vLLM
FIXTURE = ROOT / "tests" / "fixtures" / "serving" / "vllm_stream.json"


def replayed_record(monkeypatch) -> dict:
    """bench's client reading the fixture's stream line by line, its clock at each
    event's recorded arrival: the request record bench keeps."""
    from harness.serving import client

    fixture = json.loads(FIXTURE.read_text())
    record = RequestRecord(0, False, fixture["sent_s"], posted_s=fixture["posted_s"], arrival_s=0.0, load_start_s=0.0)
    now = [0.0]
    monkeypatch.setattr(client.time, "perf_counter", lambda: now[0])
    for event in fixture["events"]:
        now[0] = event["t"]
        client._on_line("data: [DONE]" if event.get("done") else f"data: {json.dumps(event['data'])}", record, 0.0)
    record.end_s = fixture["events"][-1]["t"]
    record.error = stream_verdict(record)
    return record.to_json()


def test_vllms_figures_from_benchs_record_equal_vllms_request_function_on_the_same_stream(monkeypatch):
    """The fixture's stream (empty-text tokens, a two-token chunk): bench's record of it
    gives vLLM's figures exactly as vLLM's request function reports them (the fixture's
    `vllm`, checked against vLLM itself below where CI's vLLM is at hand), and bench's
    own TTFT and E2EL start at the header write instead."""
    from harness.serving.conventions import vllm_figures

    expected = json.loads(FIXTURE.read_text())["vllm"]
    record = replayed_record(monkeypatch)
    assert record["error"] is None and sum(record["chunk_tokens"]) == record["output_tokens"] == 5
    ours = vllm_figures([record])
    assert ours["ttft_s"]["median"] == pytest.approx(expected["ttft"])
    assert ours["e2el_s"]["median"] == pytest.approx(expected["latency"])
    gaps = [b - a for a, b in zip(record["chunk_s"], record["chunk_s"][1:])]
    assert gaps == pytest.approx(expected["itl"]) and ours["itl_s"]["n"] == len(expected["itl"])
    assert record["output_tokens"] == expected["output_tokens"]
    bench = serving_metrics({"requests": [record]}, {})
    assert bench["ttft_s"]["median"] == pytest.approx(expected["ttft"] - 0.004)  # from the header write
    assert bench["tpot_s"]["median"] == pytest.approx(ours["tpot_s"]["median"])  # the start cancels


def test_the_fixtures_vllm_figures_are_vllms_own():
    """vLLM's async_request_openai_completions, in CI's vLLM environment, on the fixture's
    stream (a stand-in session replays it; the module's clock reads the recorded times)."""
    import os
    import subprocess

    python = os.environ.get("BENCH_VLLM_PYTHON")
    if not python:
        if os.environ.get("CI"):
            pytest.fail("CI must provide vLLM: .ci/run builds .venv-vllm and sets BENCH_VLLM_PYTHON")
        pytest.skip("vLLM is not installed here (.ci/run builds .venv-vllm; set BENCH_VLLM_PYTHON to its python)")
    done = subprocess.run(
        [python, str(ROOT / "tests" / "vllm_replay.py"), str(FIXTURE)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout.strip().splitlines()[-1])
    expected = json.loads(FIXTURE.read_text())["vllm"]
    assert theirs["success"] is True and theirs["output_tokens"] == expected["output_tokens"]
    for key in ("ttft", "latency"):
        assert theirs[key] == pytest.approx(expected[key])
    assert theirs["itl"] == pytest.approx(expected["itl"])


def test_a_live_load_keeps_both_clocks_and_states_differences_over_5_percent():
    """Against the fake server, capped at 1 in flight with 3 requests: each request was
    scheduled at the load's start, posted when its slot freed (the semaphore wait, 0
    for the first), written after; vLLM's duration runs from the load's start."""
    from harness.serving.conventions import differences, vllm_figures

    with fake() as port:
        requests = measured_requests(port, load={"request_rate": 1000, "max_concurrency": 1})
    for r in requests:
        assert r["load_start_s"] <= r["arrival_s"] <= r["posted_s"] <= r["sent_s"] < r["chunk_s"][0]
    ours, theirs = serving_metrics({"requests": requests}, {}), vllm_figures(requests)
    start = min(r["load_start_s"] for r in requests)
    order = sorted(requests, key=lambda r: r["posted_s"])
    for before, after in zip(order, order[1:]):  # one slot: each posted once the one before it ended
        assert after["posted_s"] >= before["end_s"]
        assert after["posted_s"] - after["arrival_s"] >= before["end_s"] - after["arrival_s"] > 0  # it waited
    waits = [r["posted_s"] - r["arrival_s"] for r in order]
    assert theirs["semaphore_wait_s"]["max"] == pytest.approx(max(waits))
    assert theirs["ttft_s"]["median"] >= ours["ttft_s"]["median"]
    assert theirs["duration_s"] == pytest.approx(max(r["end_s"] for r in requests) - start)
    said = differences(
        {"ttft_s": {"median": 0.100}, "duration_s": 10.0}, {"ttft_s": {"median": 0.106}, "duration_s": 10.4}
    )
    assert len(said) == 1 and said[0].startswith("TTFT median: bench 0.1, vLLM's convention 0.106 (+6.0%)")


def record_with_connection_waits(wait_s: float) -> dict:
    """A serve record whose every request waited `wait_s` for its connection between
    being posted and written (vLLM's clock starts at the post, bench's at the write)."""
    from test_serve_loads import serve_record, timed_requests

    from harness.serving.figures import vllm_convention

    requests = timed_requests(20, 0)
    for r in requests:
        r.update(posted_s=r["sent_s"] - wait_s, arrival_s=r["sent_s"] - wait_s, load_start_s=-wait_s)
    record = serve_record({"requests": requests}, name="tiny")
    record["metrics"].update(vllm_convention(record["raw"], record["metrics"]))
    return record


def test_show_and_the_report_state_a_convention_difference_over_5_percent_and_only_then():
    from harness.records.result import as_records
    from harness.tasks.serve.show import figure_rows
    from reports.model import build

    slow, quick = record_with_connection_waits(0.05), record_with_connection_waits(0.0001)
    ttft = slow["metrics"]["ttft_s"]["median"]
    assert slow["metrics"]["vllm_convention"]["ttft_s"]["median"] == pytest.approx(ttft + 0.05)
    (said, *_) = slow["metrics"]["convention_differences"]
    assert said.startswith(f"TTFT median: bench {ttft:.4g}, vLLM's convention {ttft + 0.05:.4g}")
    assert quick["metrics"]["convention_differences"] == []
    (typed,) = as_records([slow])
    notes = [v for k, v in figure_rows(typed) if k == "note"]
    assert f"vLLM's convention differs: {said}" in notes
    report = build([slow])
    (line,) = [w for w in report.warnings if "client conventions differ" in w]
    assert said in line and "1 of 1 runs" in line
    assert not [w for w in build([quick]).warnings if "client conventions differ" in w]


# --------------------------------------------------------------------------- server beside client
def test_the_servers_own_figures_come_from_its_metrics_sampled_through_the_load():
    """A server with vLLM's /metrics (the fake's miniature: KV-cache usage a tenth per
    request held, 0.25 s queued, one preemption and 3 of 4 prefix tokens hit per
    request): four requests held 1.2 s together read a KV-cache peak of 0.4 (sampled
    during the load: it is 0 before and after), and the counters' deltas give the rest."""
    from harness.serving.figures import server_side

    server = fake_server(0, hold=1.2, quirks={"metrics": True})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        spec = serve_spec(port, num_requests=4, warmup_requests=0, output_tokens=3, load={"concurrency": 4})
        bodies = [request_body("completions", "fake-model", {"text": f"p {i}"}, spec) for i in range(4)]
        facts = asyncio.run(drive(url(port), bodies, spec, time.perf_counter()))
    finally:
        server.shutdown()
        server.server_close()
    sm = facts["server_metrics"]
    assert sm["after"]['vllm:kv_cache_usage_perc{model_name="fake-model"}'] == 0.0  # idle once the load ended
    figures = server_side(facts)["server_figures"]
    assert figures == {
        "queue_time_mean_s": pytest.approx(0.25),
        "kv_cache_usage_peak": pytest.approx(0.4),
        "prefix_cache_hit_rate": pytest.approx(0.75),
        "preemptions": 4.0,
    }


def test_show_and_the_reports_serving_table_label_the_servers_figures(monkeypatch):
    from harness.records.result import as_records
    from harness.tasks.serve.show import figure_rows
    from reports.model import SERVE_COLUMNS, build

    record = record_with_connection_waits(0.0001)
    record["metrics"]["server_figures"] = {
        "queue_time_mean_s": 0.125,
        "kv_cache_usage_peak": 0.5,
        "prefix_cache_hit_rate": None,
        "preemptions": 2.0,
    }
    (typed,) = as_records([record])
    rows = dict(figure_rows(typed))
    assert rows["server: mean queue time (s)"] == "0.125" and rows["server: KV-cache use peak"] == "50.0%"
    assert rows["server: prefix-cache hit rate (tokens)"] == "n/a (the server did not report it)"
    assert rows["server: preemptions"] == "2"
    headers = [h for h, _, _ in SERVE_COLUMNS]
    (row,) = build([record]).serving
    cells = dict(zip(headers, row.cells))
    assert cells["server queue mean (s)"] == "0.125" and cells["server KV-cache peak"] == "50%"
    assert cells["server prefix-cache hits"] == "n/a [v]" and cells["server preemptions"] == "2"
    record["metrics"]["server_figures"] = None
    (typed,) = as_records([record])
    assert dict(figure_rows(typed))["server figures"] == "n/a (the server offers no vLLM /metrics)"
