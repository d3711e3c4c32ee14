"""bench: the harness core (spec, runner, metrics, cost, store, gate, CLI).

Nothing in this package imports an ML framework at module level: the CLI, the report
and the gate must start fast on machines that have none. Backends live in `backends/`.
"""

__version__ = "0.1.0"
