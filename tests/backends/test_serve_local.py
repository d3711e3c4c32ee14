"""The local serving engine on tiny Gemma 3, in this process: its KV cache is on (a long
prompt costs no more per output token than a short one), requests in flight are decoded
together (four in flight at least double the output tokens/s of one), arrivals and
traces are served when they come, and the serve section's precision is applied. Every
figure is recomputed here from the raw timestamps (vLLM's definitions), not read back."""

from __future__ import annotations

import json
import statistics
import time

import pytest
import torch

from backends.torch_eager.serve_local import load_model, serve_locally, serving_dtype
from harness.scenario.loader import document_from_text, validate

from conftest import TINY

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: on a 2-core machine shared with other jobs, two OpenMP threads
    spin against each other and make every step ~10x slower (16 ms vs 160 ms a token
    measured here), noise the timing checks below would read as the engine's."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class Events:
    def emit(self, *args, **kwargs) -> None:
        pass


def scenario(**serve):
    doc = document_from_text(TINY, "tiny.yaml")
    doc["tasks"] = ["serve"]
    doc["serve"] = {"engine": "local", "precision": "fp32", "warmup_requests": 1, **serve}
    return validate(doc, "s.yaml")


def measured(facts) -> list[dict]:
    return sorted((r for r in facts["requests"] if not r["warmup"]), key=lambda r: r["index"])


def tpot(r: dict) -> float:
    """vLLM's TPOT: (last token - first token) / (tokens - 1)."""
    return (r["chunk_s"][-1] - r["chunk_s"][0]) / (r["output_tokens"] - 1)


def output_tok_s(requests: list[dict]) -> float:
    """Output tokens over the measured span: first send to last token."""
    return sum(r["output_tokens"] for r in requests) / (
        max(r["end_s"] for r in requests) - min(r["sent_s"] for r in requests)
    )


def test_the_serving_model_has_its_kv_cache_on_and_it_gives_the_uncached_tokens():
    from backends.hf_common.model import build_model

    sc = scenario()
    assert build_model(sc).config.use_cache is False  # the training config the engine must not inherit
    model = load_model(sc, CPU, torch.float32)
    assert model.config.use_cache is True
    ids = torch.tensor([[2, 17, 301, 45, 99, 1000, 7]])
    with torch.no_grad():
        assert model(input_ids=ids).past_key_values is not None  # a cache is built by default
        args = dict(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12, do_sample=False)
        cached = model.generate(**args, min_new_tokens=12, use_cache=True)
        uncached = model.generate(**args, min_new_tokens=12, use_cache=False)
    assert torch.equal(cached, uncached)


def one_at_a_time_trace(tmp_path, prompt_tokens: int, requests: int, output_tokens: int):
    """A trace of requests all arriving at once, served one at a time (max_concurrency 1):
    prompts of exactly `prompt_tokens` tokens (+ <bos>)."""
    path = tmp_path / f"p{prompt_tokens}.jsonl"
    row = {"timestamp": 0, "input_length": prompt_tokens, "output_length": output_tokens}
    path.write_text((json.dumps(row) + "\n") * requests)
    trace = {"source": "trace", "path": str(path)}
    return scenario(prompts=trace, num_requests=requests, load={"max_concurrency": 1})


@pytest.mark.serial
def test_a_512_token_prompt_costs_no_more_per_output_token_than_a_16_token_one(tmp_path):
    """With the cache, each new token attends to the prompt's cached keys: TPOT after
    a 512-token prompt within 1.6x of TPOT after a 16-token one (without it: 2.9x here;
    with it 1.1-1.3x, once 1.31x on CI's clone: 1.6 keeps the margin to both).
    Measured in the order 16, 512, 512, 16, so a machine slowing down or speeding up
    during the test weighs on both lengths alike (a timing ratio on a shared host)."""
    runs = {16: [], 512: []}
    for length in (16, 512, 512, 16):
        facts = serve_locally(one_at_a_time_trace(tmp_path, length, 6, 32), Events(), time.perf_counter())
        runs[length] += measured(facts)
        assert facts["server"]["batches"]["sizes"] == [1] * 6
    short, long = (statistics.median(tpot(r) for r in runs[n]) for n in (16, 512))
    assert {n: {r["prompt_tokens"] for r in runs[n]} for n in runs} == {16: {17}, 512: {513}}
    assert all(r["output_tokens"] == 32 and len(r["chunk_s"]) == 32 for n in runs for r in runs[n])
    print(json.dumps({"tpot_short_s": short, "tpot_long_s": long, "ratio": long / short}))
    assert long / short <= 1.6, (short, long)


@pytest.mark.serial
def test_four_requests_in_flight_at_least_double_the_output_tokens_per_second():
    facts = {}
    for concurrency in (1, 4):
        sc = scenario(
            prompts={"source": "synthetic", "input_words": 64},
            output_tokens=32,
            num_requests=8,
            load={"concurrency": concurrency},
        )
        facts[concurrency] = serve_locally(sc, Events(), time.perf_counter())
    one, four = (output_tok_s(measured(facts[c])) for c in (1, 4))
    assert facts[1]["server"]["batches"]["sizes"] == [1] * 8
    assert facts[4]["server"]["batches"]["sizes"] == [4, 4]
    # a closed loop: the next four are sent as the first four end
    m4 = measured(facts[4])
    assert [r["sent_s"] for r in m4[4:]] == [r["end_s"] for r in m4[:4]]
    print(json.dumps({"output_tok_s_c1": one, "output_tok_s_c4": four, "ratio": four / one}))
    assert four >= 2 * one, (one, four)
    server = facts[4]["server"]
    assert (server["engine"], server["kv_cache"], server["dtype"], server["max_batch"]) == (
        "local",
        "dynamic",
        "fp32",
        64,
    )
    assert "not a production server" in server["name"] and server["batching"].startswith("static batches")


@pytest.mark.serial
def test_a_trace_is_served_at_its_arrivals_and_a_burst_is_one_batch(tmp_path):
    rows = [(0, 30), (0, 40), (0, 20), (50, 25), (400, 30), (650, 10)]
    path = tmp_path / "trace.jsonl"
    path.write_text(
        "".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 6}) + "\n" for t, n in rows)
    )
    facts = serve_locally(
        scenario(prompts={"source": "trace", "path": str(path)}, num_requests=6), Events(), time.perf_counter()
    )
    requests = measured(facts)
    start = requests[0]["sent_s"]
    assert [round(r["sent_s"] - start, 6) for r in requests] == [t / 1e3 for t, _ in rows]
    assert [r["prompt_tokens"] for r in requests] == [n + 1 for _, n in rows]  # <bos> + the trace's tokens
    assert all(r["sent_s"] < r["chunk_s"][0] and r["output_tokens"] == 6 for r in requests)
    sizes = facts["server"]["batches"]["sizes"]
    assert sizes[0] == 3 and sum(sizes) == 6  # the three at 0 ms decoded together


def test_the_serve_sections_precision_is_applied():
    assert serving_dtype(None, CPU) == torch.float32
    assert serving_dtype(None, torch.device("cuda")) == torch.bfloat16
    model = load_model(scenario(precision="bf16"), CPU, serving_dtype("bf16", CPU))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


@pytest.mark.parametrize("cache", ["static"])
def test_a_static_cache_serves_the_same_tokens(cache):
    """transformers' static (preallocated) cache, as an option: same greedy tokens."""
    sc = scenario(prompts={"source": "synthetic", "input_words": 20}, output_tokens=5, num_requests=2)
    model = load_model(sc, CPU, torch.float32)
    ids = torch.tensor([[2, 17, 301, 45, 99]])
    args = dict(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, min_new_tokens=6, do_sample=False)
    with torch.no_grad():
        dynamic = model.generate(**args)
        static = model.generate(**args, cache_implementation=cache, disable_compile=True)
    assert torch.equal(dynamic, static)
    facts = serve_locally(
        scenario(
            prompts={"source": "synthetic", "input_words": 20}, output_tokens=5, num_requests=2, local={"cache": cache}
        ),
        Events(),
        time.perf_counter(),
    )
    assert facts["server"]["kv_cache"] == "static" and all(r["output_tokens"] == 5 for r in measured(facts))


def test_a_left_padded_batch_gives_each_request_the_tokens_it_gets_alone():
    """What batching relies on: a short prompt left-padded beside a long one decodes the
    same greedy tokens as alone (the attention mask and positions hide the padding)."""
    model = load_model(scenario(), CPU, torch.float32)
    generator = torch.Generator().manual_seed(0)
    long, short = (torch.randint(10, 8000, (1, n), generator=generator) for n in (40, 12))
    fixed = dict(max_new_tokens=10, min_new_tokens=10, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        alone = [
            model.generate(input_ids=x, attention_mask=torch.ones_like(x), **fixed)[0, x.shape[1] :]
            for x in (long, short)
        ]
        padded = torch.cat([long, torch.cat([torch.zeros(1, 28, dtype=torch.long), short], 1)])
        mask = torch.cat([torch.ones(1, 40), torch.cat([torch.zeros(1, 28), torch.ones(1, 12)], 1)]).long()
        together = model.generate(input_ids=padded, attention_mask=mask, **fixed)[:, 40:]
    assert torch.equal(together[0], alone[0]) and torch.equal(together[1], alone[1])


def test_an_open_loop_capped_at_two_in_flight_never_has_more_than_two():
    """Poisson arrivals at 200 req/s, max_concurrency 2: a request is sent at its arrival
    or when a slot frees, whichever is later, so at every send at most two requests are
    in flight (sent, not yet ended), counted here from the raw timestamps."""
    sc = scenario(
        prompts={"source": "synthetic", "input_words": 16},
        output_tokens=6,
        num_requests=8,
        load={"request_rate": 200, "max_concurrency": 2, "seed": 3},
    )
    facts = serve_locally(sc, Events(), time.perf_counter())
    requests = measured(facts)
    for r in requests:
        in_flight = [q for q in requests if q["sent_s"] <= r["sent_s"] < q["end_s"]]
        assert len(in_flight) <= 2, (r["index"], [(q["sent_s"], q["end_s"]) for q in in_flight])
    assert max(facts["server"]["batches"]["sizes"]) <= 2 and sum(facts["server"]["batches"]["sizes"]) == 8
    assert all(r["sent_s"] < r["chunk_s"][0] <= r["end_s"] for r in requests)


@pytest.mark.serial
def test_the_compiled_engine_compiles_every_batch_size_before_the_measured_part(monkeypatch):
    """cache: static, compile: true at concurrency 2: the warm-up compiles batch sizes 1
    and 2 at the run's one cache length (longest prompt + longest output), so the
    measured part compiles no graph (torch's own count), and the record says so.
    Dynamo's eager backend: the same graphs and guards (what decides a recompile)
    without inductor's code generation, ~6 min of this 2-core machine."""
    import functools

    import transformers
    from torch._dynamo.utils import counters

    monkeypatch.setattr(transformers, "CompileConfig", functools.partial(transformers.CompileConfig, backend="eager"))

    sc = scenario(
        prompts={"source": "synthetic", "input_words": 6, "input_words_max": 12},
        output_tokens=4,
        num_requests=4,
        load={"concurrency": 2},
        local={"cache": "static", "compile": True},
    )
    before = counters["stats"]["unique_graphs"]
    facts = serve_locally(sc, Events(), time.perf_counter())
    server = facts["server"]
    assert server["compile_warmup"]["batch_sizes"] == [1, 2]
    prompts = [r["prompt_tokens"] for r in facts["requests"]]
    assert server["compile_warmup"]["cache_length"] == max(prompts) + 4
    assert counters["stats"]["unique_graphs"] > before  # it did compile, in the warm-up
    assert server["graphs_compiled_in_measured"] == 0
    assert server["batches"]["sizes"] == [2, 2] and all(r["output_tokens"] == 4 for r in measured(facts))
