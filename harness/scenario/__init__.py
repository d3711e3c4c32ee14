"""What to measure, as the user wrote it: the scenario spec and its shared sections, the
loader (strict YAML, profiles, --set, matrix), field limits, model presets, budget units,
the figures a budget may name (gate_metrics) and the registry of task kinds
(task_registry: names only; the task packages themselves live in harness/tasks).

May import: basics.
"""
