"""The scenario spec: what to measure, independent of the backend that measures it.

A scenario is YAML turned into typed, frozen pydantic models; unknown keys are errors.
The same file runs on every backend: backend-specific knobs live in `backend_options`,
validated by that backend's own config model (see `harness.run.registry`).

This core holds what every task shares (harness.scenario.sections; the limits in
harness.scenario.limits). Each task's own sections (`train:`, `serve:`, a plug-in's) belong to
the task (harness/tasks/<name>/spec.py): `Scenario` asks the task registry for them
when it validates, and imports no task module.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails

from harness.scenario.limits import MAX_RUNS, MAX_SECONDS
from harness.scenario.sections import (  # noqa: F401 - Section, PriceOverride: their usual import path
    Budget,
    CostSpec,
    DataSpec,
    ModelSpec,
    ParallelSpec,
    PriceOverride,
    Section,
    SequenceSpec,
    WorkloadSpec,
)


def task_sections() -> dict[str, Any]:
    """Every registered task's scenario sections, by section name: (the owning task's
    name, its harness.tasks.base.TaskSection)."""
    from harness.scenario import task_registry as tasks  # the registry; it loads the registered tasks by name

    return {section.name: (task.name, section) for task in tasks.loaded() for section in task.sections}


class Scenario(Section):
    # Task sections (`train:`, `serve:`, ...) are kept as extra fields, each validated by
    # its task's model in `_task_sections`; any other unknown key is refused there.
    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    # It names the record files and report rows: one printable word or phrase.
    name: str = Field(min_length=1, max_length=200)
    description: str = ""
    # Which public write-up this reproduces (W1..W5 in reference-workloads.md).
    reference: str | None = None
    backend: str | None = None
    model: ModelSpec = ModelSpec()
    data: DataSpec = DataSpec()
    sequence: SequenceSpec = SequenceSpec()
    parallel: ParallelSpec = ParallelSpec()
    # What to run (registered tasks: train, serve, plug-ins). Default: every task whose
    # section the scenario has (train's is always there). Each task writes its own record.
    tasks: tuple[str, ...] | None = None
    cost: CostSpec = CostSpec()
    workload: WorkloadSpec | None = None
    budgets: tuple[Budget, ...] = ()
    repeats: int = Field(1, gt=0, le=MAX_RUNS)
    # Per-run time limit for the worker process; None = no limit.
    run_timeout_s: float | None = Field(3600.0, gt=0, le=MAX_SECONDS)
    # Per-backend knobs, validated by the named backend's own config model.
    backend_options: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # A sweep over dotted keys: one run per combination of values.
    matrix: dict[str, tuple[Any, ...]] = Field(default_factory=dict)
    # Named sets of dotted overrides for a device kind (`cpu`, `cuda`, `tpu`): how a run
    # is fitted to a smaller machine. Applied explicitly and stated in every record.
    profiles: dict[str, dict[str, Any]] = Field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        """A task section the scenario leaves out (`scenario.serve`) reads as None."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if not name.startswith("_") and name in task_sections():
                return None
            raise

    @model_validator(mode="wrap")
    @classmethod
    def _task_sections(cls, data: Any, handler) -> "Scenario":
        """Each task section validated by its task's model, its errors under its name
        (`train.global_batch`); a key neither a field nor a section: "unknown key"."""
        if not isinstance(data, dict):
            return handler(data)
        sections = task_sections()
        core = {key: value for key, value in data.items() if key in cls.model_fields}
        errors = [_unknown(key, value) for key, value in data.items() if key not in core and key not in sections]
        for name, (_, section) in sections.items():
            errors += _validate_section(core, name, section, data)
        try:
            scenario = handler(core)  # also when a section failed: the first error is reported
        except ValidationError as exc:
            # Rules across the whole scenario (no location) hold only once every field is
            # valid, as pydantic runs them: a bad section field is the error to report.
            errors = [e for e in exc.errors() if e["loc"] or not errors] + errors
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, [_details(e) for e in _ordered(errors)])
        scenario._check_tasks()
        return scenario

    def _check_tasks(self) -> None:
        from harness.scenario import task_registry as tasks

        for name in self.tasks or ():
            owned = tasks.get(name).sections
            if owned and getattr(self, owned[0].name) is None:
                raise ValueError(f"tasks: {name} needs a {owned[0].name} section")
        for task in tasks.loaded():
            task.check_scenario(self)

    @field_validator("tasks")
    @classmethod
    def _known_tasks(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        from harness.scenario import task_registry as tasks  # the registry only: no task module is imported

        unknown = [name for name in value or () if name not in tasks.names()]
        if unknown:
            raise ValueError(f"unknown task {unknown[0]!r} (known: {', '.join(tasks.names())})")
        return value

    @model_validator(mode="after")
    def _sequence_fits_model(self) -> "Scenario":
        max_pos = self.model.architecture().get("max_position_embeddings")
        if max_pos and self.sequence.max_length > max_pos:
            raise ValueError(
                f"sequence.max_length: {self.sequence.max_length} exceeds the model's max_position_embeddings {max_pos}"
            )
        cells = 1
        for key, values in self.matrix.items():
            if not values:
                raise ValueError(f"matrix.{key}: needs at least one value")
            cells *= len(values)
        if cells * self.repeats > MAX_RUNS:
            raise ValueError(f"matrix: {cells} cells x {self.repeats} repeats exceeds {MAX_RUNS} runs")
        return self


def _validate_section(core: dict[str, Any], name: str, section, data: dict[str, Any]) -> list[dict[str, Any]]:
    """Put section `name`, validated, in `core` (or its default); its errors, located."""
    if name not in data or (data[name] is None and section.when_absent != "defaults"):
        if section.when_absent != "absent":
            core[name] = section.model() if section.when_absent == "defaults" else None
        return []
    try:
        core[name] = section.model.model_validate(data[name])
    except ValidationError as exc:
        return [{**e, "loc": (name, *e["loc"])} for e in exc.errors()]
    return []


def _unknown(key: Any, value: Any) -> dict[str, Any]:
    return {"type": "extra_forbidden", "loc": (key,), "input": value}


# Errors in the order the fields were declared before tasks owned their sections:
# model, data, sequence, then the task sections, then the rest; unknown keys last.
_FIRST_FIELDS = ("name", "description", "reference", "backend", "model", "data", "sequence")


def _ordered(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    fields = list(Scenario.model_fields)

    def rank(error: dict[str, Any]) -> float:
        loc = error["loc"]
        if not loc:  # the scenario as a whole
            return -1
        if error["type"] == "extra_forbidden" and len(loc) == 1:
            return float("inf")
        if loc[0] in _FIRST_FIELDS:
            return _FIRST_FIELDS.index(loc[0])
        return 100 + fields.index(loc[0]) if loc[0] in fields else 50  # 50: a task section

    return sorted(errors, key=rank)


def _details(error: dict[str, Any]) -> InitErrorDetails:
    """A collected error, re-raised as it was (type, location, input, context)."""
    details = {"type": error["type"], "loc": tuple(error["loc"]), "input": error["input"]}
    if error.get("ctx"):
        details["ctx"] = error["ctx"]
    return InitErrorDetails(**details)


def tasks_of(scenario: Scenario) -> tuple[str, ...]:
    """The tasks a scenario runs: its `tasks:`, else every task whose own (first) section
    it has, in registration order (train, then serve where a serve section is given)."""
    if scenario.tasks is not None:
        return tuple(dict.fromkeys(scenario.tasks))
    from harness.scenario import task_registry as tasks

    return tuple(t.name for t in tasks.loaded() if t.sections and getattr(scenario, t.sections[0].name) is not None)
