"""The projection's calibration: measured / bound where a measurement of the same
configuration exists (issue 37; docs/measurements.md, "Calibration").

A roofline bound (harness/projection.py) is a lower bound on step time; what a real
step takes is some fraction of it. That fraction is known only where a measurement and
the same configuration's bound meet: a published TPU training measurement re-projected
through a bench backend at the same model, batch, sequence and slice, or a GPU run whose
compiled step the device suite also bounded (benchmarks/gpu_calibration.py). Each entry
here carries its full configuration and its source; `measured_over_bound` is None until
the bound has been computed by a bench backend (never guessed).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PublishedMeasurement:
    source: str
    catalog_key: str
    slice: str
    model: str
    method: str  # full / lora
    global_batch: int
    seq_len: int
    measured_tokens_per_s_per_chip: float
    measured_tflops_per_chip: float | None  # the publisher's own count
    bound_tokens_per_s_per_chip: float | None = None  # bench's bound, same configuration
    note: str = ""

    @property
    def measured_over_bound(self) -> float | None:
        if not self.bound_tokens_per_s_per_chip:
            return None
        return self.measured_tokens_per_s_per_chip / self.bound_tokens_per_s_per_chip


PUBLISHED: tuple[PublishedMeasurement, ...] = (
    PublishedMeasurement(
        source="github.com/AI-Hypercomputer/tpu-recipes training/trillium/Llama3.1-8B-MaxText/v6e-8 (MaxText "
        "tpu-recipes-v0.1.4, JAX 0.6.1): 'completed step: 14, seconds: 3.443, TFLOP/s/device: 413.433, "
        "Tokens/s/device: 7138.890'",
        catalog_key="tpu-v6e",
        slice="tpu-v6e-8",
        model="Llama 3.1 8B",
        method="full (pre-training step, remat custom, fsdp over 8 chips)",
        global_batch=24,  # per_device_batch_size 3 x 8 chips
        seq_len=8192,
        measured_tokens_per_s_per_chip=7138.89,
        measured_tflops_per_chip=413.433,
        note="not yet re-projected: bench has no Llama 3.1 8B preset (harness/presets.py)",
    ),
    PublishedMeasurement(
        source="github.com/AI-Hypercomputer/maxtext docs/reference/models/tiering.md (Trillium, Gold): Llama 3.1 8B, "
        "256 chips, BF16, SL=8192, MFU 45.46%, approx 7,207 tokens/s/device",
        catalog_key="tpu-v6e",
        slice="tpu-v6e-256",
        model="Llama 3.1 8B",
        method="full (pre-training step)",
        global_batch=0,  # not stated in the table: the linked recipe's per-device batch
        seq_len=8192,
        measured_tokens_per_s_per_chip=7207.0,
        measured_tflops_per_chip=None,
        note="not yet re-projected: bench has no Llama 3.1 8B preset; the global batch is the recipe's, not tabled",
    ),
)


def measured_over_bound(catalog_key: str) -> tuple[float, str] | None:
    """(measured / bound, its source) of the first published measurement on this
    generation that has been re-projected; None where none has."""
    for entry in PUBLISHED:
        if entry.catalog_key == catalog_key and entry.measured_over_bound is not None:
            return entry.measured_over_bound, entry.source.split(" (")[0]
    return None
