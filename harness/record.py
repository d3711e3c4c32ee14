"""Assemble a result record from a run's raw facts: provenance, metrics, cost.

The worker hands over raw facts; this module adds what the harness computes, so every
record (of any backend) is computed the same way. A failed run gets a record too: its
reason, exit status and log tail, never a silent gap in a sweep.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from harness import cost as cost_model
from harness import metrics as metric_fns
from harness import plan as plans
from harness.accelerators import catalog_key, is_unknown
from harness.provenance import code_revision, host, utc_iso
from harness.store import SCHEMA, SCHEMA_VERSION


def run_key(scenario_hash: str, backend: str, accelerator: str, repeat: int) -> str:
    """What makes two runs the same run (resume skips a key that already succeeded)."""
    return hashlib.sha256(f"{scenario_hash}|{backend}|{accelerator}|{repeat}".encode()).hexdigest()[:20]


def accelerator_from(facts: dict[str, Any] | None, probe) -> dict[str, Any]:
    acc = (
        dict(facts["accelerator"])
        if facts
        else {"kind": probe.device_kind, "name": probe.device_name, "count": max(1, probe.device_count)}
    )
    acc.setdefault("catalog_key", catalog_key(acc["kind"], acc.get("name", "")))  # declared ones keep theirs
    if is_unknown(acc["catalog_key"]):
        acc["warning"] = (
            f"{acc.get('name')!r} is not in the accelerator catalog: no MFU and no price "
            "(never a neighbouring device's); add it to harness/accelerators.py and prices"
        )
    return acc


def scenario_section(run) -> dict[str, Any]:
    s = run.scenario
    return {
        "name": s.name,
        "reference": s.reference,
        "file": run.source,
        "hash": run.scenario_hash,
        "variant": run.variant,
        "cell": run.cell,
        "repeat": run.repeat,
        "overrides": run.overrides,
        "profile": run.profile,
        "resolved": s.model_dump(mode="json"),
    }


def build_record(
    run,
    backend: str,
    python: str,
    probe,
    outcome: dict[str, Any],
    *,
    key: str,
    started: float,
    finished: float,
    catalog: dict[str, Any],
    command: list[str],
    task: str = "train",
    plan=None,
) -> dict[str, Any]:
    """`outcome` is {"facts": ...} for a finished worker or {"failure": ...} otherwise."""
    facts = outcome.get("facts")
    failure = outcome.get("failure")
    accelerator = accelerator_from(facts, probe)
    record: dict[str, Any] = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "run_id": uuid.uuid4().hex,
        "run_key": key,
        "task": task,
        "status": "ok",
        "failure": None,
        "scenario": scenario_section(run),
        "backend": {"name": backend, "python": python, "options": run.scenario.backend_options.get(backend, {})},
        "accelerator": accelerator,
        "provenance": {
            **code_revision(),
            **host(),
            "started_at": utc_iso(started),
            "finished_at": utc_iso(finished),
            "command": command,
            "libraries": (facts or {}).get("versions", {}),
            "machine": (facts or {}).get("machine"),
        },
        "plan": plan.model_dump(mode="json") if plan is not None else None,
        "raw": facts,
        "metrics": None,
        "cost": None,
        "sweep": outcome.get("sweep"),  # a serve sweep's point: axis, value, index, the sweep's id
    }
    record["warnings"] = [
        w for w in (accelerator.get("warning"), ((facts or {}).get("machine") or {}).get("warning")) if w
    ]
    if failure is None and facts is not None and plan is not None:
        failure = plan_failure(plan, facts)
    if failure is None and facts is not None:
        fill = _fill_serving_metrics if task == "serve" else _fill_metrics
        failure = fill(record, run, catalog)
    if failure is None and facts is not None and facts.get("trace"):
        from harness.trace import summary

        record["trace"] = summary(facts["trace"], facts["loop"]["steps"])
    if failure is not None:
        record["status"] = "failed"
        record["failure"] = failure
    return record


def plan_failure(plan, facts: dict[str, Any]) -> dict[str, Any] | None:
    """A failure when the backend's account of what it did differs from the plan: its
    figures would describe other work than the scenario's, so none are reported."""
    loop = facts["loop"]
    found = plans.differences(plan, loop["steps"], loop.get("window"), facts.get("done"))
    if not found:
        return None
    shown = "; ".join(found[:6]) + (f"; and {len(found) - 6} more" if len(found) > 6 else "")
    return {"kind": "plan_mismatch", "reason": f"the backend did not execute the plan: {shown}", "differences": found}


def flops_model(scenario, model_facts: dict[str, Any]) -> "metric_fns.FlopsModel":
    """The FLOPs convention's inputs: the architecture the backend reports having built
    (the scenario's when it reports none) and the LoRA weights it really trains."""
    train = scenario.train
    lora = train.method == "lora"
    arch = model_facts.get("architecture") or scenario.model.architecture()
    return metric_fns.FlopsModel(
        arch,
        lora=lora,
        adapter_params=model_facts["num_trainable_params"] if lora else 0,
        checkpointing=train.gradient_checkpointing,
    )


def _fill_metrics(record: dict[str, Any], run, catalog: dict[str, Any]) -> dict[str, Any] | None:
    raw, accelerator = record["raw"], record["accelerator"]
    bad = metric_fns.first_non_finite_loss(raw)
    if bad is not None:
        step, value = bad
        return {
            "kind": "non_finite_loss",
            "reason": f"loss became {value} at step {step}: the run computed something wrong "
            "(learning rate, precision, masking); its speed is not reported",
        }
    record["metrics"] = metric_fns.training_metrics(raw, accelerator, flops_model(run.scenario, raw["model"]))
    price = cost_model.price_for(accelerator["catalog_key"], run.scenario.cost, catalog)
    record["cost"] = cost_model.training_cost(record["metrics"], accelerator.get("count", 1), price)
    return None


def _fill_serving_metrics(record: dict[str, Any], run, catalog: dict[str, Any]) -> dict[str, Any] | None:
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
    if search is not None and record["cost"] is not None:
        # $ at the SLO only where a rate met it: a price at a load that misses it is no answer.
        found = search["max_rate_req_s"]
        record["cost"]["basis"] = (
            f"at {found:g} req/s, the highest request rate meeting the SLO"
            if found is not None
            else "no rate met the SLO: no $ at the SLO"
        )
        if found is None:
            record["cost"]["usd_per_1m_output_tokens"] = None
    return None
