"""The result record as a type: `RunRecord`, frozen, one per run, schema version 2.

`harness.record` builds a record from a worker's facts, `harness.store` writes and reads
it, and every reader (gate, display, export, report) takes `RunRecord`s and reads typed
fields, never string keys. A task's figures are its own type (`TrainMetrics`,
`ServeMetrics`; a plug-in task names its own or keeps a plain mapping), chosen by the
record's `task` field.

Older records are upgraded explicitly, one version at a time (`MIGRATIONS`), before
validation: schema 1 records (written up to 2026-11-26) load, migrate and report as
they did. `raw` (the worker's facts, every step and request) and `plan` stay plain JSON:
they are inputs to the metrics, kept so that a figure can be recomputed, not figures.

Pydantic only: no backend, no ML framework.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA = "bench.result"
SCHEMA_VERSION = 2

_FROZEN = ConfigDict(frozen=True, extra="forbid")
_FROZEN_OPEN = ConfigDict(frozen=True, extra="allow")  # environment facts: what the host said


class Stats(BaseModel):
    """A distribution's summary (harness.metrics.summary); seconds where the field says."""

    model_config = _FROZEN
    median: float
    p90: float
    p99: float
    mean: float
    stdev: float
    min: float
    max: float
    n: int


class TrainMetrics(BaseModel):
    """A training run's figures (harness.metrics.training_metrics; docs: metrics.md)."""

    model_config = _FROZEN
    step_time_s: Stats | None = None
    steady_state: str | None = None
    warmup_time_s: float
    compile_time_s: float
    num_compiles: int
    num_recompiles: int
    recompile_steps: int
    recompile_steps_time_s: float
    num_setup_compiles: int
    compile_cache: Any = None
    tokens_per_s_real: float | None = None
    tokens_per_s_padded: float | None = None
    tokens_per_s_real_per_chip: float | None = None
    tokens_per_s_padded_per_chip: float | None = None
    tokens_per_s_real_effective: float | None = None
    tokens_per_s_padded_effective: float | None = None
    padding_efficiency: float | None = None
    window_tokens_per_s_real: float | None = None
    window_tokens_per_s_padded: float | None = None
    model_flops_per_token: float | None = None
    hardware_flops_per_token: float | None = None
    model_tflops_per_s: float | None = None
    mfu: float | None = None
    hfu: float | None = None
    # Why MFU (HFU) is withheld where it computed above 1 (timings not device-synchronised).
    mfu_invalid: str | None = None
    hfu_invalid: str | None = None
    mfu_convention: str
    hfu_convention: str
    peak_flops_per_chip: float | None = None
    peak_memory_gib: float | None = None
    peak_memory_kind: str | None = None
    measured_steps: int
    measured_time_s: float
    steady_time_s: float | None = None
    tokens_real: int
    tokens_padded: int
    setup_time_s: float | None = None
    run_time_s: float | None = None
    loss_first: float | None = None
    loss_last: float | None = None


class ServeMetrics(BaseModel):
    """A serving run's figures (harness.metrics.serving_metrics; docs: metrics.md)."""

    model_config = _FROZEN
    num_requests: int
    num_completed: int
    num_errors: int
    errors: list[str]
    duration_s: float
    ttft_s: Stats | None = None
    tpot_s: Stats | None = None
    itl_s: Stats | None = None
    e2el_s: Stats | None = None
    output_tokens: int
    prompt_tokens: int
    output_throughput_tok_s: float | None = None
    total_throughput_tok_s: float | None = None
    request_throughput_req_s: float | None = None
    goodput_req_s: float | None = None
    slo: dict[str, Any] = Field(default_factory=dict)
    slo_at_percentile: dict[str, Any] | None = None
    output_tok_s_per_user: float | None = None
    output_tok_s_per_chip: float | None = None
    slo_search: dict[str, Any] | None = None  # an SLO search's probes and answer


class Price(BaseModel):
    """The price a cost was computed at, and where it comes from (harness/prices.yaml)."""

    model_config = _FROZEN
    accelerator: str
    usd_per_chip_hour: float
    pricing: str
    source: str
    date: str


class TrainCost(BaseModel):
    model_config = _FROZEN
    usd_run: float | None = None
    usd_setup: float | None = None
    usd_warmup: float | None = None
    usd_steady_state: float | None = None
    usd_per_1m_tokens_real: float | None = None
    usd_per_1m_tokens_real_effective: float | None = None
    chips: int
    price: Price


class ServeCost(BaseModel):
    model_config = _FROZEN
    usd_per_1m_output_tokens: float | None = None
    usd_benchmark: float | None = None
    chips: int
    price: Price
    basis: str | None = None  # an SLO search's: the rate the $ is at


class Failure(BaseModel):
    model_config = _FROZEN_OPEN
    kind: str
    reason: str
    exit_code: int | None = None
    log_tail: str | None = None


class ScenarioRef(BaseModel):
    """Which scenario, variant and repeat the run was, and the scenario as resolved."""

    model_config = _FROZEN
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
    model_config = _FROZEN
    name: str
    python: str
    options: dict[str, Any] = Field(default_factory=dict)


class Accelerator(BaseModel):
    model_config = _FROZEN_OPEN
    kind: str
    name: str | None = None
    count: int = 1
    catalog_key: str
    warning: str | None = None


class Provenance(BaseModel):
    model_config = _FROZEN_OPEN
    commit: str | None = None
    dirty: bool | None = None
    started_at: str
    finished_at: str
    command: list[str] = Field(default_factory=list)
    libraries: dict[str, Any] = Field(default_factory=dict)


# task name -> (metrics type, cost type); a plug-in task not listed keeps plain mappings.
_TASK_TYPES: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "train": (TrainMetrics, TrainCost),
    "serve": (ServeMetrics, ServeCost),
}


def register_types(task: str, metrics: type[BaseModel], cost: type[BaseModel]) -> None:
    """A plug-in task's own figure types (harness.tasks.base.Task.record_types)."""
    _TASK_TYPES[task] = (metrics, cost)


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
    metrics: Any = None  # the task's metrics type (TrainMetrics, ServeMetrics, ...)
    cost: Any = None  # the task's cost type
    sweep: dict[str, Any] | None = None  # a serve sweep's point: axis, value, index, id
    server: dict[str, Any] | None = None  # a served run's server: engine, startup times
    trace: dict[str, Any] | None = None  # a traced run's profiler summary (harness.trace)
    warnings: list[str] = Field(default_factory=list)
    # Where the record was read from (not stored).
    path: str | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _typed_figures(self) -> "RunRecord":
        metrics_type, cost_type = _TASK_TYPES.get(self.task, (None, None))
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
        """The stored form (strict JSON types; `path` is not stored)."""
        return self.model_dump(mode="json", by_alias=True)

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
    - a serve record's `server` was also kept only in `raw`."""
    out = copy.deepcopy(doc)
    out["task"] = out.get("task") or "train"
    for key in ("plan", "sweep", "trace", "failure", "metrics", "cost", "raw"):
        out.setdefault(key, None)
    out.setdefault("warnings", [])
    if "server" not in out:
        out["server"] = (out.get("raw") or {}).get("server") if out["task"] == "serve" else None
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
        doc = MIGRATIONS[version](doc)
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
    if task not in _TASK_TYPES:
        return True
    metrics_type, cost_type = _TASK_TYPES[task]
    section, _, rest = metric_id.partition(".")
    node: Any = {"metrics": metrics_type, "cost": cost_type}.get(section) or RunRecord.model_fields.get(section)
    if node is None or not rest:
        return node is not None
    for part in rest.split("."):
        model = _model_of(node)
        if model is None or part not in model.model_fields:
            return False
        node = model.model_fields[part].annotation
    return True


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model in an annotation (`Stats | None` -> Stats), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None
