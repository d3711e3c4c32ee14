"""The report's content as plain data: one table model shared by HTML, Markdown and CSV,
so every output shows the same numbers formatted the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.cost import Fleet, cost_ratio, load_catalog
from harness.metrics import across_runs, ratio_words

# (header, unit-bearing formatter input, getter): the summary table's columns.
SUMMARY_COLUMNS: list[tuple[str, str, Any]] = [
    ("runs", "d", lambda rs: len(rs)),
    ("step median (s)", ".4g", lambda rs: across_runs((r["metrics"]["step_time_s"] or {}).get("median") for r in rs)),
    ("step p90 (s)", ".4g", lambda rs: across_runs((r["metrics"]["step_time_s"] or {}).get("p90") for r in rs)),
    ("compile (s)", ".3g", lambda rs: across_runs(r["metrics"]["compile_time_s"] for r in rs)),
    ("recompiles", ".3g", lambda rs: across_runs(r["metrics"]["num_recompiles"] for r in rs)),
    ("tok/s real", ".4g", lambda rs: across_runs(r["metrics"]["tokens_per_s_real"] for r in rs)),
    ("tok/s padded", ".4g", lambda rs: across_runs(r["metrics"]["tokens_per_s_padded"] for r in rs)),
    ("tok/s real per chip", ".4g", lambda rs: across_runs(r["metrics"]["tokens_per_s_real_per_chip"] for r in rs)),
    ("tok/s real effective", ".4g", lambda rs: across_runs(r["metrics"].get("tokens_per_s_real_effective") for r in rs)),
    ("MFU", ".2%", lambda rs: across_runs(r["metrics"]["mfu"] for r in rs)),
    ("peak mem (GiB)", ".3g", lambda rs: across_runs(r["metrics"]["peak_memory_gib"] for r in rs)),
    ("$/run", ".4g", lambda rs: across_runs((r.get("cost") or {}).get("usd_run") for r in rs)),
    ("$/1M tok", ".4g", lambda rs: across_runs((r.get("cost") or {}).get("usd_per_1m_tokens_real") for r in rs)),
]


def _lat(name: str, stat: str):
    return lambda rs: across_runs((r["metrics"].get(name) or {}).get(stat) for r in rs)


SERVE_COLUMNS: list[tuple[str, str, Any]] = [
    ("runs", "d", lambda rs: len(rs)),
    ("TTFT median (s)", ".4g", _lat("ttft_s", "median")),
    ("TTFT p99 (s)", ".4g", _lat("ttft_s", "p99")),
    ("TPOT median (s)", ".4g", _lat("tpot_s", "median")),
    ("ITL p99 (s)", ".4g", _lat("itl_s", "p99")),
    ("E2EL median (s)", ".4g", _lat("e2el_s", "median")),
    ("output tok/s", ".4g", lambda rs: across_runs(r["metrics"]["output_throughput_tok_s"] for r in rs)),
    ("req/s", ".4g", lambda rs: across_runs(r["metrics"]["request_throughput_req_s"] for r in rs)),
    ("goodput req/s", ".4g", lambda rs: across_runs(r["metrics"]["goodput_req_s"] for r in rs)),
    ("errors", "d", lambda rs: sum(r["metrics"]["num_errors"] for r in rs)),
    ("$/1M out tok", ".4g", lambda rs: across_runs((r.get("cost") or {}).get("usd_per_1m_output_tokens") for r in rs)),
]


def fmt(value: Any, spec: str) -> str:
    if value is None:
        return "n/a"
    if spec == "d":
        return str(int(value))
    return format(value, spec)


@dataclass
class Row:
    key: tuple[str, str, str]  # variant, backend, accelerator
    records: list[dict[str, Any]]
    cells: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        variant, backend, accelerator = self.key
        reduced = " (reduced)" if any(r["scenario"].get("profile") for r in self.records) else ""
        return f"{variant} · {backend} · {accelerator}{reduced}"

    def value(self, header: str) -> Any:
        getter = next(g for h, _, g in SUMMARY_COLUMNS if h == header)
        return getter(self.records)


@dataclass
class ScenarioSection:
    name: str
    reference: str | None
    rows: list[Row]
    baseline: Row
    comparisons: list[str]
    sensitivity: list[dict[str, Any]]


@dataclass
class ServeRow:
    label: str
    records: list[dict[str, Any]]
    cells: list[str]


@dataclass
class WorkloadRow:
    """A scenario's train-plus-serve workload priced on one accelerator."""

    scenario: str
    accelerator: str
    fine_tunes: float
    served_tokens_millions: float
    train_usd: float
    serve_usd_per_1m: float
    total_usd: float
    ratio_to_first: float


@dataclass
class Report:
    sections: list[ScenarioSection]
    serving: list[ServeRow]
    failed: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    prices: list[dict[str, Any]]
    warnings: list[str]
    workloads: list[WorkloadRow] = field(default_factory=list)


def _matches(row: Row, selector: tuple[str, str] | None) -> bool:
    if selector is None:
        return False
    key, value = selector
    variant, backend, accelerator = row.key
    return {"variant": variant, "backend": backend, "accelerator": accelerator}.get(key) == value


def _serving_rows(records: list[dict[str, Any]]) -> list[ServeRow]:
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["scenario"]["name"], r["scenario"]["variant"], r["backend"]["name"],
                           r["accelerator"]["catalog_key"]), []).append(r)
    return [ServeRow(" · ".join(key), rs, [fmt(g(rs), spec) for _, spec, g in SERVE_COLUMNS])
            for key, rs in sorted(groups.items())]


def build(records: list[dict[str, Any]], baseline: tuple[str, str] | None = None, warnings=()) -> Report:
    serving = _serving_rows([r for r in records if r["status"] == "ok" and r.get("task") == "serve"])
    ok = [r for r in records if r["status"] == "ok" and r.get("task", "train") == "train"]
    sections = []
    for name in sorted({r["scenario"]["name"] for r in ok}):
        mine = [r for r in ok if r["scenario"]["name"] == name]
        rows = _rows(mine)
        base = next((row for row in rows if _matches(row, baseline)), rows[0])
        sections.append(ScenarioSection(name, mine[0]["scenario"].get("reference"), rows, base,
                                        [c for row in rows if row is not base for c in [_compare(row, base)] if c],
                                        _sensitivity(rows, base)))
    failed = [r for r in records if r["status"] != "ok"]
    report = Report(sections, serving, failed, records, _prices(ok + [r for row in serving for r in row.records]),
                    list(warnings))
    report.workloads = _workloads([r for r in records if r["status"] == "ok"])
    return report


def _workloads(records: list[dict[str, Any]]) -> list[WorkloadRow]:
    """harness.cost.workload_cost for every scenario with a `workload` section and both a
    train and a serve record on the same accelerator (medians over repeats)."""
    from harness.cost import fine_tune_cost, workload_cost

    rows: list[WorkloadRow] = []
    for name in sorted({r["scenario"]["name"] for r in records}):
        mine = [r for r in records if r["scenario"]["name"] == name]
        spec = mine[0]["scenario"]["resolved"].get("workload")
        if not spec or not spec.get("fine_tune_tokens_millions"):
            continue  # records from before the fine-tune size was stated priced the benchmark run
        found = []
        for accelerator in sorted({r["accelerator"]["catalog_key"] for r in mine}):
            train = across_runs(fine_tune_cost(r.get("cost") or {}, spec["fine_tune_tokens_millions"]) for r in mine
                                if r.get("task", "train") == "train" and r["accelerator"]["catalog_key"] == accelerator)
            serve = across_runs((r.get("cost") or {}).get("usd_per_1m_output_tokens") for r in mine
                                if r.get("task") == "serve" and r["accelerator"]["catalog_key"] == accelerator)
            if train is not None and serve is not None:
                total = workload_cost(train, spec["fine_tunes"], serve, spec["served_tokens_millions"])
                found.append((accelerator, train, serve, total))
        for accelerator, train, serve, total in found:
            rows.append(WorkloadRow(name, accelerator, spec["fine_tunes"], spec["served_tokens_millions"], train, serve,
                                    total, total / found[0][3]))
    return rows


def _rows(records: list[dict[str, Any]]) -> list[Row]:
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault((r["scenario"]["variant"], r["backend"]["name"], r["accelerator"]["catalog_key"]), []).append(r)
    # In the order the runs were made: a sweep's first matrix cell is the default baseline.
    first = lambda item: min(r["provenance"].get("started_at") or "" for r in item[1])  # noqa: E731
    rows = [Row(key, rs) for key, rs in sorted(groups.items(), key=lambda item: (first(item), item[0]))]
    for row in rows:
        row.cells = [fmt(getter(row.records), spec) for _, spec, getter in SUMMARY_COLUMNS]
    return rows


def _compare(row: Row, base: Row) -> str | None:
    """`static vs dynamic: 6.10x lower median step time (better), 0 vs 37 recompiles, ...`"""
    parts = [
        ratio_words(row.value("step median (s)"), base.value("step median (s)"), True, "median step time"),
        ratio_words(row.value("tok/s real"), base.value("tok/s real"), False, "real tokens/s"),
        ratio_words(row.value("$/run"), base.value("$/run"), True, "$/run"),
    ]
    recompiles = (row.value("recompiles"), base.value("recompiles"))
    if None not in recompiles:
        parts.append(f"{fmt(recompiles[0], '.3g')} vs {fmt(recompiles[1], '.3g')} recompiles")
    parts = [p for p in parts if p]
    return f"{row.label} vs {base.label}: " + ", ".join(parts) if parts else None


def _sensitivity(rows: list[Row], base: Row) -> list[dict[str, Any]]:
    """Cost ratio against the baseline as each accelerator's price varies (only between
    different accelerators with prices: the same chip at the same price has no lever)."""
    catalog = load_catalog()
    out = []
    for row in rows:
        if row.key[2] == base.key[2] or row is base:
            continue
        a = Fleet(row.key[2], row.records[0]["accelerator"].get("count", 1))
        b = Fleet(base.key[2], base.records[0]["accelerator"].get("count", 1))
        if not base.value("step median (s)") or not row.value("step median (s)"):
            continue  # no steady state on one side: no speed-up to price
        speedup = base.value("step median (s)") / row.value("step median (s)")
        factors = [0.5, 0.75, 1.0, 1.25, 1.5]
        try:
            curve_a = [cost_ratio(speedup, a, b, catalog, factors=(f, 1.0))["cost_ratio"] for f in factors]
            curve_b = [cost_ratio(speedup, a, b, catalog, factors=(1.0, f))["cost_ratio"] for f in factors]
        except Exception:  # an accelerator without a price: nothing to vary
            continue
        out.append({"label": f"{row.label} vs {base.label}", "a": str(a), "b": str(b), "factors": factors,
                    "a_scaled": curve_a, "b_scaled": curve_b, "speedup": speedup})
    return out


def _prices(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[tuple, dict[str, Any]] = {}
    for r in records:
        price = (r.get("cost") or {}).get("price")
        if price:
            seen[(price["accelerator"], price["usd_per_chip_hour"], price["source"])] = price
    return sorted(seen.values(), key=lambda p: p["accelerator"])
