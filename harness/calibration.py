"""The projection's calibration: measured / bound where a measurement of the same
configuration exists (issue 37; docs/measurements.md, "Calibration").

A roofline bound (harness/projection.py) is a lower bound on step time; what a real
step takes is some fraction of it. That fraction is known only where a measurement and
the same configuration's bound meet: a published TPU training measurement re-projected
through a bench backend at the same model, batch, sequence and slice, or a GPU run whose
compiled step the device suite also bounded (benchmarks/gpu_calibration.py).

Each published entry carries its full configuration and its source. Its bound is never
typed in: it is read from the projection record `bench plan --compile-for` wrote for that
configuration, committed beside this table (benchmarks/calibration/, each file's
provenance says the command, the compile host and the library versions). An entry whose
record is missing, or whose record does not have the entry's configuration, has no
ratio. Standard library only (the core imports no framework).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PROJECTIONS = ROOT / "benchmarks" / "calibration"


@dataclass(frozen=True)
class PublishedMeasurement:
    source: str
    catalog_key: str
    slice: str
    model: str  # bench's preset of the same architecture
    method: str  # full / lora
    global_batch: int
    seq_len: int
    measured_step_s: float
    measured_tokens_per_s_per_chip: float
    measured_tflops_per_chip: float | None  # the publisher's own count
    stack: str = "MaxText"  # the publisher's training stack (what its ratio says as much about as the chip)
    # The projection record of the same configuration (a file in PROJECTIONS), or None.
    projection: str | None = None
    # What the publisher's run does that bench's compiled step does not (or the reverse).
    differences: str = ""

    @cached_property
    def projected(self) -> dict[str, Any] | None:
        """The committed projection record, checked against this entry's configuration;
        None without one."""
        if not self.projection:
            return None
        path = PROJECTIONS / self.projection
        if not path.exists():
            return None
        record = json.loads(path.read_text())
        mismatch = configuration_mismatch(self, record)
        if mismatch:
            raise ValueError(f"{path}: {mismatch}")
        return record

    @property
    def bound_step_s(self) -> float | None:
        """bench's roofline bound of the step: per program, runs per step x the largest of
        its compute, HBM and collectives terms (harness/projection.py), summed. Taken from
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
        """The bound's tokens per second per chip (every token of the publisher's
        synthetic rows is real: its padded and real counts are one)."""
        step = self.bound_step_s
        if not step:
            return None
        return self.global_batch * self.seq_len / self.projected["slice"]["chips"] / step

    @property
    def measured_over_bound(self) -> float | None:
        bound = self.bound_tokens_per_s_per_chip
        return self.measured_tokens_per_s_per_chip / bound if bound else None


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


MAXTEXT_DIFFERENCES = (
    "MaxText runs 3 rows per chip in one forward pass, bench 1 row x 3 passes (3 rows in one pass need "
    "32.91 GiB of temporaries per chip here, v6e allows 31.25); MaxText's remat policy 'custom' keeps the q/k/v/"
    "out projections and layer inputs (offloaded to host memory), bench recomputes each decoder layer whole; "
    "MaxText's splash blocks are 2,048 tokens, bench's 512; its XLA flags (collective overlap, sparse-core "
    "all-reduce offload) are not set"
)

PUBLISHED: tuple[PublishedMeasurement, ...] = (
    PublishedMeasurement(
        source="github.com/AI-Hypercomputer/tpu-recipes training/trillium/Llama3.1-8B-MaxText/v6e-8 (MaxText "
        "tpu-recipes-v0.1.4, JAX 0.6.1, llama3_1_8b_8192_no_collective_matmul): 'completed step: 14, seconds: "
        "3.443, TFLOP/s/device: 413.433, Tokens/s/device: 7138.890, total_weights: 196608'",
        catalog_key="tpu-v6e",
        slice="tpu-v6e-8",
        model="llama-3.1-8b",
        method="full",
        global_batch=24,  # per_device_batch_size 3 x 8 chips (total_weights 196,608 = 24 x 8,192)
        seq_len=8192,
        measured_step_s=3.443,
        measured_tokens_per_s_per_chip=7138.89,
        measured_tflops_per_chip=413.433,
        projection="llama31_8b_v6e-8.projection.json",
        differences=MAXTEXT_DIFFERENCES,
    ),
    PublishedMeasurement(
        source="github.com/AI-Hypercomputer/tpu-recipes training/trillium/Llama3.1-8B-MaxText/v6e-16 (MaxText "
        "tpu-recipes-v0.1.4, JAX 0.6.1, llama3_1_8b_8192_no_collective_matmul): 'completed step: 14, seconds: "
        "3.393, TFLOP/s/device: 419.485, Tokens/s/device: 7243.378, total_weights: 393216'",
        catalog_key="tpu-v6e",
        slice="tpu-v6e-16",
        model="llama-3.1-8b",
        method="full",
        global_batch=48,  # per_device_batch_size 3 x 16 chips (total_weights 393,216 = 48 x 8,192)
        seq_len=8192,
        measured_step_s=3.393,
        measured_tokens_per_s_per_chip=7243.378,
        measured_tflops_per_chip=419.485,
        projection="llama31_8b_v6e-16.projection.json",
        differences=MAXTEXT_DIFFERENCES,
    ),
)


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
        CalibrationPoint(entry.source.split(" (")[0], entry.catalog_key, entry.method, entry.stack, ratio)
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
