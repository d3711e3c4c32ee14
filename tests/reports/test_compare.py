"""Comparisons read from either side: the subject slower than the baseline, so the
sentence flips to "slower" and the headline swaps the sides; every figure recomputed
from the records by hand (statistics.median, numpy's bootstrap), never by the report."""

from __future__ import annotations

import random
import statistics

import numpy as np
import pytest

from records import make_record

TPU = dict(backend="xla-fsdpv2", kind="tpu", device="TPU v5", catalog_key="tpu-v5p", chips=4, usd_per_chip_hour=4.0)
GPU = dict(
    backend="gpu-fsdp",
    kind="cuda",
    device="NVIDIA H100 80GB HBM3",
    catalog_key="h100-sxm",
    chips=2,
    usd_per_chip_hour=3.0,
)


def _runs(spec: dict, step_s: float, repeats: int, seed: int, minute: int) -> list[dict]:
    """`repeats` runs of one configuration, each run's median jittered by up to +-3%."""
    rng = random.Random(seed)
    out = []
    for repeat in range(repeats):
        base = step_s * rng.uniform(0.97, 1.03)
        out.append(
            make_record(
                [base * rng.uniform(0.99, 1.01) for _ in range(6)],
                variant="padding=static",
                repeat=repeat,
                precision="bf16",
                started_at=f"2026-11-25T00:{minute + repeat:02d}:00+00:00",
                **spec,
            )
        )
    return out


def np_interval(a: list[float], b: list[float]) -> tuple[float, float]:
    """The stated convention, restated with numpy: 2,000 resamples of each side (seed 0,
    side a's draws first), the 2.5th and 97.5th percentiles of the ratio of medians."""
    rng = np.random.default_rng(0)
    a, b = np.asarray(a), np.asarray(b)
    ma = np.median(a[rng.integers(0, len(a), (2000, len(a)))], axis=1)
    mb = np.median(b[rng.integers(0, len(b), (2000, len(b)))], axis=1)
    low, high = np.percentile(ma / mb, [2.5, 97.5])
    return float(low), float(high)


@pytest.fixture(scope="module")
def swapped():
    """The TPU (3.2x faster, cheaper per token) is the baseline, the GPU the subject: the
    subject is slower, so every headline path swaps."""
    from reports.model import build

    records = _runs(TPU, 0.05, 4, seed=1, minute=0) + _runs(GPU, 0.16, 4, seed=2, minute=10)
    report = build(records, "accelerator=v5p-8")
    tok = {
        k: [r["metrics"]["tokens_per_s_real"] for r in records if r["accelerator"]["catalog_key"] == k]
        for k in ("tpu-v5p", "h100-sxm")
    }
    usd = {
        k: [r["cost"]["usd_per_1m_tokens_real"] for r in records if r["accelerator"]["catalog_key"] == k]
        for k in ("tpu-v5p", "h100-sxm")
    }
    return report.sections[0], tok, usd


def test_a_slower_subject_reads_slower_with_its_interval_inverted(swapped):
    section, tok, usd = swapped
    (c,) = section.comparisons
    assert (c.subject_level, c.reference_level) == ("2x h100-sxm · gpu-fsdp", "v5p-8 · xla-fsdpv2")
    slower = statistics.median(tok["tpu-v5p"]) / statistics.median(tok["h100-sxm"])
    low, high = np_interval(tok["h100-sxm"], tok["tpu-v5p"])  # subject / reference, < 1
    assert c.speed.value == pytest.approx(1 / slower) and (c.speed.low, c.speed.high) == pytest.approx((low, high))
    dearer = statistics.median(usd["h100-sxm"]) / statistics.median(usd["tpu-v5p"])
    cost_low, cost_high = np_interval(usd["tpu-v5p"], usd["h100-sxm"])  # > 1: the subject cheaper
    assert c.cost.value == pytest.approx(1 / dearer)
    assert c.sentence.startswith(
        f"2x h100-sxm · gpu-fsdp vs v5p-8 · xla-fsdpv2 (bf16): {slower:.2f}x slower "
        f"(95% CI {1 / high:.2f}-{1 / low:.2f}); {dearer:.2f}x dearer per 1M real tokens (steady state) "
        f"(95% CI {1 / cost_high:.2f}-{1 / cost_low:.2f})"
    )
    assert 3.0 < slower < 3.4 and 1.1 < dearer < 1.3  # the records are what the fixture says


def test_the_headline_puts_the_faster_side_first_and_inverts_both_ratios(swapped):
    section, tok, usd = swapped
    speedup = statistics.median(tok["tpu-v5p"]) / statistics.median(tok["h100-sxm"])
    cheaper = statistics.median(usd["h100-sxm"]) / statistics.median(usd["tpu-v5p"])
    low, high = np_interval(tok["h100-sxm"], tok["tpu-v5p"])
    cost_low, cost_high = np_interval(usd["tpu-v5p"], usd["h100-sxm"])
    assert section.headline[0] == (
        f"v5p-8 · xla-fsdpv2 vs 2x h100-sxm · gpu-fsdp (bf16): {speedup:.2f}x faster "
        f"(95% CI {1 / high:.2f}-{1 / low:.2f}) and {cheaper:.2f}x cheaper per 1M real tokens "
        f"(95% CI {1 / cost_high:.2f}-{1 / cost_low:.2f})"
    )


def test_oriented_swaps_rows_levels_and_inverts_speed_and_cost(swapped):
    from reports.compare import oriented

    section, _, _ = swapped
    (c,) = section.comparisons
    first, second, first_level, second_level, speed, cost = oriented(c)
    assert (first, second) == (c.reference, c.subject)
    assert (first_level, second_level) == (c.reference_level, c.subject_level)
    assert (speed.value, speed.low, speed.high) == pytest.approx((1 / c.speed.value, 1 / c.speed.high, 1 / c.speed.low))
    assert (cost.value, cost.low, cost.high) == pytest.approx((1 / c.cost.value, 1 / c.cost.high, 1 / c.cost.low))
    assert speed.runs == (4, 4) and cost.runs == (4, 4)
