"""The train task: a fine-tune on the chosen backend, its steps timed by the harness.

The worker builds the backend from the plan, feeds it the scenario's batches and hands
back raw facts; the parent checks them against the plan, then computes the training
metrics (harness.figures.metrics) and cost. Records compare whole configurations in the report.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from pydantic import BaseModel
from rich.table import Table

from harness.figures import cost as cost_model
from harness.figures import metrics as metric_fns
from harness.plan import hosts
from harness.plan import plan as plans
from harness.records.result import FROZEN, Price, RunRecord
from harness.scenario.gate_metrics import GateMetric, measured_steps
from harness.tasks.base import Column, Task, TaskSection, fmt
from harness.tasks.train.figures import TrainMetrics
from harness.tasks.train.spec import TraceSpec, TrainSpec


# ------------------------------------------------------------------ the record's figures
class TrainCost(BaseModel):
    model_config = FROZEN
    usd_run: float | None = None
    usd_setup: float | None = None
    usd_warmup: float | None = None
    usd_steady_state: float | None = None
    usd_per_1m_tokens_real: float | None = None
    usd_per_1m_tokens_real_effective: float | None = None
    usd_per_1m_tokens_real_window: float | None = None  # at the unsynced window's tokens/s
    chips: int
    price: Price


REPORT_COLUMNS: list[Column] = [
    # The headline: the unsynced window (one device sync at its end), what a job gets.
    Column("metrics.window_tokens_per_s_real", "tok/s real (window, 1 sync)", ".4g"),
    Column("cost.usd_per_1m_tokens_real_window", "$/1M real tok (window)", ".4g"),
    Column("metrics.step_time_s.median", "step median (s)", ".4g"),
    Column("metrics.step_time_s.p90", "step p90 (s)", ".4g"),
    Column("metrics.compile_time_s", "compile (s)", ".3g", compiles=True),
    Column("metrics.num_recompiles", "recompiles", ".3g", compiles=True),
    Column("metrics.tokens_per_s_real", "tok/s real (steady)", ".4g"),
    Column("metrics.tokens_per_s_real_effective", "tok/s real effective", ".4g"),
    Column("metrics.tokens_per_s_padded", "tok/s padded", ".4g"),
    Column("metrics.tokens_per_s_real_per_chip", "tok/s real per chip", ".4g"),
    Column("metrics.mfu", "MFU", ".2%"),
    Column("metrics.peak_memory_gib", "peak mem (GiB)", ".3g"),
    Column("cost.usd_per_1m_tokens_real", "$/1M real tok (steady)", ".4g"),
    Column("cost.usd_setup", "$ setup", ".3g"),
    Column("cost.usd_warmup", "$ warm-up (compile)", ".3g"),
    Column("cost.usd_steady_state", "$ steady state", ".3g"),
    Column("cost.usd_run", "$/run total", ".3g"),
]

GATE_METRICS: dict[str, GateMetric] = {
    "step_time_s": GateMetric(
        "lower", "s", "metrics.step_time_s.median", lambda r: [s["time_s"] for s in measured_steps(r)]
    ),
    "step_time_s.p90": GateMetric("lower", "s", "metrics.step_time_s.p90"),
    "tokens_per_s_real": GateMetric(
        "higher",
        "tok/s",
        "metrics.tokens_per_s_real",
        lambda r: [s["tokens_real"] / s["time_s"] for s in measured_steps(r)],
    ),
    "tokens_per_s_padded": GateMetric(
        "higher",
        "tok/s",
        "metrics.tokens_per_s_padded",
        lambda r: [s["tokens_padded"] / s["time_s"] for s in measured_steps(r)],
    ),
    "num_recompiles": GateMetric("lower", "", "metrics.num_recompiles", count=True),
    "num_compiles": GateMetric("lower", "", "metrics.num_compiles", count=True),
    "compile_time_s": GateMetric("lower", "s", "metrics.compile_time_s"),
    "peak_memory_gib": GateMetric("lower", "GiB", "metrics.peak_memory_gib"),
    "mfu": GateMetric("higher", "", "metrics.mfu"),
    "usd_run": GateMetric("lower", "$", "cost.usd_run"),
    "usd_per_1m_tokens_real": GateMetric("lower", "$", "cost.usd_per_1m_tokens_real"),
}


class TrainTask(Task):
    # ------------------------------------------------------------------ planning, naming
    def always_rerun(self, plan) -> bool:
        """A multi-host job (parallel.hosts > 1) is never skipped: each host reads only its
        own results directory, where only host 0 keeps the record, so host 0 would skip
        while the others joined the job and waited for it forever."""
        return plan is not None and plan.hosts > 1

    def launcher(self, info) -> str:
        return info.launcher

    def traced(self, scenario) -> bool:
        return scenario.trace is not None

    def check_scenario(self, scenario) -> None:
        """A trace needs the train task, and measured steps left untraced."""
        from harness.scenario.spec import tasks_of

        trace = scenario.trace
        if trace is None:
            return
        if "train" not in tasks_of(scenario):
            raise ValueError("trace: traces the train task's steps, and this scenario trains nothing")
        measured = scenario.train.measured_steps
        if trace.first + trace.steps >= measured:
            raise ValueError(
                f"trace.steps: steps {trace.first}..{trace.first + trace.steps - 1} of the "
                f"{measured} measured steps would leave none untraced for the statistics "
                "(raise train.steps, or trace fewer)"
            )

    def secondary_part(self, plan, outcome: dict[str, Any]) -> dict[str, Any] | None:
        return hosts.secondary_part(plan, outcome)

    # ------------------------------------------------------------------ worker
    def execute(self, job: dict[str, Any], scenario, events, held: list) -> dict[str, Any]:
        from harness.data.batches import build_batches
        from harness.plan.plan import Plan
        from harness.run import faults
        from harness.run.registry import get, options_for

        started_at = time.time()
        info = get(job["backend"])
        plan = Plan.model_validate(job["plan"])
        injected = faults.for_run(scenario)
        backend = info.load()(
            scenario, plan, options_for(info, scenario), events, trace_dir=job.get("trace_dir"), faults=injected
        )
        held.append(backend)
        events.phase("setup")
        if injected is not None:
            injected.before_setup()
        model = backend.setup()
        setup_s = time.perf_counter() - events.origin
        events.phase("data")
        backend.use_batches(build_batches(scenario, plan.rows_per_forward, plan.data_parallel))
        _check_vocab(backend.batches.tokenizer.vocab_size, model.vocab_size)
        events.phase("steps")
        loop = backend.run()
        facts = {
            "started_at": started_at,
            "setup_s": setup_s,
            "model": asdict(model),
            "data": backend.batches.description,
            "loop": loop.to_json(),
            "memory": asdict(backend.memory()),
            "accelerator": backend.accelerator(),
            "versions": backend.versions(),
            "notes": backend.notes(),
            "extra": backend.extra_facts(),
            "execution": {
                "micro_batch": plan.micro_batch,
                "accumulation": plan.accumulation,
                "micro_batch_how": plan.micro_batch_how,
                **backend.execution(),
            },
            "done": {**backend.done(), "trainable_params": model.num_trainable_params},
            "compile_cache": backend.compile_cache(),
        }
        if scenario.trace is not None:  # read back after the run: no step pays for it
            from harness.run.trace import collect

            facts["trace"] = collect(loop, backend.trace_dir)
        facts["wall_s"] = time.perf_counter() - events.origin
        return facts

    # ------------------------------------------------------------------ record
    def fill(self, record: dict[str, Any], run, plan, catalog: dict[str, Any]) -> dict[str, Any] | None:
        facts = record["raw"]
        failure = plan_failure(plan, facts) if plan is not None else None
        if failure is None:
            failure = _fill_metrics(record, run, catalog)
        if failure is None and facts.get("trace"):
            from harness.run.trace import summary

            record["trace"] = summary(facts["trace"], facts["loop"]["steps"])
        return failure

    # ------------------------------------------------------------------ terminal
    def progress_where(self, run, chosen) -> str:
        probe = chosen.probe
        return f"on [green]{chosen.name}[/green] ({probe.device_kind}: {probe.device_name})"

    def progress_total(self, run) -> int:
        return run.scenario.train.steps

    def summary_label(self) -> str:
        return ""

    def summary_columns(self) -> tuple[str, ...]:
        return ("step med (s)", "p90 (s)", "recomp", "tok/s real", "MFU", "mem (GiB)", "$/run")

    def summary_values(self, record: RunRecord) -> dict[str, str]:
        m, c = record.metrics, record.cost
        if m is None:  # a failed run: no figures (the summary shows "-" for the others)
            return {"MFU": "n/a"}
        step = m.step_time_s
        return {
            "step med (s)": fmt(step.median if step else None, ".4g"),
            "p90 (s)": fmt(step.p90 if step else None, ".4g"),
            "recomp": fmt(m.num_recompiles),
            "tok/s real": fmt(m.tokens_per_s_real, ".4g"),
            "MFU": fmt(m.mfu, ".2%") if m.mfu is not None else "n/a",
            "mem (GiB)": fmt(m.peak_memory_gib, ".3g"),
            "$/run": fmt(c.usd_run if c else None, ".2g"),
        }

    def show(self, record: RunRecord) -> Table:
        from harness.tasks.train.show import metrics_table

        return metrics_table(record)


def _check_vocab(tokenizer_vocab: int, model_vocab: int) -> None:
    if tokenizer_vocab > model_vocab:
        raise ValueError(
            f"the tokenizer has {tokenizer_vocab} tokens but the model's vocabulary is {model_vocab}: "
            "lower data.tokenizer.vocab_size or raise model.arch.vocab_size"
        )


def plan_failure(plan, facts: dict[str, Any]) -> dict[str, Any] | None:
    """A failure when the backend's account of what it did differs from the plan: its
    figures would describe other work than the scenario's, so none are reported."""
    loop = facts["loop"]
    found = plans.differences(plan, loop["steps"], loop.get("window"), facts.get("done"))
    if not found:
        return None
    shown = "; ".join(found[:6]) + (f"; and {len(found) - 6} more" if len(found) > 6 else "")
    return {"kind": "plan_mismatch", "reason": f"the backend did not execute the plan: {shown}", "differences": found}


def flops_model(
    scenario, model_facts: dict[str, Any], execution: dict[str, Any] | None = None
) -> "metric_fns.FlopsModel":
    """The FLOPs convention's inputs: the architecture the backend reports having built
    (the scenario's when it reports none), the LoRA weights it really trains, and
    whether its loss recomputed the LM head (`execution.loss_recompute`)."""
    train = scenario.train
    lora = train.method == "lora"
    arch = model_facts.get("architecture") or scenario.model.architecture()
    return metric_fns.FlopsModel(
        arch,
        lora=lora,
        adapter_params=model_facts["num_trainable_params"] if lora else 0,
        checkpointing=train.gradient_checkpointing,
        head_recompute=bool((execution or {}).get("loss_recompute", False)),
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
    record["metrics"] = metric_fns.training_metrics(
        raw, accelerator, flops_model(run.scenario, raw["model"], raw.get("execution"))
    )
    price = cost_model.price_for(accelerator["catalog_key"], run.scenario.cost, catalog)
    record["cost"] = cost_model.training_cost(record["metrics"], accelerator.get("count", 1), price)
    return None


TASK = TrainTask(
    "train",
    # `trace:` (a profiler trace of measured steps, or none) is dumped as null when
    # absent, as every scenario hash since it existed has it.
    sections=(TaskSection("train", TrainSpec, "defaults"), TaskSection("trace", TraceSpec, "null")),
    report_layout="comparisons",
    report_columns=REPORT_COLUMNS,
    gate_metrics=GATE_METRICS,
    priced_metrics=("usd_run", "usd_per_1m_tokens_real"),
    needs_plan=True,
    metrics_type=TrainMetrics,
    cost_type=TrainCost,
)
