"""Budget limits with units: `max: 500 ms`, `max: 2 GiB`, `min: 10 %`, `max: $5`.

A limit written with a unit is parsed by pint (a units library, not hand-written
parsing), converted to the unit the metric is stored in (harness.scenario.gate_metrics: seconds,
GiB, tok/s, $, or a plain fraction) and kept as written for display. A bare number is
already in the metric's unit. Imported only when a limit is a string: pint is not needed
to read a budget written as a number.
"""

from __future__ import annotations

from functools import lru_cache

# A gate metric's unit (GateMetric.unit) -> pint's name for it.
PINT_UNITS = {
    "s": "second",
    "tok/s": "token / second",
    "req/s": "request / second",
    "GiB": "gibibyte",
    "$": "USD",
    "": "dimensionless",
}
_MEMORY_WORDS = ("byte", "bit")


@lru_cache(maxsize=1)
def registry():
    import pint

    units = pint.UnitRegistry()
    units.define("token = [token] = tok = tokens")
    units.define("request = [request] = req = requests")
    units.define("USD = [currency] = usd = dollar = dollars")
    return units


def to_metric_unit(text: str, unit: str) -> float:
    """`text` ("500 ms") in the metric's `unit` ("s"): 0.5. ValueError, saying what was
    expected, for a text that is no quantity or one of another kind."""
    written = text.strip()
    if written.startswith("$"):
        written = f"{written[1:].strip()} USD"
    try:
        quantity = registry().Quantity(written)
    except Exception as exc:  # pint raises several types for text it cannot read
        what = unit or "a plain fraction"
        raise ValueError(
            f"{text!r} is not a number with a unit ({type(exc).__name__}; this metric is in {what})"
        ) from None
    target = PINT_UNITS.get(unit)
    if target is None:
        raise ValueError(f"{text!r}: this metric's unit {unit!r} takes a bare number")
    _same_kind(quantity, text, unit)
    try:
        value = float(quantity.to(target).magnitude)
    except Exception:
        raise ValueError(f"{text!r} is not in a unit of {unit or 'a plain fraction'}") from None
    return value


def _same_kind(quantity, text: str, unit: str) -> None:
    """pint counts bytes as plain numbers: a memory limit must name bytes, and a plain
    fraction (MFU, error rate) must not."""
    names = str(quantity.units)
    is_memory = any(word in names for word in _MEMORY_WORDS)
    if unit == "GiB" and not is_memory:
        raise ValueError(f"{text!r} is not an amount of memory (write e.g. 2 GiB or 512 MiB)")
    if unit != "GiB" and is_memory:
        raise ValueError(f"{text!r} is an amount of memory; this metric is in {unit or 'a plain fraction'}")
