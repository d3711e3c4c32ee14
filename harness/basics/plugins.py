"""One registry for every kind of plug-in: tasks, serving engines, backends.

A plug-in is registered by name and "module:attribute", loaded on first use, the way
entry points are: a registry imports nothing it names, so the core can check names (a
scenario's `tasks:`, `serve.engine`) without importing a task, an engine or a backend,
and no plug-in's imports flow back into the core. Plug-ins installed by other packages
come from an entry-point group (`[project.entry-points."bench.tasks"] NAME =
"module:attribute"`); built-in names win. Standard library only: this sits on the
ground floor of the import graph.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

from harness.basics.errors import BenchError


class Registry:
    """Names of one kind of plug-in (`kind`: "task", "serving engine"), each mapped to
    the "module:attribute" of its object, which is imported on first `get`."""

    def __init__(self, kind: str, entry_point_group: str, error: type[Exception] = BenchError) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self.error = error  # what an unknown name raises (backends: BackendUnavailable)
        self._targets: dict[str, str] = {}
        self._loaded: dict[str, Any] = {}
        self._scanned = False

    def register(self, name: str, target: str) -> None:
        """Make `name` known; `target` is "module:attribute" of its object. Registering
        the same target again is a no-op (a worker re-registers what its parent did)."""
        if self._targets.get(name, target) != target:
            raise BenchError(f"{self.kind} {name!r} is already registered as {self._targets[name]}")
        self._targets[name] = target

    def _from_entry_points(self) -> None:
        """Once per process (scanning installed packages takes milliseconds)."""
        if not self._scanned:
            self._scanned = True
            for ep in metadata.entry_points(group=self.entry_point_group):
                self._targets.setdefault(ep.name, ep.value)

    def names(self) -> tuple[str, ...]:
        self._from_entry_points()
        return tuple(self._targets)

    def known(self, name: str) -> None:
        """Refuse a name nothing registered: "unknown task 'x' (known: ...)"."""
        if name not in self._targets:
            self._from_entry_points()
        if name not in self._targets:
            import difflib  # harness.basics.suggest's rule, spelt here: nothing of bench below this floor

            near = difflib.get_close_matches(str(name), list(self._targets), n=1, cutoff=0.6)
            hint = f"; did you mean {near[0]}?" if near else ""
            raise self.error(f"unknown {self.kind} {name!r} (known: {', '.join(self._targets)}){hint}")

    def target(self, name: str) -> str:
        """Where `name` is defined: a worker process registers it from this."""
        self.known(name)
        return self._targets[name]

    def get(self, name: str) -> Any:
        self.known(name)
        if name not in self._loaded:
            module, _, attribute = self._targets[name].partition(":")
            self._loaded[name] = getattr(importlib.import_module(module), attribute)
        return self._loaded[name]

    def loaded(self) -> list[Any]:
        """Every registered plug-in, loaded, in registration order."""
        return [self.get(name) for name in self.names()]
