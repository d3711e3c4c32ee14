"""Backends: one folder each. A folder's `__init__` only describes the backend (no
framework import); its `backend.py` imports the framework and runs inside a worker."""
