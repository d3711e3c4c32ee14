"""The in-process serving engine (`serve.engine: local`, and `auto` where vLLM is not
installed): a small reference server on transformers `generate`, with per-token
timestamps. It is not a production server (no paged attention, no continuous
batching), and its $ is labelled so wherever shown.

- KV cache on: the model from `build_model` carries the training config's
  `use_cache=False`, which generate would inherit (every new token recomputing the
  whole sequence); serving turns it on explicitly.
- The serve section's precision: bf16 on an accelerator, fp32 on a CPU, unless stated.
- Requests in flight as the load says (concurrency, open-loop arrivals, a trace's
  arrivals, max_concurrency): whenever the engine is free it takes every request sent
  by then (up to `local.max_batch`), left-pads them into one batch and decodes them
  together. Measured on 2 CPU cores with tiny Gemma 3 (docs/measurements/serving.md), one
  padded batch through generate beat transformers' continuous batching
  (`generate_batch`) many times over, so static batches it is.
- A request is sent when the load sends it (its arrival; or, with a cap on requests in
  flight, when a slot frees: a closed loop's client sends its next request as its last
  one ends) and waits for the batch in progress: that queueing is in its TTFT, as a
  server's queue would be.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from backends.hf_common.model import DTYPES, build_model
from backends.hf_common.serving import local_device
from harness.data.tokenizer import load_tokenizer
from harness.records.provenance import cpu_name
from harness.serving.client import RequestRecord, arrival_delays
from harness.serving.engines import Engine
from harness.serving.prompts import build_prompts
from harness.tasks.serve.spec import LocalEngineSpec

BATCHING = "static batches: the requests sent by the time the engine is free, left-padded, through generate"


class TokenClock:
    """A generate() streamer that stamps every decoding step (one token for each row of
    the batch); `put` gets the tokens on the host, so each stamp follows the device."""

    def __init__(self, origin: float) -> None:
        self.origin, self.steps, self.prompt_seen = origin, [], False

    def put(self, value) -> None:
        if not self.prompt_seen:  # generate() first hands over the prompt
            self.prompt_seen = True
            return
        self.steps.append(time.perf_counter() - self.origin)

    def end(self) -> None:
        pass


@dataclass
class Request:
    record: RequestRecord
    ids: list[int]
    output_tokens: int


def compiled_graphs() -> int:
    """Graphs torch.compile (dynamo) has compiled in this process so far."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def serving_dtype(precision: str | None, device: torch.device) -> torch.dtype:
    """The serve section's precision; unstated: bf16 on an accelerator, fp32 on a CPU."""
    return DTYPES[precision or ("fp32" if device.type == "cpu" else "bf16")]


def load_model(scenario, device: torch.device, dtype: torch.dtype):
    model = build_model(scenario)
    # build_model's config is the training one (use_cache=False): generate would inherit
    # it and recompute the whole sequence for every token.
    model.config.use_cache = True
    model.generation_config.use_cache = True
    return model.to(device=device, dtype=dtype).eval()


def serve_locally(scenario, events, origin: float) -> dict[str, Any]:
    spec = scenario.serve
    options = spec.local or LocalEngineSpec()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = serving_dtype(spec.precision, device)
    model = load_model(scenario, device, dtype)
    tok = scenario.data.tokenizer
    handle = load_tokenizer(tok.kind, tok.vocab_size, tok.path)
    warm = spec.warmup_requests
    prompts = build_prompts(scenario, warm + spec.num_requests)
    requests = [as_request(i, i < warm, p, handle) for i, p in enumerate(prompts)]
    engine = LocalEngine(model, handle, spec, options, origin, device)
    # The warm-up at the load's concurrency (the HTTP client's too): batches of up to the
    # requests the load keeps in flight, so the measured part meets no new batch size
    # the warm-up could have shown it.
    if options.compile:  # one cache length for the whole run, warm-up included
        engine.fixed = (max(len(r.ids) for r in requests), max(r.output_tokens for r in requests))
    size = max(1, min(options.max_batch, in_flight_cap(spec) or warm or 1))
    for k in range(0, warm, size):
        batch = requests[k : k + size]
        for request in batch:
            request.record.sent_s = engine.now()
        engine.decode(batch)
    if options.compile:
        engine.warm_compiled(requests, warm + spec.num_requests, in_flight_cap(spec))
    engine.measured_from = len(engine.batch_sizes)
    done = lambda r: events.emit("request", index=r.index, total=spec.num_requests, error=r.error)  # noqa: E731
    engine.run_load(requests[warm:], measured_delays(prompts[warm:], spec), in_flight_cap(spec), done)
    return {
        "requests": [r.record.to_json() for r in requests],
        "server": engine.describe(scenario, dtype),
        "accelerator": {
            "kind": device.type,
            "count": 1,
            "name": torch.cuda.get_device_name(0) if device.type == "cuda" else cpu_name(),
        },
        "versions": {"torch": torch.__version__, "transformers": __import__("transformers").__version__},
    }


def as_request(index: int, warmup: bool, prompt: dict[str, Any], handle) -> Request:
    ids = prompt.get("token_ids")  # a trace's prompt, exact to the token
    if ids is None:
        ids = handle.encode(prompt["text"])
    ids = ([handle.bos_id] if handle.bos_id is not None else []) + list(ids)
    return Request(RequestRecord(index, warmup, 0.0), ids, prompt["output_tokens"])


def measured_delays(prompts: list[dict[str, Any]], spec) -> list[float]:
    """Each measured request's arrival after the measured phase starts: a trace's, the
    open loop's draws, or 0 for a closed loop (its clients all start at once)."""
    if prompts and prompts[0].get("arrival_s") is not None:
        return [p["arrival_s"] for p in prompts]
    return arrival_delays(len(prompts), spec.load)


def in_flight_cap(spec) -> int | None:
    """Most requests in flight: a closed loop's concurrency, else max_concurrency."""
    if spec.prompts.source == "trace":
        return spec.load.max_concurrency
    return spec.load.in_flight_limit


class LocalEngine:
    def __init__(self, model, handle, spec, options: LocalEngineSpec, origin: float, device) -> None:
        self.model, self.handle, self.spec, self.options = model, handle, spec, options
        self.origin, self.device = origin, device
        self.batch_sizes: list[int] = []
        self.measured_from = 0  # the first measured batch's index in batch_sizes
        # compile: every batch padded to one width and decoded for one length, so the
        # static cache has one length (width + new tokens) and only the batch size varies;
        # warm_compiled compiles each batch size the load can bring before it is measured.
        self.fixed: tuple[int, int] | None = None
        self.compile_warmup: dict[str, Any] | None = None
        self.graphs_in_measured: int | None = None

    def warm_compiled(self, requests: list[Request], count: int, cap: int | None) -> None:
        """With the width and length every batch is decoded at fixed (the longest prompt,
        the longest output of the run), decode one batch of every size from 1 to the most
        requests the load can put in one batch (these are not recorded requests)."""
        largest = max(1, min(self.options.max_batch, cap or self.options.max_batch, count))
        sizes = list(range(1, largest + 1))
        started = time.perf_counter()
        for size in sizes:
            template = requests[0]
            self.decode([Request(RequestRecord(-1, True, 0.0), template.ids, template.output_tokens)] * size)
        del self.batch_sizes[-len(sizes) :]  # not the load's batches
        self.compile_warmup = {
            "batch_sizes": sizes,
            "cache_length": sum(self.fixed),
            "seconds": time.perf_counter() - started,
        }

    def now(self) -> float:
        return time.perf_counter() - self.origin

    def run_load(self, requests: list[Request], delays: list[float], cap: int | None, on_done) -> None:
        """Serve `requests` in order: each is sent at max(its arrival, the moment a slot
        frees under `cap`); whenever the engine is free, every request sent by then (up
        to max_batch) is decoded as one batch."""
        start, ends = self.now(), []
        limit = min(self.options.max_batch, cap or self.options.max_batch)
        graphs_before = compiled_graphs()

        def sent_at(k: int) -> float:
            arrival = start + delays[k]
            # FIFO slots: request k gets the slot freed by the (k - cap + 1)-th request to end.
            return max(arrival, sorted(ends)[k - cap]) if cap and k >= cap else arrival

        first = 0
        while first < len(requests):
            wait = sent_at(first) - self.now()
            if wait > 0:
                time.sleep(wait)
            last = first + 1
            while last < len(requests) and last - first < limit and sent_at(last) <= self.now():
                last += 1
            batch = requests[first:last]
            for k, request in enumerate(batch, first):
                request.record.sent_s = sent_at(k)
            self.decode(batch)
            ends += [r.record.end_s for r in batch]
            for request in batch:
                on_done(request.record)
            first = last
        if self.options.compile:  # any compile left in the measured part, counted
            self.graphs_in_measured = compiled_graphs() - graphs_before

    @torch.no_grad()
    def decode(self, batch: list[Request]) -> None:
        """One left-padded batch through generate; each row's tokens stamped per step."""
        self.batch_sizes.append(len(batch))
        width = self.fixed[0] if self.fixed else max(len(r.ids) for r in batch)
        pad = self.handle.pad_id
        rows = [[pad] * (width - len(r.ids)) + r.ids for r in batch]
        mask = [[0] * (width - len(r.ids)) + [1] * len(r.ids) for r in batch]
        input_ids = torch.tensor(rows, device=self.device)
        longest = self.fixed[1] if self.fixed else max(r.output_tokens for r in batch)
        clock = TokenClock(self.origin)
        out = self.model.generate(
            input_ids=input_ids,
            attention_mask=torch.tensor(mask, device=self.device),
            max_new_tokens=longest,
            min_new_tokens=longest if self.spec.force_output_length else None,
            do_sample=False,
            use_cache=True,
            streamer=clock,
            pad_token_id=pad,
            eos_token_id=self.handle.eos_id,
            **self.cache_options(),
        )
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        for row, request in enumerate(batch):
            count = self.tokens_of(out[row, width:].tolist(), request.output_tokens)
            record = request.record
            record.chunk_s = clock.steps[:count]
            record.end_s = record.chunk_s[-1] if record.chunk_s else self.now()
            record.prompt_tokens, record.output_tokens, record.status = len(request.ids), count, 200

    def tokens_of(self, generated: list[int], wanted: int) -> int:
        """The row's own output: its length, or up to and including its end-of-sequence
        when the length is not forced (rows of a batch end at their own EOS)."""
        generated = generated[:wanted]
        if not self.spec.force_output_length and self.handle.eos_id in generated:
            return generated.index(self.handle.eos_id) + 1
        return len(generated)

    def cache_options(self) -> dict[str, Any]:
        """transformers' static cache (preallocated) and its compiled forward, when asked."""
        if self.options.cache == "dynamic":
            return {}
        options: dict[str, Any] = {"cache_implementation": "static", "disable_compile": not self.options.compile}
        if self.options.compile:
            from transformers import CompileConfig

            config = CompileConfig(fullgraph=True)
            # transformers compiles on accelerators only unless told: compile: true means compiled.
            config._compile_all_devices = True
            options["compile_config"] = config
        return options

    def describe(self, scenario, dtype: torch.dtype) -> dict[str, Any]:
        from backends.hf_common.model import dtype_name

        sizes = self.batch_sizes[self.measured_from :]
        return {
            "engine": "local",
            "name": "transformers generate (in process): a reference engine, not a production server",
            "model": scenario.model.preset or scenario.model.path,
            "kv_cache": self.options.cache,
            "compile": self.options.compile,
            "dtype": dtype_name(dtype),
            "batching": BATCHING,
            "max_batch": self.options.max_batch,
            "batches": {"count": len(sizes), "mean_size": sum(sizes) / len(sizes) if sizes else None, "sizes": sizes},
            # compile: what was compiled before the measured part, and the graphs torch
            # compiled during it (each one's compile time is inside some request's TTFT)
            "compile_warmup": self.compile_warmup,
            "graphs_compiled_in_measured": self.graphs_in_measured,
        }


ENGINE = Engine(
    "local",
    serve_locally,
    local_device,  # never asked: serve_locally reports the device it generated on
    notes=("local engine: requests in flight decoded in static batches (transformers generate), KV cache on",),
)
