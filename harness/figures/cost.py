"""What a run costs, and the price each figure rests on.

cost = chips x hours x price per chip-hour (metrics.md). Every figure carries the price
used, its source and its date, because cost ratios between platforms move a lot with the
price assumed. Prices come from the catalog shipped in `harness/figures/prices.yaml`, a user's
prices file, or the scenario's `cost.prices` (in rising order of precedence).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness.basics.errors import SpecError
from harness.scenario.limits import MAX_USD_PER_CHIP_HOUR  # past it, a misplaced decimal point

CATALOG_FILE = Path(__file__).with_name("prices.yaml")


@dataclass(frozen=True)
class Price:
    accelerator: str
    usd_per_chip_hour: float
    pricing: str  # on_demand | spot | custom
    source: str
    date: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def load_catalog(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The shipped catalog, with a user's prices file, or one of the catalog's named price
    sets (`w3`), laid over it."""
    catalog, sets = _shipped()
    if path:
        if str(path) in sets and not Path(path).exists():
            overlay = sets[str(path)]
        elif not Path(path).exists():
            raise SpecError(str(path), "", f"no such prices file, nor a named price set ({', '.join(sorted(sets))})")
        else:
            overlay = _read(Path(path))
        for key, entry in overlay.items():
            catalog[key] = {**catalog.get(key, {}), **entry}
    return catalog


def price_sets() -> list[str]:
    """The names `--prices` accepts besides a file."""
    return sorted(_shipped()[1])


def _shipped() -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(the shipped price table, its named sets), each entry checked as a prices file's."""
    from harness.basics.yaml_io import parse_yaml

    doc = parse_yaml(CATALOG_FILE.read_text(), str(CATALOG_FILE))
    sets = doc.pop("sets", {})
    return _checked(doc, CATALOG_FILE), {name: _checked(entries, CATALOG_FILE) for name, entries in sets.items()}


def _read(path: Path) -> dict[str, dict[str, Any]]:
    from harness.basics.yaml_io import parse_yaml

    try:
        doc = parse_yaml(path.read_text(), str(path))
    except OSError as exc:
        raise SpecError(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    return _checked(doc, path)


def _checked(doc: Any, path: Path) -> dict[str, dict[str, Any]]:
    if not isinstance(doc, dict):
        raise SpecError(str(path), "", "a prices file is a mapping of accelerator -> price entry")
    for key, entry in doc.items():
        if not isinstance(entry, dict) or not entry.get("source") or not entry.get("date"):
            raise SpecError(str(path), str(key), "each price needs on_demand (or spot), source and date")
        for field in ("on_demand", "spot"):
            value = entry.get(field)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_USD_PER_CHIP_HOUR
            ):
                raise SpecError(
                    str(path),
                    f"{key}.{field}",
                    f"must be a number of $ per chip-hour > 0 and at most {MAX_USD_PER_CHIP_HOUR:g}, got {value!r}",
                )
    return doc


def price_for(accelerator: str, cost_spec, catalog: dict[str, dict[str, Any]]) -> Price | None:
    """The scenario's own price for this accelerator, else the catalog's; None if neither."""
    override = cost_spec.prices.get(accelerator) if cost_spec else None
    if override is not None:
        return Price(accelerator, override.usd_per_chip_hour, "custom", override.source, override.date)
    entry = catalog.get(accelerator)
    pricing = cost_spec.pricing if cost_spec else "on_demand"
    if not entry or entry.get(pricing) is None:
        return None
    return Price(accelerator, float(entry[pricing]), pricing, entry["source"], str(entry["date"]))


def usd(chips: int, seconds: float, price: Price) -> float:
    return chips * seconds / 3600.0 * price.usd_per_chip_hour


def training_cost(metrics: dict[str, Any], chips: int, price: Price | None) -> dict[str, Any] | None:
    """$/run (whole run and steady state) and $/1M real tokens, with the price used."""
    if price is None:
        return None
    return {
        "usd_run": usd(chips, metrics["run_time_s"], price),
        # What a run pays before its steady state: setup (model build, sharding, data)
        # and the warm-up steps (compilation); a fine-tune pays them once.
        "usd_setup": usd(chips, metrics["setup_time_s"] or 0.0, price),
        "usd_warmup": usd(chips, metrics["warmup_time_s"], price),
        "usd_steady_state": usd(chips, metrics.get("steady_time_s", metrics["measured_time_s"]), price),
        # Steady state (no compiling step), and over every measured step (recompiles too).
        "usd_per_1m_tokens_real": usd(chips, 1e6 / metrics["tokens_per_s_real"], price)
        if metrics.get("tokens_per_s_real")
        else None,
        "usd_per_1m_tokens_real_effective": usd(chips, 1e6 / metrics["tokens_per_s_real_effective"], price)
        if metrics.get("tokens_per_s_real_effective")
        else None,
        # Over the unsynced window (one device sync at its end): what a fine-tune pays.
        "usd_per_1m_tokens_real_window": usd(chips, 1e6 / metrics["window_tokens_per_s_real"], price)
        if metrics.get("window_tokens_per_s_real")
        else None,
        "chips": chips,
        "price": price.to_json(),
    }


def serving_cost(metrics: dict[str, Any], chips: int, price: Price | None) -> dict[str, Any] | None:
    """$ per 1M output tokens at the measured output throughput, and the benchmark's cost."""
    if price is None or not metrics.get("output_throughput_tok_s"):
        return None
    return {
        "usd_per_1m_output_tokens": usd(chips, 1e6 / metrics["output_throughput_tok_s"], price),
        "usd_benchmark": usd(chips, metrics["duration_s"], price),
        "chips": chips,
        "price": price.to_json(),
    }


# --------------------------------------------------------------------------- comparisons
@dataclass(frozen=True)
class Fleet:
    """Accelerators a job runs on: a catalog key and a chip count."""

    accelerator: str
    chips: int

    def __str__(self) -> str:
        return f"{self.chips}x {self.accelerator}"


# More chips than any one job rents (the largest TPU pods and GPU clusters are ~10^5).
MAX_CHIPS = 1_000_000


def parse_fleet(text: str, catalog: dict[str, Any] | None = None, source: str | None = None) -> Fleet:
    """`h100-sxm:2`, `tpu-v5p:4`, or a TPU slice name such as `v5p-8` (= 4 chips). With a
    catalog, an accelerator it does not price is refused, listing the keys it does."""
    from harness.figures.accelerators import _CORES_PER_CHIP, catalog_key, chips_in_slice

    where = f"{source} {text}" if source else text
    key, sep, count = text.strip().partition(":")
    if sep:
        if not count.isdigit() or not 1 <= int(count) <= MAX_CHIPS:
            raise SpecError(where, "chips", f"expected a chip count from 1 to {MAX_CHIPS}, got {count!r}")
        fleet = Fleet(key, int(count))
    else:
        try:
            fleet = Fleet(catalog_key("tpu", key), chips_in_slice(key))
        except ValueError:
            raise SpecError(where, "", "expected ACCELERATOR:CHIPS (h100-sxm:2) or a TPU slice (v5p-8)") from None
        cores = int(key.rsplit("-", 1)[1])
        per_chip = _CORES_PER_CHIP.get(fleet.accelerator, 1)
        if cores % per_chip or cores < per_chip:
            raise SpecError(
                where,
                "",
                f"a {fleet.accelerator} slice counts TensorCores, {per_chip} per chip: "
                f"{cores} is not a whole number of chips (e.g. {key.rsplit('-', 1)[0]}-8 "
                f"is {8 // per_chip} chips)",
            )
        if fleet.chips > MAX_CHIPS:
            raise SpecError(where, "", f"{fleet.chips} chips is more than {MAX_CHIPS}")
    if catalog is not None and fleet.accelerator not in catalog:
        raise SpecError(
            where,
            "",
            f"unknown accelerator {key!r} (known: {', '.join(sorted(catalog))}, or a TPU slice such as v5p-8)",
        )
    return fleet


def hourly(fleet: Fleet, catalog, cost_spec=None, factor: float = 1.0) -> tuple[float, Price]:
    price = price_for(fleet.accelerator, cost_spec, catalog)
    if price is None:
        known = ", ".join(
            sorted(k for k, e in catalog.items() if e.get((cost_spec.pricing if cost_spec else "on_demand")))
        )
        raise SpecError(
            "prices", fleet.accelerator, f"no price in the catalog (priced: {known}); give one with --prices"
        )
    return fleet.chips * price.usd_per_chip_hour * factor, price


def check_speedup(speedup: float) -> None:
    """How many times faster a is than b: a positive, finite number (0 would be a
    division by zero; a negative one a negative break-even price)."""
    if not (isinstance(speedup, (int, float)) and math.isfinite(speedup) and speedup > 0):
        raise SpecError("--speedup", "", f"how many times faster a is than b: a number > 0 (e.g. 1.6), got {speedup:g}")


def cost_ratio(speedup: float, a: Fleet, b: Fleet, catalog, cost_spec=None, factors=(1.0, 1.0)) -> dict:
    """A job that runs `speedup` times faster on `a` than on `b`: what it costs on `a`
    relative to `b`. cost = chips x hours x price, so the ratio is price ratio / speedup."""
    check_speedup(speedup)
    hourly_a, price_a = hourly(a, catalog, cost_spec, factors[0])
    hourly_b, price_b = hourly(b, catalog, cost_spec, factors[1])
    price_ratio = hourly_a / hourly_b
    ratio = price_ratio / speedup
    return {
        "speedup": speedup,
        "a": str(a),
        "b": str(b),
        "usd_per_hour_a": hourly_a,
        "usd_per_hour_b": hourly_b,
        "price_ratio": price_ratio,
        "cost_ratio": ratio,
        "prices": [price_a.to_json(), price_b.to_json()],
        # The price of one `b` chip-hour at which both cost the same per job.
        "break_even_usd_per_chip_hour_b": hourly_a / speedup / b.chips,
    }


def cost_statement(c: dict) -> str:
    cheaper = f"{1 / c['cost_ratio']:.2f}x cheaper" if c["cost_ratio"] < 1 else f"{c['cost_ratio']:.2f}x dearer"
    return (
        f"{c['a']} is {c['speedup']:.2f}x faster than {c['b']}; at ${c['usd_per_hour_a']:.2f}/h vs "
        f"${c['usd_per_hour_b']:.2f}/h (price ratio {c['price_ratio']:.3f}) a job costs {c['cost_ratio']:.3f}x "
        f"as much on {c['a']}: {cheaper}. Break-even: {c['b'].split('x ', 1)[1]} at "
        f"${c['break_even_usd_per_chip_hour_b']:.2f}/chip-hour."
    )


# How far each side's price is scaled in a sensitivity table (report and `bench cost`).
PRICE_FACTORS = (0.5, 0.75, 1.0, 1.25, 1.5)


def scaled_cost_ratios(ratio: float, factors=PRICE_FACTORS) -> list[tuple[float, float, float]]:
    """The one sensitivity rule: cost a/b is linear in a's price and inverse in b's, so
    scaling a's price by f gives ratio x f, scaling b's gives ratio / f.
    Returns (f, ratio if a's price is scaled, ratio if b's price is scaled) per factor."""
    return [(f, ratio * f, ratio / f) for f in factors]


def sensitivity(speedup: float, a: Fleet, b: Fleet, catalog, cost_spec=None, factors=PRICE_FACTORS) -> list[dict]:
    """How the cost ratio moves as each side's price varies (the other held at list)."""
    ratio = cost_ratio(speedup, a, b, catalog, cost_spec)["cost_ratio"]
    return [
        {"price_factor": f, "cost_ratio_if_a_price_scaled": ra, "cost_ratio_if_b_price_scaled": rb}
        for f, ra, rb in scaled_cost_ratios(ratio, factors)
    ]


# The $/1M real tokens a fine-tune pays, best first: the unsynced window (steps back to
# back with one sync, as a fine-tune runs; docs/metrics: the headline), else the steady
# state (each step synced), else every measured step (a run without a steady state).
FINE_TUNE_RATES = (
    ("usd_per_1m_tokens_real_window", "window"),
    ("usd_per_1m_tokens_real", "steady"),
    ("usd_per_1m_tokens_real_effective", "effective"),
)
FINE_TUNE_FORMULA = (
    "$/fine-tune = fine_tune_tokens_millions x $/1M real tokens (over the window where measured, else steady, "
    "else effective) + $ setup + $ warm-up (compile), paid once"
)


def fine_tune_rate(train_cost) -> tuple[float, str] | None:
    """(the $/1M real tokens a fine-tune is priced at, which one: FINE_TUNE_RATES)."""
    for field, name in FINE_TUNE_RATES:
        value = getattr(train_cost, field, None) if train_cost is not None else None
        if value:
            return value, name
    return None


def fine_tune_cost(train_cost, tokens_millions: float) -> float | None:
    """One real fine-tune of the workload (FINE_TUNE_FORMULA): `tokens_millions` million
    real tokens, the scenario's `workload.fine_tune_tokens_millions`, at the train record's
    $/1M real tokens, plus its one-off setup and warm-up. None where the record has no
    $/1M or no setup cost (records from before setup was priced)."""
    rate = fine_tune_rate(train_cost)
    if rate is None or train_cost.usd_setup is None:
        return None
    return rate[0] * tokens_millions + train_cost.usd_setup + (train_cost.usd_warmup or 0.0)


def fine_tune_of_record(record) -> tuple[float, str] | None:
    """A train record's $/fine-tune for its scenario's workload, with the basis in
    words; None where its scenario states no workload or its cost lacks a figure."""
    workload = record.scenario.resolved.get("workload") or {}
    tokens = workload.get("fine_tune_tokens_millions")
    usd = fine_tune_cost(record.cost, tokens) if tokens else None
    if usd is None:
        return None
    rate, which = fine_tune_rate(record.cost)
    return usd, f"{tokens:g}M real tokens x ${rate:.4g}/1M ({which}) + setup + warm-up"


def workload_cost(
    train_usd: float, fine_tunes: float, serve_usd_per_1m_tokens: float, served_tokens_millions: float
) -> float:
    """A train-plus-serve workload: `fine_tunes` fine-tunes plus N million served tokens."""
    return fine_tunes * train_usd + served_tokens_millions * serve_usd_per_1m_tokens
