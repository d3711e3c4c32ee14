"""What a run costs, and the price each figure rests on.

cost = chips x hours x price per chip-hour (metrics.md). Every figure carries the price
used, its source and its date, because cost ratios between platforms move a lot with the
price assumed. Prices come from the catalog shipped in `harness/prices.yaml`, a user's
prices file, or the scenario's `cost.prices` (in rising order of precedence).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.errors import SpecError

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
    """The shipped catalog, with a user's prices file laid over it."""
    catalog = _read(CATALOG_FILE)
    if path:
        for key, entry in _read(Path(path)).items():
            catalog[key] = {**catalog.get(key, {}), **entry}
    return catalog


def _read(path: Path) -> dict[str, dict[str, Any]]:
    from harness.loader import parse_yaml

    try:
        doc = parse_yaml(path.read_text(), str(path))
    except OSError as exc:
        raise SpecError(str(path), "", f"cannot read: {exc.strerror or exc}") from None
    if not isinstance(doc, dict):
        raise SpecError(str(path), "", "a prices file is a mapping of accelerator -> price entry")
    for key, entry in doc.items():
        if not isinstance(entry, dict) or not entry.get("source") or not entry.get("date"):
            raise SpecError(str(path), str(key), "each price needs on_demand (or spot), source and date")
        for field in ("on_demand", "spot"):
            value = entry.get(field)
            if value is not None and (not isinstance(value, (int, float)) or value <= 0):
                raise SpecError(str(path), f"{key}.{field}", f"must be a positive number, got {value!r}")
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
        "usd_steady_state": usd(chips, metrics["measured_time_s"], price),
        "usd_per_1m_tokens_real": usd(chips, 1e6 / metrics["tokens_per_s_real"], price),
        "chips": chips,
        "price": price.to_json(),
    }
