"""The serve task: load a model server (an engine: harness/serving/engines.py) with
requests and keep raw per-request timestamps; the parent computes vLLM's serving
metrics, goodput and $ per 1M output tokens. A sweep's worker measures every point and
writes one record per point (harness/serving/points.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from rich.table import Table
from rich.text import Text

from harness import cost as cost_model
from harness import metrics as metric_fns
from harness.gate_metrics import GateMetric
from harness.result import FROZEN, Price, RunRecord, Stats
from harness.serving import engines, points
from harness.tasks.base import Column, Task, fmt


# ------------------------------------------------------------------ the record's figures
class ServeMetrics(BaseModel):
    """A serving run's figures (harness.metrics.serving_metrics; docs: metrics.md)."""

    model_config = FROZEN
    num_requests: int
    num_completed: int
    num_errors: int
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
    # Prefix cache (harness.metrics.prefix_cache_hits): None where the server did not say.
    cached_prompt_tokens: int | None = None
    cached_prompt_fraction: float | None = None


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
    Column("cost.usd_per_1m_output_tokens", "$/1M out tok", ".4g"),
]

GATE_METRICS: dict[str, GateMetric] = {
    "ttft_s": GateMetric("lower", "s", "metrics.ttft_s.median"),
    "ttft_s.p99": GateMetric("lower", "s", "metrics.ttft_s.p99"),
    "tpot_s": GateMetric("lower", "s", "metrics.tpot_s.median"),
    "itl_s.p99": GateMetric("lower", "s", "metrics.itl_s.p99"),
    "output_throughput_tok_s": GateMetric("higher", "tok/s", "metrics.output_throughput_tok_s"),
    "usd_per_1m_output_tokens": GateMetric("lower", "$", "cost.usd_per_1m_output_tokens"),
}


class ServeTask(Task):
    # ------------------------------------------------------------------ planning, naming
    def backend_label(self, run, backend: str) -> str:
        """The engine serves, not the chosen training backend: `serve-<engine>`, the one
        that runs (auto's choice: `serve-local`, or `serve-vllm` for its vLLM)."""
        choice = engines.choose(run.scenario.serve)
        return "serve-vllm" if choice.vllm_python or choice.vllm_executable else f"serve-{choice.engine}"

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
        choice = engines.choose(run.scenario.serve)
        return {"engine": choice.engine, "engine_target": engines.target(choice.engine), "choice": choice.to_json()}

    def prepare_worker(self, job: dict[str, Any]) -> None:
        # A plug-in engine registered in the parent reaches the worker by name.
        engines.register(job["engine"], job["engine_target"])

    def execute(self, job: dict[str, Any], scenario, events, held: list) -> dict[str, Any]:
        from harness.serving.run import execute_serve

        return execute_serve(scenario, events, job["choice"])

    # ------------------------------------------------------------------ record
    def fill(self, record: dict[str, Any], run, plan, catalog: dict[str, Any]) -> dict[str, Any] | None:
        slo = run.scenario.serve.slo.model_dump()
        raw, search = record["raw"], None
        if raw.get("slo_search"):  # the metrics, goodput and $ at the rate the search found
            search, requests = metric_fns.slo_search_summary(raw, slo)
            raw = {**raw, "requests": requests}
        metrics = metric_fns.serving_metrics(raw, slo)
        accelerator = record["accelerator"]
        chips = accelerator.get("count", 1)
        throughput = metrics["output_throughput_tok_s"]
        metrics["output_tok_s_per_chip"] = throughput / chips if throughput is not None else None
        if search is not None:
            metrics["slo_search"] = search
        record["metrics"] = metrics
        record["server"] = record["raw"].get("server")
        if metrics["num_completed"] == 0:
            return {"kind": "error", "reason": f"every measured request failed ({', '.join(metrics['errors'])})"}
        price = cost_model.price_for(accelerator["catalog_key"], run.scenario.cost, catalog)
        record["cost"] = cost_model.serving_cost(metrics, chips, price)
        if record["cost"] is not None and record["raw"].get("engine") == "local":
            record["cost"]["label"] = engines.LOCAL_LABEL
        if search is not None and record["cost"] is not None:
            _cost_at_slo(record["cost"], search)
        return None

    # ------------------------------------------------------------------ terminal
    def progress_where(self, run, chosen) -> str:
        choice = engines.choose(run.scenario.serve)
        return f"serving via [green]{choice.label}[/green]: {choice.reason}"

    def progress_total(self, run) -> int:
        return run.scenario.serve.num_requests

    def summary_label(self) -> str:
        return " serve (TTFT)"

    def summary_values(self, record: RunRecord) -> dict[str, str]:
        ttft = record.metrics.ttft_s if record.metrics else None
        return {
            "step med (s)": fmt(ttft.median if ttft else None, ".4g"),
            "p90 (s)": fmt(ttft.p90 if ttft else None, ".4g"),
            "MFU": "n/a",
        }

    def show(self, record: RunRecord) -> Table:
        return serving_table(record)


def _cost_at_slo(cost: dict[str, Any], search: dict[str, Any]) -> None:
    """$ at the SLO only where a rate met it: a price at a load that misses it is no answer."""
    found = search["max_rate_req_s"]
    cost["basis"] = (
        f"at {found:g} req/s, the highest request rate meeting the SLO"
        if found is not None
        else "no rate met the SLO: no $ at the SLO"
    )
    if found is None:
        cost["usd_per_1m_output_tokens"] = None


def serving_table(record: RunRecord) -> Table:
    m, c, server = record.metrics, record.cost, record.server or {}
    table = Table(show_header=True)
    for column in ("metric", "mean", "median", "p90", "p99"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for name in ("ttft_s", "tpot_s", "itl_s", "e2el_s"):
        stats = getattr(m, name)
        table.add_row(
            f"{name[:-2].upper()} (s)",
            *(fmt(getattr(stats, k) if stats else None, ".4g") for k in ("mean", "median", "p90", "p99")),
        )
    table.add_row("requests ok / sent", f"{m.num_completed} / {m.num_requests}", "", "", "")
    table.add_row(
        "output tok/s, total tok/s", fmt(m.output_throughput_tok_s, ".4g"), fmt(m.total_throughput_tok_s, ".4g"), "", ""
    )
    table.add_row(
        "requests/s, goodput req/s", fmt(m.request_throughput_req_s, ".4g"), fmt(m.goodput_req_s, ".4g"), "", ""
    )
    table.add_row(
        "server",
        Text(f"{server.get('engine') or server.get('owned_by') or ''} {server.get('model') or ''}"),
        "",
        "",
        "",
    )
    chosen = server.get("chosen")
    if chosen:
        table.add_row("engine", Text(f"{chosen['ran']}: {chosen['reason']}"), "", "", "")
    if m.cached_prompt_tokens is not None:
        table.add_row(
            "cached prompt tokens, fraction", str(m.cached_prompt_tokens), fmt(m.cached_prompt_fraction, ".3f"), "", ""
        )
    if c:
        p = c.price
        label = f" ({c.label})" if c.label else ""
        table.add_row("$/1M output tokens", Text(fmt(c.usd_per_1m_output_tokens, ".4g") + label), "", "", "")
        table.add_row("price", Text(f"${p.usd_per_chip_hour}/chip-h x {c.chips} ({p.source}, {p.date})"), "", "", "")
    return table


TASK = ServeTask(
    "serve",
    report_layout="serving",
    report_columns=REPORT_COLUMNS,
    gate_metrics=GATE_METRICS,
    priced_metrics=("usd_per_1m_output_tokens",),
    metrics_type=ServeMetrics,
    cost_type=ServeCost,
)
