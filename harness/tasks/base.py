"""What a task plug-in provides (harness/tasks/__init__.py registers them).

Defaults fit a task that runs in one worker on the backend's machine and writes one
record per run; a task overrides what differs. Nothing here imports a backend or an ML
framework: a task's worker side imports those itself, inside `execute`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from harness.scenario.gate_metrics import GateMetric


def fmt(value: Any, spec: str = ".3g", unit: str = "") -> str:
    """A figure for the terminal: "-" when missing, never cut."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:{spec}}{unit}"
    return f"{value}{unit}"


@dataclass(frozen=True)
class Column:
    """One report column: a record's figure, by its id (harness.records.result.RunRecord.figure);
    a row shows the median over its runs (or the sum, for counts such as errors). The
    header is only what is printed: report and plots look columns up by id."""

    id: str
    header: str
    spec: str
    compiles: bool = False  # "n/a (eager)" where the backend compiles nothing
    over_runs: Literal["median", "sum"] = "median"

    def value(self, record) -> Any:
        return record.figure(self.id)


@dataclass(frozen=True)
class TaskSection:
    """A top-level scenario section a task owns: harness.scenario.spec.Scenario validates a
    scenario's `<name>:` with `model` (a harness.scenario.sections.Section), and refuses a bad
    field naming `<name>.<field>`."""

    name: str
    model: type
    # When a scenario leaves it out: "defaults" (there, with the model's defaults: the
    # train section), "null" (None, dumped as null: serve, as every scenario hash since
    # the first version has it), "absent" (None, not dumped: a plug-in's section changes
    # no other scenario's hash).
    when_absent: Literal["defaults", "null", "absent"] = "absent"


@dataclass
class Task:
    name: str
    # The scenario sections it owns; the first is the task's own (a scenario without
    # `tasks:` runs every task whose first section it has). Empty: it has no section.
    sections: tuple[TaskSection, ...] = ()
    # The report's layout for this task's records: "comparisons" (rows of whole
    # configurations compared level against level), "serving" (latency rows, SLO
    # plots), or "table" (its columns, one row per configuration).
    report_layout: str = "table"
    report_columns: list[Column] = field(default_factory=list)
    gate_metrics: dict[str, GateMetric] = field(default_factory=dict)
    # Budget metrics that are $ figures: they need a price for the device (checked
    # before any work).
    priced_metrics: tuple[str, ...] = ()
    # Whether the task needs an execution plan on the chosen backend (harness.plan.plan).
    needs_plan: bool = False
    # Its records' figure types (frozen pydantic models: harness.records.result.RunRecord types
    # `metrics` and `cost` with them); None keeps plain mappings.
    metrics_type: type | None = None
    cost_type: type | None = None

    def check_scenario(self, scenario) -> None:
        """Rules across its sections and the core's (a harness.scenario.spec.Scenario, its fields
        validated): raise ValueError("dotted.field: why") to refuse the scenario."""

    # ------------------------------------------------------------------ planning, naming
    def backend_label(self, run, backend: str) -> str:
        """The record's `backend.name` (part of the run key)."""
        return backend

    def accelerator_key(self, scenario, measured: str) -> str:
        """The catalog key its cost is billed at (`measured`: the chosen backend's)."""
        return measured

    def record_keys(self, run, key: str) -> list[str]:
        """The run keys its records will have (resume skips when all are done)."""
        return [key]

    def split(self, run, key: str, outcome: dict[str, Any]) -> list[tuple[Any, str, dict[str, Any]]]:
        """(run, key, outcome) per record the worker's outcome makes."""
        return [(run, key, outcome)]

    def always_rerun(self, plan) -> bool:
        """Whether a run is never skipped as already done."""
        return False

    def launcher(self, info) -> str:
        """How its worker is started (harness/plan/launchers.py), given the backend's info."""
        return "single"

    def traced(self, scenario) -> bool:
        """Whether its worker writes a profiler trace next to the record."""
        return False

    def secondary_part(self, plan, outcome: dict[str, Any]) -> dict[str, Any] | None:
        """This host's part when another host writes the job's record, else None."""
        return None

    # ------------------------------------------------------------------ worker, record
    def job_fields(self, run) -> dict[str, Any]:
        """What its worker needs beyond the scenario and plan (a plug-in's name)."""
        return {}

    def prepare_worker(self, job: dict[str, Any]) -> None:
        """In the worker, before the scenario is read: register the plug-ins it names."""

    def execute(self, job: dict[str, Any], scenario, events, held: list) -> dict[str, Any]:
        """In the worker: do the work, return raw facts (no statistics). Anything that
        must be torn down afterwards (a backend) is appended to `held`."""
        raise NotImplementedError

    def fill(self, record: dict[str, Any], run, plan, catalog: dict[str, Any]) -> dict[str, Any] | None:
        """Fill the record's metrics and cost from its raw facts; a failure, or None."""
        raise NotImplementedError

    # ------------------------------------------------------------------ terminal
    def progress_where(self, run, chosen) -> str:
        return f"on [green]{chosen.name}[/green]"

    def progress_total(self, run) -> int | None:
        return None

    def summary_label(self) -> str:
        """Said after a run's name in the summary table ("" for the usual task)."""
        return f" {self.name}"

    def summary_columns(self) -> tuple[str, ...]:
        """The headers of its rows in the terminal's summary (harness.terminal.display): by
        default its report columns'."""
        return tuple(c.header for c in self.report_columns)

    def summary_values(self, record) -> dict[str, str]:
        """Its figures for its summary columns (harness.terminal.display), by column, from a
        finished record (a RunRecord); by default its report columns' figures."""
        return {c.header: fmt(c.value(record), c.spec) for c in self.report_columns}

    def show(self, record):
        """`bench show`'s table for one successful record (a RunRecord; a rich renderable)."""
        from rich.pretty import Pretty

        return Pretty(record.metrics)
