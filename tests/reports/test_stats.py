"""How sure a ratio is: the bootstrap interval against scipy's, and every way a sentence
reads it (the direction flipped, the sides swapped), by hand."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from scipy.stats import bootstrap

from reports.stats import (
    LEVEL,
    METHOD,
    RESAMPLES,
    SEED,
    Ratio,
    bootstrap_interval,
    interval_words,
    noise_words,
    ratio_of_medians,
    ratio_sentence,
)

# Two sides of 31 and 29 runs (lognormal, sigma 0.5, rounded): medians of resamples this
# size are fine-grained enough that the 95% interval's ends sit 5-7% outside the 90%
# one's, far more than 2,000 resamples' noise (under 1% here).
A = [1.065, 0.936, 1.377, 1.054, 0.765, 1.198, 1.919, 1.606, 0.703, 0.531, 0.732, 1.021, 0.313, 0.896, 0.536, 0.693]
A += [0.762, 0.854, 1.229, 1.684, 0.938, 1.98, 0.717, 1.192, 1.571, 1.048, 0.69, 0.631, 0.795, 1.116, 0.604]
B = [0.901, 0.923, 1.311, 1.113, 1.194, 0.721, 0.937, 1.48, 2.11, 0.533, 2.132, 1.96, 1.478, 1.141, 0.855, 2.073]
B += [2.665, 2.462, 1.93, 1.196, 0.547, 0.998, 1.389, 0.525, 1.218, 1.24, 1.416, 0.553, 0.718]


def _ratio_of_medians(x, y, axis=-1):
    return np.median(x, axis=axis) / np.median(y, axis=axis)


def scipy_interval(a, b, level: float) -> tuple[float, float]:
    """scipy's percentile bootstrap, each side resampled independently, many resamples."""
    found = bootstrap(
        (np.asarray(a), np.asarray(b)),
        _ratio_of_medians,
        confidence_level=level,
        method="percentile",
        n_resamples=40_000,
        vectorized=True,
        rng=np.random.default_rng(1),
    )
    return found.confidence_interval.low, found.confidence_interval.high


def test_the_interval_is_scipys_95_percent_percentile_bootstrap():
    low, high = bootstrap_interval(A, B)
    low95, high95 = scipy_interval(A, B, 0.95)
    low90, high90 = scipy_interval(A, B, 0.90)
    assert low == pytest.approx(low95, rel=0.015) and high == pytest.approx(high95, rel=0.015)
    # ... and well apart from the 90% interval (tails not halved would give that one).
    assert low < low90 * 0.97 and high > high90 * 1.03
    assert LEVEL == 0.95 and RESAMPLES == 2000 and SEED == 0


# Even-sized sides: a median then averages two values, so the resampled ratios have few
# ties and a percentile moved by a fraction of a rank moves the interval's ends.
EVEN = (A[:30], A[30:] + B[:27])


@pytest.mark.parametrize("a, b", [(A, B), EVEN])
def test_the_interval_holds_the_central_95_percent_of_the_resampled_ratios(a, b):
    """The convention stated on the report, restated with numpy: the same seeded draws
    (side a's indices, then side b's), the 2.5th and 97.5th percentiles of the ratios."""
    rng = np.random.default_rng(0)
    va, vb = np.asarray(a), np.asarray(b)
    ra = np.median(va[rng.integers(0, len(va), (2000, len(va)))], axis=1)
    rb = np.median(vb[rng.integers(0, len(vb), (2000, len(vb)))], axis=1)
    ratios = ra / rb
    low, high = bootstrap_interval(a, b)
    assert (low, high) == pytest.approx((np.percentile(ratios, 2.5), np.percentile(ratios, 97.5)), rel=1e-12)
    inside = np.mean((ratios >= low) & (ratios <= high))
    assert 0.945 <= inside <= 0.955


def test_ratio_of_medians_and_its_interval():
    r = ratio_of_medians(A, B)
    assert r.value == pytest.approx(statistics.median(A) / statistics.median(B))
    assert (r.low, r.high) == bootstrap_interval(A, B) and r.runs == (31, 29)
    assert r.low < r.value < r.high and r.has_interval


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ([], [1.0], None),
        ([1.0], [], None),
        ([None, None], [1.0], None),
        ([0.0, 1.0], [1.0, 2.0], None),  # a non-positive figure has no ratio
        ([1.0, 2.0], [-1.0, 2.0], None),
        ([1.0, 2.0], [0.0, 2.0], None),
        ([3.0, None], [2.0], Ratio(1.5, None, None, (1, 1))),  # None runs are dropped, not counted
        ([3.0], [2.0, 1.0], Ratio(2.0, None, None, (1, 2))),
    ],
)
def test_ratio_of_medians_without_an_interval(a, b, expected):
    assert ratio_of_medians(a, b) == expected


def test_an_inverted_ratio_swaps_and_inverts_its_interval():
    r = Ratio(0.5, 0.4, 0.625, (3, 5))
    assert r.inverted() == Ratio(2.0, 1.6, 2.5, (5, 3))
    assert Ratio(4.0, None, None, (1, 2)).inverted() == Ratio(0.25, None, None, (2, 1))


@pytest.mark.parametrize(
    "low, high, distinguishable",
    [(1.1, 1.3, True), (0.7, 0.9, True), (0.9, 1.1, False), (1.0, 1.2, False), (0.8, 1.0, False)],
)
def test_an_interval_touching_1_is_not_distinguishable(low, high, distinguishable):
    assert Ratio(1.0, low, high, (2, 2)).distinguishable is distinguishable
    assert Ratio(1.0, None, None, (1, 2)).distinguishable is None


def test_a_slower_subject_reads_faster_from_the_other_side_with_its_interval_inverted():
    """0.5x as fast, interval 0.4-0.625: `2.00x slower (95% CI 1.60-2.50)`: 1/0.625 and 1/0.4."""
    r = Ratio(0.5, 0.4, 0.625, (3, 3))
    assert interval_words(r) == "95% CI 0.40-0.62"
    assert interval_words(r, flip=True) == "95% CI 1.60-2.50"
    assert ratio_sentence(r, "faster", "slower") == "2.00x slower (95% CI 1.60-2.50)"
    assert ratio_sentence(r, "faster", "slower", "in steady state") == "2.00x slower in steady state (95% CI 1.60-2.50)"
    faster = Ratio(2.0, 1.6, 2.5, (3, 3))
    assert ratio_sentence(faster, "faster", "slower", "in steady state") == (
        "2.00x faster in steady state (95% CI 1.60-2.50)"
    )


def test_sentences_without_an_interval_or_not_distinguishable():
    assert ratio_sentence(Ratio(0.8, None, None, (1, 1)), "cheaper", "dearer", "per 1M") == "1.25x dearer per 1M"
    assert ratio_sentence(Ratio(1.25, None, None, (1, 1)), "cheaper", "dearer") == "1.25x cheaper"
    same = Ratio(0.95, 0.8, 1.1, (2, 2))  # slower, interval spans 1: flipped 1/1.1 to 1/0.8
    assert ratio_sentence(same, "faster", "slower", "x", "speed") == (
        "speed not distinguishable (1.05x slower, 95% CI 0.91-1.25)"
    )
    assert ratio_sentence(Ratio(1.05, 0.9, 1.2, (2, 2)), "faster", "slower") == (
        "the two not distinguishable (1.05x faster, 95% CI 0.90-1.20)"
    )


@pytest.mark.parametrize(
    "runs, words",
    [
        ((1, 3), "1 vs 3 runs: between-run noise not measured"),
        ((1, 1), "1 vs 1 run: between-run noise not measured"),
        ((2, 1), "2 vs 1 runs: between-run noise not measured"),
    ],
)
def test_noise_words(runs, words):
    assert noise_words(runs) == words


def test_the_method_states_level_resamples_and_seed():
    assert METHOD == (
        "95% percentile bootstrap of the ratio of medians: each side's runs resampled with replacement, "
        "independently, 2,000 times (seed 0); needs at least 2 runs per side"
    )


def test_a_ratio_of_exactly_1_reads_in_the_better_direction():
    assert ratio_sentence(Ratio(1.0, None, None, (1, 1)), "faster", "slower") == "1.00x faster"


def test_two_runs_a_side_are_enough_for_an_interval():
    two = ratio_of_medians([1.0, 1.2], [2.0, 2.2])
    assert two.has_interval and two.runs == (2, 2) and two.value == pytest.approx(1.1 / 2.1)
    assert not ratio_of_medians([1.0], [2.0, 2.2]).has_interval and not ratio_of_medians([1.0, 1.2], [2.0]).has_interval
