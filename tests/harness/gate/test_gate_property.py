"""The gate's contract as a property (issue 44): over generated result folders (figures
within and beyond budgets, missing and negative figures, unreadable files, train and serve
records of several configurations, failed requests, failed repeats), `bench gate` exits
non-zero whenever any current figure violates any budget that applies to it or any record
cannot be accounted for, and exits 0 only when every applicable check passed. The oracle
below reads the generated values directly, not the gate's code."""

from __future__ import annotations

import copy
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main

from records import failed_record, make_record, serve_record

SCENARIOS = ("a", "b")
STEP = st.floats(min_value=0.1, max_value=2.0, allow_nan=False)

train_run = st.fixed_dictionaries(
    {
        "task": st.just("train"),
        "scenario": st.sampled_from(SCENARIOS),
        "chips": st.sampled_from((1, 2)),
        "steps": st.lists(STEP, min_size=3, max_size=5),
        # what can be wrong with a run: nothing, it failed, its median is negative, its
        # steady-state figures are missing, its file is cut short
        "fault": st.sampled_from(("none", "none", "none", "failed", "negative", "missing", "unreadable")),
    }
)
serve_run = st.fixed_dictionaries(
    {
        "task": st.just("serve"),
        "scenario": st.sampled_from(SCENARIOS),
        "chips": st.just(1),
        "failed_requests": st.integers(min_value=0, max_value=3),
        "fault": st.sampled_from(("none", "none", "failed", "unreadable")),
    }
)
budget = st.one_of(
    st.fixed_dictionaries(
        {"metric": st.just("step_time_s"), "max": STEP, "scenario": st.sampled_from((None, *SCENARIOS))}
    ),
    st.fixed_dictionaries(
        {"metric": st.just("ttft_s"), "max": st.floats(min_value=0.05, max_value=0.5), "scenario": st.just(None)}
    ),
)


def build(run: dict) -> dict:
    """The record a run of this description writes (or its broken copy)."""
    if run["task"] == "serve":
        record = serve_record(10, failed=run["failed_requests"])
        record["scenario"]["name"] = run["scenario"]
    elif run["fault"] == "failed":
        record = failed_record(name=run["scenario"], chips=run["chips"])
    else:
        record = make_record(run["steps"], name=run["scenario"], chips=run["chips"])
    if run["fault"] == "failed" and run["task"] == "serve":
        record.update(status="failed", failure={"kind": "error", "reason": "crash"}, metrics=None, cost=None)
    if run["fault"] == "negative":
        record["metrics"]["step_time_s"]["median"] = -abs(record["metrics"]["step_time_s"]["median"])
    if run["fault"] == "missing":
        record["metrics"]["step_time_s"] = None
    return record


def applies(b: dict, run: dict) -> bool:
    task = "serve" if b["metric"] == "ttft_s" else "train"
    return task == run["task"] and b["scenario"] in (None, run["scenario"])


def violates(b: dict, run: dict, record: dict) -> bool:
    """Whether this run's own figure breaks budget `b` (a missing or negative one does)."""
    if b["metric"] == "step_time_s":
        stats = record["metrics"]["step_time_s"]
        return stats is None or stats["median"] < 0 or stats["median"] > b["max"]
    stats = record["metrics"]["ttft_s"]
    return stats is None or stats["median"] > b["max"]


def must_fail(runs: list[dict], records: list[dict], budgets: list[dict]) -> bool:
    if any(r["fault"] in ("unreadable", "failed") for r in runs):
        return True
    if any(r["task"] == "serve" and r["failed_requests"] > 0 for r in runs):  # error_rate: {max: 0}
        return True
    for b in budgets:
        if not any(applies(b, r) for r in runs):
            return True  # a budget that checks nothing fails, naming its filter
        if any(applies(b, r) and violates(b, r, rec) for r, rec in zip(runs, records)):
            return True
    return False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    runs=st.lists(st.one_of(train_run, serve_run), min_size=1, max_size=5),
    budgets=st.lists(budget, min_size=1, max_size=3),
)
def test_the_gate_passes_exactly_when_every_applicable_check_passes(tmp_path_factory, runs, budgets):
    folder = tmp_path_factory.mktemp("now")
    records = [build(run) for run in runs]
    for i, (run, record) in enumerate(zip(runs, records)):
        text = json.dumps(record)
        (folder / f"{i}.json").write_text(text[: len(text) // 2] if run["fault"] == "unreadable" else text)
    path = folder.parent / f"{folder.name}-budgets.yaml"
    cleaned = [{k: v for k, v in copy.deepcopy(b).items() if v is not None} for b in budgets]
    path.write_text(json.dumps({"budgets": cleaned}))
    code = main(["gate", str(folder), "--budgets", str(path), "--format", "json"])
    assert code == (1 if must_fail(runs, records, budgets) else 0), (runs, budgets)
