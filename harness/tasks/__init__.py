"""The registry of tasks: what a run measures (train, serve, ...), each a plug-in.

A task owns everything that differs between kinds of run: how its worker executes, how
its record's metrics and cost are filled, its summary row, its `bench show` table, its
report layout and columns, its gate metrics, and how its runs are named and planned
(harness/tasks/base.py lists them). The core (runner, worker, record, display, report,
gate) asks the registry, never `if task == ...`.

A task is registered by name and "module:attribute", loaded on first use, the way
entry points are: this module imports no task, so the spec can check task names and
no task module's imports flow back into the core. Adding a task is its module plus one
line below (or one `register` call from a plug-in that is imported first).
"""

from __future__ import annotations

import functools
import importlib
from importlib import metadata
from typing import Any

from harness.errors import BenchError

# Task objects are harness.tasks.base.Task; not imported here, so that this registry
# depends on nothing a task module imports (the spec and gate metrics ask it for names).
Task = Any

_TARGETS: dict[str, str] = {}
_LOADED: dict[str, Task] = {}


def register(name: str, target: str) -> None:
    """Make task `name` known; `target` is "module:attribute" of its Task object."""
    if _TARGETS.get(name, target) != target:
        raise BenchError(f"task {name!r} is already registered as {_TARGETS[name]}")
    _TARGETS[name] = target


register("train", "harness.tasks.train:TASK")
register("serve", "harness.tasks.serve:TASK")


ENTRY_POINT_GROUP = "bench.tasks"


@functools.cache  # once per process: scanning installed packages takes milliseconds
def _from_entry_points() -> None:
    """Plug-ins installed by other packages: `[project.entry-points."bench.tasks"]
    NAME = "module:attribute"`. Built-in names win."""
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        _TARGETS.setdefault(ep.name, ep.value)


def names() -> tuple[str, ...]:
    _from_entry_points()
    return tuple(_TARGETS)


def target(name: str) -> str:
    """Where task `name` is defined: a worker process registers it from this."""
    get(name)
    return _TARGETS[name]


def get(name: str) -> Task:
    if name not in _TARGETS:
        _from_entry_points()
    if name not in _TARGETS:
        raise BenchError(f"unknown task {name!r} (known: {', '.join(_TARGETS)})")
    if name not in _LOADED:
        module, _, attribute = _TARGETS[name].partition(":")
        _LOADED[name] = getattr(importlib.import_module(module), attribute)
    return _LOADED[name]


def name_of(record) -> str:
    """A record's task (a RunRecord's; schema-1 records written before the `task` field
    existed, all training runs, say so once migrated: harness.result)."""
    return record.task


def of(record) -> Task:
    return get(name_of(record))


def loaded() -> list[Task]:
    """Every registered task, loaded (for what all tasks contribute: gate metrics)."""
    return [get(name) for name in _TARGETS]
