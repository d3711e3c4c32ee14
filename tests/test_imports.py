"""The package's import structure, read from the source (ast), not by importing it:
no import cycle anywhere (a lazy import inside a function counts too: it is still a
dependency), and the core (`harness`, `reports`) imports no backend and no ML framework
at module level, so `bench validate`, `report` and `gate` run without any of them."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PACKAGES = ("harness", "backends", "reports")
ML_FRAMEWORKS = {
    "torch",
    "torch_xla",
    "jax",
    "jaxlib",
    "flax",
    "optax",
    "tunix",
    "qwix",
    "torchax",
    "transformers",
    "peft",
    "trl",
    "vllm",
    "tensorflow",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def imported(path: Path, name: str, known: dict[str, Path], *, top_level_only: bool) -> set[str]:
    """The names a module imports (absolute, resolved); `from pkg import sub` names the
    submodule when it is one, so a package's `__init__` is not blamed for its children."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    nodes = tree.body if top_level_only else ast.walk(tree)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            subs = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
            found.update(subs if len(subs) == len(node.names) else [base, *subs])
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    edges = {}
    for name, path in known.items():
        targets = {t for t in imported(path, name, known, top_level_only=False) if t in known}
        # Importing a submodule runs its parent packages first: that is not a dependency
        # of the parent on the child.
        edges[name] = {t for t in targets if t != name and not name.startswith(t + ".")}
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_core_imports_no_backend_and_no_framework_at_module_level():
    known = modules()
    offenders = []
    for name, path in known.items():
        if not name.startswith(("harness", "reports")):
            continue
        for target in imported(path, name, known, top_level_only=True):
            root = target.split(".")[0]
            if root == "backends" or root in ML_FRAMEWORKS:
                offenders.append(f"{name} imports {target}")
    assert offenders == []


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for target in edges[todo.pop()] - seen:
            seen.add(target)
            todo.append(target)
    return seen


def test_the_core_spec_imports_no_task_and_no_engine():
    """The scenario spec sits near the ground floor: it reaches the task registry (names,
    loaded by string) and nothing a task or an engine is made of, lazy imports counted."""
    reached = reachable(graph(), "harness.scenario.spec")
    assert "harness.scenario.task_registry" in reached  # the registry it asks for task sections
    offenders = sorted(m for m in reached if m.startswith(("harness.tasks", "harness.serving", "backends")))
    assert offenders == []
    assert reached <= {
        "harness.scenario.task_registry",
        "harness.basics.plugins",
        "harness.basics.errors",
        "harness.scenario.sections",
    } | {
        "harness.scenario.limits",
        "harness.scenario.presets",
        "harness.scenario.budget_units",  # budgets with units; pint only when a limit has one
        "harness.scenario.gate_metrics",
    }
