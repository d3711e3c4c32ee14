"""`bench gate` and `bench history`: budgets held against records, beyond noise, and never
passed by mistake (gate); one series per configuration with its change points and band
(history).

May import: every room below it (basics to projection).
"""
