"""What was measured, kept: the typed, versioned record (result) and its migrations, the
record assembled from a run's raw facts (record, failure_text), provenance, the store and
where it lives (store, locations), and the pytest-benchmark export (export).

May import: basics, scenario, figures, plan, data, serving.
"""
