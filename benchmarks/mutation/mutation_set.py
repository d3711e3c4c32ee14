"""Put a mutation set's [tool.mutmut] (benchmarks/mutation/sets/NAME.toml) in place of the
one in a copy's pyproject.toml (benchmarks/mutation/mutation.sh, MUTATION_SET=NAME): mutmut
reads only pyproject.toml, and the default set stays the ten formula modules."""

from __future__ import annotations

import re
import sys
from pathlib import Path


def _header(text: str) -> int:
    """Where the `[tool.mutmut]` table starts (a line of its own, not a comment's words)."""
    return re.search(r"^\[tool\.mutmut\]", text, flags=re.M).start()


def main(set_file: str, pyproject: str) -> None:
    table = Path(set_file).read_text()
    table = table[_header(table) :]
    text = Path(pyproject).read_text()
    start = _header(text)
    following = re.search(r"^\[(?!tool\.mutmut\])", text[start + 1 :], flags=re.M)
    end = start + 1 + following.start() if following else len(text)
    Path(pyproject).write_text(text[:start] + table.rstrip() + "\n" + text[end:])


if __name__ == "__main__":
    main(*sys.argv[1:])
