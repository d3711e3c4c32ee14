"""The serve task's scenario section, `serve:`: the engine (and its endpoint, launch or
local section), prompts, output lengths, the load (or a sweep, or an SLO search) and
the SLO."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_serializer, model_validator

from harness.scenario.limits import (
    MAX_BATCH,
    MAX_CONCURRENCY,
    MAX_OUTPUT_TOKENS,
    MAX_REQUEST_RATE,
    MAX_REQUESTS,
    MAX_SECONDS,
    Seed,
)
from harness.scenario.sections import Section


class PromptSpec(Section):
    # function-calling: the prompts (developer + user turns) of the same data the
    # fine-tune uses; synthetic: random words, `input_words` of them (or a seeded uniform
    # length from input_words to input_words_max); shared-prefix: one of `num_prefixes`
    # prefixes of `prefix_words` words, then a synthetic suffix (a prefix cache's effect);
    # multi-turn: function-calling conversations of `turns` user turns, each turn's
    # prompt the earlier turns with the generator's reference answers, then its question.
    # trace: a JSONL file (`path`) of recorded requests, replayed at their arrival times
    # (harness/serving/trace.py: timestamp in ms, input_length and output_length in tokens).
    source: Literal["function-calling", "synthetic", "shared-prefix", "multi-turn", "trace"] = "function-calling"
    path: str | None = None
    input_words: int = Field(200, gt=0, le=1_000_000)
    input_words_max: int | None = Field(None, gt=0, le=1_000_000)
    # synthetic: each prompt exactly this many tokens of the project's tokenizer (the one
    # the local engine and a launched or auto server use) instead of input_words words.
    input_tokens: int | None = Field(None, gt=0, le=1_000_000)
    prefix_words: int | None = Field(None, gt=0, le=1_000_000)
    num_prefixes: int | None = Field(None, gt=0, le=MAX_REQUESTS)
    turns: int | None = Field(None, ge=2, le=1000)
    seed: Seed = 0

    @model_validator(mode="after")
    def _fields_of_the_source(self) -> "PromptSpec":
        self._trace_fields()
        if self.input_tokens is not None:
            if self.source != "synthetic":
                raise ValueError(f"input_tokens: only synthetic prompts are drawn in tokens (source is {self.source})")
            given = [n for n in ("input_words", "input_words_max") if n in self.model_fields_set and getattr(self, n)]
            if given:
                raise ValueError(f"{given[0]}: input_tokens gives the prompt's length; drop {given[0]}")
        random_words = self.source in ("synthetic", "shared-prefix")
        if self.input_words_max is not None and not random_words:
            raise ValueError(
                f"input_words_max: only synthetic and shared-prefix prompts have a length (source is {self.source})"
            )
        if self.input_words_max is not None and self.input_words_max < self.input_words:
            raise ValueError(f"input_words_max: {self.input_words_max} is below input_words {self.input_words}")
        shared = self.source == "shared-prefix"
        for name in ("prefix_words", "num_prefixes"):
            if (getattr(self, name) is None) == shared:
                raise ValueError(
                    f"{name}: "
                    + (
                        "source: shared-prefix needs it"
                        if shared
                        else f"only source: shared-prefix has it (source is {self.source})"
                    )
                )
        if (self.turns is None) == (self.source == "multi-turn"):
            raise ValueError(
                "turns: "
                + (
                    "source: multi-turn needs the number of user turns (>= 2)"
                    if self.turns is None
                    else f"only source: multi-turn has turns (source is {self.source})"
                )
            )
        return self

    @model_serializer(mode="wrap")
    def _without_what_a_trace_gives(self, handler):
        """A trace's prompt section (and one in tokens) has no word counts: dumped without
        them, so a dumped scenario validates again (the worker's, a record's) and says
        only what ran."""
        data = handler(self)
        if self.source == "trace" or self.input_tokens is not None:
            data.pop("input_words", None)
        return data

    def _trace_fields(self) -> None:
        """A trace gives each request's lengths and arrival: the word-count fields have no
        meaning there; the file is read now, so a bad one is refused before any work."""
        if (self.path is None) == (self.source == "trace"):
            raise ValueError(
                "path: "
                + (
                    "source: trace needs the path of a JSONL trace"
                    if self.path is None
                    else "only source: trace has a path"
                )
            )
        if self.source != "trace":
            return
        given = [n for n in ("input_words", "input_words_max") if n in self.model_fields_set and getattr(self, n)]
        if given:
            raise ValueError(f"{given[0]}: the trace gives each request's input length (source is trace)")
        from harness.serving.trace import read_trace  # standard library only

        try:
            read_trace(self.path)
        except ValueError as exc:  # the message names the file, the line and the trace's field
            raise ValueError(f"path: {exc}") from None


class RampSpec(Section):
    """vLLM's ramp-up: request i of n arrives at the rate start + (end - start) * i / (n - 1)
    (linear) or start * (end / start) ** (i / (n - 1)) (exponential), in requests/s."""

    start_rate: float = Field(gt=0, le=MAX_REQUEST_RATE)
    end_rate: float = Field(gt=0, le=MAX_REQUEST_RATE)
    shape: Literal["linear", "exponential"] = "linear"


class LoadSpec(Section):
    """One load, one meaning per field. Closed loop: `concurrency` requests in flight.
    Open loop: arrivals at `request_rate` requests/s, or a `ramp` of the rate; `arrival`
    poisson (exponential gaps) or gamma with `burstiness` B (vLLM's meaning: gaps drawn
    from Gamma(shape B, scale 1 / (rate * B)), mean 1/rate, coefficient of variation
    1/sqrt(B); B = 1 is Poisson); `max_concurrency` caps requests in flight (a request
    waits for a slot, and is sent, and timed, when it gets one). Nothing given: a closed
    loop of one request at a time. A sweep or search gives the rate or concurrency."""

    concurrency: int | None = Field(None, gt=0, le=MAX_CONCURRENCY)
    request_rate: float | None = Field(None, gt=0, le=MAX_REQUEST_RATE)
    ramp: RampSpec | None = None
    arrival: Literal["poisson", "gamma"] | None = None  # open loop only; poisson when not given
    burstiness: float | None = Field(None, gt=0, le=1e6)
    max_concurrency: int | None = Field(None, gt=0, le=MAX_CONCURRENCY)
    # The arrival times' seed: open loop only (a closed loop draws nothing); 0 when not given.
    seed: Seed | None = None

    @model_validator(mode="after")
    def _one_load(self) -> "LoadSpec":
        if self.concurrency is not None and (self.request_rate is not None or self.ramp is not None):
            raise ValueError(
                "concurrency: a closed loop's requests in flight; it does not combine with request_rate "
                "or ramp (cap an open loop's requests in flight with max_concurrency)"
            )
        if self.request_rate is not None and self.ramp is not None:
            raise ValueError("ramp: gives the rate itself; drop request_rate")
        if (self.burstiness is not None) != (self.arrival == "gamma"):
            raise ValueError(
                "burstiness: "
                + (
                    "arrival: gamma needs it (1 = Poisson, < 1 burstier, > 1 steadier)"
                    if self.burstiness is None
                    else "only arrival: gamma has a burstiness"
                )
            )
        if self.concurrency is not None:
            for name in ("arrival", "max_concurrency"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}: only an open loop (request_rate, ramp) has it, not concurrency")
        return self

    @property
    def open_loop(self) -> bool:
        return self.request_rate is not None or self.ramp is not None

    @property
    def in_flight_limit(self) -> int | None:
        """Most requests in flight: the closed loop's concurrency (1 when nothing is
        given), an open loop's max_concurrency, or None (no limit)."""
        if self.open_loop:
            return self.max_concurrency
        return self.concurrency or 1


class SloSpec(Section):
    """Targets, in seconds, with vLLM's per-request meanings. Goodput counts the requests
    meeting every given target (per request). `percentile` p states when a load meets the
    SLO (what `slo_search` searches for): every given target's p-th percentile over the
    load's completed requests is within it, and no request failed."""

    ttft_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    tpot_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    e2el_s: float | None = Field(None, gt=0, le=MAX_SECONDS)
    percentile: float | None = Field(None, gt=0, le=100)

    @property
    def targets(self) -> dict[str, float]:
        return {
            k: v
            for k, v in (("ttft_s", self.ttft_s), ("tpot_s", self.tpot_s), ("e2el_s", self.e2el_s))
            if v is not None
        }

    @model_validator(mode="after")
    def _percentile_of_something(self) -> "SloSpec":
        if self.percentile is not None and not self.targets:
            raise ValueError("percentile: give at least one target (ttft_s, tpot_s, e2el_s) for it to apply to")
        return self


# A sweep or search measures at most this many load points: past it, a typo.
MAX_LOAD_POINTS = 100


class SweepSpec(Section):
    """One load per value, each measured with `serve.num_requests` requests and written as
    its own record, all sharing one sweep id. Points run in order on the same server;
    once `max_duration_s` has passed, the point in flight is cut short (its unfinished
    requests are errors) and the rest are recorded as not run."""

    request_rate: (
        Annotated[
            tuple[Annotated[float, Field(gt=0, le=MAX_REQUEST_RATE)], ...],
            Field(min_length=1, max_length=MAX_LOAD_POINTS),
        ]
        | None
    ) = None
    concurrency: (
        Annotated[
            tuple[Annotated[int, Field(gt=0, le=MAX_CONCURRENCY)], ...], Field(min_length=1, max_length=MAX_LOAD_POINTS)
        ]
        | None
    ) = None
    max_duration_s: float = Field(3600.0, gt=0, le=MAX_SECONDS)

    @model_validator(mode="after")
    def _one_axis(self) -> "SweepSpec":
        if (self.request_rate is None) == (self.concurrency is None):
            raise ValueError("request_rate: a sweep is over request_rate or concurrency (exactly one)")
        return self

    @property
    def axis(self) -> str:
        return "request_rate" if self.request_rate is not None else "concurrency"

    @property
    def values(self) -> tuple:
        return self.request_rate if self.request_rate is not None else self.concurrency


class SloSearchSpec(Section):
    """The highest request rate in [low, high] whose load meets the SLO (serve.slo, at its
    percentile): `low` and `high` first, then bisection until the bracket is at most
    `tolerance` req/s wide, at most `max_steps` bisection steps, or `max_duration_s`
    passed. Every point measures `serve.num_requests` requests, so a search sends at
    most (2 + max_steps) x num_requests. One record: the rate found, with the metrics,
    goodput and $ per 1M output tokens measured there."""

    low: float = Field(gt=0, le=MAX_REQUEST_RATE)
    high: float = Field(gt=0, le=MAX_REQUEST_RATE)
    tolerance: float = Field(gt=0, le=MAX_REQUEST_RATE)
    max_steps: int = Field(8, ge=1, le=MAX_LOAD_POINTS - 2)
    max_duration_s: float = Field(3600.0, gt=0, le=MAX_SECONDS)

    @model_validator(mode="after")
    def _bracket(self) -> "SloSearchSpec":
        if self.low >= self.high:
            raise ValueError(f"high: {self.high:g} is not above low {self.low:g}")
        return self


class EndpointSpec(Section):
    base_url: str  # e.g. http://127.0.0.1:8000/v1
    model: str | None = None  # None: the first model the server lists


class LaunchSpec(Section):
    """A server the harness starts, waits for, measures and stops. `{model_dir}` (the
    scenario's model saved locally), `{port}` (a free port) and `{python}` are filled in."""

    command: Annotated[tuple[str, ...], Field(min_length=1)]
    base_url: str = "http://127.0.0.1:{port}/v1"
    health_url: str = "http://127.0.0.1:{port}/health"
    health_timeout_s: float = Field(300.0, gt=0, le=MAX_SECONDS)
    env: dict[str, str] = Field(default_factory=dict)
    model: str | None = None


# The request body's fields bench sets (harness.serving.client.request_body), and the
# serve field each comes from: extra_body may add fields, never override these.
BENCH_BODY_FIELDS = {
    "model": "endpoint.model / launch.model (the served model)",
    "prompt": "prompts (api: completions)",
    "messages": "prompts (api: chat)",
    "max_tokens": "output_tokens",
    "min_tokens": "output_tokens with force_output_length",
    "ignore_eos": "force_output_length",
    "return_token_ids": "token_ids",
    "stream": "bench's streaming client (always true)",
    "stream_options": "bench's streaming client (include_usage, for the token counts)",
    "temperature": "bench's greedy decoding (0)",
}


class LocalEngineSpec(Section):
    """The in-process engine (backends/torch_eager/serve_local.py): the requests in flight
    decoded together through transformers `generate`, KV cache on."""

    max_batch: int = Field(64, gt=0, le=MAX_BATCH)  # most requests decoded in one batch
    # transformers' KV cache: dynamic (grows per token) or static (preallocated, what
    # compile needs); compile: torch.compile of the decoding forward (static cache only).
    cache: Literal["dynamic", "static"] = "dynamic"
    compile: bool = False

    @model_validator(mode="after")
    def _compile_needs_static(self) -> "LocalEngineSpec":
        if self.compile and self.cache != "static":
            raise ValueError("compile: needs cache: static (a growing cache recompiles every token)")
        return self


class ServeSpec(Section):
    # auto: vLLM (launched in its own environment: BENCH_VLLM_PYTHON, or `vllm` on PATH)
    # where installed, else local; the record says which ran and why.
    # local: in-process generation with transformers (the `local` section);
    # endpoint: an existing OpenAI-compatible server; launch: one the harness starts.
    # (harness/serving/engines.py: the registry; a plug-in engine is registered there)
    engine: str = "auto"
    endpoint: EndpointSpec | None = None
    launch: LaunchSpec | None = None
    local: LocalEngineSpec | None = None
    # The weights' and activations' dtype for engines bench starts (local, auto's vLLM).
    # None: bf16 on an accelerator, fp32 on a CPU (bf16 matmuls crawl on most CPUs).
    precision: Literal["fp32", "bf16", "fp16"] | None = None
    api: Literal["completions", "chat"] = "completions"
    prompts: PromptSpec = PromptSpec()
    output_tokens: int = Field(64, gt=0, le=MAX_OUTPUT_TOKENS)
    # With a maximum, each prompt's output length is drawn (seeded by prompts.seed)
    # uniformly from output_tokens to output_tokens_max; forced like a fixed length.
    output_tokens_max: int | None = Field(None, gt=0, le=MAX_OUTPUT_TOKENS)
    # Ask the server to ignore EOS so every request produces output_tokens (vLLM's
    # ignore_eos/min_tokens); server-specific fields go in extra_body.
    force_output_length: bool = True
    # Ask the server for each streamed chunk's token ids (vLLM's return_token_ids) and
    # fail a request whose stream carried fewer than its usage reports. Off for a server
    # that refuses fields it does not know (transformers serve); chunks are then counted
    # as token events, never as tokens (output tokens always come from usage).
    token_ids: bool = True
    extra_body: dict[str, Any] = Field(default_factory=dict)
    load: LoadSpec = LoadSpec()
    # Measured requests of the load (of each point of a sweep or search).
    num_requests: int = Field(16, gt=0, le=MAX_REQUESTS)
    warmup_requests: int = Field(2, ge=0, le=MAX_REQUESTS)
    slo: SloSpec = SloSpec()
    sweep: SweepSpec | None = None
    slo_search: SloSearchSpec | None = None
    request_timeout_s: float = Field(120.0, gt=0, le=MAX_SECONDS)
    # The share of measured requests that may fail before the run is not ok (default 0:
    # any failed request fails the run; its figures are kept, its headline is not shown).
    max_error_rate: float = Field(0.0, ge=0, le=1)
    # Where an endpoint's or launched server's model runs, for cost (ACCELERATOR:CHIPS or
    # a TPU slice); launch defaults to this machine's device. local and auto bill the
    # device they measure and refuse it.
    accelerator: str | None = None
    # Extra percentiles of TTFT, TPOT, ITL and E2EL in the record (e.g. [95, 99.9]),
    # beside the median, p90 and p99 every record has.
    percentiles: tuple[Annotated[float, Field(gt=0, lt=100)], ...] = ()
    # POST /reset_prefix_cache (vLLM's; launched vLLM has it on) after the warm-up and
    # before every point, so a repeated run measures a cold prefix cache as its first
    # did; where the server does not offer it, the record says so.
    reset_prefix_cache: bool = True
    # engine auto's vLLM on a TPU slice or a multi-GPU host (harness.serving.engines):
    # tensor-parallel over the fewest chips the weights fit, then `fill` replicates the
    # model over every billed chip left (vLLM's --data-parallel-size: throughput, the
    # whole slice billed); `one` runs one replica and bills only its chips, stated.
    auto_replicas: Literal["fill", "one"] = "fill"

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        from harness.serving import engines  # the registry only: no engine is imported

        if value != "auto" and value not in engines.ENGINES.names():
            raise ValueError(f"unknown engine {value!r} (known: auto, {', '.join(engines.ENGINES.names())})")
        return value

    @model_validator(mode="after")
    def _engine_has_its_section(self) -> "ServeSpec":
        if self.engine == "endpoint" and self.endpoint is None:
            raise ValueError("endpoint: engine: endpoint needs an endpoint section (base_url)")
        if self.engine == "endpoint" and self.prompts.input_tokens is not None:
            raise ValueError(
                "prompts.input_tokens: counted in the project's tokenizer, which an endpoint's server need not "
                "use; give input_words (each request's prompt tokens are in the record, as the server counted them)"
            )
        if self.engine == "launch" and self.launch is None:
            raise ValueError("launch: engine: launch needs a launch section (command)")
        # Sections and fields another engine would use are refused, not ignored.
        for section in ("endpoint", "launch"):
            if getattr(self, section) is not None and self.engine != section:
                raise ValueError(f"{section}: only engine: {section} uses it (engine is {self.engine})")
        self._local_rules()
        if self.output_tokens_max is not None:
            if self.output_tokens_max < self.output_tokens:
                raise ValueError(
                    f"output_tokens_max: {self.output_tokens_max} is below output_tokens {self.output_tokens}"
                )
            if not self.force_output_length:
                raise ValueError(
                    "output_tokens_max: a length distribution needs force_output_length: true "
                    "(otherwise the model's end-of-sequence decides the lengths)"
                )
        self._loads_fit()
        return self

    @model_serializer(mode="wrap")
    def _without_what_a_trace_gives(self, handler):
        """A trace gives each request's output length: dumped without output_tokens, so a
        dumped scenario validates again and says only what ran."""
        data = handler(self)
        if self.prompts.source == "trace":
            data.pop("output_tokens", None)
        return data

    def _local_rules(self) -> None:
        """What the local engine cannot do is refused for `local`, and for `auto`, which
        falls back to it where vLLM is not installed: the same file must mean the same."""
        local = self.engine in ("local", "auto")
        might = "the local engine" if self.engine == "local" else "engine auto (it may fall back to the local engine)"
        if self.local is not None and not local:
            raise ValueError(f"local: only engine local (or auto) uses it (engine is {self.engine})")
        if self.precision is not None and not local:
            raise ValueError(f"precision: engine {self.engine}'s server sets its own dtype (its command or config)")
        if local and self.accelerator is not None:
            raise ValueError(
                f"accelerator: {might} bills the device it measures running on; serve.accelerator is for "
                "engine endpoint or launch"
            )
        if self.engine != "auto" and self.auto_replicas != "fill":  # (a dumped scenario holds the default)
            raise ValueError(f"auto_replicas: only engine auto's vLLM uses it (engine is {self.engine})")
        if local and self.extra_body:
            raise ValueError(f"extra_body: {might} sends no HTTP request; name engine: endpoint or launch")
        if local and self.api != "completions":
            raise ValueError(f"api: {might} generates from the prompt text; chat is for endpoint or launch")
        if local and (self.sweep or self.slo_search):
            raise ValueError(
                f"{'sweep' if self.sweep else 'slo_search'}: {might} runs one load; name engine: endpoint or "
                "launch for a sweep or search"
            )
        self._trace_rules()

    def _trace_rules(self) -> None:
        """A replayed trace is its own load: arrivals, lengths and count come from it."""
        if self.prompts.source == "trace":
            load = self.load
            given = [
                n for n in ("concurrency", "request_rate", "ramp", "arrival", "seed") if getattr(load, n) is not None
            ]
            if given:
                raise ValueError(f"load.{given[0]}: a trace gives every arrival time; only max_concurrency applies")
            if "output_tokens" in self.model_fields_set or self.output_tokens_max is not None:
                # (a trace's serve section is dumped without output_tokens: below)
                raise ValueError("output_tokens: the trace gives each request's output length")
            if self.sweep or self.slo_search:
                raise ValueError(
                    f"{'sweep' if self.sweep else 'slo_search'}: a trace is one load, replayed as recorded"
                )
            from harness.serving.trace import read_trace

            rows = len(read_trace(self.prompts.path))
            if self.num_requests > rows:
                raise ValueError(
                    f"num_requests: {self.num_requests}, but the trace {self.prompts.path} has {rows} requests"
                )

    def _loads_fit(self) -> None:
        """A sweep or search gives the load's rate (or concurrency); the load section the
        rest. Each combination either has one meaning or is refused, naming the field."""
        load, sweep, search = self.load, self.sweep, self.slo_search
        if sweep is not None and search is not None:
            raise ValueError("slo_search: a search picks its own rates; it does not combine with a sweep")
        by_rate = search is not None or (sweep is not None and sweep.axis == "request_rate")
        if by_rate and (load.concurrency is not None or load.request_rate is not None or load.ramp is not None):
            given = "concurrency" if load.concurrency is not None else "request_rate" if load.request_rate else "ramp"
            raise ValueError(
                f"load.{given}: the {'slo_search' if search else 'sweep'} gives each point's request "
                "rate; drop it from load"
            )
        if sweep is not None and sweep.axis == "concurrency":
            for name in ("concurrency", "request_rate", "ramp", "arrival", "max_concurrency"):
                if getattr(load, name) is not None:
                    raise ValueError(f"load.{name}: a sweep over concurrency is a closed loop; drop it from load")
        trace = self.prompts.source == "trace"  # its own open loop: the trace's arrivals
        if not by_rate and not load.open_loop and load.max_concurrency is not None and not trace:
            raise ValueError("load.max_concurrency: caps an open loop; give request_rate or ramp")
        if not by_rate and not load.open_loop and load.arrival is not None:
            raise ValueError(
                "load.arrival: only an open loop (request_rate, ramp, a rate sweep or search) has arrivals"
            )
        if not by_rate and not load.open_loop and load.seed is not None:
            raise ValueError(
                "load.seed: seeds an open loop's arrival times (request_rate, ramp, a rate sweep or search); "
                "a closed loop (concurrency) draws nothing"
            )
        owned = sorted(set(self.extra_body) & set(BENCH_BODY_FIELDS))
        if owned:
            raise ValueError(
                f"extra_body.{owned[0]}: bench owns this request field ({BENCH_BODY_FIELDS[owned[0]]}); "
                "drop it from extra_body"
            )
        if search is not None and (not self.slo.targets or self.slo.percentile is None):
            raise ValueError(
                "slo.percentile: slo_search needs SLO targets and the percentile at which they must hold "
                "(e.g. slo: {ttft_s: 0.5, percentile: 90})"
            )
