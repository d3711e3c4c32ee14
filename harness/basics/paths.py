"""Where this checkout lives: `harness` and `backends` are importable from here. Handed to
workers run by another interpreter so that they import this checkout's code. A module of
its own so that anything may import it without importing the registry."""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
