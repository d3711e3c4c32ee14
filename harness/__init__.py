"""bench: the harness core, in rooms that name the flow a run takes (docs/architecture.md):
scenario -> plan -> run (worker, loop, backend) -> records -> figures -> projection, gate
and terminal, with tasks, serving and data beside them and the CLI's commands on top.

Nothing in this package imports an ML framework at module level: the CLI, the report
and the gate must start fast on machines that have none. Backends live in `backends/`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

__version__ = "0.2.0"

# Where each module lived before the rooms (bench 0.1.0): its old dotted path still
# imports, for one release, with a DeprecationWarning naming the new one, so a
# third-party backend written against `harness.backend` keeps working. (harness.plan,
# harness.projection and harness.gate are rooms now; their modules keep those names
# inside: harness.plan.plan, harness.projection.projection, harness.gate.gate.)
MOVED = {
    "harness.accelerators": "harness.figures.accelerators",
    "harness.backend": "harness.run.backend",
    "harness.budget_units": "harness.scenario.budget_units",
    "harness.calibration": "harness.projection.calibration",
    "harness.choice": "harness.run.choice",
    "harness.cost": "harness.figures.cost",
    "harness.display": "harness.terminal.display",
    "harness.errors": "harness.basics.errors",
    "harness.export": "harness.records.export",
    "harness.failure_text": "harness.records.failure_text",
    "harness.faults": "harness.run.faults",
    "harness.fine_tune": "harness.projection.fine_tune",
    "harness.gate_metrics": "harness.scenario.gate_metrics",
    "harness.gpu_projection": "harness.projection.gpu_projection",
    "harness.history": "harness.gate.history",
    "harness.hosts": "harness.plan.hosts",
    "harness.launch": "harness.run.launch",
    "harness.launchers": "harness.plan.launchers",
    "harness.limits": "harness.scenario.limits",
    "harness.loader": "harness.scenario.loader",
    "harness.locations": "harness.records.locations",
    "harness.loop": "harness.run.loop",
    "harness.metrics": "harness.figures.metrics",
    "harness.migrations": "harness.records.migrations",
    "harness.offline": "harness.run.offline",
    "harness.paths": "harness.basics.paths",
    "harness.plugins": "harness.basics.plugins",
    "harness.presets": "harness.scenario.presets",
    "harness.probe_cache": "harness.run.probe_cache",
    "harness.provenance": "harness.records.provenance",
    "harness.recommend": "harness.projection.recommend",
    "harness.record": "harness.records.record",
    "harness.registry": "harness.run.registry",
    "harness.result": "harness.records.result",
    "harness.run_lines": "harness.terminal.run_lines",
    "harness.runner": "harness.run.runner",
    "harness.sections": "harness.scenario.sections",
    "harness.serving.projection": "harness.projection.serving",
    "harness.spec": "harness.scenario.spec",
    "harness.store": "harness.records.store",
    "harness.suggest": "harness.basics.suggest",
    "harness.suite": "harness.commands.suite_file",
    "harness.textsafe": "harness.basics.textsafe",
    "harness.tpu_plan": "harness.projection.tpu_plan",
    "harness.trace": "harness.run.trace",
    "harness.worker": "harness.run.worker",
    "harness.yaml_io": "harness.basics.yaml_io",
}


class _MovedModule(types.ModuleType):
    """The old path's module: every attribute read from the module at its new path."""

    def __init__(self, name: str, target: types.ModuleType) -> None:
        super().__init__(name, target.__doc__)
        self.__dict__["_target"] = target

    def __getattr__(self, attribute: str):
        return getattr(self.__dict__["_target"], attribute)

    def __dir__(self):
        return dir(self.__dict__["_target"])


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new} (bench 0.2.0); the old import path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return _MovedModule(spec.name, importlib.import_module(new))

    def exec_module(self, module) -> None:
        pass  # the module at the new path is already executed


if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedFinder())
