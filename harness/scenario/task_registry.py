"""The registry of tasks: what a run measures (train, serve, ...), each a plug-in.

A task owns everything that differs between kinds of run: its scenario sections
(harness/tasks/<name>/spec.py; harness.scenario.spec asks for them), how its worker executes,
how its record's metrics and cost are filled, its summary row, its `bench show` table,
its report layout and columns, its gate metrics, and how its runs are named and planned
(harness/tasks/base.py lists them). The core (runner, worker, record, display, report,
gate) asks the registry, never `if task == ...`.

A task is registered by name and "module:attribute", loaded on first use (the one
Registry of harness.basics.plugins): this module imports no task, so the spec can check task
names and no task module's imports flow back into the core. Adding a task is its
package plus one line below (or one `register` call, or a `bench.tasks` entry point).
"""

from __future__ import annotations

from typing import Any

from harness.basics.plugins import Registry

# Task objects are harness.tasks.base.Task; not imported here, so that this registry
# depends on nothing a task module imports (the spec and gate metrics ask it for names).
Task = Any

ENTRY_POINT_GROUP = "bench.tasks"
TASKS = Registry("task", ENTRY_POINT_GROUP)
TASKS.register("train", "harness.tasks.train:TASK")
TASKS.register("serve", "harness.tasks.serve:TASK")

register = TASKS.register
names = TASKS.names
target = TASKS.target
get = TASKS.get
loaded = TASKS.loaded  # every registered task (for what all tasks contribute: gate metrics)


def name_of(record) -> str:
    """A record's task (a RunRecord's; schema-1 records written before the `task` field
    existed, all training runs, say so once migrated: harness.records.result)."""
    return record.task


def of(record) -> Task:
    return get(name_of(record))
