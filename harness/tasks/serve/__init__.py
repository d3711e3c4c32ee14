"""The serve task: load a model server (an engine: harness/serving/engines.py) with
requests and keep raw per-request timestamps; the parent computes vLLM's serving
metrics, goodput and $ per 1M output tokens. A sweep's worker measures every point and
writes one record per point (harness/serving/points.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from harness.figures import cost as cost_model
from harness.records.result import FROZEN, Price, RunRecord, Stats
from harness.scenario.gate_metrics import GateMetric
from harness.serving import engines, points
from harness.serving.figures import serve_figures
from harness.tasks.base import Column, Task, TaskSection, fmt
from harness.tasks.serve.spec import ServeSpec


# ------------------------------------------------------------------ the record's figures
class ServeMetrics(BaseModel):
    """A serving run's figures (harness.figures.metrics.serving_metrics; docs: metrics.md)."""

    model_config = FROZEN
    num_requests: int
    num_completed: int
    num_errors: int
    error_rate: float | None = None  # num_errors / num_requests (None: no measured request)
    errors: list[str]
    duration_s: float
    ttft_s: Stats | None = None
    tpot_s: Stats | None = None
    itl_s: Stats | None = None
    e2el_s: Stats | None = None
    output_tokens: int
    prompt_tokens: int
    output_throughput_tok_s: float | None = None
    total_throughput_tok_s: float | None = None
    request_throughput_req_s: float | None = None
    goodput_req_s: float | None = None
    slo: dict[str, Any] = Field(default_factory=dict)
    slo_at_percentile: dict[str, Any] | None = None
    output_tok_s_per_user: float | None = None
    output_tok_s_per_chip: float | None = None
    slo_search: dict[str, Any] | None = None  # an SLO search's probes and answer
    # Prefix cache (harness.figures.metrics.prefix_cache_hits): None where the server did not say.
    cached_prompt_tokens: int | None = None
    cached_prompt_fraction: float | None = None
    # serve.percentiles: {"ttft_s": {"p95": s, ...}, ...}; and every percentile shown whose
    # sample is too small to support it (harness.figures.metrics.supports_percentile), named.
    percentiles: dict[str, dict[str, float | None]] | None = None
    thin_percentiles: list[str] = Field(default_factory=list)
    # The client's side: each request's wait inside bench's client before it was
    # written (s), a sentence where the client limited the load, and the request rate
    # actually sent ((n - 1) / (last send - first send), req/s).
    client_queue_s: Stats | None = None
    client_saturated: str | None = None
    achieved_rate_req_s: float | None = None
    # The server's own /metrics (vLLM's) read before and after the measured requests:
    # {"before", "after", "delta"} of its vllm: samples (harness.serving.server_metrics).
    server_metrics: dict[str, Any] | None = None
    # The server's own figures over the load, from those readings
    # (harness.serving.server_side.server_figures): queue_time_mean_s, kv_cache_usage_peak
    # (fraction), prefix_cache_hit_rate (fraction of queried tokens), preemptions.
    server_figures: dict[str, Any] | None = None
    # The same requests by vLLM's own client's convention (harness.serving.conventions:
    # TTFT and E2EL from before the connection, duration from the load's start, the
    # semaphore wait), and a sentence for each figure where it differs from bench's by
    # more than 5%. None where the record lacks vLLM's clock (the local engine).
    vllm_convention: dict[str, Any] | None = None
    convention_differences: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _error_rate_of_older_records(cls, data: Any) -> Any:
        """Records written before `error_rate` existed: the same figure from their counts."""
        if isinstance(data, dict) and "error_rate" not in data and data.get("num_requests"):
            data = {**data, "error_rate": data.get("num_errors", 0) / data["num_requests"]}
        return data


class ServeCost(BaseModel):
    model_config = FROZEN
    usd_per_1m_output_tokens: float | None = None
    usd_benchmark: float | None = None
    chips: int
    price: Price
    basis: str | None = None  # an SLO search's: the rate the $ is at
    # What the $ is of, where it is not a production server's (the local engine's).
    label: str | None = None


REPORT_COLUMNS: list[Column] = [
    Column("metrics.ttft_s.median", "TTFT median (s)", ".4g"),
    Column("metrics.ttft_s.p99", "TTFT p99 (s)", ".4g"),
    Column("metrics.tpot_s.median", "TPOT median (s)", ".4g"),
    Column("metrics.itl_s.p99", "ITL p99 (s)", ".4g"),
    Column("metrics.e2el_s.median", "E2EL median (s)", ".4g"),
    Column("metrics.output_throughput_tok_s", "output tok/s", ".4g"),
    Column("metrics.request_throughput_req_s", "req/s", ".4g"),
    Column("metrics.goodput_req_s", "goodput req/s", ".4g"),
    Column("metrics.num_errors", "errors", "d", over_runs="sum"),
    # The server's own figures (vLLM's /metrics), labelled as the server's.
    Column("metrics.server_figures.queue_time_mean_s", "server queue mean (s)", ".3g"),
    Column("metrics.server_figures.kv_cache_usage_peak", "server KV-cache peak", ".0%"),
    Column("metrics.server_figures.prefix_cache_hit_rate", "server prefix-cache hits", ".0%"),
    Column("metrics.server_figures.preemptions", "server preemptions", ".0f"),
    Column("cost.usd_per_1m_output_tokens", "$/1M out tok", ".4g"),
]

GATE_METRICS: dict[str, GateMetric] = {
    "ttft_s": GateMetric("lower", "s", "metrics.ttft_s.median"),
    "ttft_s.p99": GateMetric("lower", "s", "metrics.ttft_s.p99"),
    "tpot_s": GateMetric("lower", "s", "metrics.tpot_s.median"),
    "itl_s.p99": GateMetric("lower", "s", "metrics.itl_s.p99"),
    "output_throughput_tok_s": GateMetric("higher", "tok/s", "metrics.output_throughput_tok_s"),
    "usd_per_1m_output_tokens": GateMetric("lower", "$", "cost.usd_per_1m_output_tokens"),
    # Failed measured requests / measured requests; every gate on a serve run holds it to
    # max 0 (or the scenario's serve.max_error_rate) unless a budget on it says otherwise.
    "error_rate": GateMetric("lower", "", "metrics.error_rate", count=True),
}


def too_many_errors(metrics: dict[str, Any], allowed: float) -> str | None:
    """Why a run whose failed requests exceed serve.max_error_rate (default 0: any) is not
    ok: its latencies and throughput are those of the requests that happened to succeed."""
    rate = metrics.get("error_rate")
    if rate is None or rate <= allowed:
        return None
    return (
        f"{metrics['num_errors']} of {metrics['num_requests']} measured requests failed (error rate {rate:.1%}, "
        f"above serve.max_error_rate {allowed:g}): {', '.join(metrics['errors'])}"
    )


class ServeTask(Task):
    # ------------------------------------------------------------------ planning, naming
    def backend_label(self, run, backend: str) -> str:
        """The engine serves, not the chosen training backend: `serve-<engine>`, the one
        that runs (auto's choice: `serve-local`, or `serve-vllm` for its vLLM)."""
        choice = engines.choose_for(run.scenario)
        if choice.vllm_python or choice.vllm_executable:
            return "serve-vllm-tpu" if choice.platform == "tpu" else "serve-vllm"
        return f"serve-{choice.engine}"

    def accelerator_key(self, scenario, measured: str) -> str:
        """The server's declared accelerator, where the scenario names one."""
        if scenario.serve.accelerator:
            return cost_model.parse_fleet(scenario.serve.accelerator).accelerator
        return measured

    def record_keys(self, run, key: str) -> list[str]:
        return points.record_keys(run, key)

    def split(self, run, key: str, outcome: dict[str, Any]) -> list[tuple[Any, str, dict[str, Any]]]:
        return points.split(run, key, outcome)

    # ------------------------------------------------------------------ worker
    def job_fields(self, run) -> dict[str, Any]:
        choice = engines.choose_for(run.scenario)
        return {
            "engine": choice.engine,
            "engine_target": engines.ENGINES.target(choice.engine),
            "choice": choice.to_json(),
        }

    def prepare_worker(self, job: dict[str, Any]) -> None:
        # A plug-in engine registered in the parent reaches the worker by name.
        engines.ENGINES.register(job["engine"], job["engine_target"])

    def execute(self, job: dict[str, Any], scenario, events, held: list) -> dict[str, Any]:
        from harness.serving.run import execute_serve

        return execute_serve(scenario, events, job["choice"])

    # ------------------------------------------------------------------ record
    def fill(self, record: dict[str, Any], run, plan, catalog: dict[str, Any]) -> dict[str, Any] | None:
        accelerator = record["accelerator"]
        price = cost_model.price_for(accelerator["catalog_key"], run.scenario.cost, catalog)
        slo = run.scenario.serve.slo.model_dump()
        metrics, cost = serve_figures(
            record["raw"], slo, accelerator.get("count", 1), price, run.scenario.serve.percentiles
        )
        record["metrics"] = metrics
        record["server"] = record["raw"].get("server")
        if metrics["num_completed"] == 0:
            return {"kind": "error", "reason": f"every measured request failed ({', '.join(metrics['errors'])})"}
        too_many = too_many_errors(metrics, run.scenario.serve.max_error_rate)
        if too_many:
            return {"kind": "error", "reason": too_many}
        record["cost"] = cost
        if cost is not None and record["raw"].get("engine") == "local":
            cost["label"] = engines.LOCAL_LABEL
        return None

    # ------------------------------------------------------------------ terminal
    def progress_where(self, run, chosen) -> str:
        choice = engines.choose_for(run.scenario)
        return f"serving via [green]{choice.label}[/green]: {choice.reason}"

    def progress_total(self, run) -> int:
        return run.scenario.serve.num_requests

    def summary_label(self) -> str:
        return " serve"

    def summary_columns(self) -> tuple[str, ...]:
        return ("TTFT med (s)", "TTFT p90 (s)", "TPOT med (s)", "out tok/s", "errors", "$/1M out tok")

    def summary_values(self, record: RunRecord) -> dict[str, str]:
        m, c = record.metrics, record.cost
        if m is None:  # a failed run: its reason is in the status column
            return {}
        return {
            "TTFT med (s)": fmt(m.ttft_s.median if m.ttft_s else None, ".4g"),
            "TTFT p90 (s)": fmt(m.ttft_s.p90 if m.ttft_s else None, ".4g"),
            "TPOT med (s)": fmt(m.tpot_s.median if m.tpot_s else None, ".4g"),
            "out tok/s": fmt(m.output_throughput_tok_s, ".4g"),
            "errors": f"{m.num_errors}/{m.num_requests}",
            "$/1M out tok": engines.with_caveat(
                fmt(c.usd_per_1m_output_tokens if c else None, ".3g"), c.label if c and c.label else ""
            ),
        }

    def show(self, record: RunRecord):
        from harness.tasks.serve.show import serving_table

        return serving_table(record)


TASK = ServeTask(
    "serve",
    sections=(TaskSection("serve", ServeSpec, "null"),),
    report_layout="serving",
    report_columns=REPORT_COLUMNS,
    gate_metrics=GATE_METRICS,
    priced_metrics=("usd_per_1m_output_tokens",),
    metrics_type=ServeMetrics,
    cost_type=ServeCost,
)
