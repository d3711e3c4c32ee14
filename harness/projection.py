"""Projections: figures of their own kind, computed from a model of the work, never measured.

Two kinds, both stored and shown as projected, never mixed into measured rows:

- **On a TPU slice nobody rented** (`bench plan SCENARIO --compile-for tpu-v5e-8`): the
  scenario's train step compiled ahead of time for the slice's topology on this host
  (backends/*/aot.py). Per distinct shape the padding policy gives: whether it fits
  (per-device memory against the chip's HBM), per-device FLOPs and bytes from the
  compiler's cost model, the collectives in the compiled HLO, the compile seconds here,
  and a roofline *lower bound* on step time, max(FLOPs / peak, bytes / HBM bandwidth)
  per program, hence an upper bound on tokens/s per chip and a lower bound on $/1M.
- **The whole fine-tune** (`fine_tune`): a sample of steps says what a step costs; a
  real fine-tune pays setup once, one compile per distinct new shape it meets, and
  every optimizer step of every example x epochs:
  time = setup + shapes x compile seconds per shape + steps x steady step time.

Pure Python and pydantic: no framework is imported here.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import SpecError

SCHEMA = "bench.projection"
SCHEMA_VERSION = 1
SUFFIX = ".projection.json"  # projections live beside records, never read as records

AOT_METHOD = (
    "deviceless ahead-of-time compile for the slice's TPU topology (jax.experimental.topologies, libtpu): "
    "memory from memory_analysis (arguments + outputs - donated + temporaries + code, per device), FLOPs and "
    "bytes accessed from cost_analysis (the compiler's cost model, per device), collectives parsed from the "
    "compiled HLO; step time bound = sum over the step's programs of runs x max(FLOPs / peak bf16 FLOP/s, "
    "bytes accessed / HBM bandwidth): a lower bound, not a measurement"
)
FINE_TUNE_METHOD = (
    "setup + first compile (every program's, for the shapes met first) + new shapes x compile seconds per shape + "
    "optimizer steps x steady step time; steps = ceil(examples x epochs / global batch); shapes = the padded "
    "lengths the padding policy gives over the whole fine-tune's batches (the run's own data order)"
)

FROZEN = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------- TPU slices
@dataclass(frozen=True)
class TpuSlice:
    """A TPU slice as the compiler needs it: its topology and its chips' datasheet."""

    name: str  # tpu-v5e-8
    catalog_key: str  # tpu-v5e
    chips: int
    topology: str  # v5e:2x4
    host_bounds: tuple[int, int, int]  # chips per host, as libtpu lays them out
    hbm_bytes: int
    hbm_bytes_per_s: float
    peak_flops: float

    def to_json(self) -> dict[str, Any]:
        """Every field, in declaration order; host_bounds as a JSON list."""
        return {**asdict(self), "host_bounds": list(self.host_bounds)}


# Chips -> topology: v5e/v6e slices are 2D (8 chips a host), v4/v5p 3D (4 chips a host).
_GRID_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
_GRID_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8"}


def tpu_slice(text: str, source: str = "--compile-for") -> TpuSlice:
    """`tpu-v5e-8`, `v5p-8` or `v5litepod-8` as a TpuSlice; refused, naming the option,
    when the generation has no HBM figures or the chip count no topology here."""
    from harness.accelerators import HBM_BYTES, HBM_BYTES_PER_S, catalog_key, chips_in_slice, peak_flops

    name = text.strip().lower().removeprefix("tpu-")
    try:
        chips = chips_in_slice(name)
    except ValueError:
        raise SpecError(source, text, "expected a TPU slice such as tpu-v5e-8, tpu-v5p-8 or tpu-v6e-8") from None
    key = "tpu-v5e" if "lite" in name else catalog_key("tpu", name.rsplit("-", 1)[0])
    if key not in HBM_BYTES or peak_flops(key) is None:
        known = ", ".join(sorted(HBM_BYTES))
        raise SpecError(source, text, f"no HBM and peak figures for {key} (known: {known})")
    three_d = key in ("tpu-v4", "tpu-v5p")
    grid = (_GRID_3D if three_d else _GRID_2D).get(chips)
    if grid is None:
        sizes = ", ".join(map(str, sorted(_GRID_3D if three_d else _GRID_2D)))
        raise SpecError(source, text, f"{chips} chips: no {key} topology known here (chips: {sizes})")
    generation = key.removeprefix("tpu-")
    dims = [int(d) for d in grid.split("x")] + ([1] if not three_d else [])
    bounds = (min(dims[0], 2), min(dims[1], 2 if three_d else 4), 1)
    return TpuSlice(
        f"tpu-{name}", key, chips, f"{generation}:{grid}", bounds, HBM_BYTES[key], HBM_BYTES_PER_S[key], peak_flops(key)
    )


# --------------------------------------------------------------------------- types
class Collective(BaseModel):
    model_config = FROZEN
    count: int
    bytes: int  # summed result sizes on one device


class Program(BaseModel):
    """One compiled program of the step, per device: `runs_per_step` times per
    optimizer step (a micro-batch's program runs once per accumulation step)."""

    model_config = FROZEN
    name: str
    runs_per_step: int
    compile_s: float
    memory_bytes: int  # at its peak, per device (or what the compiler said it needed)
    out_of_memory: str | None = None  # the compiler's own words when it did not fit
    flops: float | None = None
    bytes_accessed: float | None = None
    collectives: dict[str, Collective] = Field(default_factory=dict)
    memory: dict[str, int] = Field(default_factory=dict)  # memory_analysis' parts

    def bound_s(self, peak_flops: float, hbm_bytes_per_s: float) -> float | None:
        """Roofline lower bound of one run: max(FLOPs / peak, bytes / bandwidth)."""
        if self.flops is None or self.bytes_accessed is None:
            return None
        return max(self.flops / peak_flops, self.bytes_accessed / hbm_bytes_per_s)


class ShapeProjection(BaseModel):
    """One distinct shape of the step (rows x padded length per forward pass)."""

    model_config = FROZEN
    seq_len: int
    rows_per_forward: int
    accumulation: int
    programs: list[Program]
    fits: bool
    memory_bytes_per_device: int  # the largest program's
    hbm_bytes_per_device: int
    compile_s: float  # this shape's programs, on this host
    flops_per_device_per_forward: float | None  # the micro-batch program, compiler's count
    bench_flops_per_device_per_forward: float | None  # harness.metrics' count, same tokens
    step_time_bound_s: float | None  # per optimizer step
    tokens_per_s_per_chip_bound: float | None  # padded tokens (every one real at this shape)
    usd_per_1m_tokens_bound: float | None


class FineTune(BaseModel):
    """A whole fine-tune, projected (FINE_TUNE_METHOD)."""

    model_config = FROZEN
    examples: int
    epochs: int
    steps: int
    shapes: list[int]  # the distinct padded lengths the run meets, in the order met
    compiles: int  # one per distinct shape
    setup_s: float
    first_compile_s: float  # the first steps' compiles: every program once, for the shapes met first
    shapes_compiled_first: int  # the shapes those first compiles covered
    compile_s_per_shape: float  # each shape met after them
    step_time_s: float
    time_s: float
    usd: float | None = None
    basis: str  # where setup, compile and step time come from
    method: str = FINE_TUNE_METHOD


class ProjectionRecord(BaseModel):
    """A projection, stored as `<name>.projection.json` beside the records."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    schema_: Literal["bench.projection"] = Field(SCHEMA, alias="schema")
    schema_version: Literal[1] = SCHEMA_VERSION
    kind: Literal["tpu_aot"] = "tpu_aot"
    method: str = AOT_METHOD
    scenario: dict[str, Any]  # name, file, variant, hash, resolved
    backend: str
    slice: dict[str, Any]  # TpuSlice.to_json()
    price: dict[str, Any] | None  # harness.cost.Price.to_json(), or None if the catalog has none
    plan: dict[str, Any]
    shapes: list[ShapeProjection]
    fine_tune: FineTune | None = None
    provenance: dict[str, Any]
    path: str | None = Field(default=None, exclude=True)

    @property
    def fits(self) -> bool:
        return all(s.fits for s in self.shapes)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True)


# --------------------------------------------------------------------------- formulas
def usd_per_1m_tokens(tokens_per_s_per_chip: float | None, usd_per_chip_hour: float | None) -> float | None:
    """$ per 1M tokens at a per-chip rate: every chip is paid for the time 1M take."""
    if not tokens_per_s_per_chip or usd_per_chip_hour is None:
        return None
    return 1e6 / tokens_per_s_per_chip / 3600.0 * usd_per_chip_hour


def shape_projection(
    seq_len: int, plan: dict[str, Any], programs: list[Program], chip: TpuSlice, usd_per_chip_hour, bench_flops
) -> ShapeProjection:
    """A shape's figures from its compiled programs (the first is the micro-batch's)."""
    bounds = [p.bound_s(chip.peak_flops, chip.hbm_bytes_per_s) for p in programs]
    step_bound = None if None in bounds else sum(p.runs_per_step * b for p, b in zip(programs, bounds))
    memory = max(p.memory_bytes for p in programs)
    fits = memory <= chip.hbm_bytes and not any(p.out_of_memory for p in programs)
    tokens = plan["rows_per_step"] * seq_len
    per_chip = tokens / step_bound / plan["devices"] if step_bound else None
    return ShapeProjection(
        seq_len=seq_len,
        rows_per_forward=plan["rows_per_forward"],
        accumulation=plan["accumulation"],
        programs=programs,
        fits=fits,
        memory_bytes_per_device=memory,
        hbm_bytes_per_device=chip.hbm_bytes,
        compile_s=sum(p.compile_s for p in programs),
        flops_per_device_per_forward=programs[0].flops,
        bench_flops_per_device_per_forward=bench_flops,
        step_time_bound_s=step_bound if fits else None,
        tokens_per_s_per_chip_bound=per_chip if fits else None,
        usd_per_1m_tokens_bound=usd_per_1m_tokens(per_chip, usd_per_chip_hour) if fits else None,
    )


def fine_tune_steps(examples: int, epochs: int, global_batch: int) -> int:
    """Optimizer steps of a fine-tune over every example `epochs` times (a last,
    partial batch counts as a step)."""
    return math.ceil(examples * epochs / global_batch)


def fine_tune(
    *,
    examples: int,
    epochs: int,
    steps: int,
    shapes: list[int],
    setup_s: float,
    compile_s_per_shape: float,
    step_time_s: float,
    basis: str,
    chips: int = 1,
    usd_per_chip_hour: float | None = None,
    first_compile_s: float = 0.0,
    shapes_compiled_first: int = 0,
) -> FineTune:
    """The whole fine-tune's time (FINE_TUNE_METHOD) and, at a price, its $. Without a
    first compile measured (a TPU projection), every shape costs compile_s_per_shape."""
    new_shapes = len(shapes) - shapes_compiled_first
    time_s = setup_s + first_compile_s + new_shapes * compile_s_per_shape + steps * step_time_s
    return FineTune(
        examples=examples,
        epochs=epochs,
        steps=steps,
        shapes=shapes,
        compiles=len(shapes),
        setup_s=setup_s,
        first_compile_s=first_compile_s,
        shapes_compiled_first=shapes_compiled_first,
        compile_s_per_shape=compile_s_per_shape,
        step_time_s=step_time_s,
        time_s=time_s,
        usd=chips * time_s / 3600.0 * usd_per_chip_hour if usd_per_chip_hour is not None else None,
        basis=basis,
    )


def projection_filename(record: ProjectionRecord) -> str:
    variant = re.sub(r"[^A-Za-z0-9_.=-]+", "-", record.scenario.get("variant", "default"))
    return f"{record.scenario['name']}__{variant}__{record.backend}__{record.slice['name']}{SUFFIX}"


# --------------------------------------------------------------------------- store
def load_projection(path) -> ProjectionRecord:
    """A stored projection; ValueError (naming the file) if it is not one."""
    import json
    from pathlib import Path

    try:
        from harness.locations import is_url, read_text

        doc = json.loads(read_text(path) if is_url(path) else Path(path).read_text())
        if doc.get("schema") != SCHEMA:
            raise ValueError("not a bench projection")
        return ProjectionRecord.model_validate(doc).model_copy(update={"path": str(path)})
    except (OSError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path}: {' '.join(str(exc).split())[:200]}") from None


def load_projections(paths) -> list[ProjectionRecord]:
    """Every projection under the given directories (recursively) and files."""
    from pathlib import Path

    from harness.locations import files_under, is_url

    found = []
    for p in paths:
        if is_url(p):
            found.extend(load_projection(f) for f in files_under(str(p), SUFFIX))
            continue
        p = Path(p)
        files = sorted(p.rglob(f"*{SUFFIX}")) if p.is_dir() else ([p] if p.name.endswith(SUFFIX) else [])
        found.extend(load_projection(f) for f in files)
    return found
