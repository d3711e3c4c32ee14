"""Did-you-mean hints ("did you mean train.steps?") for the names a user misspells: scenario and suite keys
(`--set train.stepz=4`), backends (`--backend torchh`). Standard library and pydantic
only, nothing of bench: the YAML reader and the loader use it (the plug-in registry,
on the ground floor, spells its own with difflib)."""

from __future__ import annotations

import difflib
import typing
from typing import Any, Callable, Iterable

# How close a candidate must be (difflib's ratio): `stepz` -> `steps` is 0.8, `torchh`
# -> `torch` 0.91; unrelated names (`zz` -> `data`) stay below.
CUTOFF = 0.6


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate nearest to `word`, or None when none is close."""
    found = difflib.get_close_matches(str(word), sorted(set(map(str, candidates))), n=1, cutoff=CUTOFF)
    return found[0] if found else None


def did_you_mean(word: str, candidates: Iterable[str], prefix: str = "") -> str:
    """'; did you mean PREFIX+NAME?' for the nearest candidate, else ''."""
    name = closest(word, candidates)
    return f"; did you mean {prefix}{name}?" if name else ""


def model_keys(model: Any, path: Iterable[Any]) -> list[str]:
    """The keys a pydantic model accepts at a dotted location under it (`("train",
    "lora")`), following nested models (through Optional and unions); [] where the
    location is not a model (a mapping's own keys, a scalar)."""
    for part in path:
        if isinstance(part, int):  # an item of a list of models (a suite's `runs.0`)
            continue
        field = getattr(model, "model_fields", {}).get(part)
        model = _model_in(field.annotation) if field is not None else None
        if model is None:
            return []
    return list(model.model_fields)


def _model_in(annotation: Any) -> Any:
    if isinstance(annotation, type) and hasattr(annotation, "model_fields"):
        return annotation
    if typing.get_origin(annotation) in (dict, typing.Dict):  # a mapping's keys are the user's
        return None
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def keys_of(model: Any) -> Callable[[tuple[Any, ...]], list[str]]:
    """`keys_at` for a plain pydantic model (a suite file's)."""
    return lambda path: model_keys(model, path)
