"""How sure a ratio between two sets of runs is: a seeded percentile bootstrap.

Convention (stated on every report): each side's runs are resampled with replacement,
independently, RESAMPLES times (seed SEED, so a report is reproducible); each resample
gives the ratio of the two sides' medians; the 95% interval is the 2.5th and 97.5th
percentile of those ratios. An interval that contains 1 means the two sides are not
distinguishable at this confidence. With fewer than two runs on a side there is no
between-run spread to resample: the ratio has no interval, and says so.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

RESAMPLES = 2000
SEED = 0
LEVEL = 0.95
METHOD = (
    f"{LEVEL:.0%} percentile bootstrap of the ratio of medians: each side's runs resampled with "
    f"replacement, independently, {RESAMPLES:,} times (seed {SEED}); needs at least 2 runs per side"
)
NOT_MEASURED = "between-run noise not measured"


@dataclass(frozen=True)
class Ratio:
    """median(a) / median(b), with its bootstrap interval when both sides have repeats."""

    value: float
    low: float | None
    high: float | None
    runs: tuple[int, int]

    @property
    def has_interval(self) -> bool:
        return self.low is not None

    @property
    def distinguishable(self) -> bool | None:
        """False when the interval contains 1; None when there is no interval."""
        if not self.has_interval:
            return None
        return not (self.low <= 1.0 <= self.high)

    def inverted(self) -> Ratio:
        """b / a: the same comparison read from the other side."""
        if not self.has_interval:
            return Ratio(1 / self.value, None, None, self.runs[::-1])
        return Ratio(1 / self.value, 1 / self.high, 1 / self.low, self.runs[::-1])


def ratio_of_medians(a: Sequence[float], b: Sequence[float]) -> Ratio | None:
    """None when a side has no usable value (no run, or a non-positive figure)."""
    a, b = [x for x in a if x is not None], [x for x in b if x is not None]
    if not a or not b or min(a) <= 0 or min(b) <= 0:
        return None
    value = statistics.median(a) / statistics.median(b)
    if len(a) < 2 or len(b) < 2:
        return Ratio(value, None, None, (len(a), len(b)))
    low, high = bootstrap_interval(a, b)
    return Ratio(value, low, high, (len(a), len(b)))


def bootstrap_interval(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    import numpy as np

    rng = np.random.default_rng(SEED)
    va, vb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ma = np.median(va[rng.integers(0, len(va), (RESAMPLES, len(va)))], axis=1)
    mb = np.median(vb[rng.integers(0, len(vb), (RESAMPLES, len(vb)))], axis=1)
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(ma / mb, [tail, 100 - tail])
    return float(low), float(high)


def interval_words(r: Ratio, flip: bool = False) -> str:
    """`95% CI 2.80-3.12`, as read in the sentence's direction."""
    low, high = (1 / r.high, 1 / r.low) if flip else (r.low, r.high)
    return f"{LEVEL:.0%} CI {low:.2f}-{high:.2f}"


def noise_words(runs: tuple[int, int]) -> str:
    """Why a ratio has no interval: `1 vs 3 runs: between-run noise not measured`."""
    return f"{runs[0]} vs {runs[1]} run{'s' if max(runs) > 1 else ''}: {NOT_MEASURED}"


def ratio_sentence(r: Ratio, better: str, worse: str, what: str = "", quantity: str = "") -> str:
    """`2.97x faster (95% CI 2.80-3.12)`; `speed not distinguishable (1.01x faster, 95%
    CI 0.95-1.08)`; without repeats the bare ratio (the caller says once, for the whole
    comparison, that noise was not measured). `r` is "how many times better" (> 1 =
    better); the words carry the direction, `quantity` names what is not distinguishable."""
    flip = r.value < 1
    ratio = f"{1 / r.value if flip else r.value:.2f}x {worse if flip else better}"
    tail = f" {what}" if what else ""
    if not r.has_interval:
        return ratio + tail
    if r.distinguishable is False:
        return f"{quantity or 'the two'} not distinguishable ({ratio}, {interval_words(r, flip)})"
    return f"{ratio}{tail} ({interval_words(r, flip)})"
