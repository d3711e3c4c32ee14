"""Assemble a result record from a run's raw facts: provenance, metrics, cost.

The worker hands over raw facts; this module adds what every record has (identity,
provenance, status) and asks the run's task (harness.tasks) for its metrics and cost,
so every record of a task, of any backend, is computed the same way. A failed run gets
a record too: its reason, exit status and log tail, never a silent gap in a sweep.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from harness.figures.accelerators import catalog_key, is_unknown
from harness.records.failure_text import explained
from harness.records.provenance import code_revision, host, utc_iso
from harness.records.result import SCHEMA, SCHEMA_VERSION, RunRecord, as_record
from harness.scenario import task_registry as tasks


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
            "(never a neighbouring device's); add it to harness/figures/accelerators.py and prices"
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
) -> RunRecord:
    """`outcome` is {"facts": ...} for a finished worker or {"failure": ...} otherwise.
    The task fills the figures into the JSON form; the record comes back typed."""
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
        "server": None,
        "trace": None,
    }
    record["warnings"] = [
        w for w in (accelerator.get("warning"), ((facts or {}).get("machine") or {}).get("warning")) if w
    ]
    if failure is None and facts is not None:
        failure = tasks.get(task).fill(record, run, plan, catalog)
    if failure is not None:
        record["status"] = "failed"
        record["failure"] = {**failure, "reason": explained(failure["reason"])}
    return typed(record)


def typed(record: dict[str, Any]) -> RunRecord:
    """The record as a RunRecord. A figure that is not a finite number (NaN, infinity)
    fails the run, naming the figure: a record never stores one for a reader to trust.
    Other figures that do not fit their type are a bench bug, but the run is not lost to
    it either: it is stored as failed, raw facts kept, saying why."""
    try:
        return as_record(record)
    except ValueError as exc:
        failed = {**record, "status": "failed", "metrics": None, "cost": None, "trace": None}
        why = (
            "a figure is not a finite number (NaN or infinity)"
            if "finite number" in str(exc)
            else "bench bug, figures do not fit the record type"
        )
        failed["failure"] = {"kind": "error", "reason": f"{why}: {exc}"}
        return as_record(failed)
