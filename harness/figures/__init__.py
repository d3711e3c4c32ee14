"""Formulas over facts: every metric of metrics.md (metrics), what a run costs and the
price each figure rests on (cost, prices.yaml), and accelerator identity and datasheet
peaks (accelerators).

May import: basics, scenario.
"""
