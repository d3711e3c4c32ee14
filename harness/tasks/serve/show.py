"""`bench show` of a serve record: the latency distributions under their statistics'
headers (mean, median, p90, p99), then every other figure of the record one a row under
`value`, goodput with the SLO that decides it; absent figures say why."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from harness.records.result import RunRecord
from harness.tasks.base import fmt

STATISTICS = ("mean", "median", "p90", "p99")
LATENCIES = ("ttft_s", "tpot_s", "itl_s", "e2el_s")


def serving_table(record: RunRecord) -> Group:
    return Group(latency_table(record), figures_table(record))


def latency_table(record: RunRecord) -> Table:
    m = record.metrics
    table = Table(show_header=True, title="latency per request (s)")
    table.add_column("latency (s)", overflow="fold")
    for column in STATISTICS:
        table.add_column(column, justify="right", overflow="fold")
    for name in LATENCIES:
        stats = getattr(m, name)
        why = "n/a (no request completed)" if not m.num_completed else "n/a (one-token requests)"
        table.add_row(
            f"{name[:-2].upper()} (s)", *(fmt(getattr(stats, k), ".4g") if stats else why for k in STATISTICS)
        )
    return table


def figures_table(record: RunRecord) -> Table:
    table = Table(show_header=True)
    table.add_column("metric", overflow="fold")
    table.add_column("value", justify="right", overflow="fold")
    for name, value in figure_rows(record) + cost_rows(record):
        table.add_row(name, Text(value))
    return table


def client_rows(record: RunRecord) -> list[tuple[str, str]]:
    """The client's side (queue time, the rate sent), the asked percentiles, and the
    notes: the client limiting the load, percentiles too thin, warnings."""
    m, rows = record.metrics, []
    if m.client_queue_s is not None:
        q = m.client_queue_s
        rows.append(("client queue (s): median, p99, max", f"{q.median:.3g}, {q.p99:.3g}, {q.max:.3g}"))
    if m.achieved_rate_req_s is not None:
        rows.append(("request rate sent (req/s)", fmt(m.achieved_rate_req_s, ".4g")))
    for name, values in (m.percentiles or {}).items():
        rows.append(
            (f"{name[:-2].upper()} (s) percentiles", ", ".join(f"{p} {fmt(v, '.4g')}" for p, v in values.items()))
        )
    notes = [m.client_saturated] if m.client_saturated else []
    notes += [f"vLLM's convention differs: {d}" for d in m.convention_differences]
    notes += [f"too few samples for {t}" for t in m.thin_percentiles] + list(m.warnings)
    return rows + [("note", note) for note in notes]


def figure_rows(record: RunRecord) -> list[tuple[str, str]]:
    m, server = record.metrics, record.server or {}
    chosen = server.get("chosen") or {}
    rows = [
        ("requests sent", str(m.num_requests)),
        ("requests completed", str(m.num_completed)),
        ("requests failed", str(m.num_errors)),
        *((f"error {i + 1}", error) for i, error in enumerate(m.errors)),
        ("duration (s)", fmt(m.duration_s, ".4g")),
        ("prompt tokens", str(m.prompt_tokens)),
        ("output tokens", str(m.output_tokens)),
        ("output tok/s", _or_why(m.output_throughput_tok_s, "no request completed")),
        ("total tok/s (prompt + output)", _or_why(m.total_throughput_tok_s, "no request completed")),
        ("output tok/s per user", _or_why(m.output_tok_s_per_user, "no request completed")),
        ("output tok/s per chip", _or_why(m.output_tok_s_per_chip, "no request completed")),
        ("requests/s", _or_why(m.request_throughput_req_s, "no request completed")),
        (f"goodput req/s ({slo_words(m.slo)})", _or_why(m.goodput_req_s, "no SLO set")),
    ]
    if m.slo_at_percentile:
        rows.append(("SLO at percentile", _mapping(m.slo_at_percentile)))
    if m.slo_search:
        search = m.slo_search
        rows.append(("SLO search: highest rate within the SLO (req/s)", fmt(search.get("max_rate_req_s"), ".4g")))
    rows += client_rows(record)
    rows += server_rows(m.server_figures)
    if m.cached_prompt_tokens is not None:
        rows.append(("cached prompt tokens", str(m.cached_prompt_tokens)))
        rows.append(("cached prompt fraction", fmt(m.cached_prompt_fraction, ".3f")))
    rows.append(
        ("server", f"{server.get('engine') or server.get('owned_by') or ''} {server.get('model') or ''}".strip())
    )
    if chosen:
        rows.append(("engine", f"{chosen['ran']}: {chosen['reason']}"))
    return rows


# The server's own figures (metrics.server_figures), each labelled as the server's.
SERVER_ROWS = (
    ("queue_time_mean_s", "server: mean queue time (s)", ".4g"),
    ("kv_cache_usage_peak", "server: KV-cache use peak", ".1%"),
    ("prefix_cache_hit_rate", "server: prefix-cache hit rate (tokens)", ".1%"),
    ("preemptions", "server: preemptions", ".0f"),
)


def server_rows(figures: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The server's figures beside the client's, or one row saying why there are none."""
    if figures is None:
        return [("server figures", "n/a (the server offers no vLLM /metrics)")]
    return [
        (label, fmt(figures[key], spec) if figures.get(key) is not None else "n/a (the server did not report it)")
        for key, label, spec in SERVER_ROWS
    ]


def cost_rows(record: RunRecord) -> list[tuple[str, str]]:
    c = record.cost
    if c is None:
        return [("$/1M output tokens", "n/a (no price for this device)")]
    p = c.price
    label = f" ({c.label})" if c.label else ""
    rows = [
        ("$/1M output tokens", fmt(c.usd_per_1m_output_tokens, ".4g") + label),
        ("$ of the benchmark", fmt(c.usd_benchmark, ".4g")),
        ("price", f"${p.usd_per_chip_hour}/chip-h x {c.chips} ({p.pricing}; {p.source}, {p.date})"),
    ]
    if c.basis:
        rows.insert(1, ("$/1M output tokens at", c.basis))
    return rows


def slo_words(slo: dict[str, Any] | None) -> str:
    """The SLO goodput counts requests against, in words."""
    slo = slo or {}
    targets = {k: v for k, v in slo.items() if k.endswith("_s") and v is not None}
    if not targets:
        return "no SLO set"
    at = f" at p{slo['percentile']:g}" if slo.get("percentile") else ""
    return "SLO " + ", ".join(f"{k.removesuffix('_s').upper()} <= {v:g} s" for k, v in targets.items()) + at


def _or_why(value: Any, why: str) -> str:
    return fmt(value, ".4g") if value is not None else f"n/a ({why})"


def _mapping(values: dict[str, Any]) -> str:
    return ", ".join(f"{k} {fmt(v, '.4g') if isinstance(v, float) else v}" for k, v in values.items())
