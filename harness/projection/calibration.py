"""The projection's calibration: measured / bound where a measurement of the same
configuration exists (issues 37 and 43; docs/measurements/projections-and-calibration.md, "Calibration").

A roofline bound (harness/projection/projection.py) is a lower bound on step time; what a real
step takes is some fraction of it. That fraction is known only where a measurement and
the same configuration's bound meet: a published TPU training measurement re-projected
through a bench backend at the same model, method, batch, sequence and slice, or a GPU
run whose compiled step the device suite also bounded (benchmarks/gpu_calibration.py).

The points are package data, shipped with bench (harness/projection/calibration_points/, read with
importlib.resources, so a non-editable install has them): `published.json` holds each
point's full configuration, its source (repository, path and commit), the publisher's
log line, its stack, its slicing (and whether that is ambiguous) and what it does that
bench's compiled step does not. Its bound is never typed in: it is read from the
projection record `bench plan --compile-for` wrote for that configuration, in the same
folder (each file's provenance says the command, the compile host and the library
versions). An entry whose record is missing has no ratio; one whose record does not have
the entry's configuration is refused. Standard library only (the core imports no
framework).

Applied by method class (`method_class`: adapter = LoRA, or full): the calibrated end of
a projection's range is the lowest measured / bound of its class, or of all points where
its class has none (`calibrated_low`), never the first entry of a generation.
"""

from __future__ import annotations

import json
from dataclasses import MISSING, dataclass, fields
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The folder of the points and their projection records, inside the installed package.
PROJECTIONS: Any = resources.files("harness.projection") / "calibration_points"
TABLE = "published.json"


@dataclass(frozen=True)
class PublishedMeasurement:
    id: str
    source: dict[str, str]  # repository, path, commit
    log_line: str  # the publisher's own line, the figures below transcribed from it
    stack: str  # the publisher's training stack (its ratio says as much about it as about the chip)
    stack_version: str
    slicing: str  # single slice or several, as the source states it
    provenance_ambiguous: bool  # the slicing (or the run) cannot be told from the sources
    catalog_key: str
    slice: str
    model: str  # bench's preset of the same architecture
    method: str  # full / lora
    global_batch: int
    global_batch_basis: str
    seq_len: int
    measured_step_s: float
    measured_tokens_per_s_per_chip: float
    measured_tflops_per_chip: float | None  # the publisher's own count
    # The projection record of the same configuration (a file beside the table), or None.
    projection: str | None = None
    # What the publisher's run does that bench's compiled step does not (or the reverse).
    differences: str = ""
    # What cannot be told, short, where provenance_ambiguous (the label says it).
    ambiguity: str = "single or multi-slice"

    @property
    def label(self) -> str:
        """Where the point comes from, short: repository, folder, commit; its ambiguity said."""
        folder = self.source["path"].rsplit("/", 1)[0]
        said = f" (provenance ambiguous: {self.ambiguity})" if self.provenance_ambiguous else ""
        return f"{self.source['repository']} {folder}@{self.source['commit'][:8]}{said}"

    @cached_property
    def projected(self) -> dict[str, Any] | None:
        """The committed projection record, checked against this entry's configuration;
        None without one."""
        if not self.projection:
            return None
        path = PROJECTIONS / self.projection
        if not path.is_file():
            return None
        record = json.loads(path.read_text())
        mismatch = configuration_mismatch(self, record)
        if mismatch:
            raise ValueError(f"{path}: {mismatch}")
        return record

    @property
    def bound_step_s(self) -> float | None:
        """bench's roofline bound of the step: per program, runs per step x the largest of
        its compute, HBM and collectives terms (harness/projection/projection.py), summed. Taken from
        the terms even where bench's fit says no: the fit judges bench's execution of the
        configuration (its memory plan), the bound the work the compiled step does."""
        record = self.projected
        if not record:
            return None
        (shape,) = record["shapes"]
        if not shape["terms"]:
            return None
        terms = [(t["compute_s"], t["hbm_s"], t["collectives_s"]) for t in shape["terms"]]
        runs = [t["runs_per_step"] for t in shape["terms"]]
        return sum(n * max(v for v in seconds if v is not None) for n, seconds in zip(runs, terms))

    @property
    def bound_tokens_per_s_per_chip(self) -> float | None:
        """The bound's tokens per second per chip: the rows x sequence of the publisher's
        step, the tokens its own figure counts (a synthetic row's every token is real;
        LitGPT's rows are padded to the longest sample, and its figure counts them so)."""
        step = self.bound_step_s
        if not step:
            return None
        return self.global_batch * self.seq_len / self.projected["slice"]["chips"] / step

    @property
    def measured_over_bound(self) -> float | None:
        bound = self.bound_tokens_per_s_per_chip
        return self.measured_tokens_per_s_per_chip / bound if bound else None


def load_published(folder: Any = None) -> tuple[PublishedMeasurement, ...]:
    """The points of `published.json` in `folder` (the package's by default); an entry
    with a field missing or unknown is refused, naming the file, the entry and the field."""
    path = (PROJECTIONS if folder is None else folder) / TABLE
    names = {f.name for f in fields(PublishedMeasurement)}
    required = {f.name for f in fields(PublishedMeasurement) if f.default is MISSING}
    out = []
    for i, entry in enumerate(json.loads(path.read_text())["points"]):
        unknown = sorted(set(entry) - names)
        missing = sorted(required - set(entry))
        if unknown or missing:
            field = (unknown or missing)[0]
            raise ValueError(f"{path}: points[{i}].{field}: {'unknown field' if unknown else 'missing'}")
        out.append(PublishedMeasurement(**entry))
    return tuple(out)


def configuration_mismatch(entry: PublishedMeasurement, record: dict[str, Any]) -> str | None:
    """Which field of a projection record differs from the published configuration
    (slice, model, method, global batch, sequence), or None."""
    resolved = record["scenario"]["resolved"]
    found = {
        "slice.name": (record["slice"]["name"], entry.slice),
        "model.preset": (resolved["model"]["preset"], entry.model),
        "train.method": (resolved["train"]["method"], entry.method),
        "train.global_batch": (resolved["train"]["global_batch"], entry.global_batch),
        "shapes.seq_len": ([s["seq_len"] for s in record["shapes"]], [entry.seq_len]),
    }
    for field, (have, want) in found.items():
        if have != want:
            return f"{field} is {have!r}, the published run's is {want!r}"
    return None


PUBLISHED: tuple[PublishedMeasurement, ...] = load_published()


def method_class(method: str) -> str:
    """A train method's calibration class: `adapter` (LoRA: frozen base, small trained
    matrices) or `full`. The class matters as much as the chip: an adapter step moves the
    frozen weights for little compute, and public LoRA ports sit far below their bound."""
    return "adapter" if method == "lora" else "full"


@dataclass(frozen=True)
class CalibrationPoint:
    """One measured / bound: where it was measured (its source, short), on which
    generation, of which method and stack."""

    source: str
    catalog_key: str
    method: str
    stack: str
    ratio: float

    @property
    def label(self) -> str:
        return f"{self.source} ({self.catalog_key}, {self.method}, {self.stack}): {self.ratio:.3g}"


@dataclass(frozen=True)
class CalibratedLow:
    """The lower end of a projection's range: the lowest measured / bound among the
    points of the projection's method class, or of all points where that class has none
    (`same_class` False, and the sentence says so)."""

    ratio: float
    point: CalibrationPoint
    method_class: str
    same_class: bool
    pool: tuple[CalibrationPoint, ...]  # the points the lowest was taken from

    def note(self) -> str:
        basis = (
            f"the lowest measured / bound of the {self.method_class} points"
            if self.same_class
            else f"no {self.method_class} point is calibrated, so the lowest measured / bound of all points"
        )
        return f"{basis}: {self.point.label}; points: {'; '.join(p.label for p in self.pool)}"


def published_points() -> list[CalibrationPoint]:
    """The published measurements that have a bound, as calibration points."""
    return [
        CalibrationPoint(entry.label, entry.catalog_key, entry.method, entry.stack, ratio)
        for entry in PUBLISHED
        if (ratio := entry.measured_over_bound) is not None
    ]


def calibrated_low(method: str, points: list[CalibrationPoint] | None = None) -> CalibratedLow | None:
    """The lowest measured / bound for a projection of `method` (module doc); None where
    no point is calibrated at all."""
    points = published_points() if points is None else list(points)
    if not points:
        return None
    wanted = method_class(method)
    same = [p for p in points if method_class(p.method) == wanted]
    pool = same or points
    lowest = min(pool, key=lambda p: p.ratio)
    return CalibratedLow(lowest.ratio, lowest, wanted, bool(same), tuple(pool))


def method_of(projection) -> str:
    """The projection's train method (its calibration class), refused where the record lacks it."""
    try:
        return projection.scenario["resolved"]["train"]["method"]
    except (KeyError, TypeError):
        raise ValueError(
            f"projection {projection.scenario.get('name')}: scenario.resolved.train.method missing"
        ) from None


def calibrated_fine_tune_usd(ft, ratio: float) -> float | None:
    """The whole fine-tune's $ with every step at the calibrated rate (bound / ratio).
    Only a time that is steps alone scales so (a TPU projection: setup not projected,
    compiles apart); any other is not scaled (None)."""
    if ft is None or ft.usd is None or ft.compile_in_time or ft.setup_s is not None:
        return None
    return ft.usd / ratio
