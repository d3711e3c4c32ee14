"""The tasks: what a run measures (train, serve, ...), each a plug-in package here
(harness/tasks/<name>/; harness/tasks/base.py lists what a task owns).

Their registry lives low, in harness/scenario/task_registry.py, so that the scenario,
the records and the runner can name a task without importing one; it is re-exported
here, where plug-in authors have always found it (`harness.tasks.register`).

May import: every room below it (basics to run).
"""

from harness.scenario.task_registry import (  # noqa: F401  (the registry's public names)
    ENTRY_POINT_GROUP,
    TASKS,
    Task,
    get,
    loaded,
    name_of,
    names,
    of,
    register,
    target,
)
