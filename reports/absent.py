"""Why a report cell reads `n/a`: one short code per cause, explained under each table.

A figure is absent for a reason the record can tell: the run measured no window, the
device has no peak FLOP/s (so no MFU), no measured step was free of compiles (no steady
state), the device has no price, the bench that wrote the record did not measure it, no
request completed. The cell says `n/a [code]`; the table's legend says what the code means.
"""

from __future__ import annotations

from typing import Any

# code -> cause, in words. A code is one character, so that cells stay narrow.
CAUSES: dict[str, str] = {
    "w": "no window measured (the run's train.window_steps is 0: no unsynced window)",
    "p": "no peak FLOP/s for this device (a CPU has no meaningful one), so no MFU",
    "m": "MFU withheld: it computed above 1 (timing not synchronised)",
    "s": "no steady state: every measured step compiled (the effective figures count them)",
    "$": "no price for this device (not in the price table, no --prices or cost.prices)",
    "o": "not measured by the bench that wrote this record (an older schema)",
    "r": "no request completed",
    "t": "no time per output token: every request produced one token",
    "g": "no SLO set (serve.slo): goodput counts the requests within one",
    "v": "the server reported no such figure (no vLLM /metrics, or not this one)",
    "x": "not recorded in this record",
}

WINDOW = (
    "metrics.window_tokens_per_s_real",
    "metrics.window_tokens_per_s_padded",
    "cost.usd_per_1m_tokens_real_window",
)
STEADY = (
    "metrics.step_time_s",
    "metrics.tokens_per_s_real",
    "metrics.tokens_per_s_padded",
    "metrics.tokens_per_s_real_per_chip",
    "metrics.tokens_per_s_padded_per_chip",
    "cost.usd_per_1m_tokens_real",
)


def cause(record, figure: str) -> str:
    """The code of why `figure` (an id such as "metrics.mfu", "metrics.ttft_s.median") is
    absent from `record` (a RunRecord)."""
    if figure in record.absent or _base(figure) in record.absent:
        return "o"
    if figure.startswith("cost.") and record.cost is None:
        return "$"
    m = record.metrics
    if figure in WINDOW and _get(m, "window_tokens_per_s_real") is None:
        return "w"
    if figure in ("metrics.mfu", "metrics.hfu", "metrics.model_tflops_per_s"):
        return "m" if _get(m, "mfu_invalid") else "p"
    if _base(figure) in STEADY and _get(m, "step_time_s") is None:
        return "s"
    if figure.startswith(("metrics.ttft_s", "metrics.e2el_s", "metrics.itl_s")) or figure.startswith(
        "metrics.output_throughput"
    ):
        return "r" if not _get(m, "num_completed") else "x"
    if figure.startswith("metrics.tpot_s"):
        return "r" if not _get(m, "num_completed") else "t"
    if figure.startswith("metrics.server_figures."):
        return "v"
    slo = _get(m, "slo") or {}
    if figure == "metrics.goodput_req_s" and not any(v is not None for k, v in slo.items() if k.endswith("_s")):
        return "g"
    if figure.startswith("cost.") and _get(m, "output_throughput_tok_s") == 0:
        return "r"
    return "x"


def na(code: str) -> str:
    return f"n/a [{code}]"


def legend(cells) -> list[str]:
    """`[code] cause` for each code found in these cells (`n/a [w]`, or a fallback's
    `(steady [w])`), in CAUSES' order."""
    text = " ".join(cells)
    return [f"[{code}] {why}" for code, why in CAUSES.items() if f"[{code}]" in text]


def _base(figure: str) -> str:
    """ "metrics.step_time_s.median" -> "metrics.step_time_s" (a distribution's figure)."""
    parts = figure.split(".")
    return ".".join(parts[:2])


def _get(metrics: Any, name: str) -> Any:
    if metrics is None:
        return None
    return metrics.get(name) if isinstance(metrics, dict) else getattr(metrics, name, None)
