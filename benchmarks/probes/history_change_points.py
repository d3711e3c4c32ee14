"""Does `bench history` find false changes? Answer: docs/measurements/gate-and-history.md, "History: change points".
Issue 38: how often `bench history` finds a change that is not there, and finds the one
that is; how often `bench gate --history`'s band fails an unchanged run, and catches a
15% slower one. Generated series as the tests' (tests/history_series.py): 30 runs, Gaussian
noise of 3% (sd), a +15% step from run 18 on. Run: `python benchmarks/probes/history_change_points.py [SERIES]`."""

from __future__ import annotations

import sys

import numpy as np
from scipy.stats import t

from harness.gate import history

STEP_AT, N, NOISE = 18, 30, 0.03


def series(rng, step: bool) -> list[float]:
    values = 0.5 * (1 + rng.normal(0, NOISE, N))
    if step:
        values[STEP_AT - 1 :] *= 1.15
    return list(values)


def torchprime_high(values) -> float:
    """torchprime's band: mean + max(99.9% CI half-width of the mean, 1.5%, observed spread)."""
    v = np.asarray(values)
    m, s, n = v.mean(), v.std(ddof=1), len(v)
    return m + max(t.ppf(0.9995, n - 1) * s / np.sqrt(n), 0.015 * m, np.abs(v - m).max())


def main(count: int) -> None:
    rng = np.random.default_rng(38)
    false = sum(len(history.change_indices(series(rng, False))) for _ in range(count))
    found = [history.change_indices(series(rng, True)) for _ in range(count)]
    right = sum(1 for f in found if len(f) == 1 and f[0][0] + 1 in (STEP_AT - 1, STEP_AT, STEP_AT + 1))
    print(f"change points over {count} series of {N} runs, noise {NOISE:.0%}:")
    print(f"  flat: {false} false change points ({false / count:.3f} per series)")
    print(f"  +15% step at run {STEP_AT}: exactly one, at run 17-19, in {right / count:.1%}")
    small = 0
    for _ in range(count):
        values = 0.5 * (1 + rng.normal(0, NOISE, N))
        values[STEP_AT - 1 :] *= 1.07
        kept = history.change_indices(list(values))
        small += len(kept) == 1 and abs(kept[0][0] + 1 - STEP_AT) <= 2
    print(f"  +7% step at run {STEP_AT}: exactly one, within 2 runs, in {small / count:.1%}")
    for name, high in (
        ("bench (99% prediction)", lambda v: history.band(v).high),
        ("torchprime (99.9% CI)", torchprime_high),
    ):
        unchanged = sum(
            0.5 * (1 + rng.normal(0, NOISE)) > high(list(0.5 * (1 + rng.normal(0, NOISE, 10))))
            for _ in range(count * 4)
        )
        slower = sum(
            0.575 * (1 + rng.normal(0, NOISE)) > high(list(0.5 * (1 + rng.normal(0, NOISE, 10))))
            for _ in range(count * 4)
        )
        print(
            f"  band of 10 runs, {name}: fails {unchanged / (count * 4):.1%} of unchanged runs, {slower / (count * 4):.1%} of +15% runs"
        )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
