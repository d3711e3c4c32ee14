"""The projection's calibration on a GPU (issue 37): the same roofline bound bench puts
on a TPU slice, put on the card a JAX backend just ran on, beside that run's measured
step. measured / bound is how far a real step stays from the compiler's bound.

    python benchmarks/gpu_calibration.py RECORD.json [RECORD.json ...] [--out DIR]

For each measured train record of a JAX backend (torchax, jax-tunix) on a GPU: the
backend's own step (backends/*/aot.py: the programs it jits, with the record's plan)
compiled for this host's devices (`jax.devices()`, JAX's CUDA backend on the card),
`cost_analysis` for its FLOPs and bytes, the collectives of its HLO, and the bound
max(FLOPs / peak, bytes / HBM bandwidth, collective bytes / NVLink) per program with the
card's datasheet figures (harness/figures/accelerators.py), at the record's longest padded
length; then measured / bound = bound step time / the record's mean steady step
(harness/fine_tune.steady_step_s). Written as `<run_id>.calibration.json` beside the
record (or under --out) and printed. Needs the record's own environment (the JAX
backend's: jax with CUDA); on a CPU host it compiles for the CPU and says so (the check
the tests make of the pieces: the figures are not a GPU's).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

GIB = 1024**3
AOT_MODULES = {"jax-tunix": "backends.jax_tunix.aot", "torchax": "backends.torchax_jax.aot"}


def card(catalog_key: str, count: int):
    """The card as the projection's chip: its peak, HBM bandwidth and NVLink; None
    when bench has no figure for one of them (then no bound is claimed)."""
    from harness.figures.accelerators import GPU_HBM_BYTES_PER_S, NVLINK_BYTES_PER_S, peak_flops
    from harness.projection.projection import TpuSlice

    peak, hbm = peak_flops(catalog_key), GPU_HBM_BYTES_PER_S.get(catalog_key)
    if not peak or not hbm:
        return None
    return TpuSlice(
        f"{count}x {catalog_key}",
        catalog_key,
        count,
        "gpu",
        (1, 1, 1),
        0,  # capacity: the run fitted, it was measured; not what is calibrated
        hbm,
        peak,
        NVLINK_BYTES_PER_S.get(catalog_key),
        None,
        "not checked: a measured run",
    )


def calibration(record: dict[str, Any], programs: list[dict[str, Any]], seq_len: int) -> dict[str, Any]:
    """measured / bound of a record from its step's compiled programs' facts (as
    backends/jax_common/aot.compile_facts writes them)."""
    from harness.projection.fine_tune import steady_step_s
    from harness.projection.projection import Program
    from harness.projection.tpu_plan import _program

    chip = card(record["accelerator"]["catalog_key"], record["accelerator"]["count"])
    if chip is None:
        return {
            "run_id": record["run_id"],
            "why_not": f"no peak or HBM figure for {record['accelerator']['catalog_key']}",
        }
    terms = [Program.model_validate(_program(p)).terms(chip) for p in programs]
    if None in terms:
        return {"run_id": record["run_id"], "why_not": "the compiler gave no FLOPs or bytes"}
    bound = sum(t.runs_per_step * t.bound_s for t in terms)
    measured = steady_step_s(record["raw"])
    return {
        "run_id": record["run_id"],
        "scenario": record["scenario"]["name"],
        "variant": record["scenario"]["variant"],
        "backend": record["backend"]["name"],
        "accelerator": chip.name,
        "seq_len": seq_len,
        "peak_flops": chip.peak_flops,
        "hbm_bytes_per_s": chip.hbm_bytes_per_s,
        "nvlink_bytes_per_s": chip.ici_bytes_per_s,
        "terms": [t.model_dump() for t in terms],
        "bound_step_s": bound,
        "measured_step_s": measured,
        "measured_over_bound": bound / measured if measured else None,
        "convention": "bound step time / measured mean steady step: the fraction of the bound's throughput reached",
    }


def compile_record(record: dict[str, Any]) -> tuple[list[dict[str, Any]], int, str]:
    """The record's step compiled on this host's devices: (programs' facts, length, platform)."""
    import importlib

    import jax

    from harness.plan.plan import Plan
    from harness.scenario.loader import validate

    backend = record["backend"]["name"]
    if backend not in AOT_MODULES:
        raise SystemExit(f"{record['run_id']}: backend {backend}: only the JAX backends' step compiles here")
    scenario = validate(record["scenario"]["resolved"], record["scenario"]["file"])
    plan = Plan.model_validate(record["plan"])
    steps = record["raw"]["loop"]["steps"]
    seq_len = max(max(s.get("seq_lens") or [s["seq_len"]]) for s in steps if s["phase"] == "measure")
    devices = jax.devices()
    module = importlib.import_module(AOT_MODULES[backend])
    (programs,) = module.compile_shapes(scenario, plan, devices, [seq_len])
    return programs, seq_len, devices[0].platform


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records", nargs="+")
    parser.add_argument(
        "--out", default=None, help="directory for the .calibration.json files (default: beside each record)"
    )
    args = parser.parse_args(argv)
    for path in map(Path, args.records):
        record = json.loads(path.read_text())
        if record.get("status") != "ok":  # a cut or failed run has no measured step to calibrate
            reason = ((record.get("failure") or {}).get("reason") or "no reason recorded").splitlines()[0]
            print(f"{path.name}: not calibrated: the run {record.get('status', 'has no status')} ({reason})")
            continue
        programs, seq_len, platform = compile_record(record)
        result = calibration(record, programs, seq_len)
        result["compiled_on"] = platform
        if platform != "gpu":
            result["note"] = f"compiled for {platform}, not the card: the figures are not a GPU's"
        out = Path(args.out or path.parent) / f"{record['run_id']}.calibration.json"
        out.write_text(json.dumps(result, indent=1))
        ratio = result.get("measured_over_bound")
        print(
            f"{path.name}: measured / bound {ratio:.3g} on {result['accelerator']}"
            if ratio
            else f"{path.name}: {result}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
