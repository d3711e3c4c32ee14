"""A serving run's figures from its raw facts: vLLM's serving metrics, an SLO search's
answer, and the cost at the price given. The serve task fills its records with them, and
a migrated schema-1 record is derived again by them (harness.records.migrations)."""

from __future__ import annotations

from typing import Any

from harness.figures import cost as cost_model
from harness.figures import metrics as metric_fns


def serve_figures(
    raw: dict[str, Any], slo: dict[str, Any], chips: int, price, percentiles=()
) -> tuple[dict, dict | None]:
    """A serving run's metrics and cost from its raw facts (also a migrated record's:
    harness.records.migrations); an SLO search's at the rate it found."""
    search = None
    if raw.get("slo_search"):  # the metrics, goodput and $ at the rate the search found
        search, requests = metric_fns.slo_search_summary(raw, slo)
        raw = {**raw, "requests": requests}
    metrics = metric_fns.serving_metrics(raw, slo, percentiles)
    metrics.update(vllm_convention(raw, metrics))
    metrics.update(server_side(raw))
    throughput = metrics["output_throughput_tok_s"]
    metrics["output_tok_s_per_chip"] = throughput / chips if throughput is not None else None
    if search is not None:
        metrics["slo_search"] = search
    cost = cost_model.serving_cost(metrics, chips, price)
    if search is not None and cost is not None:
        _cost_at_slo(cost, search)
    return metrics, cost


def vllm_convention(raw: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any]:
    """vLLM's own client's figures from the same timestamps, and the sentences where they
    differ from bench's by more than 5% (harness.serving.conventions)."""
    from harness.serving import conventions

    vllm = conventions.vllm_figures([r for r in raw["requests"] if not r["warmup"]])
    return {"vllm_convention": vllm, "convention_differences": conventions.differences(metrics, vllm)}


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


def server_side(raw: dict[str, Any]) -> dict[str, Any]:
    """What the run's facts say beside the client's figures: the server's own /metrics
    over the measured phase (harness.serving.server_metrics), and warnings where a compile or a warm cache leaked into
    what was measured."""
    from harness.serving.server_side import server_figures

    out: dict[str, Any] = {
        "server_metrics": raw.get("server_metrics"),
        "server_figures": server_figures(raw.get("server_metrics")),
    }
    measured = [r for r in raw["requests"] if not r["warmup"] and r["error"] is None]
    warnings = []
    compiled = (raw.get("server") or {}).get("graphs_compiled_in_measured")
    if compiled:
        warnings.append(
            f"torch.compile compiled {compiled} graph(s) during the measured requests: their compile time is "
            "inside those requests' TTFT and TPOT"
        )
    warnings += warm_cache_warning(raw.get("prefix_cache_reset"), measured)
    if warnings:
        out["warnings"] = warnings
    return out


def warm_cache_warning(reset: dict[str, Any] | None, measured: list[dict[str, Any]]) -> list[str]:
    """A run meant to be cold (its prefix cache reset just before) whose first request
    found cached tokens: the reset did not take, so every TTFT may be a warm cache's.
    Later requests hitting the prefixes of earlier ones in the same run (a shared system
    prompt) are what a server does, not a leak: counted in the record's cached_prompt_tokens (harness.figures.metrics), no warning."""
    if not (reset and reset.get("done")) or not measured:
        return []
    first = min(measured, key=lambda r: r["sent_s"])
    if not first.get("cached_tokens"):
        return []
    return [
        f"the prefix cache was reset before the measured requests, yet the first of them found "
        f"{first['cached_tokens']} cached prompt tokens: the reset did not take, TTFTs may be a warm cache's"
    ]
