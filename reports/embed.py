"""A plotly figure embedded in a page (the report's and `bench history`'s)."""

from __future__ import annotations


def script_json(figure) -> str:
    """A figure as JSON safe inside <script>: no `</script>` can close the element."""
    return figure.to_json().replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
