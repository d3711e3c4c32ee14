"""The result record as a type: `RunRecord`, frozen, one per run, schema version 2.

`harness.records.record` builds a record from a worker's facts, `harness.records.store` writes and reads
it, and every reader (gate, display, export, report) takes `RunRecord`s and reads typed
fields, never string keys. A task's figures are its own types, declared by the task
(`Task.metrics_type`, `Task.cost_type`: harness/tasks/train/'s `TrainMetrics`, serve's
`ServeMetrics`; a plug-in task without types keeps plain mappings), chosen by the
record's `task` field. This module holds what every record has, and the shared types
(`Stats`, `Price`).

Older records are upgraded explicitly, one version at a time (`MIGRATIONS`), before
validation: schema 1 records (written up to 2026-11-26, every shape from the first
landing on: tests/fixtures/records_history) load, with their figures derived again from
their raw facts by today's definitions and what those facts cannot give named in
`absent` (harness.records.migrations). `raw` (the worker's facts, every step and request) and `plan` stay plain JSON:
they are inputs to the metrics, kept so that a figure can be recomputed, not figures.

Pydantic only: no backend, no ML framework.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA = "bench.result"
SCHEMA_VERSION = 2

# Figures are numbers or absent: NaN and infinities are refused when a record is built
# (the run is stored as failed, naming the figure: harness.records.record.typed) and when one is
# read (an edited or corrupt record is unreadable, and `bench gate` fails on it).
FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
FROZEN_OPEN = ConfigDict(frozen=True, extra="allow")  # environment facts: what the host said


class Stats(BaseModel):
    """A distribution's summary (harness.figures.metrics.summary); seconds where the field says."""

    model_config = FROZEN
    median: float
    p90: float
    p99: float
    mean: float
    stdev: float
    min: float
    max: float
    n: int


class Price(BaseModel):
    """The price a cost was computed at, and where it comes from (harness/figures/prices.yaml)."""

    model_config = FROZEN
    accelerator: str
    usd_per_chip_hour: float
    pricing: str
    source: str
    date: str


class Failure(BaseModel):
    model_config = FROZEN_OPEN
    kind: str
    reason: str
    exit_code: int | None = None
    log_tail: str | None = None


class ScenarioRef(BaseModel):
    """Which scenario, variant and repeat the run was, and the scenario as resolved."""

    model_config = FROZEN
    name: str
    reference: str | None = None
    file: str
    hash: str
    variant: str
    cell: dict[str, Any] = Field(default_factory=dict)
    repeat: int
    overrides: dict[str, Any] = Field(default_factory=dict)
    profile: dict[str, Any] | None = None  # the named profile applied: name, overrides, reduced
    resolved: dict[str, Any]


class BackendRef(BaseModel):
    model_config = FROZEN
    name: str
    python: str
    options: dict[str, Any] = Field(default_factory=dict)


class Accelerator(BaseModel):
    model_config = FROZEN_OPEN
    kind: str
    name: str | None = None
    count: int = 1
    catalog_key: str
    warning: str | None = None


class Provenance(BaseModel):
    model_config = FROZEN_OPEN
    commit: str | None = None
    dirty: bool | None = None
    started_at: str
    finished_at: str
    command: list[str] = Field(default_factory=list)
    libraries: dict[str, Any] = Field(default_factory=dict)


def figure_types(task: str) -> tuple[type[BaseModel] | None, type[BaseModel] | None]:
    """The metrics and cost types a task declares (harness.tasks: each task owns its
    figures). A task not registered here (a plug-in of another install) or one without
    types keeps plain mappings: its records still load."""
    from harness.scenario import task_registry as tasks

    if task not in tasks.names():
        return None, None
    owner = tasks.get(task)
    return owner.metrics_type, owner.cost_type


class RunRecord(BaseModel):
    """One run: what ran, where, on which code, its raw facts, its figures and cost."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    schema_: Literal["bench.result"] = Field(SCHEMA, alias="schema")
    schema_version: Literal[2] = SCHEMA_VERSION
    run_id: str
    run_key: str
    task: str
    status: Literal["ok", "failed"]
    failure: Failure | None = None
    scenario: ScenarioRef
    backend: BackendRef
    accelerator: Accelerator
    provenance: Provenance
    plan: dict[str, Any] | None = None
    raw: dict[str, Any] | None = None  # the worker's facts: inputs of the figures
    metrics: Any = None  # the task's metrics type (its Task.metrics_type)
    cost: Any = None  # the task's cost type (its Task.cost_type)
    sweep: dict[str, Any] | None = None  # a serve sweep's point: axis, value, index, id
    server: dict[str, Any] | None = None  # a served run's server: engine, startup times
    trace: dict[str, Any] | None = None  # a traced run's profiler summary (harness.run.trace)
    warnings: list[str] = Field(default_factory=list)
    # Figure id -> why it is None: a migrated record's figure that the bench which wrote
    # it did not measure ("not measured by bench 6f4a76e (schema 1)"; harness.records.migrations).
    absent: dict[str, str] = Field(default_factory=dict)
    # Where the record was read from (not stored).
    path: str | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _typed_figures(self) -> "RunRecord":
        metrics_type, cost_type = figure_types(self.task)
        if metrics_type is not None and isinstance(self.metrics, dict):
            object.__setattr__(self, "metrics", metrics_type.model_validate(self.metrics))
        if cost_type is not None and isinstance(self.cost, dict):
            object.__setattr__(self, "cost", cost_type.model_validate(self.cost))
        if self.status == "failed" and self.failure is None:
            raise ValueError("a failed record says why: `failure` is missing")
        return self

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        """The stored form (strict JSON types; `path` is not stored). Every field of the
        record is stored; `metrics` and `cost` hold exactly the figures their task computed
        (an optional figure it did not produce, such as `mfu_invalid`, is absent, and reads
        as None), so `training_metrics(record.raw, ...)` recomputes the stored section."""
        out = self.model_dump(mode="json", by_alias=True)
        for section in ("metrics", "cost"):
            value = getattr(self, section)
            if isinstance(value, BaseModel):
                out[section] = value.model_dump(mode="json", exclude_unset=True)
        return out

    def figure(self, metric_id: str) -> Any:
        """A figure by its id: "section.field[.stat]" ("metrics.step_time_s.median",
        "cost.usd_run"); None where the record has no such figure."""
        node: Any = self
        for part in metric_id.split("."):
            if node is None:
                return None
            node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
        return node


# --------------------------------------------------------------------------- migrations
def _v1_to_v2(doc: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 grew fields without a version bump; schema 2 has every field, always.
    - `task`: absent in the earliest schema-1 records, which were all training runs;
    - `plan`, `sweep`, `server`, `trace`, `warnings`: absent before they existed;
    - a serve record's `server` was also kept only in `raw`;
    - `metrics` and `cost`: derived again from `raw` by today's definitions, some of
      which changed within schema 1; what the raw facts cannot give is None and named in
      `absent` (harness.records.migrations)."""
    from harness.records.migrations import refigure

    out = copy.deepcopy(doc)
    out["task"] = out.get("task") or "train"
    for key in ("plan", "sweep", "trace", "failure", "metrics", "cost", "raw"):
        out.setdefault(key, None)
    out.setdefault("warnings", [])
    if "server" not in out:
        out["server"] = (out.get("raw") or {}).get("server") if out["task"] == "serve" else None
    out = refigure(out)  # while it still says which schema wrote it
    out["schema_version"] = 2
    return out


# schema version -> the function that upgrades a record of that version by one version.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


def migrate(doc: dict[str, Any], where: str = "record") -> dict[str, Any]:
    """A stored record's JSON, upgraded to SCHEMA_VERSION; ValueError if it is not one."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"{where}: not a bench result record")
    version = doc.get("schema_version")
    if not isinstance(version, int) or version < 1 or version > SCHEMA_VERSION:
        raise ValueError(
            f"{where}: schema version {version!r} is newer than this bench ({SCHEMA_VERSION}); upgrade bench"
            if isinstance(version, int) and version > SCHEMA_VERSION
            else f"{where}: schema version {version!r} is not one bench knows"
        )
    while version < SCHEMA_VERSION:
        try:
            doc = MIGRATIONS[version](doc)
        except ValueError as exc:
            raise ValueError(f"{where}: schema {version} record: {exc}") from None
        version = doc["schema_version"]
    return doc


def as_record(value: "RunRecord | dict[str, Any]", where: str = "record") -> RunRecord:
    """A RunRecord from a stored record's JSON (migrated) or a RunRecord as it is."""
    if isinstance(value, RunRecord):
        return value
    doc = dict(migrate(value, where))  # a shallow copy: the caller's dict keeps its `_path`
    path = doc.pop("_path", None)
    try:
        record = RunRecord.model_validate(doc)
    except ValueError as exc:
        raise ValueError(f"{where}: not a valid schema-{SCHEMA_VERSION} record: {_first_error(exc)}") from None
    return record.model_copy(update={"path": path}) if path else record


def as_records(values) -> list[RunRecord]:
    return [as_record(v) for v in values]


def _first_error(exc: ValueError) -> str:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        first = errors()[0]
        return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"
    return str(exc)


def declares(task: str, metric_id: str) -> bool:
    """Whether `metric_id` ("metrics.step_time_s.median") names a field the record types
    of `task` declare: report columns and gate metrics are checked against it, so a
    misspelt id fails a test instead of showing "n/a" forever. A task without types of
    its own (plain mappings) declares whatever its records hold."""
    metrics_type, cost_type = figure_types(task)
    section, _, rest = metric_id.partition(".")
    if section in ("metrics", "cost") and {"metrics": metrics_type, "cost": cost_type}[section] is None:
        return True  # a plain mapping: whatever its records hold
    node: Any = {"metrics": metrics_type, "cost": cost_type}.get(section) or RunRecord.model_fields.get(section)
    if node is None or not rest:
        return node is not None
    for part in rest.split("."):
        if _is_mapping(node):
            return True  # a plain mapping's keys are its writer's (server_figures: the server's names)
        model = _model_of(node)
        if model is None or part not in model.model_fields:
            return False
        node = model.model_fields[part].annotation
    return True


def _is_mapping(annotation: Any) -> bool:
    """Whether an annotation is a mapping of open keys (`dict[str, Any] | None`)."""
    import typing

    if typing.get_origin(annotation) is dict or annotation is dict:
        return True
    return any(_is_mapping(arg) for arg in typing.get_args(annotation) if arg is not type(None))


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model in an annotation (`Stats | None` -> Stats), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None
