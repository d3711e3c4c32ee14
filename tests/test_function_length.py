"""No function outside tests/ is over 60 lines (end_lineno - lineno + 1, decorators not
counted), read with ast from every .py file of the checkout: a long function is split
into named steps (docs: shared style, "functions are short")."""

from __future__ import annotations

import ast
import os
from pathlib import Path

from conftest import ROOT

MAX_LINES = 60
# Not the project's code: tests, virtual environments and caches (dot folders), mutmut's
# mutated copies, build outputs.
SKIPPED_PARTS = {"tests", "mutants", "build", "dist", "__pycache__", "node_modules", "wheels"}


def python_files(root: Path) -> list[Path]:
    """Every .py file under root, skipped folders pruned (not walked: CI's virtual
    environments live in the checkout)."""
    found = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if not d.startswith(".") and d not in SKIPPED_PARTS)
        found += [Path(folder) / name for name in sorted(files) if name.endswith(".py")]
    return found


def long_functions(path: Path, source: str) -> list[str]:
    """`path:line name (N lines)` for each function or method over MAX_LINES, nested ones too."""
    return [
        f"{path}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for node in ast.walk(ast.parse(source, str(path)))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > MAX_LINES
    ]


def test_the_finder_flags_a_long_function_and_spares_a_short_one():
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES - 1))  # def line + 59 = 60 lines
    assert long_functions(Path("ok.py"), "def ok():\n" + body) == []
    found = long_functions(
        Path("m.py"), "class C:\n    async def f():\n    " + body.replace("\n    ", "\n        ") + "        y = 0\n"
    )
    assert found == ["m.py:2 f (61 lines)"]


def test_the_walk_skips_tests_and_dot_folders_but_not_benchmarks():
    relative = {p.relative_to(ROOT).parts[0] for p in python_files(ROOT)}
    assert {"harness", "backends", "reports", "benchmarks"} <= relative
    assert not relative & {"tests", ".venv"}


def test_no_function_outside_tests_is_over_60_lines():
    offenders = [
        line for path in python_files(ROOT) for line in long_functions(path.relative_to(ROOT), path.read_text())
    ]
    assert offenders == []
