"""How often does the history band fail an unchanged run, catch a slower one? Answer: docs/measurements/gate-and-history.md, "#44".
The history band is harness/gate/history.py's BAND_RULE; the rates, on generated series, are
the ones docs/reports-and-gates.md quotes.

Answers: with 10 runs of 3% normal noise, what share of unchanged runs fall beyond the band
(false alarms), what share of runs 15% slower do (detection), and how far one outlier in
the window widens it. Numpy only; run `python benchmarks/probes/gate_band_rates.py`.
"""

from __future__ import annotations

import argparse

import numpy as np


def rates(trials: int, n: int, noise: float, slower: float, seed: int) -> dict[str, float]:
    from harness.gate.history import band

    rng = np.random.default_rng(seed)
    windows = rng.normal(1.0, noise, (trials, n))
    new = rng.normal(1.0, noise, trials)
    highs = np.array([band(list(w)).high for w in windows])
    with_outlier = windows.copy()
    with_outlier[:, -1] = 3.0  # one run at 3x in each window
    highs_outlier = np.array([band(list(w)).high for w in with_outlier[: trials // 10]])
    return {
        "false alarms (unchanged run beyond the band)": float(np.mean(new > highs)),
        f"detection ({slower:.0%} slower run beyond the band)": float(np.mean(new * (1 + slower) > highs)),
        "median band top, no outlier": float(np.median(highs)),
        "median band top, one 3x outlier in the window": float(np.median(highs_outlier)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--noise", type=float, default=0.03)
    parser.add_argument("--slower", type=float, default=0.15)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for name, value in rates(args.trials, args.runs, args.noise, args.slower, args.seed).items():
        print(f"{name}: {value:.4f}")


if __name__ == "__main__":
    main()
