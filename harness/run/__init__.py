"""Executing a scenario: the runner and its worker processes, the timed step loop, the
backend interface (backend) and registry, which backend a run uses (choice) and its probe
cache, test-only fault injection, profiler traces, `bench launch` and the
offline installer.

May import: basics, scenario, figures, plan, data, serving, records.
"""
