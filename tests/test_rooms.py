"""The import contract of harness/'s rooms (docs/architecture.md): imports run one way, a
room imports only the rooms below it, and only commands/cli and the report generator sit
above them all. A static check of every import statement, function-local ones included
(a lazy import is still a dependency)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Bottom to top: a room may import itself and the rooms before it in this list.
LAYERS = [
    "basics",
    "scenario",
    "figures",
    "plan",
    "data",
    "serving",
    "records",
    "run",
    "tasks",
    "projection",
    "gate",
    "terminal",
    "commands",
]
# reports/ reads records and projections; only the CLI's commands import it.
ABOVE_EVERY_ROOM = {"reports": len(LAYERS) - 1, "cli": len(LAYERS)}


def room_of(module: str) -> str | None:
    """harness.<room>.x -> room; reports.* -> "reports"; harness.cli -> "cli"."""
    parts = module.split(".")
    if parts[0] == "reports":
        return "reports"
    if parts[0] != "harness" or len(parts) < 2 or parts[1].startswith("__"):
        return None  # the package itself (harness.__version__), not a room
    return parts[1]


def level(room: str) -> int:
    return LAYERS.index(room) if room in LAYERS else ABOVE_EVERY_ROOM[room]


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, module) for every import in a file, resolved to absolute names."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            found += [
                (node.lineno, f"{base}.{alias.name}" if base in ("harness", "reports") else base)
                for alias in node.names
            ]
    return found


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def violations(root: Path) -> list[str]:
    """Each import that runs upward (or sideways into an unknown room), as
    'file:line: room -> room (module)'."""
    found = []
    for path in sorted([*(root / "harness").rglob("*.py"), *(root / "reports").rglob("*.py")]):
        module = module_name(root, path)
        here = room_of(module)
        if here is None:  # harness/__init__.py: the package itself (the moved-path aliases)
            continue
        for line, target in imported_modules(path, module):
            there = room_of(target)
            if there is None or there == here:
                continue
            if (
                here not in LAYERS
                and here not in ABOVE_EVERY_ROOM
                or there not in LAYERS
                and there not in ABOVE_EVERY_ROOM
            ):
                found.append(f"{path.relative_to(root)}:{line}: {here} -> {there}: a room the contract does not name")
            elif level(there) > level(here):
                found.append(f"{path.relative_to(root)}:{line}: {here} -> {there} ({target}) runs upward")
    return found


def test_harness_root_holds_only_rooms():
    loose = sorted(p.name for p in (ROOT / "harness").iterdir() if p.is_file() and p.suffix == ".py")
    assert loose == ["__init__.py", "cli.py"]
    rooms = {p.name for p in (ROOT / "harness").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert rooms == set(LAYERS), sorted(rooms ^ set(LAYERS))
    for room in rooms:
        assert (ROOT / "harness" / room / "__init__.py").read_text().startswith('"""'), (
            f"harness/{room} says what it owns"
        )


def test_imports_run_one_way():
    assert violations(ROOT) == []


def test_the_check_fails_on_an_upward_import(tmp_path):
    """A deliberate violation: the scenario (the bottom of the flow) importing the gate."""
    for package in ("harness", "reports"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    spec = tmp_path / "harness" / "scenario" / "spec.py"
    spec.write_text(spec.read_text() + "\n\ndef _upward():\n    from harness.gate import gate\n")
    lines = spec.read_text().count("\n")
    assert violations(tmp_path) == [f"harness/scenario/spec.py:{lines}: scenario -> gate (harness.gate) runs upward"]


def test_the_check_fails_on_a_room_importing_the_report_generator(tmp_path):
    for package in ("harness", "reports"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    store = tmp_path / "harness" / "records" / "store.py"
    store.write_text(store.read_text() + "\nimport reports.render\n")
    assert [v.split(": ", 1)[1] for v in violations(tmp_path)] == ["records -> reports (reports.render) runs upward"]
