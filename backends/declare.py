"""A backend's `BackendInfo` from the `backend.yaml` beside its `__init__.py`: the facts
the registry needs without importing the framework (name, summary, requirements,
install line, priority, worker environment, launcher, capabilities) as data, one file a
backend; its options model and eager test stay code, given by the `__init__`.

`backend_class: module:Class` names the Backend subclass; `BackendInfo.load()` imports
it, in a worker. YAML's lists become the tuples the dataclasses hold, `null` is None
(Capabilities' `max_devices: null`: as many devices as the host has). A key that
BackendInfo or Capabilities does not have is refused, naming the file and the field."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path
from typing import Any, Callable

from harness.basics.errors import SpecError
from harness.run.backend import BackendInfo, BackendOptions, Capabilities

FILENAME = "backend.yaml"
# Given in code by the backend's __init__, or built here: never in the file.
_FROM_CODE = {"options", "load", "capabilities", "eager"}


def declared_backend(
    package_file: str, options: type[BackendOptions], eager: Callable[[dict[str, Any]], bool] | None = None
) -> BackendInfo:
    """The BackendInfo of the package whose `__init__.py` is `package_file`."""
    from harness.basics.yaml_io import read_document

    path = Path(package_file).with_name(FILENAME)
    doc = read_document(path)
    facts = _known(path, "", {k: v for k, v in doc.items() if k not in ("capabilities", "backend_class")}, BackendInfo)
    capabilities = _known(path, "capabilities.", doc.get("capabilities") or {}, Capabilities)
    if "backend_class" not in doc:
        raise SpecError(str(path), "backend_class", "required: the Backend subclass as module:Class")
    return BackendInfo(
        **facts,
        options=options,
        load=_importer(doc["backend_class"]),
        capabilities=Capabilities(**capabilities),
        eager=eager,
    )


def _known(path: Path, prefix: str, block: dict[str, Any], kind: type) -> dict[str, Any]:
    """`block`'s fields for the dataclass `kind` (lists as tuples); unknown ones refused."""
    allowed = {f.name for f in fields(kind)} - (_FROM_CODE if kind is BackendInfo else set())
    for key in block:
        if key not in allowed:
            raise SpecError(str(path), f"{prefix}{key}", f"unknown field (known: {', '.join(sorted(allowed))})")
    return {key: tuple(value) if isinstance(value, list) else value for key, value in block.items()}


def _importer(target: str) -> Callable[[], type]:
    """A loader of "module:Class" that imports the module when called (in a worker)."""
    module, _, name = target.partition(":")

    def load():
        import importlib

        return getattr(importlib.import_module(module), name)

    return load
