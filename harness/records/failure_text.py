"""A failed run's reason, with its cause on the first line.

A reason is often a wrapper's sentence followed by a log: "server exited with status 1
before becoming healthy; log tail:" and forty lines of the server's output, whose last
line is the error that explains it. The summary, `bench show` and the report print the
reason's first line, so the cause is brought up to it; a long reason keeps its head and
its tail (where a log's error is), never only its head.
"""

from __future__ import annotations

import re

# The most of a reason a record keeps (its log tail is kept whole beside it), and of its
# first line's two parts: what failed and the cause.
REASON_CHARS = 2000
HEAD_CHARS = 200
CAUSE_CHARS = 600
# A line that states an error: a Python exception's `Name: message`, or a log's
# `ERROR`/`error:`/`FATAL`/`Traceback`-style line.
_ERROR_LINE = re.compile(
    r"\b[A-Za-z_]*(Error|Exception|Exit|Interrupt)\b\s*:|\b(ERROR|FATAL|CRITICAL)\b|\berror:", re.I
)


def cause_line(text: str) -> str:
    """The line of `text` that states the cause: the last line that reads as an error,
    else the last non-empty line (the first one when the text is a single line)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    errors = [line for line in lines[1:] if _ERROR_LINE.search(line)]
    return errors[-1] if errors else lines[-1] if len(lines) > 1 and _wraps(lines[0]) else lines[0]


def _wraps(first: str) -> bool:
    """Whether a first line only introduces what follows (`...; log tail:`)."""
    return first.rstrip().endswith(":")


def explained(reason: str, limit: int = REASON_CHARS) -> str:
    """`reason` with its cause on the first line (`head … cause` when they differ), then
    the text itself, cut in the middle to `limit` characters when longer."""
    text = reason.strip()
    lines = text.splitlines()
    head = lines[0].strip() if lines else ""
    cause = cause_line(text)
    if cause == head:  # one sentence that explains itself: whole, however long
        first, rest = head, "\n".join(lines[1:])
    else:  # a clipped head stays whole in the body: nothing of the reason is lost
        first = f"{_clip(head, HEAD_CHARS)} … {_clip(cause, CAUSE_CHARS)}"
        rest = "\n".join([head] * (len(head) > HEAD_CHARS) + lines[1:])
    body = _cut_middle(rest, max(0, limit - len(first) - 1))
    return f"{first}\n{body}" if body else first


def _clip(line: str, chars: int) -> str:
    return line if len(line) <= chars else line[: chars - 1] + "…"


def _cut_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    note = f"\n… ({len(text) - limit} characters cut) …\n"
    keep = max(0, limit - len(note))
    return text[: keep // 2] + note + text[len(text) - (keep - keep // 2) :]


def first_line(reason: str) -> str:
    """The line the summary and the report print."""
    return reason.strip().splitlines()[0] if reason.strip() else ""
