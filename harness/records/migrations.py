"""A schema-1 record's figures, derived again from its raw facts by today's definitions.

Schema 1 grew without a version bump, and some of its figures changed meaning on the way
(E2EL ends at the last content chunk since 26cdd23; steady-state step time leaves out
every compiling step since d08562e). A figure read under today's name must mean what
today's code means by it, so a migrated record's `metrics` and `cost` are computed
again from its `raw` facts with today's harness.figures.metrics and harness.figures.cost, at the price
the record was billed at. What those facts cannot give (FLOPs without each row's real
tokens, whether a compilation cache was on) is absent: None, and named in the record's
`absent` with the version that did not measure it. Nothing is invented.

Plain Python (harness.figures.metrics, harness.figures.cost): no ML framework.
"""

from __future__ import annotations

from typing import Any, Callable

# Figures that need each row's real tokens (raw `loop.steps[].row_tokens`, d08562e on).
FLOPS_FIGURES = ("model_flops_per_token", "hardware_flops_per_token", "model_tflops_per_s", "mfu", "hfu")


def not_measured_by(doc: dict[str, Any]) -> str:
    """Why a figure is absent: the version of bench that wrote the record."""
    commit = (doc.get("provenance") or {}).get("commit") or "of unknown commit"
    return f"not measured by bench {commit[:7]} (schema {doc.get('schema_version')})"


def refigure(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` (a schema-1 record's JSON, copied) with its figures derived again from its raw
    facts and `absent` filled; a failed run, or a task bench does not know, as it was."""
    derive = DERIVERS.get(doc.get("task") or "train")
    if doc.get("status") != "ok" or not doc.get("raw") or derive is None:
        return doc
    try:
        metrics, cost, absent = derive(doc, not_measured_by(doc))
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise ValueError(f"its figures cannot be derived again from its raw facts ({exc!r})") from None
    return {**doc, "metrics": metrics, "cost": cost, "absent": {**doc.get("absent", {}), **absent}}


def _price(doc: dict[str, Any]):
    from harness.figures.cost import Price

    stored = (doc.get("cost") or {}).get("price")
    return Price(**stored) if stored else None


def _flops(doc: dict[str, Any]):
    """The FLOPs model from the record's own facts; None where they lack each row's real
    tokens or the architecture the backend built (bench before d08562e)."""
    from harness.figures.metrics import FlopsModel

    raw, train = doc["raw"], (doc["scenario"].get("resolved") or {}).get("train")
    arch = raw["model"].get("architecture")
    if train is None or arch is None or not all("row_tokens" in s for s in raw["loop"]["steps"]):
        return None
    lora = train["method"] == "lora"
    adapters = raw["model"]["num_trainable_params"] if lora else 0
    return FlopsModel(
        arch,
        lora=lora,
        adapter_params=adapters,
        checkpointing=train.get("gradient_checkpointing", False),
        head_recompute=bool(raw.get("execution", {}).get("loss_recompute", False)),  # since #36
    )


def _train(doc: dict[str, Any], why: str) -> tuple[dict, dict | None, dict[str, str]]:
    from harness.figures.cost import training_cost
    from harness.figures.metrics import training_metrics

    raw, accelerator = doc["raw"], doc["accelerator"]
    flops = _flops(doc)
    if "train" not in (doc["scenario"].get("resolved") or {}):
        # the FLOPs model needs the method (LoRA or full) and checkpointing it trained with
        why_flops = f"{why}: its resolved scenario has no `train` section (method, gradient_checkpointing)"
    else:
        why_flops = why
    absent = {f"metrics.{name}": why_flops for name in FLOPS_FIGURES} if flops is None else {}
    if "compile_cache" not in raw:
        absent["metrics.compile_cache"] = why
    metrics = training_metrics(raw, accelerator, flops)
    price = _price(doc)
    cost = training_cost(metrics, accelerator.get("count", 1), price) if price else None
    return metrics, cost, absent


def _serve(doc: dict[str, Any], why: str) -> tuple[dict, dict | None, dict[str, str]]:
    from harness.serving.figures import serve_figures

    slo = doc["scenario"]["resolved"]["serve"].get("slo") or {}
    metrics, cost = serve_figures(doc["raw"], slo, doc["accelerator"].get("count", 1), _price(doc))
    return metrics, cost, {}


# task -> how its schema-1 figures are derived again (a plug-in task keeps its own).
DERIVERS: dict[str, Callable[[dict[str, Any], str], tuple[dict, dict | None, dict[str, str]]]] = {
    "train": _train,
    "serve": _serve,
}
