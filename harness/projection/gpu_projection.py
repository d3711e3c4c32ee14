"""The GPU side projected (issue 43): `bench plan SCENARIO --project-for h100-sxm:2`.

Most people asking "TPU or GPU?" have neither at hand, so the GPU half of the answer is
projected too, from bench's own count of the step's work and the card's datasheet; no
framework, no compile, no GPU. Per GPU, for one micro-batch and for the optimizer update:

- compute: the step's FLOPs (harness.figures.metrics.FlopsModel, hardware convention: the model's
  matmuls and causal attention over every padded token, plus the forward again where the
  scenario checkpoints) / the card's dense bf16 peak;
- memory: bytes that must cross the card's memory at least once (MEMORY_CONVENTION) /
  its memory bandwidth;
- links: wire bytes of the step's collectives, ring factors over the GPUs of one host
  (WIRE_CONVENTION) / one direction of the card's GPU-to-GPU link.

The bound is a lower bound on step time: each term counts only what cannot be avoided
and the largest is taken as if the others overlapped it perfectly. So every rate and $
from it is a best case; the report's other end is the bound x the lowest measured /
bound of published GPU runs of the same method class (harness/projection/calibration.py's rule,
points in harness/projection/calibration_points/gpu_published.json), computed with these same
functions at each run's own configuration. Records say "projected" and are never mixed
with measured ones.
"""

from __future__ import annotations

import json
import re
from dataclasses import MISSING, dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from harness.basics.errors import SpecError

MEMORY_CONVENTION = (
    "per GPU: each micro-batch reads every matmul weight once in the forward, once in the backward and once more "
    "where layers are recomputed (in the frozen dtype for LoRA, the compute dtype for a full fine-tune), writes the "
    "trained weights' gradients once (grad-reduce dtype), and writes then reads back its activations (bench's "
    "memory model, harness/plan.activation_bytes_per_token, SDPA); the update reads and writes the GPU's shard of "
    "the trained weights' fp32 master, gradient and AdamW's two moments (28 bytes a trained parameter, 30 where a "
    "compute-dtype copy is written back for a full fine-tune). Embedding lookups, norms, the logits and the "
    "kernels' own temporaries are left out: a floor"
)
WIRE_CONVENTION = (
    "ring collectives over the N GPUs of one host (N - 1 of every N bytes cross a GPU's link one way): with fsdp, "
    "every micro-batch all-gathers the matmul weights (twice with full_shard: forward and backward; once with "
    "shard_grad_op) and reduce-scatters the trained weights' gradients; with data parallelism, each step "
    "all-reduces the gradients (2 (N - 1) / N); over one direction of the datasheet's bidirectional link"
)
LINK_DIRECTIONS = 2  # the datasheets' link bandwidth counts both directions; a ring step sends one way
ONE_HOST_GPUS = 8  # the projection models one host's links; a larger count needs the host-to-host network
UPDATE_BYTES_PER_TRAINED = 28  # fp32 master r/w 8, gradient read 4, two fp32 moments r/w 16
COMPUTE_COPY_BYTES = 2  # a full fine-tune writes back its 16-bit compute copy


@dataclass(frozen=True)
class Card:
    """N GPUs of one catalog kind in one host, with their datasheet figures (or, for
    `--recommend`, a TPU slice's chips: tpu_card)."""

    key: str
    count: int
    peak_flops: float
    memory_bytes: float
    memory_bytes_per_s: float
    link_bytes_per_s: float  # bidirectional, per GPU (the datasheet's figure)
    link: str

    @property
    def name(self) -> str:
        return f"{self.count}x {self.key}"


def gpu_card(text: str, source: str = "--project-for") -> Card:
    """`h100-sxm:2` (a catalog key and a GPU count, 1 to 8) as a Card; refused,
    naming the flag, where the key has no datasheet figures or the count is not one host's."""
    from harness.figures.accelerators import GPU_PROJECTION_DATASHEET, peak_flops

    match = re.fullmatch(r"([a-z0-9-]+):(\d+)", text.strip().lower())
    if not match:
        raise SpecError(source, text, "name a GPU kind and a count, e.g. h100-sxm:2")
    key, count = match.group(1), int(match.group(2))
    sheet = GPU_PROJECTION_DATASHEET.get(key)
    if sheet is None or not peak_flops(key):
        raise SpecError(source, text, f"no datasheet figures for {key!r}; known: {', '.join(GPU_PROJECTION_DATASHEET)}")
    if not 1 <= count <= ONE_HOST_GPUS:
        raise SpecError(source, text, f"{count} GPUs: the projection models one host's links, 1 to {ONE_HOST_GPUS}")
    return Card(
        key,
        count,
        peak_flops(key),
        float(sheet["memory_bytes"]),
        float(sheet["memory_bytes_per_s"]),
        float(sheet["link_bytes_per_s"]),
        str(sheet["link"]),
    )


@dataclass(frozen=True)
class Work:
    """One program's work on one GPU: FLOPs, memory bytes, wire bytes."""

    flops: float
    memory_bytes: float
    wire_bytes: float

    def terms(self, card: Card) -> dict[str, Any]:
        """Each term's seconds on the card, the bound (the largest) and which term it is."""
        # A card without a link figure (tpu-v4: no ICI figure in the catalog) has no links
        # term where bytes cross: None, left out of the max (the bound is then compute and
        # memory alone, still a lower bound) and printed as such.
        links = (
            0.0
            if not self.wire_bytes
            else self.wire_bytes / (card.link_bytes_per_s / LINK_DIRECTIONS)
            if card.link_bytes_per_s
            else None
        )
        seconds = {
            "compute": self.flops / card.peak_flops,
            "memory": self.memory_bytes / card.memory_bytes_per_s,
            "links": links,
        }
        bound_by = max((k for k, v in seconds.items() if v is not None), key=seconds.get)
        return {**{f"{k}_s": v for k, v in seconds.items()}, "bound_s": seconds[bound_by], "bound_by": bound_by}


@dataclass(frozen=True)
class StepShape:
    """What a step does on each GPU, in bench's terms (from a plan, or a published run's
    configuration): the architecture, the method, rows per GPU per micro-batch, the
    micro-batches per step, the mesh, and the dtypes."""

    arch: dict[str, Any]
    lora: bool
    trainable: int  # trained parameters (the adapters for LoRA, every matmul weight for full)
    rows_per_gpu: int  # per micro-batch
    accumulation: int
    checkpointing: bool
    fsdp: int
    data: int
    sharding: str  # full_shard / shard_grad_op
    weight_bytes: int  # bytes of a matmul weight as the micro-batch reads it
    grad_bytes: int  # bytes of a gradient as it is reduced
    compute_bytes: int  # bytes of an activation


def micro_batch_work(shape: StepShape, seq_len: int) -> Work:
    """One micro-batch's work per GPU at padded length `seq_len` (module doc)."""
    from harness.figures.metrics import FlopsModel, matmul_weights
    from harness.plan.plan import activation_bytes_per_token

    layers, head = matmul_weights(shape.arch)
    weights = layers + head
    flops_model = FlopsModel(
        shape.arch,
        lora=shape.lora,
        adapter_params=shape.trainable if shape.lora else 0,
        checkpointing=shape.checkpointing,
    )
    flops = flops_model.hardware_flops([seq_len] * shape.rows_per_gpu)
    passes = 3 if shape.checkpointing else 2
    tokens = shape.rows_per_gpu * seq_len
    activations = activation_bytes_per_token(
        shape.arch, "bf16" if shape.compute_bytes == 2 else "fp32", "sdpa", seq_len
    )
    memory = weights * shape.weight_bytes * passes + shape.trainable * shape.grad_bytes + 2 * activations * tokens
    wire = 0.0
    if shape.fsdp > 1:
        ring = (shape.fsdp - 1) / shape.fsdp
        gathers = {"full_shard": 2, "shard_grad_op": 1}[shape.sharding]
        wire = ring * (gathers * weights * shape.weight_bytes + shape.trainable * shape.grad_bytes)
    return Work(flops, memory, wire)


def update_work(shape: StepShape) -> Work:
    """The optimizer update's work per GPU, once a step (module doc)."""
    per_trained = UPDATE_BYTES_PER_TRAINED + (0 if shape.lora else COMPUTE_COPY_BYTES)
    memory = shape.trainable / shape.fsdp * per_trained
    wire = 2 * (shape.data - 1) / shape.data * shape.trainable * shape.grad_bytes if shape.data > 1 else 0.0
    return Work(0.0, memory, wire)


def step_bound(shape: StepShape, seq_len: int, card: Card) -> dict[str, Any]:
    """The step's bound at one padded length: micro-batches x the micro-batch's bound +
    the update's, each term shown."""
    micro = micro_batch_work(shape, seq_len).terms(card)
    update = update_work(shape).terms(card)
    return {
        "seq_len": seq_len,
        "micro_batch": micro,
        "update": update,
        "step_s": shape.accumulation * micro["bound_s"] + update["bound_s"],
    }


def shape_of_plan(plan, arch: dict[str, Any]) -> StepShape:
    """A bench plan (harness/plan/plan.py) as the step each GPU does."""
    from harness.figures.metrics import matmul_weights
    from harness.plan.plan import DTYPE_BYTES

    lora = plan.method == "lora"
    if lora and plan.trainable_params is None:
        # Without the adapter's size the gradient and update terms would drop out of the
        # bound unsaid: refused, naming the field that made it unknown.
        raise SpecError(
            "the GPU projection",
            "train.lora.target_modules",
            f"{', '.join(plan.lora_targets) or 'none'}: no trainable-parameter count for a module bench cannot size",
        )
    layers, head = matmul_weights(arch)
    p = plan.precision
    return StepShape(
        arch=arch,
        lora=lora,
        trainable=plan.trainable_params if lora else layers + head,
        rows_per_gpu=plan.micro_batch,
        accumulation=plan.accumulation,
        checkpointing=plan.gradient_checkpointing,
        fsdp=plan.mesh["fsdp"],
        data=plan.mesh["data"],
        sharding=plan.sharding,
        weight_bytes=DTYPE_BYTES[p.frozen_params if lora else p.compute],
        grad_bytes=DTYPE_BYTES[p.grad_reduce],
        compute_bytes=DTYPE_BYTES[p.compute],
    )


def fits(shape: StepShape, seq_len: int, card: Card) -> tuple[bool, float]:
    """(fits, bytes per GPU) by bench's memory model: the resident weights, gradients and
    AdamW state sharded over fsdp, plus one micro-batch's activations (with
    checkpointing: each layer's input, and one layer's full stash while it is
    recomputed)."""
    from harness.figures.metrics import matmul_weights
    from harness.plan.plan import activation_bytes_per_token

    layers, head = matmul_weights(shape.arch)
    frozen = (layers + head) * shape.weight_bytes if shape.lora else 0
    trained = shape.trainable * (4 + 4 + 8)  # fp32 master, gradient, two moments
    dtype = "bf16" if shape.compute_bytes == 2 else "fp32"
    per_token = activation_bytes_per_token(shape.arch, dtype, "sdpa", seq_len)
    if shape.checkpointing:
        n = shape.arch["num_layers"]
        per_token = n * shape.arch["hidden_size"] * shape.compute_bytes + per_token / n
    need = (frozen + trained) / shape.fsdp + shape.rows_per_gpu * seq_len * per_token
    return need <= card.memory_bytes, need


# --------------------------------------------------------------------------- a scenario on a card
GPU_BACKEND = "torch"  # whose capabilities the plan is checked against when --backend names none


def project_scenario(
    scenario, card: Card, price, capabilities, source: str, device_kind: str = "cuda", points=None
) -> dict[str, Any]:
    """One resolved scenario projected on `card`: the plan on its GPUs, the bound per
    padded length the whole fine-tune meets, the fit, the rates and $ as bound and as
    calibrated range (from `points`, the published GPU runs by default), the whole
    fine-tune. Labelled projected throughout."""
    from harness.plan import plan as plans
    from harness.projection.calibration import calibrated_low
    from harness.projection.fine_tune import fine_tune_work

    plan = plans.resolve(
        scenario, device_kind, card.count, capabilities, source, device_memory_bytes=int(card.memory_bytes)
    )
    arch = scenario.model.architecture()
    shape = shape_of_plan(plan, arch)
    work = fine_tune_work(scenario, plan.rows_per_forward)
    longest = max(work.shapes)
    bounds = {n: step_bound(shape, n, card) for n in sorted(set(work.shapes))}
    micro = {n: b["micro_batch"]["bound_s"] for n, b in bounds.items()}
    update_s = bounds[longest]["update"]["bound_s"]
    time_s = sum(count * micro[n] for n, count in work.micro_batches.items()) + work.steps * update_s
    fit, need = fits(shape, longest, card)
    rate = price.usd_per_chip_hour if price else None
    low = calibrated_low(plan.method, gpu_points() if points is None else points)
    tokens_bound = plan.rows_per_step * longest / card.count / bounds[longest]["step_s"]
    real = tokens_bound * work.real_fraction[longest]
    usd = time_s / 3600 * card.count * rate if rate else None
    return {
        "kind": "gpu_projection",
        "label": "PROJECTED (not measured)",
        "card": {"name": card.name, "key": card.key, "count": card.count, "link": card.link},
        "plan": plan.model_dump(mode="json"),
        "fits": fit,
        "memory_bytes_per_gpu": need,
        "bounds": bounds,
        "longest": longest,
        "tokens_per_s_per_gpu_bound": tokens_bound,
        "real_tokens_per_s_per_gpu_bound": real,
        "usd_per_1m_real_tokens_bound": usd_per_1m(real, rate),
        "fine_tune": {"steps": work.steps, "time_s": time_s, "usd": usd},
        "calibration": _calibrated(low, real, rate, time_s, usd),
        "price": price.to_json() if price else None,
        "conventions": {"memory": MEMORY_CONVENTION, "wire": WIRE_CONVENTION},
    }


def usd_per_1m(tokens_per_s_per_gpu: float | None, usd_per_gpu_hour: float | None) -> float | None:
    if not tokens_per_s_per_gpu or usd_per_gpu_hour is None:
        return None
    return usd_per_gpu_hour / 3600 / tokens_per_s_per_gpu * 1e6


def _calibrated(low, real: float, rate, time_s: float, usd) -> dict[str, Any]:
    """The calibrated end of each figure: the bound's rate x the lowest measured / bound
    of the method's class, its $ and time / it; the points named."""
    if low is None:
        return {"ratio": None, "same_class": None, "note": "no published run is calibrated: the bound alone"}
    return {
        "ratio": low.ratio,
        "same_class": low.same_class,
        "method_class": low.method_class,
        "real_tokens_per_s_per_gpu": real * low.ratio,
        "usd_per_1m_real_tokens": usd_per_1m(real * low.ratio, rate),
        "fine_tune_time_s": time_s / low.ratio,
        "fine_tune_usd": usd / low.ratio if usd is not None else None,
        "note": low.note(),
    }


@dataclass(frozen=True)
class GpuRequest:
    scenario_path: str
    backend: str | None
    targets: list[str]
    overrides: dict[str, Any] = field(default_factory=dict)
    profile: str = "auto"
    results_dir: Path = Path("results")
    prices_file: str | None = None


def project(request: GpuRequest) -> list[dict[str, Any]]:
    """`bench plan SCENARIO --project-for KEY:N ...`: every matrix cell on every card,
    written as `<results>/<scenario>-<variant>-<card>.gpu-projection.json`."""
    from harness.basics.files import write_json_atomic
    from harness.figures.cost import load_catalog, price_for
    from harness.run import registry
    from harness.run.runner import pick_profile
    from harness.scenario.loader import read_document, resolve_runs, validate

    cards = [gpu_card(text) for text in request.targets]
    base = validate(read_document(request.scenario_path), request.scenario_path)
    runs = resolve_runs(request.scenario_path, request.overrides, pick_profile(request.profile, base.profiles, "cuda"))
    catalog = load_catalog(request.prices_file)
    capabilities = registry.get(request.backend or GPU_BACKEND).capabilities
    out = []
    for run in [r for r in runs if r.repeat == 0]:
        for card in cards:
            source = f"{request.scenario_path} [{run.variant}] on {card.name}"
            record = project_scenario(
                run.scenario, card, price_for(card.key, run.scenario.cost, catalog), capabilities, source
            )
            record["scenario"] = {"name": run.scenario.name, "variant": run.variant, "file": run.source}
            record["backend"] = request.backend or GPU_BACKEND
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{run.scenario.name}-{run.variant}-{card.count}x{card.key}")
            record["path"] = str(write_json_atomic(request.results_dir / f"{name}.gpu-projection.json", record))
            out.append(record)
    return out


# --------------------------------------------------------------------------- display
def lines(record: dict[str, Any]) -> list[str]:
    """A GPU projection for the terminal, every figure labelled projected, the range's
    ends said (the bound's is a best case)."""
    gib = 1024**3
    plan, card = record["plan"], record["card"]
    out = [
        f"{record['label']}: {record['scenario']['name']} [{record['scenario']['variant']}] on {card['name']} "
        f"({record['backend']}'s plan), from bench's FLOPs and bytes and the datasheet; no GPU ran",
        f"  plan: {plan['rows_per_step']} rows a step, {plan['micro_batch']} per GPU per micro-batch x "
        f"{plan['accumulation']} micro-batches; fsdp {plan['mesh']['fsdp']}, data {plan['mesh']['data']}; "
        f"{plan['method']}, checkpointing {'on' if plan['gradient_checkpointing'] else 'off'}",
        f"  fits: {'yes' if record['fits'] else 'NO'}, {record['memory_bytes_per_gpu'] / gib:.2f} GiB per GPU by bench's "
        "memory model (weights, gradients, AdamW state over fsdp, one micro-batch's activations)",
    ]
    for n, b in sorted(record["bounds"].items(), key=lambda kv: int(kv[0])):
        out.append(
            f"  length {n}: micro-batch {_terms(b['micro_batch'])}; update {_terms(b['update'])}; step >= {b['step_s']:.4g} s"
        )
    price = (
        f", >= ${record['usd_per_1m_real_tokens_bound']:.4g} per 1M real tokens"
        if record["usd_per_1m_real_tokens_bound"]
        else ""
    )
    out.append(
        f"  bound at length {record['longest']}: <= {record['real_tokens_per_s_per_gpu_bound']:.4g} real tokens/s per GPU "
        f"(<= {record['tokens_per_s_per_gpu_bound']:.4g} padded){price}"
    )
    out.extend(_range_lines(record))
    out.append(f"  memory bytes: {record['conventions']['memory']}")
    out.append(f"  wire bytes: {record['conventions']['wire']}")
    return out


def usd_text(usd: float) -> str:
    """Dollars to the cent, or to 3 significant figures under a dollar (a small fine-tune's cents)."""
    return f"${usd:,.2f}" if usd >= 1 else f"${usd:.3g}"


def _terms(t: dict[str, Any]) -> str:
    links = "no link figure" if t["links_s"] is None else f"{t['links_s']:.4g} s"
    return f"compute {t['compute_s']:.4g} s, memory {t['memory_s']:.4g} s, links {links}: bound by {t['bound_by']}"


def _range_lines(record: dict[str, Any]) -> list[str]:
    """The calibrated range of the rate, the $ and the whole fine-tune."""
    cal, ft = record["calibration"], record["fine_tune"]
    whole = f"  whole fine-tune: {ft['steps']} steps, >= {ft['time_s'] / 60:.3g} min"
    whole += f", >= {usd_text(ft['usd'])}" if ft["usd"] is not None else ""
    if cal["ratio"] is None:
        return [f"  calibrated range: none ({cal['note']})", whole + " (the bound alone, a best case)"]
    usd = (
        f", ${record['usd_per_1m_real_tokens_bound']:.4g}-${cal['usd_per_1m_real_tokens']:.4g} per 1M real tokens"
        if cal["usd_per_1m_real_tokens"]
        else ""
    )
    ft_usd = f", {usd_text(ft['usd'])}-{usd_text(cal['fine_tune_usd'])}" if cal["fine_tune_usd"] is not None else ""
    return [
        f"  calibrated range: {cal['real_tokens_per_s_per_gpu']:.4g}-{record['real_tokens_per_s_per_gpu_bound']:.4g} real "
        f"tokens/s per GPU{usd} (the bound's end is a best case; the other is bound x {cal['ratio']:.3g}: {cal['note']})",
        f"  whole fine-tune: {ft['steps']} steps, {ft['time_s'] / 60:.3g}-{cal['fine_tune_time_s'] / 60:.3g} min{ft_usd} "
        "(projected: steps only, setup and compiles not included)",
    ]


# --------------------------------------------------------------------------- the GPU side
GPU_TABLE = "gpu_published.json"


@dataclass(frozen=True)
class PublishedGpuRun:
    """A published GPU training measurement with the configuration bench bounds it at
    (this module; the table's convention in gpu_published.json)."""

    id: str
    source: dict[str, str]  # repository, path, commit
    quote: str  # the publisher's own row, the figures below transcribed from it
    configuration_sources: str  # where the rest of the configuration is stated
    stack: str
    catalog_key: str
    gpus: int
    model: str  # bench's preset of the same architecture
    method: str
    lora_rank: int | None
    lora_targets: list[str]
    global_batch: int
    rows_per_gpu: int  # per micro-batch
    accumulation: int
    seq_len: int
    checkpointing: bool
    fsdp: int
    data: int
    sharding: str
    weight_bytes: int
    grad_bytes: int
    compute_bytes: int
    measured_tokens_per_s_per_gpu: float
    differences: str = ""

    @property
    def label(self) -> str:
        return f"{self.source['repository']} {self.source['path']}@{self.source['commit'][:8]} ({self.id})"

    def step_shape(self):
        """The run's step as this module bounds it."""
        from harness.figures.metrics import matmul_weights
        from harness.plan.plan import lora_trainable_params
        from harness.scenario.presets import MODEL_PRESETS

        arch = MODEL_PRESETS[self.model]
        lora = self.method == "lora"
        return StepShape(
            arch=arch,
            lora=lora,
            trainable=lora_trainable_params(arch, tuple(self.lora_targets), self.lora_rank)
            if lora
            else sum(matmul_weights(arch)),
            rows_per_gpu=self.rows_per_gpu,
            accumulation=self.accumulation,
            checkpointing=self.checkpointing,
            fsdp=self.fsdp,
            data=self.data,
            sharding=self.sharding,
            weight_bytes=self.weight_bytes,
            grad_bytes=self.grad_bytes,
            compute_bytes=self.compute_bytes,
        )

    @cached_property
    def bound(self) -> dict[str, Any]:
        """The step's bound on the catalog card (step_bound)."""
        return step_bound(self.step_shape(), self.seq_len, gpu_card(f"{self.catalog_key}:{self.gpus}", self.id))

    @property
    def bound_tokens_per_s_per_gpu(self) -> float:
        return self.rows_per_gpu * self.accumulation * self.seq_len / self.bound["step_s"]

    @property
    def measured_over_bound(self) -> float:
        return self.measured_tokens_per_s_per_gpu / self.bound_tokens_per_s_per_gpu


def load_gpu_published(folder: Any = None) -> tuple[PublishedGpuRun, ...]:
    """The points of gpu_published.json (the package's by default), refused as
    load_published refuses: naming the file, the entry and the field."""
    from harness.projection.calibration import PROJECTIONS

    path = (PROJECTIONS if folder is None else folder) / GPU_TABLE
    names = {f.name for f in fields(PublishedGpuRun)}
    required = {f.name for f in fields(PublishedGpuRun) if f.default is MISSING}
    out = []
    for i, entry in enumerate(json.loads(path.read_text())["points"]):
        unknown, missing = sorted(set(entry) - names), sorted(required - set(entry))
        if unknown or missing:
            field = (unknown or missing)[0]
            raise ValueError(f"{path}: points[{i}].{field}: {'unknown field' if unknown else 'missing'}")
        out.append(PublishedGpuRun(**entry))
    return tuple(out)


GPU_PUBLISHED: tuple[PublishedGpuRun, ...] = load_gpu_published()


def gpu_points(measured_folder: Any = None) -> list:
    """The GPU calibration points (harness.projection.calibration.CalibrationPoint: their
    measured / bound): the published GPU runs, then every GPU training record this project
    measured itself (own_gpu_points). They live here, beside the bound they are divided
    by: the calibration module holds the rule and the TPU points, and imports no projection."""
    from harness.projection.calibration import CalibrationPoint

    published = [
        CalibrationPoint(run.label, run.catalog_key, run.method, run.stack, run.measured_over_bound)
        for run in GPU_PUBLISHED
    ]
    return published + own_gpu_points(measured_folder)


# This project's own GPU measurements: the device suite's training records, copied into the
# package (benchmarks/device_suite.sh says how), join the GPU calibration as they are, each
# divided by the bound this module computes for its own plan on its own card.
MEASURED_FOLDER = "measured_gpu"


def own_gpu_points(folder: Any = None) -> list:
    """A calibration point per successful training record on a GPU with datasheet figures,
    in `folder` (the package's calibration_points/measured_gpu by default): measured padded
    tokens/s per GPU over the bound's, at the record's plan and static padded length. A
    record the bound cannot be computed for (dynamic padding, a card with no datasheet, a
    mesh over several hosts) is left out with its reason in own_gpu_skipped."""
    return [point for point, _ in _own_gpu(folder) if point is not None]


def own_gpu_skipped(folder: Any = None) -> list[str]:
    """The records own_gpu_points left out, each with why."""
    return [why for point, why in _own_gpu(folder) if point is None]


def _own_gpu(folder: Any) -> list[tuple[Any, str]]:
    from harness.projection.calibration import PROJECTIONS

    folder = (PROJECTIONS / MEASURED_FOLDER) if folder is None else folder
    if not folder.is_dir():
        return []
    # The device suite's archive: a folder per run, its record beside traces and the
    # calibration probe's <run_id>.calibration.json (not records).
    paths = sorted(
        (p for p in folder.rglob("*.json") if not p.name.endswith((".calibration.json", ".projection.json"))),
        key=lambda p: str(p.relative_to(folder)),
    )
    return [_own_gpu_record(path, str(path.relative_to(folder))) for path in paths]


def _own_gpu_record(path: Any, name: str) -> tuple[Any, str]:
    """A file of the archive as a point, or left out with why (a JSON file that is no
    bench record, e.g. a `--project-for` output or a trace, is named, not fatal)."""
    from harness.records.store import load_record

    try:
        record = load_record(path)
    except ValueError as exc:
        return None, f"{name}: not a bench result record ({' '.join(str(exc).split())[:200]})"
    return _own_gpu_point(record, name)


def _own_gpu_point(record, name: str) -> tuple[Any, str]:
    """(point, "") or (None, why) for one record."""
    from harness.figures.accelerators import GPU_PROJECTION_DATASHEET
    from harness.plan.plan import Plan
    from harness.projection.calibration import CalibrationPoint
    from harness.scenario.spec import Scenario

    key, count = record.accelerator.catalog_key, record.accelerator.count
    reason = (
        "not a successful training run"
        if record.task != "train" or record.status != "ok"
        else f"no datasheet figures for {key!r}"
        if key not in GPU_PROJECTION_DATASHEET
        else f"{count} GPUs: more than one host"
        if not 1 <= count <= ONE_HOST_GPUS
        else "dynamic padding: no one padded length to bound"
        if record.plan.get("padding") != "static"
        else "LoRA on modules bench cannot size: no trainable-parameter count"
        if record.plan.get("method") == "lora" and record.plan.get("trainable_params") is None
        else ""
    )
    if reason:
        return None, f"{name}: {reason}"
    scenario = Scenario.model_validate(record.scenario.resolved)
    plan = Plan.model_validate(record.plan)
    seq_len = scenario.sequence.max_length
    bound = step_bound(shape_of_plan(plan, scenario.model.architecture()), seq_len, gpu_card(f"{key}:{count}", name))
    bound_tokens_per_s_per_gpu = plan.rows_per_step * seq_len / count / bound["step_s"]
    ratio = record.figure("metrics.tokens_per_s_padded_per_chip") / bound_tokens_per_s_per_gpu
    source = f"bench's own measurement {name} ({record.scenario.name}, {record.backend.name}, {key}:{count})"
    return CalibrationPoint(source, key, plan.method, f"bench {record.backend.name}", ratio), ""
