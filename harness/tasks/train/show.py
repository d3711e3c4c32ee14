"""`bench show` of a train record: every figure of the record, one a row, each value in
the value column with its unit in the metric's name; absent figures say why, as the
report does (compile time `n/a (eager)` for a backend that compiles nothing)."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from harness.records.result import RunRecord
from harness.tasks.base import fmt


def metrics_table(record: RunRecord) -> Table:
    table = Table(show_header=True)
    table.add_column("metric", overflow="fold")
    table.add_column("value", justify="right", overflow="fold")
    for name, value in metric_rows(record) + cost_rows(record):
        table.add_row(name, Text(value))
    return table


def metric_rows(record: RunRecord) -> list[tuple[str, str]]:
    m = record.metrics
    return [
        *_step_rows(m),
        ("steady state", m.steady_state or "n/a (not recorded)"),
        ("measured steps", str(m.measured_steps)),
        ("measured steps time (s)", fmt(m.measured_time_s, ".4g")),
        ("steady steps time (s)", _or_why(m.steady_time_s, ".4g", "no steady state")),
        ("recompiling measured steps", str(m.recompile_steps)),
        ("recompiling steps time (s)", fmt(m.recompile_steps_time_s, ".4g")),
        ("warm-up steps time (s)", fmt(m.warmup_time_s, ".4g")),
        *_compile_rows(record),
        ("tokens real, measured steps", str(m.tokens_real)),
        ("tokens padded, measured steps", str(m.tokens_padded)),
        ("window tokens/s real (1 sync)", _or_why(m.window_tokens_per_s_real, ".4g", "no window measured")),
        ("window tokens/s padded (1 sync)", _or_why(m.window_tokens_per_s_padded, ".4g", "no window measured")),
        ("tokens/s real, steady", _or_why(m.tokens_per_s_real, ".4g", "no steady state")),
        ("tokens/s padded, steady", _or_why(m.tokens_per_s_padded, ".4g", "no steady state")),
        ("tokens/s real per chip", _or_why(m.tokens_per_s_real_per_chip, ".4g", "no steady state")),
        ("tokens/s padded per chip", _or_why(m.tokens_per_s_padded_per_chip, ".4g", "no steady state")),
        ("tokens/s real, effective (recompiles too)", fmt(m.tokens_per_s_real_effective, ".4g")),
        ("tokens/s padded, effective", fmt(m.tokens_per_s_padded_effective, ".4g")),
        ("padding efficiency (real/padded)", fmt(m.padding_efficiency, ".1%")),
        *_flop_rows(record),
        ("peak memory (GiB)", fmt(m.peak_memory_gib, ".3g")),
        ("peak memory counter", m.peak_memory_kind or "n/a (not recorded)"),
        ("loss first (nats/token)", fmt(m.loss_first, ".4f")),
        ("loss last (nats/token)", fmt(m.loss_last, ".4f")),
        ("run time (s)", fmt(m.run_time_s, ".4g")),
        ("setup time (s)", fmt(m.setup_time_s, ".3g")),
    ]


def _step_rows(m) -> list[tuple[str, str]]:
    step = m.step_time_s
    if not step:
        why = f"n/a (no steady state: {m.steady_state})"
        return [("step time median (s), steady", why)]
    return [
        ("step time median (s), steady", fmt(step.median, ".4g")),
        ("step time p90 (s), steady", fmt(step.p90, ".4g")),
        ("step time mean (s), steady", fmt(step.mean, ".4g")),
        ("step time stdev (s), steady", fmt(step.stdev, ".2g")),
        ("step time min / max (s), steady", f"{fmt(step.min, '.4g')} / {fmt(step.max, '.4g')}"),
        ("steady steps (n)", str(step.n)),
    ]


def _compile_rows(record: RunRecord) -> list[tuple[str, str]]:
    from harness.run.registry import compiles_nothing

    m = record.metrics
    eager = compiles_nothing(record)
    counted = (lambda value, spec: "n/a (eager)") if eager else fmt
    return [
        ("compile time (s)", counted(m.compile_time_s, ".4g")),
        ("compiles", counted(m.num_compiles, "d")),
        ("recompiles after warm-up", counted(m.num_recompiles, "d")),
        ("compiles during setup", counted(m.num_setup_compiles, "d")),
        ("persistent compilation cache", record.absent.get("metrics.compile_cache") or _cache_words(m.compile_cache)),
    ]


def _flop_rows(record: RunRecord) -> list[tuple[str, str]]:
    m = record.metrics
    no_peak = record.absent.get("metrics.mfu") or "no peak FLOP/s for this device"
    return [
        ("model FLOPs per real token", fmt(m.model_flops_per_token, ".4g")),
        ("model FLOPs convention", m.mfu_convention),
        ("hardware FLOPs per real token", fmt(m.hardware_flops_per_token, ".4g")),
        ("hardware FLOPs convention", m.hfu_convention),
        ("model TFLOP/s", fmt(m.model_tflops_per_s, ".4g")),
        ("peak FLOP/s per chip (bf16 dense)", _or_why(m.peak_flops_per_chip, ".4g", no_peak)),
        ("MFU", fmt(m.mfu, ".2%") if m.mfu is not None else f"n/a ({m.mfu_invalid or no_peak})"),
        ("HFU (with recomputation)", fmt(m.hfu, ".2%") if m.hfu is not None else f"n/a ({m.hfu_invalid or no_peak})"),
    ]


def cost_rows(record: RunRecord) -> list[tuple[str, str]]:
    from harness.figures.cost import fine_tune_of_record

    c = record.cost
    if c is None:
        return [("$", "n/a (no price for this device)")]
    p = c.price
    fine_tune = fine_tune_of_record(record)
    return [
        (
            "$/1M real tokens, window (the headline)",
            _or_why(c.usd_per_1m_tokens_real_window, ".4g", "no window measured"),
        ),
        ("$/1M real tokens, steady", _or_why(c.usd_per_1m_tokens_real, ".4g", "no steady state")),
        ("$/1M real tokens, effective", fmt(c.usd_per_1m_tokens_real_effective, ".4g")),
        ("$/run (whole run)", fmt(c.usd_run, ".4g")),
        ("$ setup", fmt(c.usd_setup, ".4g")),
        ("$ warm-up (compile)", fmt(c.usd_warmup, ".4g")),
        ("$ steady state", fmt(c.usd_steady_state, ".4g")),
        (
            "$/fine-tune (workload)",
            f"{fine_tune[0]:.4g} ({fine_tune[1]})" if fine_tune else "n/a (the scenario states no workload)",
        ),
        ("price", f"${p.usd_per_chip_hour}/chip-h x {c.chips} ({p.pricing}; {p.source}, {p.date})"),
    ]


def _or_why(value: Any, spec: str, why: str) -> str:
    return fmt(value, spec) if value is not None else f"n/a ({why})"


def _cache_words(cache: dict[str, Any] | None) -> str:
    if cache is None:
        return "n/a (eager)"
    return (
        f"ON: {cache['what']} ({cache.get('dir')}): cached compiles are not counted"
        if cache["persistent"]
        else f"off ({cache['what']})"
    )
