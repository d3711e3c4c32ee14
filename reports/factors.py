"""What a row is, and which rows may be compared.

A row is every run of one full configuration: the resolved scenario (every field, after
profile, matrix cell and --set), the backend with its options, the accelerator with its
chip count, and the price the records were billed at. Runs that differ in anything
else are different rows.

A factor is a field that varies among a scenario's rows and that the benchmark varies
on purpose: the accelerator (with chip count), the backend, every matrix key, and the
precision. A factor's levels are compared holding everything else fixed; the one
exception is that an accelerator comparison lets the backend change with it when
neither backend ran on the other's accelerator (each stack runs on its own hardware,
e.g. xla-fsdpv2 on TPU and gpu-fsdp on GPU); both backends are named then.
"""

from __future__ import annotations

import json
from typing import Any

from harness.basics.errors import SpecError
from harness.records.result import Accelerator, RunRecord

ACCELERATOR, BACKEND, PRECISION = "accelerator", "backend", "train.precision"
# Fields that describe the scenario file or the harness's bookkeeping, not the run.
NOT_CONFIGURATION = {
    "name",
    "description",
    "reference",
    "matrix",
    "profiles",
    "repeats",
    "budgets",
    "run_timeout_s",
    "backend",
    "backend_options",
}
UNSET = "unset"  # a field one record has and another does not
# Fields that change with the accelerator: held fixed for every other comparison.
OWNED_BY_ACCELERATOR = ("parallel.devices", "price")


def accelerator_label(acc: Accelerator) -> str:
    """`v5p-8` for a TPU slice (what `bench cost` accepts), else `2x h100-sxm`."""
    from harness.figures.accelerators import _CORES_PER_CHIP
    from harness.figures.cost import parse_fleet

    key, chips = acc.catalog_key, int(acc.count or 1)
    if key.startswith("tpu-"):
        name = f"{key[4:]}-{chips * _CORES_PER_CHIP.get(key, 1)}"
        try:
            if parse_fleet(name) == parse_fleet(f"{key}:{chips}"):
                return name
        except SpecError:
            pass  # a generation without slice names (tpu-7x): the plain form below
    return f"{chips}x {key}"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def flatten(doc: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in doc.items():
        if isinstance(value, dict) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = _text(value)
    return out


def backend_label(record: RunRecord) -> str:
    """The backend's name, with the options the record ran with (those a matrix key
    sets are the matrix factor's, not the backend's)."""
    name = record.backend.name
    set_by_matrix = {k.split(".", 2)[2] for k in record.scenario.cell if k.startswith(f"backend_options.{name}.")}
    options = {k: v for k, v in record.backend.options.items() if k not in set_by_matrix}
    return name + (" {" + ", ".join(f"{k}: {_text(v)}" for k, v in sorted(options.items())) + "}" if options else "")


def price_label(record: RunRecord) -> str:
    # By figure id: a plug-in task's cost may be a plain mapping (harness.records.result).
    rate, pricing = record.figure("cost.price.usd_per_chip_hour"), record.figure("cost.price.pricing")
    return f"${rate:g}/chip-h {pricing}" if rate is not None else "unpriced"


def profile_name(record: RunRecord) -> str | None:
    """The name of the profile a reduced run applied (harness.scenario.loader: its name,
    overrides and `reduced`), None for a full run."""
    profile = record.scenario.profile
    if isinstance(profile, dict):
        return profile.get("name")
    return getattr(profile, "name", profile)


def attributes(record: RunRecord) -> dict[str, str]:
    """Everything that defines a record's configuration, as `field -> value` text, in
    display order: accelerator, backend, matrix keys, precision, the rest."""
    resolved = {k: v for k, v in record.scenario.resolved.items() if k not in NOT_CONFIGURATION}
    flat = flatten(resolved)
    cell = {k: _text(v) for k, v in record.scenario.cell.items()}
    head = {ACCELERATOR: accelerator_label(record.accelerator), BACKEND: backend_label(record), **cell}
    if PRECISION in flat:
        head.setdefault(PRECISION, flat[PRECISION])
    rest = {k: v for k, v in sorted(flat.items()) if k not in head}
    profile = profile_name(record) or "none"
    return {**head, **rest, "profile": profile, "price": price_label(record)}


def factors(rows: list) -> list[str]:
    """The factors that vary among these rows, in display order."""
    candidates = [ACCELERATOR, BACKEND]
    for row in rows:
        candidates += [k for k in row.records[0].scenario.cell if k not in candidates]
    candidates.append(PRECISION)
    return [f for f in dict.fromkeys(candidates) if len({row.attrs.get(f) for row in rows}) > 1]


def differences(rows: list, factor_names: list[str]) -> list[str]:
    """Non-factor fields whose values differ among rows the factors do not tell apart
    (an override, a profile, a price): shown beside each row's label."""
    out = []
    for key in dict.fromkeys(k for row in rows for k in row.attrs):
        if key in factor_names:
            continue
        within = ACCELERATOR if key in OWNED_BY_ACCELERATOR else None
        groups: dict[str, set[str]] = {}
        for row in rows:
            groups.setdefault(row.attrs[ACCELERATOR] if within else "", set()).add(row.attrs.get(key, UNSET))
        if any(len(values) > 1 for values in groups.values()):
            out.append(key)
    return out


def short(key: str) -> str:
    """`sequence.padding` -> `padding`: how a variant names a matrix key."""
    return key.rsplit(".", 1)[-1]


def level_text(key: str, value: str) -> str:
    """How a factor's level reads in a sentence: `v5p-8`, `gpu-fsdp`, `padding=static`, `bf16`."""
    return value if key in (ACCELERATOR, BACKEND, PRECISION) else f"{short(key)}={value}"


def comparable(a, b, factor: str, backends_by_accelerator: dict[str, set[str]]) -> bool:
    """Do rows a and b differ in `factor` and in nothing else that matters?"""
    if a.attrs[factor] == b.attrs[factor]:
        return False
    free = {factor, *(OWNED_BY_ACCELERATOR if factor == ACCELERATOR else ())}
    if factor == ACCELERATOR and a.attrs[BACKEND] != b.attrs[BACKEND]:
        if (
            a.attrs[BACKEND] in backends_by_accelerator[b.attrs[ACCELERATOR]]
            or b.attrs[BACKEND] in backends_by_accelerator[a.attrs[ACCELERATOR]]
        ):
            return False  # one backend ran on both: compare like with like
        free.add(BACKEND)
    keys = set(a.attrs) | set(b.attrs)
    return all(a.attrs.get(k) == b.attrs.get(k) for k in keys - free)


# --------------------------------------------------------------------------- selectors
SELECTOR_KEYS = ("variant", "backend", "accelerator", "precision")


def parse_selector(text: str, option: str) -> list[tuple[str, str]]:
    """`variant=padding=static accelerator=v5p-8`: whitespace-separated KEY=VALUE terms,
    all of which a row must match."""
    terms = []
    for term in text.split():
        key, sep, value = term.partition("=")
        if not sep or not key or not value:
            raise SpecError(option, term, "expected KEY=VALUE terms, e.g. 'variant=padding=static accelerator=v5p-8'")
        terms.append((key, value))
    if not terms:
        raise SpecError(option, "", "expected KEY=VALUE terms, e.g. 'variant=padding=static accelerator=v5p-8'")
    return terms


def accelerator_matches(acc: Accelerator, wanted: str) -> bool:
    """A catalog key (`tpu-v5p`, any chip count), `key:chips`, a TPU slice (`v5p-8`), or
    the report's own label (`2x h100-sxm`)."""
    from harness.figures.cost import parse_fleet

    if wanted in (acc.catalog_key, accelerator_label(acc)):
        return True
    try:
        fleet = parse_fleet(wanted)
    except SpecError:
        return False
    return (fleet.accelerator, fleet.chips) == (acc.catalog_key, int(acc.count or 1))


def term_matches(row, key: str, value: str) -> bool:
    record = row.records[0]
    if key == "variant":
        return record.scenario.variant == value
    if key == "backend":
        return record.backend.name == value or row.attrs[BACKEND] == value
    if key == "accelerator":
        return accelerator_matches(record.accelerator, value)
    if key == "precision":
        return row.attrs.get(PRECISION) == value
    return row.attrs.get(key) == value


def known_key(rows: list, key: str) -> bool:
    return key in SELECTOR_KEYS or any(key in row.attrs for row in rows)


def candidates(rows: list, key: str) -> list[str]:
    """The values a key could have matched, for the error message."""
    if key == "variant":
        values = [row.records[0].scenario.variant for row in rows]
    elif key == "backend":
        values = [row.records[0].backend.name for row in rows]
    elif key == "precision":
        values = [row.attrs.get(PRECISION, "") for row in rows]
    else:
        values = [row.attrs.get(key, "") for row in rows]
    return list(dict.fromkeys(values))
