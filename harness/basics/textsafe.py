"""Escaping for text that reaches Markdown or HTML: record fields come from other
people's scenario files and results, and must show as text, never run as markup."""

from __future__ import annotations

import html
import re

_MD_SPECIAL = re.compile(r"([\\`*_\[\]#|~])")


def md_cell(value: object) -> str:
    """One Markdown table cell: no line breaks, no markup, no raw HTML."""
    text = " ".join(str(value).split())
    return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=False))
