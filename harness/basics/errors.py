"""Errors a user can act on: each says the file and the dotted field, in one line."""

from __future__ import annotations


class BenchError(Exception):
    """An error caused by the user's input; the CLI prints it as one line, exit 2."""

    exit_code = 2


class SpecError(BenchError):
    """A scenario, budget or override value is wrong."""

    def __init__(self, source: str, field: str, message: str):
        self.source, self.field, self.message = source, field, message
        where = f"{source}: {field}: " if field else f"{source}: "
        # One line, always: a value quoted from a hostile file may hold newlines.
        super().__init__(" ".join(f"{where}{message}".split()))


class BackendUnavailable(BenchError):
    """The requested backend cannot run here; the message says why."""
