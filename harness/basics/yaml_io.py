"""YAML and validation errors, shared by every reader of user files (scenarios, budgets,
prices): the safe loader with bounded size and alias expansion, duplicate keys refused,
and pydantic's first error as one line naming the file and the dotted field. Imports
nothing of bench but its errors, so any module may use it without a cycle."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from harness.basics.errors import SpecError

MAX_DOCUMENT_BYTES = 1 << 20
# Nodes after alias expansion: a real scenario has a few hundred.
MAX_EXPANDED_NODES = 100_000

_FIELD_PREFIX = re.compile(r"^([A-Za-z_][\w.]*): (.*)$", re.S)


class _Loader(yaml.SafeLoader):
    """The safe loader, plus YAML 1.2's reading of exponent floats: YAML 1.1 (PyYAML)
    reads `1e3` and `2e-5` as strings, which a number field then half-accepts and a
    prices file refuses. (Its yes/no/on/off booleans are refused where a field wants a
    number or a string: see `harness.scenario.sections.Section`.)"""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"), list("-+0123456789")
)


# --------------------------------------------------------------------------- YAML
def _expanded_size(node: yaml.Node, memo: dict[int, int], limit: int) -> int:
    """Nodes the document would have with every alias expanded, without expanding."""
    key = id(node)
    if key in memo:
        return memo[key]
    memo[key] = limit + 1  # a cycle (recursive alias) counts as over the limit
    size = 1
    if isinstance(node, yaml.SequenceNode):
        for child in node.value:
            size += _expanded_size(child, memo, limit)
            if size > limit:
                break
    elif isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            size += _expanded_size(k, memo, limit) + _expanded_size(v, memo, limit)
            if size > limit:
                break
    memo[key] = size
    return size


def parse_yaml(text: str, source: str) -> Any:
    """Safe-load one YAML document, refusing oversized and alias-bomb documents."""
    if len(text.encode("utf-8", "replace")) > MAX_DOCUMENT_BYTES:
        raise SpecError(source, "", f"document is larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        node = yaml.compose(text, Loader=_Loader)
        if node is None:
            return None
        if _expanded_size(node, {}, MAX_EXPANDED_NODES) > MAX_EXPANDED_NODES:
            raise SpecError(source, "", f"aliases expand to more than {MAX_EXPANDED_NODES} nodes; refused")
        _refuse_duplicate_keys(node, source)
        return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
    except SpecError:
        raise
    except yaml.constructor.ConstructorError as exc:
        if "constructor for the tag" not in str(exc.problem):  # e.g. an unhashable (list) key
            raise SpecError(source, "", f"{_yaml_where(exc)}invalid YAML: {exc.problem}") from None
        raise SpecError(
            source, "", f"{_yaml_where(exc)}unsupported YAML tag ({exc.problem}); only plain data is allowed"
        ) from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(source, "", f"{_yaml_where(exc)}invalid YAML: {problem}") from None
    except RecursionError:
        raise SpecError(source, "", "document nests too deeply") from None


def _refuse_duplicate_keys(root: yaml.Node, source: str) -> None:
    """The YAML spec forbids a key twice in one mapping; PyYAML silently keeps the last,
    so `steps: 10` ... `steps: 1000` would run the second. Refused, naming the key and
    both lines. (Keys a `<<` merge brings in may be overridden: that is not a duplicate.)"""
    seen_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, str]] = [(root, "")]
    while stack:
        node, path = stack.pop()
        if id(node) in seen_nodes:  # an alias: walked once
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend((child, f"{path}.{i}" if path else str(i)) for i, child in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            first_line: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                name = key.value if isinstance(key, yaml.ScalarNode) else "?"
                dotted = f"{path}.{name}" if path else str(name)
                if isinstance(key, yaml.ScalarNode):
                    ident = (key.tag, key.value)
                    if ident in first_line:
                        raise SpecError(
                            source,
                            dotted,
                            f"duplicate key (lines {first_line[ident]} and "
                            f"{key.start_mark.line + 1}); YAML forbids a key twice in a "
                            "mapping, and the last one would silently win",
                        )
                    first_line[ident] = key.start_mark.line + 1
                stack.append((value, dotted))


def _yaml_where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""


def read_document(path: str | Path) -> dict[str, Any]:
    """The scenario file as a plain mapping, or a SpecError naming the file."""
    source = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise SpecError(source, "", f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(source, "", "not UTF-8 text") from None
    return document_from_text(text, source)


def document_from_text(text: str, source: str) -> dict[str, Any]:
    """A scenario document (a mapping) from YAML text, or a SpecError."""
    doc = parse_yaml(text, source)
    if doc is None:
        raise SpecError(source, "", "empty file: a scenario needs at least `name`")
    if not isinstance(doc, dict):
        raise SpecError(source, "", f"top level must be a mapping, got {type(doc).__name__}")
    return doc


# --------------------------------------------------------------------------- validation
# The names pydantic gives the members of a union in an error's location
# (`devices.constrained-int`, `concurrency.function-after[...]`): not fields.
_UNION_MEMBER = re.compile(r"^(constrained-)?(int|float|str|bool|none)$|^[\w-]+\[.*\]$", re.S)


def _dotted(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc if not (isinstance(part, str) and _UNION_MEMBER.match(part)))


def first_error(exc: ValidationError, source: str, keys_at=None) -> SpecError:
    """Pydantic's first error as one SpecError line: file, dotted field, message.
    `keys_at(location)`: the keys accepted there, for an unknown key's "did you mean"."""
    err = exc.errors(include_url=False)[0]
    loc = tuple(err["loc"])
    message = str(err["msg"]).removeprefix("Value error, ")
    match = _FIELD_PREFIX.match(message)
    if match:  # model validators prefix the field they blame: "preset: ..."
        loc, message = loc + (match.group(1),), match.group(2)
    if err["type"] == "extra_forbidden":
        message = "unknown key" + _suggestion(loc, keys_at)
    elif "input" in err and err["type"] not in ("missing",) and not match:
        message = f"{message}, got {_short(err['input'])}"
    return SpecError(source, _dotted(loc) or "(top level)", message)


def _suggestion(loc: tuple[Any, ...], keys_at) -> str:
    """'; did you mean train.steps?' for an unknown key near a known one, else ''."""
    if keys_at is None:
        return ""
    from harness.basics.suggest import did_you_mean

    parts = tuple(p for p in loc if not (isinstance(p, str) and _UNION_MEMBER.match(p)))
    prefix = ".".join(map(str, parts[:-1]))
    return did_you_mean(str(parts[-1]), keys_at(parts[:-1]), prefix + "." if prefix else "")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
