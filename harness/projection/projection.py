"""Projections: figures of their own kind, computed from a model of the work, never measured.

Two kinds, both stored and shown as projected, never mixed into measured rows:

- **On a TPU slice nobody rented** (`bench plan SCENARIO --compile-for tpu-v5e-8`): the
  scenario's train step compiled ahead of time for the slice's topology on this host
  (backends/*/aot.py). Per distinct shape the padding policy gives: whether it fits
  (per-device memory against the chip's HBM), per-device FLOPs and bytes from the
  compiler's cost model, the collectives in the compiled HLO, the compile seconds here,
  and a roofline *lower bound* on step time, max(FLOPs / peak, bytes / HBM bandwidth,
  collective bytes / ICI bandwidth) per program, hence an upper bound on tokens/s per
  chip and a lower bound on $/1M, per real token (padded beside it).
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

from harness.basics.errors import SpecError

SCHEMA = "bench.projection"
SCHEMA_VERSION = 1
SUFFIX = ".projection.json"  # projections live beside records, never read as records

AOT_METHOD = (
    "deviceless ahead-of-time compile for the slice's TPU topology (jax.experimental.topologies, libtpu): "
    "memory from memory_analysis (arguments + outputs - donated + temporaries + code, per device), FLOPs and "
    "bytes accessed from cost_analysis (the compiler's cost model, per device), collectives parsed from the "
    "compiled HLO (each op once, async pairs once, x trip count inside while loops); step time bound = sum over "
    "the step's programs of runs x max(compute: FLOPs / peak bf16 FLOP/s, HBM: bytes accessed / HBM bandwidth, "
    "collectives: collective result bytes per device / bidirectional ICI bandwidth per chip): a lower bound, not a "
    "measurement. FLOPs checked against bench's count (harness.figures.metrics, executed convention): outside "
    "[0.9, 1.5] flagged and the larger used. Fits: each program's peak plus the state kept on device across steps "
    "that it does not take, against the chip's usable HBM"
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
    ici_bytes_per_s: float | None = None  # bidirectional per chip (harness.figures.accelerators.ICI_BYTES_PER_S)
    usable_hbm_bytes: int | None = None  # what a program may fill (harness.figures.accelerators.usable_hbm)
    usable_hbm_source: str = "datasheet"

    @property
    def usable_hbm(self) -> int:
        return self.usable_hbm_bytes or self.hbm_bytes

    def to_json(self) -> dict[str, Any]:
        """Every field, in declaration order; host_bounds as a JSON list."""
        return {**asdict(self), "host_bounds": list(self.host_bounds)}


# Chips -> topology: v5e/v6e slices are 2D (8 chips a host), v4/v5p 3D (4 chips a host).
_GRID_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
_GRID_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8"}


def tpu_slice(text: str, source: str = "--compile-for") -> TpuSlice:
    """`tpu-v5e-8`, `v5p-8` or `v5litepod-8` as a TpuSlice; refused, naming the option,
    when the generation has no HBM figures or the chip count no topology here."""
    from harness.figures.accelerators import (
        HBM_BYTES,
        HBM_BYTES_PER_S,
        catalog_key,
        chips_in_slice,
        interconnect_bytes_per_s,
        peak_flops,
        usable_hbm,
    )

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
    usable, usable_source = usable_hbm(key)
    return TpuSlice(
        f"tpu-{name}",
        key,
        chips,
        f"{generation}:{grid}",
        bounds,
        HBM_BYTES[key],
        HBM_BYTES_PER_S[key],
        peak_flops(key),
        interconnect_bytes_per_s(key),
        usable,
        usable_source,
    )


# --------------------------------------------------------------------------- types
class Collective(BaseModel):
    model_config = FROZEN
    count: int  # ops executed per run of the program (x trip count inside loops)
    bytes: int  # summed result sizes on one device, per run of the program
    # What one device sends for them over a ring of each op's replica group, per run
    # (backends/jax_common/hlo_collectives.wire_factor); None in a record from before wire bytes.
    wire_bytes: int | None = None


# ICI ports per chip by torus dimensions (v5e/v6e 2D: 4; v4/v5p 3D: 6): the chip's
# bidirectional ICI figure (harness.figures.accelerators.ICI_BYTES_PER_S) counts all of them.
ICI_PORTS = {2: 4, 3: 6}
# A ring collective runs over 2 of a chip's ports (its neighbours on the ring), both ways
# (a bidirectional ring sends half each way): a device sends at one port's bidirectional
# rate. The slice is compiled without wraparound (aot.topology_devices: wrap False), so no
# more ports than a ring's are assumed.
RING_PORTS = 2


FLOPS_CHECK_RANGE = (0.9, 1.5)  # compiled / bench's count outside it: flagged, the larger used


class BoundTerms(BaseModel):
    """One run of a program against the chip: seconds for its FLOPs at peak, its bytes
    at HBM bandwidth, its collective bytes at ICI bandwidth (None: no ICI figure)."""

    model_config = FROZEN
    program: str
    runs_per_step: int
    compute_s: float
    hbm_s: float
    collectives_s: float | None
    bound_by: Literal["compute", "hbm", "collectives"]
    # What the collectives term divides: wire bytes (ring factors), or, in a record from
    # before them, the ops' result bytes (a lower count for reduce-scatter and all-reduce).
    collectives_basis: str = ""

    @property
    def bound_s(self) -> float:
        return max(t for t in (self.compute_s, self.hbm_s, self.collectives_s) if t is not None)


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
    # The five collective ops sending the most bytes (hlo_collectives.largest_collectives): op, kind,
    # runs, result_bytes, group, wire_bytes.
    largest_collectives: list[dict[str, Any]] = Field(default_factory=list)
    memory: dict[str, int] = Field(default_factory=dict)  # memory_analysis' parts
    # State the backend keeps on device across steps that this program does not take as
    # an argument (torchax's grad program: the optimizer state), per device.
    resident_outside_bytes: int = 0

    @property
    def collective_bytes(self) -> int:
        return sum(c.bytes for c in self.collectives.values())

    @property
    def wire_bytes(self) -> int | None:
        """What one device sends for the program's collectives, or None where the record
        predates wire bytes."""
        if any(c.wire_bytes is None for c in self.collectives.values()):
            return None
        return sum(c.wire_bytes for c in self.collectives.values())

    @property
    def fit_bytes(self) -> int:
        """Device memory while this program runs: its own peak and the kept state it does not hold."""
        return self.memory_bytes + self.resident_outside_bytes

    def terms(self, chip: TpuSlice, flops: float | None = None, moved: float | None = None) -> BoundTerms | None:
        """Its three roofline terms on `chip` (FLOPs: `flops`, HBM bytes: `moved`, where a
        check chose another count); None without the compiler's FLOPs or bytes."""
        flops = self.flops if flops is None else flops
        moved_hbm = self.bytes_accessed if moved is None else moved
        if flops is None or moved_hbm is None:
            return None
        wire = self.wire_bytes
        moved, basis = (
            (wire, "wire bytes") if wire is not None else (self.collective_bytes, "result bytes (old record)")
        )
        ring = ring_bytes_per_s(chip)
        named = {
            "compute": flops / chip.peak_flops,
            "hbm": moved_hbm / chip.hbm_bytes_per_s,
            "collectives": moved / ring if ring else None,
        }
        largest = max((k for k, v in named.items() if v is not None), key=lambda k: named[k])
        return BoundTerms(
            program=self.name,
            runs_per_step=self.runs_per_step,
            compute_s=named["compute"],
            hbm_s=named["hbm"],
            collectives_s=named["collectives"],
            bound_by=largest,
            collectives_basis=f"{basis} over {RING_PORTS} of {ici_ports(chip)} ICI ports" if ring else "",
        )


def ici_ports(chip: TpuSlice) -> int:
    """The chip's ICI ports: 6 on a 3D torus generation, 4 on a 2D one; a GPU (the GPU
    calibration's card, topology "gpu") has one link to its switch, counted as 2 ports
    so that a ring sends at one direction of it."""
    if chip.topology == "gpu":
        return RING_PORTS
    return ICI_PORTS[len(chip.topology.split(":")[1].split("x"))]


def ring_bytes_per_s(chip: TpuSlice) -> float | None:
    """What a device sends per second in a ring collective: RING_PORTS of its ICI_PORTS,
    each at its bidirectional share of the chip's figure, half each way (RING_PORTS); on
    a GPU, one direction of its NVLink figure."""
    if not chip.ici_bytes_per_s:
        return None
    return chip.ici_bytes_per_s / ici_ports(chip) * RING_PORTS / 2


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
    bench_flops_per_device_per_forward: float | None  # harness.figures.metrics' count, same tokens
    step_time_bound_s: float | None  # per optimizer step
    tokens_per_s_per_chip_bound: float | None  # padded tokens
    usd_per_1m_tokens_bound: float | None  # per 1M padded tokens
    terms: list[BoundTerms] = Field(default_factory=list)  # per program, one run each
    flops_ratio: float | None = None  # compiled / bench's count, per device per forward
    flops_flag: str | None = None  # why the check flagged it and which count it used
    fit_bytes_per_device: int | None = None  # the largest program's peak + kept state it does not hold
    usable_hbm_bytes_per_device: int | None = None
    usable_hbm_source: str | None = None
    real_fraction: float | None = None  # real / padded tokens over the fine-tune's batches at this length
    real_tokens_per_s_per_chip_bound: float | None = None
    usd_per_1m_real_tokens_bound: float | None = None
    # The HBM bytes check (bytes_check): bench's floor of the micro-batch program's
    # memory traffic per device (harness.projection.gpu_projection.micro_batch_work), compiled / it,
    # and the flag where the compiler counts less than the floor.
    bench_bytes_per_device_per_forward: float | None = None
    bytes_ratio: float | None = None
    bytes_flag: str | None = None


class FineTune(BaseModel):
    """A whole fine-tune, projected (FINE_TUNE_METHOD)."""

    model_config = FROZEN
    examples: int
    epochs: int
    steps: int
    shapes: list[int]  # the distinct padded lengths the run meets, in the order met
    compiles: int  # one per distinct shape
    setup_s: float | None  # None: not projected (and not in time_s)
    first_compile_s: float  # the first steps' compiles: every program once, for the shapes met first
    shapes_compiled_first: int  # the shapes those first compiles covered
    compile_s_per_shape: float  # each shape met after them
    step_time_s: float
    time_s: float
    usd: float | None = None
    basis: str  # where setup, compile and step time come from
    method: str = FINE_TUNE_METHOD
    # Where the compile seconds were measured. A TPU projection's were measured on the
    # host that ran `bench plan`, not on a TPU VM: shown apart (compiles x seconds per
    # shape, naming that host) and never added into time_s (compile_in_time False).
    compile_host: str | None = None
    compile_in_time: bool = True
    # Per padded length the data meets: the bound on one micro-batch at it, seconds, and
    # whether that length was compiled or interpolated between compiled ones.
    length_bounds: dict[int, float] = Field(default_factory=dict)
    length_basis: dict[int, str] = Field(default_factory=dict)

    @property
    def compile_s(self) -> float:
        """Every compile the fine-tune pays, on the host that measured them."""
        return self.first_compile_s + (len(self.shapes) - self.shapes_compiled_first) * self.compile_s_per_shape


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
    price: dict[str, Any] | None  # harness.figures.cost.Price.to_json(), or None if the catalog has none
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


def flops_check(compiled: float | None, bench: float | None) -> tuple[float | None, float | None, str | None]:
    """(ratio compiled / bench, the FLOPs the compute term uses, the flag or None). Inside
    FLOPS_CHECK_RANGE the compiler's count is used as it is; outside, the larger of the
    two, because the bound must not count less work than the step does (a count too
    low makes the compute term too small) nor hide work the compiler added."""
    if compiled is None or not bench:
        return None, compiled, None
    ratio = compiled / bench
    low, high = FLOPS_CHECK_RANGE
    if low <= ratio <= high:
        return ratio, compiled, None
    used, which = (bench, "bench's") if bench > compiled else (compiled, "the compiler's")
    why = (
        "the compiler counts less work than the step does (a while loop's body counted once: "
        "docs/measurements/projections-and-calibration.md, issue 37)"
        if bench > compiled
        else "the compiler counts work bench's convention leaves out (recomputation, padding, extra ops)"
    )
    flag = (
        f"FLOPs check: compiled {compiled:.4g} / bench {bench:.4g} = {ratio:.3f}, outside [{low}, {high}]: "
        f"the compute term uses the larger, {which} {used:.4g}, because {why}"
    )
    return ratio, used, flag


def bytes_check(compiled: float | None, bench: float | None) -> tuple[float | None, float | None, str | None]:
    """(ratio compiled / bench's floor, the bytes the HBM term uses, the flag or None).
    bench's count is a floor (weights per pass, gradients, activations: what must cross
    HBM), so a compiled count above it is expected (the cost model sums every fusion's
    operands); below it, the compiler missed traffic (a while loop's body counted once, a
    Pallas kernel opaque to cost_analysis): flagged, and the floor used."""
    if compiled is None or not bench:
        return None, compiled, None
    ratio = compiled / bench
    if ratio >= 1:
        return ratio, compiled, None
    flag = (
        f"HBM bytes check: compiled {compiled:.4g} / bench's floor {bench:.4g} = {ratio:.3f} < 1: the compiler "
        f"counts less traffic than the step must move (a loop body counted once, an opaque kernel); the HBM term "
        f"uses bench's {bench:.4g}"
    )
    return ratio, bench, flag


def shape_projection(
    seq_len: int,
    plan: dict[str, Any],
    programs: list[Program],
    chip: TpuSlice,
    usd_per_chip_hour,
    bench_flops,
    real_fraction: float | None = None,
    bench_bytes: float | None = None,
) -> ShapeProjection:
    """A shape's figures from its compiled programs (the first is the micro-batch's)."""
    ratio, used_flops, flag = flops_check(programs[0].flops, bench_flops)
    bytes_ratio, used_bytes, bytes_flag = bytes_check(programs[0].bytes_accessed, bench_bytes)
    terms = [p.terms(chip, used_flops, used_bytes) if i == 0 else p.terms(chip) for i, p in enumerate(programs)]
    step_bound = None if None in terms else sum(t.runs_per_step * t.bound_s for t in terms)
    limit = _usable_hbm(programs, chip)
    fit = max(p.fit_bytes for p in programs)
    fits = fit <= limit and not any(p.out_of_memory for p in programs)
    tokens = plan["rows_per_step"] * seq_len
    per_chip = tokens / step_bound / plan["devices"] if step_bound and fits else None
    real = per_chip * real_fraction if per_chip and real_fraction else None
    return ShapeProjection(
        seq_len=seq_len,
        rows_per_forward=plan["rows_per_forward"],
        accumulation=plan["accumulation"],
        programs=programs,
        fits=fits,
        memory_bytes_per_device=max(p.memory_bytes for p in programs),
        hbm_bytes_per_device=chip.hbm_bytes,
        compile_s=sum(p.compile_s for p in programs),
        flops_per_device_per_forward=programs[0].flops,
        bench_flops_per_device_per_forward=bench_flops,
        step_time_bound_s=step_bound if fits else None,
        tokens_per_s_per_chip_bound=per_chip,
        usd_per_1m_tokens_bound=usd_per_1m_tokens(per_chip, usd_per_chip_hour),
        terms=[t for t in terms if t is not None],
        flops_ratio=ratio,
        flops_flag=flag,
        fit_bytes_per_device=fit,
        usable_hbm_bytes_per_device=limit,
        usable_hbm_source=_usable_source(programs, chip),
        real_fraction=real_fraction,
        real_tokens_per_s_per_chip_bound=real,
        usd_per_1m_real_tokens_bound=usd_per_1m_tokens(real, usd_per_chip_hour),
        bench_bytes_per_device_per_forward=bench_bytes,
        bytes_ratio=bytes_ratio,
        bytes_flag=bytes_flag,
    )


def _usable_hbm(programs: list[Program], chip: TpuSlice) -> int:
    """The compiler's own limit where a program's answer states it, else the chip's usable HBM."""
    stated = [p.memory["compiler_hbm_bytes"] for p in programs if p.memory.get("compiler_hbm_bytes")]
    return min(stated) if stated else chip.usable_hbm


def _usable_source(programs: list[Program], chip: TpuSlice) -> str:
    if any(p.memory.get("compiler_hbm_bytes") for p in programs):
        return "the compiler's limit, from its answer"
    return chip.usable_hbm_source


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
    setup_s: float | None,
    compile_s_per_shape: float,
    step_time_s: float,
    basis: str,
    chips: int = 1,
    usd_per_chip_hour: float | None = None,
    first_compile_s: float = 0.0,
    shapes_compiled_first: int = 0,
    compile_host: str | None = None,
    compile_in_time: bool = True,
    length_bounds: dict[int, float] | None = None,
    length_basis: dict[int, str] | None = None,
) -> FineTune:
    """The whole fine-tune's time (FINE_TUNE_METHOD) and, at a price, its $. Without a
    first compile measured (a TPU projection), every shape costs compile_s_per_shape.
    Setup None (not projected) and compiles measured elsewhere (compile_in_time False)
    are left out of the time, and the FineTune says so."""
    new_shapes = len(shapes) - shapes_compiled_first
    compiles = first_compile_s + new_shapes * compile_s_per_shape if compile_in_time else 0.0
    time_s = (setup_s or 0.0) + compiles + steps * step_time_s
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
        compile_host=compile_host,
        compile_in_time=compile_in_time,
        length_bounds=length_bounds or {},
        length_basis=length_basis or {},
    )


def length_bounds(compiled: dict[int, float], lengths: list[int]) -> tuple[dict[int, float], dict[int, str]]:
    """Per length met, one micro-batch's bound: the compiled figure where that length was
    compiled; else linear in the length through the two nearest compiled lengths (a
    step's cost is a fixed part, the weights, plus a part that grows with its tokens),
    extrapolated from the two nearest beyond them; scaled by length with one compiled
    length; never below 0."""
    known = sorted(compiled)
    bounds, basis = {}, {}
    for n in lengths:
        if n in compiled:
            bounds[n], basis[n] = compiled[n], "compiled"
            continue
        if len(known) == 1:
            bounds[n] = compiled[known[0]] * n / known[0]
            basis[n] = f"scaled by length from {known[0]}"
            continue
        a, b = known[-2:] if n > known[-1] else _neighbours(known, n)
        slope = (compiled[b] - compiled[a]) / (b - a)
        bounds[n] = max(0.0, compiled[a] + slope * (n - a))
        basis[n] = f"interpolated between {a} and {b}" if a < n < b else f"extrapolated from {a} and {b}"
    return bounds, basis


def _neighbours(known: list[int], n: int) -> tuple[int, int]:
    """The compiled lengths either side of n; the two shortest when n is below them all."""
    above = [k for k in known if k > n]
    below = [k for k in known if k < n]
    return (below[-1], above[0]) if below else (known[0], known[1])


def projection_filename(record: ProjectionRecord) -> str:
    variant = re.sub(r"[^A-Za-z0-9_.=-]+", "-", record.scenario.get("variant", "default"))
    return f"{record.scenario['name']}__{variant}__{record.backend}__{record.slice['name']}{SUFFIX}"


# --------------------------------------------------------------------------- store
def load_projection(path) -> ProjectionRecord:
    """A stored projection; ValueError (naming the file) if it is not one."""
    import json
    from pathlib import Path

    try:
        from harness.records.locations import is_url, read_text

        doc = json.loads(read_text(path) if is_url(path) else Path(path).read_text())
        if doc.get("schema") != SCHEMA:
            raise ValueError("not a bench projection")
        return ProjectionRecord.model_validate(doc).model_copy(update={"path": str(path)})
    except (OSError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path}: {' '.join(str(exc).split())[:200]}") from None


def load_projections(paths) -> list[ProjectionRecord]:
    """Every projection under the given directories (recursively) and files."""
    from pathlib import Path

    from harness.records.locations import files_under, is_url

    found = []
    for p in paths:
        if is_url(p):
            found.extend(load_projection(f) for f in files_under(str(p), SUFFIX))
            continue
        p = Path(p)
        files = sorted(p.rglob(f"*{SUFFIX}")) if p.is_dir() else ([p] if p.name.endswith(SUFFIX) else [])
        found.extend(load_projection(f) for f in files)
    return found
