"""`bench plan SCENARIO --recommend`: which accelerator to rent (issue 43).

Every catalog option the scenario can run on, TPU slices and GPU counts alike, projected
the same way, from bench's own count of the step's work (harness/projection/gpu_projection.py: FLOPs,
a floor of memory bytes, ring wire bytes) over each option's datasheet, so that the
options are compared on one footing and no compile or device is needed:

- GPUs: every kind with datasheet figures and a price (h100-sxm, h200, b200, a100, l4) x
  1, 2, 4, 8 per host; the calibrated end from the published GPU runs;
- TPUs: v5e, v5p, v6e slices of 1 to 8 chips (one host); the chip's usable HBM, its
  datasheet peak and HBM bandwidth, and its ICI (every link both ways, halved for a ring's
  one direction: generous where a small slice has fewer ports, so still a bound); the
  calibrated end from the published TPU runs, each re-bounded by this same analytic model
  at its own configuration (tpu_points), never the compiled bound's ratio (a ratio is
  only applied to the kind of bound it was measured against).
- the calibrated end's points (calibration_pools): the kind's own points of the
  scenario's method class; where the kind has none, the other kind's points of that class
  (no TPU adapter run is calibrated yet: a LoRA scenario's TPU options take the GPU LoRA
  runs' ratio rather than a full fine-tune's, which would flatter them); the table says
  which.

Each option: fits (bench's memory model) yes/no, the binding term, the whole fine-tune's
time and $ as a range (the bound's end, a best case, and the calibrated end), ranked by
the calibrated (worse) $ end, then time; options that do not fit or cannot run are listed
after, with why. Labelled projected throughout: a TPU option here is an analytic bound, a
`--compile-for` projection the compiler's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from harness.projection.gpu_projection import Card

GPU_COUNTS = (1, 2, 4, 8)
TPU_SLICES = ("tpu-v5e-1", "tpu-v5e-4", "tpu-v5e-8", "tpu-v5p-8", "tpu-v6e-1", "tpu-v6e-4", "tpu-v6e-8")
# Per device kind, the backends tried in order (the first whose plan is not refused runs
# the option); `--backend` names one for both kinds.
BACKENDS = {"cuda": ("torch", "gpu-fsdp"), "tpu": ("torchax", "jax-tunix", "xla-fsdpv2")}


def tpu_card(text: str) -> Card:
    """A TPU slice's chips as a Card: usable HBM, datasheet peak and HBM bandwidth, ICI."""
    from harness.projection.projection import tpu_slice

    chip = tpu_slice(text, "--recommend")
    return Card(
        chip.catalog_key,
        chip.chips,
        chip.peak_flops,
        float(chip.usable_hbm),
        chip.hbm_bytes_per_s,
        chip.ici_bytes_per_s or 0.0,
        "ICI",
    )


def tpu_points():
    """The published TPU runs as calibration points of the analytic bound: measured /
    the analytic bound at each run's own configuration (bench's execution of it: 1 row
    per pass, its passes per step, each decoder layer recomputed, fsdp over the slice)."""
    from harness.figures.metrics import matmul_weights
    from harness.projection.calibration import PUBLISHED, CalibrationPoint
    from harness.projection.gpu_projection import StepShape, step_bound
    from harness.scenario.presets import MODEL_PRESETS

    points = []
    for entry in PUBLISHED:
        arch = MODEL_PRESETS[entry.model]
        card = tpu_card(entry.slice)
        rows_per_chip = entry.global_batch // card.count
        shape = StepShape(
            arch=arch,
            lora=entry.method == "lora",
            # LoRA: the adapters bench compiled for the point (its record's plan)
            trainable=entry.projected["plan"]["trainable_params"]
            if entry.method == "lora"
            else sum(matmul_weights(arch)),
            rows_per_gpu=1,
            accumulation=rows_per_chip,
            checkpointing=True,
            fsdp=card.count,
            data=1,
            sharding="full_shard",
            weight_bytes=2,
            grad_bytes=4,
            compute_bytes=2,
        )
        bound = rows_per_chip * entry.seq_len / step_bound(shape, entry.seq_len, card)["step_s"]
        ratio = entry.measured_tokens_per_s_per_chip / bound
        points.append(CalibrationPoint(entry.label, entry.catalog_key, entry.method, entry.stack, ratio))
    return points


@dataclass(frozen=True)
class Option:
    name: str  # "2x h100-sxm", "tpu-v5p-8"
    kind: str  # gpu / tpu
    backend: str
    fits: bool | None  # None: the plan refused the option
    bound_by: str
    time_s: tuple[float, float] | None  # (bound, calibrated)
    usd: tuple[float, float] | None
    why: str = ""  # a refusal's reason, or the calibration's note
    calibrated_by: str = ""  # the class whose lowest point gave the calibrated end; "*" where not the method's own


def _option(name: str, kind: str, backend: str, record: dict[str, Any]) -> Option:
    ft, cal = record["fine_tune"], record["calibration"]
    ratio = cal["ratio"]
    time = (ft["time_s"], ft["time_s"] / ratio if ratio else ft["time_s"])
    usd = (ft["usd"], ft["usd"] / ratio if ratio else ft["usd"]) if ft["usd"] is not None else None
    longest = record["bounds"][record["longest"]]["micro_batch"]["bound_by"]
    return Option(name, kind, backend, record["fits"], longest, time, usd, cal["note"])


def options(scenario, catalog, backend: str | None = None) -> list[Option]:
    """Every option projected (on `backend`, else the first of BACKENDS whose plan is
    not refused), or refused with why."""
    from harness.basics.errors import BenchError
    from harness.figures.accelerators import GPU_PROJECTION_DATASHEET
    from harness.figures.cost import price_for
    from harness.projection.gpu_projection import gpu_card

    tries: list[tuple[str, str, Any]] = []
    for key in GPU_PROJECTION_DATASHEET:
        for count in GPU_COUNTS:
            tries.append((f"{count}x {key}", "cuda", lambda k=key, n=count: gpu_card(f"{k}:{n}", "--recommend")))
    for text in TPU_SLICES:
        tries.append((text, "tpu", lambda t=text: tpu_card(t)))
    pools = calibration_pools(scenario.train.method)
    out = []
    for name, device, make in tries:
        points, said = pools[device]
        try:
            card = make()
        except BenchError as exc:
            out.append(Option(name, device, "", None, "", None, None, " ".join(str(exc).split())))
            continue
        price = price_for(card.key, scenario.cost, catalog)
        if price is None:
            continue  # an option nobody can price is not a recommendation
        option = _first_runnable(
            scenario, name, device, card, price, points, (backend,) if backend else BACKENDS[device]
        )
        out.append(replace(option, calibrated_by=said) if option.fits is not None else option)
    return ranked(out)


def calibration_pools(method: str) -> dict[str, tuple[list, str]]:
    """Per device kind, the points its calibrated end is taken from, and what the table
    says of them: the kind's own points of the method's class; else the class's points
    of the other kind (the same analytic bound, so comparable; never the other class
    while one exists, which would flatter an adapter run); else every point of the kind."""
    from harness.projection.calibration import method_class
    from harness.projection.gpu_projection import gpu_points

    kinds = {"cuda": gpu_points(), "tpu": tpu_points()}
    wanted = method_class(method)
    out = {}
    for device, own in kinds.items():
        other = kinds["tpu" if device == "cuda" else "cuda"]
        same = [p for p in own if method_class(p.method) == wanted]
        across = [p for p in other if method_class(p.method) == wanted]
        if same:
            out[device] = (same, wanted)
        elif across:
            out[device] = (across, f"{wanted} ({'TPU' if device == 'cuda' else 'GPU'}'s)")
        else:
            out[device] = (own, f"{wanted} *all*")
    return out


def _first_runnable(scenario, name, device, card, price, points, backends) -> Option:
    """The option on the first backend whose plan is not refused, or the last refusal."""
    from harness.basics.errors import BenchError
    from harness.projection.gpu_projection import project_scenario
    from harness.run import registry

    why = ""
    for backend in backends:
        capabilities = registry.get(backend).capabilities
        try:
            record = project_scenario(scenario, card, price, capabilities, name, device, points)
        except BenchError as exc:
            why = f"{backend}: " + " ".join(str(exc).split())
            continue
        return _option(name, device, backend, record)
    return Option(name, device, "", None, "", None, None, why)


def ranked(found: list[Option]) -> list[Option]:
    """Fitting options by their calibrated (worse) $ end, then time; the rest after."""
    fitting = [o for o in found if o.fits and o.usd is not None]
    rest = [o for o in found if o not in fitting]
    return sorted(fitting, key=lambda o: (o.usd[1], o.time_s[1])) + rest


def table_lines(found: list[Option]) -> list[str]:
    """The terminal table: rank, option, fits, bound by, $ and time ranges."""
    head = (
        f"{'#':>3}  {'option':<14} {'backend':<10} {'fits':<4} {'bound by':<8} {'calibrated by':<16} "
        f"{'$ per fine-tune':<22} minutes per fine-tune"
    )
    out = ["PROJECTED (not measured): which accelerator to rent, ranked by the calibrated $ end", head]
    for i, o in enumerate(found, 1):
        if o.fits is None:
            out.append(f"{'-':>3}  {o.name:<14} {'':<10} {'n/a':<4} {'':<8} {'':<16} cannot run: {o.why}")
            continue
        usd = f"${o.usd[0]:.3g}-${o.usd[1]:.3g}" if o.usd else "no price"
        minutes = f"{o.time_s[0] / 60:.3g}-{o.time_s[1] / 60:.3g}"
        rank = str(i) if o.fits else "-"
        out.append(
            f"{rank:>3}  {o.name:<14} {o.backend:<10} {'yes' if o.fits else 'NO':<4} {o.bound_by:<8} "
            f"{o.calibrated_by:<16} {usd:<22} {minutes}"
        )
    out.append(
        "Ranges: the bound's end (a best case) - the calibrated end (the bound / the lowest measured / bound of the "
        "method's class: published GPU runs for GPUs, published TPU runs re-bounded analytically for TPUs). Steps "
        "only: setup and compiles not included. A TPU row is an analytic bound; `--compile-for` gives the compiler's. "
        "calibrated by: the method class whose lowest point gave the calibrated end; (GPU's) or (TPU's): the kind "
        "has no point of that class, so the other kind's points of the class are used (the same analytic bound); *all*: "
        "no point of the class at all, the lowest of the kind's points of any class (optimistic for an adapter run)."
    )
    notes = sorted({(o.kind, o.why) for o in found if o.fits is not None})
    out += [f"calibrated end ({'GPU' if kind == 'cuda' else 'TPU'}): {why}" for kind, why in notes]
    return out
