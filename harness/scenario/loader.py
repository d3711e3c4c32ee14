"""Reading scenario files safely and resolving them into the runs they describe.

Scenario files come from other people: YAML is loaded with the safe loader only (no
Python tags), the document size and its alias expansion are bounded (a "billion
laughs" file is refused before anything walks it), and every bad value is reported
as one line naming the file and the dotted field.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from harness.basics.errors import SpecError
from harness.basics.yaml_io import (  # noqa: F401 - re-exported: loader is their old home
    MAX_DOCUMENT_BYTES,
    MAX_EXPANDED_NODES,
    document_from_text,
    first_error,
    parse_yaml,
    read_document,
)
from harness.scenario.spec import Scenario


def validate(doc: dict[str, Any], source: str) -> Scenario:
    try:
        return Scenario.model_validate(doc)
    except ValidationError as exc:
        raise first_error(exc, source, scenario_keys_at) from None
    except RecursionError:
        raise SpecError(source, "", "document nests too deeply") from None


def scenario_keys_at(path: tuple[Any, ...]) -> list[str]:
    """The keys a scenario accepts at a location: its fields and every task's sections at
    the top, a task section's model's fields under it."""
    from harness.basics.suggest import model_keys
    from harness.scenario.spec import task_sections

    sections = task_sections()
    if not path:
        return [*Scenario.model_fields, *sections]
    if path[0] in sections:
        return model_keys(sections[path[0]][1].model, path[1:])
    return model_keys(Scenario, path)


# --------------------------------------------------------------------------- overrides
def parse_override(text: str, source: str = "--set") -> tuple[str, Any]:
    """`train.steps=10` -> ("train.steps", 10); the value is read as YAML."""
    key, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][\w\-]*(\.[A-Za-z_\d][\w\-]*)*", key.strip()):
        raise SpecError(source, text, "expected KEY=VALUE with a dotted key, e.g. train.steps=10")
    return key.strip(), parse_yaml(value, source) if value.strip() else ""


def set_dotted(doc: dict[str, Any], key: str, value: Any, source: str) -> None:
    """Set `a.b.c` in a nested mapping, creating intermediate mappings."""
    node = doc
    parts = key.split(".")
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise SpecError(source, ".".join(parts[: i + 1]), f"is a {type(child).__name__}, cannot set {key}")
        node = child
    node[parts[-1]] = value


def apply_overrides(doc: dict[str, Any], overrides: dict[str, Any], source: str) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for key, value in overrides.items():
        set_dotted(out, key, value, source)
    return out


# --------------------------------------------------------------------------- runs
@dataclass(frozen=True)
class ResolvedRun:
    """One run a scenario asks for: the validated scenario of one matrix cell."""

    scenario: Scenario
    source: str
    cell: dict[str, Any]
    repeat: int
    overrides: dict[str, Any]
    profile: dict[str, Any] | None = None
    document: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def scenario_hash(self) -> str:
        return scenario_hash(self.scenario)

    @property
    def variant(self) -> str:
        """A short human label for the matrix cell, e.g. `padding=dynamic`."""
        return ",".join(f"{k.split('.')[-1]}={v}" for k, v in self.cell.items()) or "default"


def scenario_hash(scenario: Scenario) -> str:
    """Content hash of everything that defines the run (what resume keys on)."""
    canonical = json.dumps(scenario.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def matrix_cells(matrix: dict[str, tuple[Any, ...]], pinned: set[str]) -> list[dict[str, Any]]:
    """Cartesian product of the matrix axes, leaving out axes pinned by --set."""
    axes = {k: v for k, v in matrix.items() if k not in pinned}
    if not axes:
        return [{}]
    keys = list(axes)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]


def resolve_runs(
    path: str | Path, overrides: dict[str, Any] | None = None, profile: str | None = None
) -> list[ResolvedRun]:
    """Every run of the scenario file: file -> profile -> matrix cell -> --set."""
    source = str(path)
    base_doc = read_document(path)
    base = validate(base_doc, source)  # the file itself must be valid on its own
    overrides = dict(overrides or {})
    profile_info = _profile(base, profile, source)
    runs: list[ResolvedRun] = []
    for cell in matrix_cells(base.matrix, set(overrides)):
        doc = apply_overrides(base_doc, (profile_info or {}).get("overrides", {}), f"{source} (profile)")
        doc = apply_overrides(doc, cell, f"{source} (matrix)")
        doc = apply_overrides(doc, overrides, "--set")
        scenario = validate(doc, _where(source, cell, overrides))
        for repeat in range(scenario.repeats):
            runs.append(ResolvedRun(scenario, source, cell, repeat, overrides, profile_info, doc))
    return runs


def _where(source: str, cell: dict[str, Any], overrides: dict[str, Any]) -> str:
    parts = [f"{k}={v}" for k, v in {**cell, **overrides}.items()]
    return f"{source} [{', '.join(parts)}]" if parts else source


def _profile(base: Scenario, name: str | None, source: str) -> dict[str, Any] | None:
    if name is None:
        return None
    if name not in base.profiles:
        known = ", ".join(sorted(base.profiles)) or "none defined"
        raise SpecError(source, f"profiles.{name}", f"no such profile (known: {known})")
    return {"name": name, "overrides": dict(base.profiles[name]), "reduced": True}
