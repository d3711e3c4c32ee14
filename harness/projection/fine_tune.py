"""The whole fine-tune a benchmark's sample of steps stands for, projected.

A benchmark measures a few steps; a user pays for every example x epochs. The scenario's
data and padding policy say exactly what the real fine-tune meets: its optimizer steps
and the distinct padded lengths of its micro-batches (each a new compile for XLA), built
here by the harness's own batching in the run's own data order. A measured record says
what setup, a compile and a steady step cost; harness.projection.projection.fine_tune puts them
together: setup + shapes x compile seconds + steps x steady step time.

No framework: the harness's data pipeline (numpy, tokenizers) only.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from harness.projection.projection import FineTune, fine_tune, fine_tune_steps


@dataclass(frozen=True)
class FineTuneWork:
    """What a whole fine-tune of a scenario meets."""

    examples: int
    epochs: int
    steps: int
    shapes: list[int]  # distinct padded lengths, in the order the run meets them
    padded_tokens_per_step: float  # mean over the fine-tune's steps
    # Per padded length: the micro-batches of the whole fine-tune at it, and their real
    # tokens over their padded tokens (what turns a padded-token rate into a real one).
    micro_batches: dict[int, int] = field(default_factory=dict)
    real_fraction: dict[int, float] = field(default_factory=dict)

    @property
    def real_fraction_overall(self) -> float | None:
        """Real / padded tokens over every micro-batch of the fine-tune."""
        padded = sum(n * count for n, count in self.micro_batches.items())
        real = sum(n * count * self.real_fraction[n] for n, count in self.micro_batches.items())
        return real / padded if padded else None


def epochs_of(scenario) -> int:
    """The fine-tune's passes over the data: the workload's `epochs`, else one."""
    return scenario.workload.epochs if scenario.workload is not None else 1


_WORK: dict[tuple, FineTuneWork] = {}  # a report asks for the same fine-tune several times


def fine_tune_work(scenario, rows_per_forward: int) -> FineTuneWork:
    """Every batch of the whole fine-tune (every example, `epochs` times), cut and
    padded as the run cuts and pads them; its steps and the distinct lengths met.
    Remembered per (resolved scenario, rows, the JSONL file's size and mtime): the
    tokenizing is seconds, and the same data gives the same batches."""
    from pathlib import Path

    data = scenario.data
    stat = Path(data.path).stat() if data.source == "jsonl" and data.path and Path(data.path).exists() else None
    key = (scenario.model_dump_json(), rows_per_forward, stat and (stat.st_size, stat.st_mtime_ns))
    if key not in _WORK:
        if len(_WORK) >= 32:
            _WORK.clear()
        _WORK[key] = _fine_tune_work(scenario, rows_per_forward)
    return _WORK[key]


def _fine_tune_work(scenario, rows_per_forward: int) -> FineTuneWork:
    from harness.data.batches import build_batches, load_examples

    examples, epochs, train = len(load_examples(scenario)), epochs_of(scenario), scenario.train
    steps = fine_tune_steps(examples, epochs, train.global_batch)
    # The benchmark's own batching, over the whole fine-tune's steps (not re-validated:
    # a one-step fine-tune has no measured step, which only a benchmark needs).
    whole = scenario.model_copy(update={"train": train.model_copy(update={"steps": steps, "window_steps": 0})})
    batches = build_batches(whole, rows_per_forward)
    met: list[int] = []
    for step in batches.steps:
        met.extend(n for n in step.seq_lens if n not in met)
    padded = statistics.fmean(step.tokens_padded for step in batches.steps)
    counts: dict[int, int] = {}
    real: dict[int, list[int]] = {}
    for micro in (m for step in batches.steps for m in step.micro_batches):
        counts[micro.seq_len] = counts.get(micro.seq_len, 0) + 1
        pair = real.setdefault(micro.seq_len, [0, 0])
        pair[0] += micro.tokens_real
        pair[1] += micro.tokens_padded
    fractions = {n: r / p for n, (r, p) in real.items()}
    return FineTuneWork(examples, epochs, steps, met, padded, counts, fractions)


# --------------------------------------------------------------------------- from a measured record
def steady_step_s(raw: dict[str, Any]) -> float | None:
    """Mean time of the measured steps that compiled nothing: a fine-tune's steps add
    up, so the mean, not the median, is what they cost together. Where every measured
    step compiled (dynamic shapes in a short run), the measured steps' time less their
    compile seconds (JAX's and XLA's compile events: trace, lower, compile)."""
    measured = [s for s in raw["loop"]["steps"] if s["phase"] == "measure"]
    calm = [s["time_s"] for s in measured if s["num_compiles"] == 0]
    if calm:
        return statistics.fmean(calm)
    less_compiles = [s["time_s"] - s.get("compile_s", 0.0) for s in measured if s.get("compile_s") is not None]
    return statistics.fmean(less_compiles) if less_compiles else None


def compile_costs(raw: dict[str, Any], steady_s: float) -> tuple[float, list[int], float]:
    """(first compile s, the lengths it covered, compile s per new length), from the
    steps' time above a steady step. The warm-up steps compile every program once (a
    backend's update program too) for the lengths they meet; a measured step that
    compiled met a new length: its excess per compile is what a new shape costs. With
    no such step, a new shape is priced at the first compile per length it covered."""
    steps = raw["loop"]["steps"]
    warm = [s for s in steps if s["phase"] == "warmup"]
    first = max(0.0, sum(s["time_s"] - steady_s for s in warm))
    lengths = sorted({n for s in warm for n in s.get("seq_lens", [s.get("seq_len")]) if n is not None})
    later = [s for s in steps if s["phase"] != "warmup" and s["num_compiles"] > 0]
    compiles = sum(s["num_compiles"] for s in later)
    if compiles:
        return first, lengths, max(0.0, sum(s["time_s"] - steady_s for s in later)) / compiles
    return first, lengths, first / max(1, len(lengths))


def from_record(record, scenario, usd_per_chip_hour: float | None = None) -> FineTune | None:
    """The whole fine-tune of `scenario` projected from a measured train record of it:
    its setup, its first compile, its compile seconds per new shape and its steady step
    time. None when the record has no step to price."""
    raw = record.raw or {}
    if not raw.get("loop") or not record.plan:
        return None
    step_s = steady_step_s(raw)
    if step_s is None:
        return None
    first, first_lengths, per_shape = compile_costs(raw, step_s)
    work = fine_tune_work(scenario, record.plan["rows_per_forward"])
    return fine_tune(
        examples=work.examples,
        epochs=work.epochs,
        steps=work.steps,
        shapes=work.shapes,
        setup_s=raw.get("setup_s"),
        first_compile_s=first,
        shapes_compiled_first=len(set(first_lengths) & set(work.shapes)),
        compile_s_per_shape=per_shape,
        step_time_s=step_s,
        basis=(
            f"measured: record {record.run_id} (setup{'' if raw.get('setup_s') is not None else ' not recorded: not projected'}"
            ", first compile, compile seconds per new shape, mean steady step)"
        ),
        compile_host=f"{record.accelerator.catalog_key} (the measured run's own)",
        chips=record.accelerator.count,
        usd_per_chip_hour=usd_per_chip_hour,
    )
