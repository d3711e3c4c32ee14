"""Serving figures a serving engineer would sign (issue 40): a client that is never the
bottleneck (a connection per request in flight, sent at the write, its own queue time
recorded), arrivals at their nominal rate, the achieved rate in records, plots and the
SLO answer, billing the device that ran, the local engine's caveat on every $ of it,
auto's vLLM only where it can serve, the per-request export."""

from __future__ import annotations

import asyncio
import csv
import json
import statistics
import threading
import time

import pytest
from rich.console import Console
from test_serve_loads import bodies, serve_record, serve_spec, timed_requests, url

from harness.basics.errors import BenchError, SpecError
from harness.scenario.loader import validate
from harness.serving.client import arrival_delays
from harness.serving.engines import LOCAL_LABEL, ServingModel, choose
from harness.serving.loads import drive
from harness.tasks.serve.spec import LoadSpec, ServeSpec

from conftest import TINY, bench
from fake_openai import serve as fake_server


@pytest.fixture(autouse=True)
def vllm_answers_yes(monkeypatch):
    """The stand-in interpreters here (/bin/sh) are not vLLM: its own answer (does it
    import, does its registry list the model, its platform the dtype) is stood in for;
    test_serving_tpu_gpu.py tests the asking."""
    from harness.serving import engines

    monkeypatch.setattr(engines, "vllm_probe", lambda python, architecture, dtype: None)


# --------------------------------------------------------------------------- the client
@pytest.mark.serial
def test_the_client_holds_a_connection_per_request_in_flight_and_stamps_the_write():
    """120 requests at once, each held 1.5 s by the server: the server sees 120 open
    connections and 120 requests in flight (a pool of 64 would cap both at 64 and make
    the rest wait inside the client, in their TTFT); every request's send stamp is
    before the server read it and within a second of it (a request that waited for a
    pooled connection would be read a whole hold, 1.5 s, after its stamp; 120 threads on
    2 cores have read one 0.77 s late), and its client queue time is recorded
    (sent - due)."""
    n, hold = 120, 1.5
    server = fake_server(0, hold=hold)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        spec = serve_spec(port, num_requests=n, warmup_requests=0, output_tokens=2, load={"request_rate": 1000})
        origin = time.perf_counter()
        facts = asyncio.run(drive(url(port), bodies(n), spec, origin))
    finally:
        server.shutdown()
        server.server_close()
    requests = facts["requests"]
    assert len(requests) == n and all(r["error"] is None for r in requests), requests[0]["error"]
    assert server.stats["peak_connections"] == n and server.stats["peak_in_flight"] == n
    arrivals = server.stats["arrivals"]
    for r in requests:
        assert (
            r["queue_s"] is not None and r["queue_s"] == pytest.approx(r["sent_s"] - r["due_s"]) and r["queue_s"] >= 0
        )
        read_after = arrivals[f"p {r['index']}"] - (origin + r["sent_s"])
        assert 0 <= read_after < 1.0, read_after  # stamped at the write, not before a wait for a connection
        assert r["chunk_s"][0] - r["sent_s"] < hold  # TTFT from the write: within the server's hold


def test_the_client_says_when_it_limited_the_load():
    from harness.figures.metrics import CLIENT_LAG_S, serving_metrics

    requests = timed_requests(10, 0)
    for i, r in enumerate(requests):
        r.update(due_s=r["sent_s"] - (0.2 if i == 3 else 0.001), queue_s=0.2 if i == 3 else 0.001)
    got = serving_metrics({"requests": requests}, {"ttft_s": None, "tpot_s": None, "e2el_s": None})
    assert got["client_queue_s"]["max"] == 0.2 and got["client_queue_s"]["n"] == 10
    assert got["client_saturated"].startswith(f"1 of 10 requests waited over {CLIENT_LAG_S * 1e3:g} ms")
    for r in requests:
        r["queue_s"] = 0.001
    assert serving_metrics({"requests": requests}, {"ttft_s": None})["client_saturated"] is None


# --------------------------------------------------------------------------- arrivals
@pytest.mark.parametrize("arrival", [{}, {"arrival": "gamma", "burstiness": 0.5}])
def test_normalised_gaps_offer_the_nominal_rate_of_16_requests(arrival):
    """(n - 1) / (last - first arrival) over 16 requests is the nominal rate within 1%
    for every seed (unnormalised draws are off by ~25%); the gaps stay random."""
    for seed in range(20):
        for rate in (0.5, 4.0, 37.0):
            delays = arrival_delays(16, LoadSpec(request_rate=rate, seed=seed, **arrival))
            assert delays[0] == 0.0 and delays == sorted(delays)
            assert 15 / (delays[-1] - delays[0]) == pytest.approx(rate, rel=0.01)
            gaps = [b - a for a, b in zip(delays, delays[1:])]
            assert statistics.pstdev(gaps) > 0.1 / rate  # still Poisson/gamma gaps, not a metronome


def test_a_rate_sweeps_records_and_plot_carry_the_achieved_rate():
    """Two points of a rate sweep whose requests were sent slower than offered (a
    server or client that could not keep up): the record's achieved rate and the plot's
    x are the sent rate, recomputed here from the send stamps."""
    from reports.model import build
    from reports.plots import figures

    records = []
    for i, (offered, sent_at) in enumerate(((4, 3.2), (8, 5.0))):
        record = serve_record({"requests": timed_requests(sent_at, 100 * i)}, name="tiny")
        record["sweep"] = {"axis": "request_rate", "value": offered, "index": i, "of": 2, "id": "sweep-1"}
        record["scenario"]["cell"] = {"serve.load.request_rate": offered}
        records.append(record)
    for record, sent_at in zip(records, (3.2, 5.0)):
        sends = sorted(r["sent_s"] for r in record["raw"]["requests"])
        assert record["metrics"]["achieved_rate_req_s"] == pytest.approx((len(sends) - 1) / (sends[-1] - sends[0]))
        assert record["metrics"]["achieved_rate_req_s"] == pytest.approx(sent_at)
    plots = dict(figures(build(records))[""])
    fig = plots["TTFT percentiles vs request rate, SLO drawn"]
    assert [list(t.x) for t in fig.data] == [pytest.approx([3.2, 5.0])] * 3
    assert "achieved" in fig.layout.xaxis.title.text


# --------------------------------------------------------------------------- billing
@pytest.mark.parametrize("engine", ["local", "auto"])
def test_local_and_auto_refuse_a_declared_accelerator(tmp_path, engine):
    doc = {"name": "x", "tasks": ["serve"], "serve": {"engine": engine, "accelerator": "h100-sxm:8"}}
    with pytest.raises(SpecError) as err:
        validate(doc, "s.yaml")
    text = str(err.value)
    assert "s.yaml" in text and "accelerator" in text and "bills the device it measures" in text
    assert validate({**doc, "serve": {"engine": engine}}, "s.yaml").serve.accelerator is None


# --------------------------------------------------------------------------- the caveat
def local_records():
    """A train record and a local-engine serve record on the same accelerator."""
    from test_serve_loads import WORKLOAD

    from records import make_record

    train = make_record([0.5] * 4, name="tiny")
    train["scenario"]["resolved"]["workload"] = dict(WORKLOAD)
    serve = serve_record({"requests": timed_requests(20, 0), "engine": "local"}, name="tiny")
    serve["cost"]["label"] = LOCAL_LABEL
    return train, serve


def test_every_output_showing_a_local_engines_dollars_carries_the_caveat():
    from harness.gate.gate import BudgetsFile, markdown, run_gate
    from harness.terminal.display import summary_table
    from reports.compare import ttft_words
    from reports.model import build
    from reports.render import html
    from reports.render import markdown as report_md

    train, serve = local_records()
    console = Console(width=400, record=True)
    console.print(summary_table([serve]))
    terminal = console.export_text()
    assert f"({LOCAL_LABEL})" in terminal and "$/1M out tok" in terminal

    report = build([train, serve])
    (workload,) = report.workloads
    usd = f"{workload.serve_usd_per_1m:.4g}"
    assert f"| {usd} ({LOCAL_LABEL}) |" in report_md(report)  # the workload table
    assert f"{usd} ({LOCAL_LABEL})</td>" in html(report)
    assert ttft_words(report.serving, report.serving, "a", "b").endswith(f"ms ({LOCAL_LABEL})")  # headline's TTFT

    budgets = BudgetsFile.model_validate({"budgets": [{"metric": "usd_per_1m_output_tokens", "max": 1e9}]})
    checks = {c.metric: c for c in run_gate([serve], None, budgets, "b.yaml") if c.kind == "absolute"}
    check, errors = checks["usd_per_1m_output_tokens"], checks["error_rate"]  # and the default error_rate budget
    assert LOCAL_LABEL not in errors.detail
    assert check.detail.endswith(f"({LOCAL_LABEL})") and LOCAL_LABEL in markdown([check])
    serve["cost"]["label"] = None  # a production server's $: no caveat
    (check,) = [
        c for c in run_gate([serve], None, budgets, "b.yaml") if c.kind == "absolute" and c.metric.startswith("usd")
    ]
    assert LOCAL_LABEL not in check.detail


# --------------------------------------------------------------------------- auto
def test_auto_serves_locally_where_vllm_cannot_and_says_why():
    """vLLM found, but its CPU attention lacks the model's head size, or the load's
    longest request exceeds the context vLLM would get: the local engine, the reason
    naming the limit; a model it can serve: vLLM at the model's position limit."""
    found = {"BENCH_VLLM_PYTHON": "/bin/sh"}
    head16 = choose(ServeSpec(), found, ServingModel(2048, 16, 300), platform="cpu")
    assert head16.engine == "local" and "head_dim is 16" in head16.reason and "CPU attention" in head16.reason
    long = choose(ServeSpec(), found, ServingModel(2048, 64, 3000), platform="cpu")
    assert long.engine == "local" and "3000 tokens" in long.reason and "2048-token context" in long.reason
    fits = choose(ServeSpec(), found, ServingModel(2048, 64, 300), platform="cpu")
    assert (fits.engine, fits.max_model_len, fits.platform) == ("launch", 2048, "cpu")
    big = choose(ServeSpec(), found, ServingModel(32_768, 256, 300), platform="cpu")
    assert big.max_model_len == 4096  # a CPU's KV cache: capped


def test_auto_on_a_tpu_vm_launches_vllm_tpu_billed_to_the_tpu(monkeypatch):
    """The platform probe faked to a TPU VM: vLLM-TPU settings (bf16, compiled, no CPU
    environment) billed to the VM's slice; a VM that does not say its TPU is refused."""
    from backends.hf_common.serving import auto_vllm
    from harness.serving import engines

    monkeypatch.setattr(engines, "platform_probe", lambda: "tpu")
    environ = {"BENCH_VLLM_PYTHON": "/bin/sh", "TPU_ACCELERATOR_TYPE": "v6e-8"}
    choice = choose(ServeSpec(), environ, ServingModel(2048, 16, 300))  # head 16: a CPU limit only
    assert (choice.engine, choice.platform, choice.label) == ("launch", "tpu", "vllm-tpu (launch)")
    assert choice.accelerator == {"kind": "declared", "name": "tpu-v6e", "count": 8, "catalog_key": "tpu-v6e"}
    serve = auto_vllm(validate({"name": "x", "tasks": ["serve"], "serve": {}}, "s.yaml"), choice.to_json()).serve
    command = list(serve.launch.command)
    assert command[command.index("--dtype") + 1] == "bfloat16" and "--enforce-eager" not in command
    assert "VLLM_CPU_KVCACHE_SPACE" not in serve.launch.env and command[command.index("--max-model-len") + 1] == "2048"
    with pytest.raises(BenchError, match="TPU_ACCELERATOR_TYPE"):
        choose(ServeSpec(), {"BENCH_VLLM_PYTHON": "/bin/sh"}, ServingModel(2048, 16, 300))


# --------------------------------------------------------------------------- export
def test_an_exported_model_generates_with_its_kv_cache(tmp_path):
    """export_model's config and generation config say use_cache=True (the training
    config says False, which a server would inherit): loaded back, generate keeps a
    cache and the decoding forward sees one token at a time."""
    import torch
    from transformers import AutoModelForCausalLM

    from backends.hf_common.serving import export_model

    scenario = validate({**__import__("yaml").safe_load(TINY), "tasks": ["serve"], "serve": {}}, "s.yaml")
    export_model(scenario, tmp_path / "model")
    saved = json.loads((tmp_path / "model" / "config.json").read_text())
    generation = json.loads((tmp_path / "model" / "generation_config.json").read_text())
    assert saved["use_cache"] is True and generation.get("use_cache", True) is True
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "model").eval()
    widths = []
    model.register_forward_pre_hook(
        lambda mod, args, kwargs: widths.append(kwargs["input_ids"].shape[1]), with_kwargs=True
    )
    with torch.no_grad():
        out = model.generate(
            torch.tensor([[2, 5, 6, 7, 8]]),
            max_new_tokens=4,
            min_new_tokens=4,
            do_sample=False,
            return_dict_in_generate=True,
        )
    assert out.past_key_values is not None
    assert widths == [5, 1, 1, 1]  # the prompt once, then one new token per step (no recompute)


def test_bench_export_requests_writes_one_line_per_measured_request(tmp_path):
    """`bench export --requests` over serve records: JSON Lines and CSV, one row per
    measured request (warm-up left out), with its send, first token, chunks, tokens,
    client queue time and error."""
    _, serve = local_records()
    path = tmp_path / "r.json"
    path.write_text(json.dumps(serve))
    measured = [r for r in serve["raw"]["requests"] if not r["warmup"]]
    done = bench("export", "--requests", str(path), "-o", str(tmp_path / "q.jsonl"))
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "q.jsonl").read_text().splitlines()]
    assert len(rows) == len(measured) and [r["index"] for r in rows] == [r["index"] for r in measured]
    for row, r in zip(rows, measured):
        assert row["run_id"] == serve["run_id"] and row["sent_s"] == r["sent_s"] and row["chunk_s"] == r["chunk_s"]
        assert row["first_token_s"] == r["chunk_s"][0] and row["ttft_s"] == pytest.approx(r["chunk_s"][0] - r["sent_s"])
        assert row["output_tokens"] == r["output_tokens"] and "queue_s" in row and row["error"] is None
    done = bench("export", "--requests", str(path), "-o", str(tmp_path / "q.csv"))
    assert done.returncode == 0, done.stderr
    table = list(csv.DictReader((tmp_path / "q.csv").open()))
    assert len(table) == len(measured) and json.loads(table[0]["chunk_s"]) == measured[0]["chunk_s"]


def test_synthetic_prompts_in_tokens_have_exactly_that_many_and_endpoint_refuses_them():
    """prompts.input_tokens: every prompt is that many tokens of the project's tokenizer
    (the local engine's and a launched server's), counted here by encoding its ids'
    text again (a cut inside a word may merge at most a token or two); the dumped
    scenario validates again; an endpoint, whose tokenizer is not known, is refused."""
    import yaml

    from harness.data.tokenizer import load_tokenizer
    from harness.scenario.spec import Scenario
    from harness.serving.prompts import build_prompts

    doc = {**yaml.safe_load(TINY), "tasks": ["serve"]}
    doc["serve"] = {"engine": "local", "prompts": {"source": "synthetic", "input_tokens": 40, "seed": 3}}
    scenario = validate(doc, "s.yaml")
    assert Scenario.model_validate(scenario.model_dump(mode="json")).serve.prompts.input_tokens == 40
    tok = scenario.data.tokenizer
    handle = load_tokenizer(tok.kind, tok.vocab_size, tok.path)
    prompts = build_prompts(scenario, 5)
    assert [len(p["token_ids"]) for p in prompts] == [40] * 5 and len({p["text"] for p in prompts}) == 5
    assert all(abs(len(handle.encode(p["text"])) - 40) <= 2 for p in prompts)
    doc["serve"] = {**doc["serve"], "engine": "endpoint", "endpoint": {"base_url": "http://h/v1"}}
    with pytest.raises(SpecError, match="input_tokens: counted in the project's tokenizer"):
        validate(doc, "s.yaml")
    doc["serve"] = {"prompts": {"source": "synthetic", "input_tokens": 40, "input_words": 9}}
    with pytest.raises(SpecError, match="input_words: input_tokens gives"):
        validate(doc, "s.yaml")


def test_a_launch_failures_reason_keeps_the_servers_error_line():
    """A server that exits before it is healthy: its last error line leads the reason,
    and the reason the worker records (cut to its limit) keeps it."""
    from harness.records.failure_text import explained
    from harness.serving.launch import error_line

    tail = "INFO start\n" * 300 + "ValueError: max_model_len 4096 exceeds the model's 2048\nINFO shutting down"
    assert error_line(tail) == ": ValueError: max_model_len 4096 exceeds the model's 2048"
    message = f"server exited with status 1 before becoming healthy{error_line(tail)}; log tail:\n{tail}"
    reason = explained(f"RuntimeError: {message}")
    assert len(reason) < len(message) and "ValueError: max_model_len 4096 exceeds the model's 2048" in reason
