"""The collectives and loops of a compiled HLO module, read from its text: which
collective ops one run of the module executes on one device, how many times each runs
(a while loop's trip count), the bytes each produces and the bytes each sends over a ring
of its replica group (the projection's collectives term, harness/projection/projection.py).

Pure text parsing (no JAX): the TPU compile worker calls it on `compiled.as_text()`
(backends/jax_common/aot.py), the tests on hand-written HLO, and the mutation check
covers it (benchmarks/mutation/mutation.sh).
"""

from __future__ import annotations

import re
from typing import Any

# Collectives counted in the compiled HLO; async pairs are counted once, at `-start`, and
# an op inside a while loop as many times as the loop runs (computation_runs).
COLLECTIVES = ("all-gather", "reduce-scatter", "all-reduce", "all-to-all", "collective-permute")
DTYPE_BYTES = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "s16": 2,
    "u16": 2,
    "bf16": 2,
    "f16": 2,
    "s32": 4,
    "u32": 4,
    "f32": 4,
    "s64": 8,
    "u64": 8,
    "f64": 8,
    # 4-bit integers, two to a byte, and the 8-bit floats (f8e4m3fn, f8e5m2, ...)
    "s4": 0.5,
    "u4": 0.5,
    "f8": 1,
}
_SHAPE = re.compile(r"\b(pred|[suf]\d+|bf16|f8e\w+?)\[([\d,]*)\]")
_PARTITIONS = re.compile(r"\bnum_partitions=(\d+)")
_OP = re.compile(r"=\s*(.*?)\s+(" + "|".join(COLLECTIVES) + r")(-start)?\(")


def shape_bytes(text: str) -> int:
    """Bytes of every array shape in an HLO result type (`bf16[4,640]`, or a tuple)."""
    total = 0
    for dtype, dims in _SHAPE.findall(text):
        count = 1
        for d in filter(None, dims.split(",")):
            count *= int(d)
        total += count * DTYPE_BYTES.get("f8" if dtype.startswith("f8e") else dtype, 4)
    return int(total)


def collectives(hlo_text: str) -> dict[str, dict[str, int]]:
    """{kind: {count, bytes, wire_bytes}} of the collectives one run of a compiled HLO
    module executes, on one device. Each op once: an async pair at its `-start` (the
    `-done` moves nothing more), an `async-start` wrapper through the computation it
    calls; an op inside a while loop's body counted trip-count times (computation_runs).
    `bytes` are each op's result on one device (an all-gather's gathered array, an
    all-reduce's reduced one); a `-start`'s tuple holds its operands, then its results,
    then scalar context: only the results are counted. `wire_bytes` are what one device
    sends for it over a ring of its replica group (wire_factor)."""
    found = {kind: {"count": 0, "bytes": 0, "wire_bytes": 0} for kind in COLLECTIVES}
    for op in collective_ops(hlo_text):
        kind = found[op["kind"]]
        kind["count"] += op["runs"]
        kind["bytes"] += op["runs"] * op["result_bytes"]
        kind["wire_bytes"] += op["wire_bytes"]
    return {kind: counts for kind, counts in found.items() if counts["count"]}


def collective_ops(hlo_text: str) -> list[dict[str, Any]]:
    """Every collective op of one run of the module, with its runs (trip counts), its
    result bytes on one device, its replica group's size and its wire bytes for all its
    runs (result bytes x wire_factor x runs)."""
    partitions = _PARTITIONS.search(hlo_text)
    default_group = int(partitions.group(1)) if partitions else 1
    bodies, runs = computation_runs(hlo_text)
    out = []
    for name, lines in bodies.items():
        for line in lines:
            match = _OP.search(line)
            if match is None or not runs.get(name):
                continue
            kind = match.group(2)
            result = op_result_bytes(match.group(1), bool(match.group(3)), kind)
            group = replica_group_size(line, default_group)
            out.append(
                {
                    "op": line.split("=", 1)[0].split()[-1].lstrip("%"),  # without a ROOT before it
                    "kind": kind,
                    "runs": runs[name],
                    "result_bytes": result,
                    "group": group,
                    "wire_bytes": int(runs[name] * result * wire_factor(kind, group)),
                }
            )
    return out


def largest_collectives(hlo_text: str, n: int = 5) -> list[dict[str, Any]]:
    """The `n` collective ops that send the most bytes over a run of the module."""
    return sorted(collective_ops(hlo_text), key=lambda op: op["wire_bytes"], reverse=True)[:n]


def replica_group_size(line: str, default: int) -> int:
    """The devices in one of an op's replica groups: `replica_groups={{0,1},{2,3}}` (2),
    the iota form `replica_groups=[2,4]<=[8]` (4: its last dimension), or `default` (the
    module's partitions) where the op names none or an empty set."""
    listed = re.search(r"replica_groups=\{\{([^}]*)\}", line)
    if listed:
        return len([d for d in listed.group(1).split(",") if d.strip()])
    iota = re.search(r"replica_groups=\[([\d,]+)\]<=", line)
    if iota:
        return int(iota.group(1).split(",")[-1])
    return default


def wire_factor(kind: str, group: int) -> float:
    """Bytes one device sends per byte of the op's result on it, over a ring of `group`
    devices: an all-gather's result is the gathered array, (N - 1) / N of it arrives from
    the others; a reduce-scatter's result is the shard, N - 1 shards pass through each
    device; an all-reduce is a reduce-scatter then an all-gather, 2 (N - 1) / N; an
    all-to-all keeps 1 / N; a collective-permute sends its result once. Alone in its
    group, an op sends nothing (a permute's pairs name their own peers: it always sends)."""
    if kind == "collective-permute":
        return 1.0
    if group <= 1:
        return 0.0
    return {
        "all-gather": (group - 1) / group,
        "reduce-scatter": float(group - 1),
        "all-reduce": 2 * (group - 1) / group,
        "all-to-all": (group - 1) / group,
    }[kind]


def op_result_bytes(result_type: str, is_start: bool, kind: str) -> int:
    """Bytes a collective produces on one device, from its HLO result type. An
    all-gather-start's or collective-permute-start's tuple is (operands..., results...,
    scalar context): its second half of arrays; anything else: every array in it."""
    arrays = [m for m in _SHAPE.finditer(result_type) if m.group(2)]  # rank-0 scalars are context
    if is_start and kind in ("all-gather", "collective-permute") and result_type.lstrip().startswith("("):
        arrays = arrays[len(arrays) // 2 :]
    return sum(shape_bytes(m.group(0)) for m in arrays)


_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(")
_WHILE = re.compile(r"\bwhile\((.*?)\),\s*condition=%?([\w.\-]+),\s*body=%?([\w.\-]+)")
_CALLED = re.compile(r"\b(?:calls|to_apply|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"\bbranch_computations=\{([^}]*)\}")
_KNOWN_TRIPS = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def hlo_computations(hlo_text: str) -> tuple[dict[str, list[str]], str | None]:
    """({computation name: its instruction lines}, the ENTRY computation's name)."""
    bodies: dict[str, list[str]] = {}
    entry, current = None, None
    for line in hlo_text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith("{"):
            header = _HEADER.match(line)
            if header:
                current = header.group(2)
                bodies[current] = []
                entry = current if header.group(1) else entry
                continue
        if current is not None and line.startswith((" ", "\t")):
            bodies[current].append(line)
    if not bodies:  # instructions without a module around them: one computation, run once
        return {"ENTRY": hlo_text.splitlines()}, "ENTRY"
    return bodies, entry


def computation_runs(hlo_text: str) -> tuple[dict[str, list[str]], dict[str, int]]:
    """(computations, how many times each runs per run of the module). ENTRY runs
    once; a while loop's body and condition run its trip count (while_trip_count) times
    per run of the computation holding it; any other call runs once per run of its
    caller. HLO text prints callees before callers, so callers are visited first in
    reverse order; a computation called from several places adds up."""
    bodies, entry = hlo_computations(hlo_text)
    runs = dict.fromkeys(bodies, 0)
    if entry is None:
        return bodies, runs
    runs[entry] = 1
    for name in reversed(list(bodies)):
        if not runs[name]:
            continue
        for line in bodies[name]:
            loop = _WHILE.search(line)
            if loop:
                trips = while_trip_count(line, bodies, loop)
                for callee in (loop.group(2), loop.group(3)):
                    runs[callee] = runs.get(callee, 0) + runs[name] * trips
            called = _CALLED.findall(line) + [
                b.strip().lstrip("%") for group in _BRANCHES.findall(line) for b in group.split(",")
            ]
            for callee in called:
                if callee in runs:
                    runs[callee] += runs[name]
    return bodies, runs


def while_trip_count(line: str, bodies: dict[str, list[str]], loop) -> int:
    """A while loop's iterations: the compiler's `known_trip_count` where it states it;
    else read from a counted loop (the condition compares tuple element k LT a constant
    L, the body adds a constant S to element k, element k starts at a constant I):
    ceil((L - I) / S); else 1 (the body counted once, as cost_analysis counts it)."""
    known = _KNOWN_TRIPS.search(line)
    if known:
        return int(known.group(1))
    try:
        index, limit = _loop_limit(bodies[loop.group(2)])
        step = _loop_step(bodies[loop.group(3)], index)
        start = _loop_start(loop.group(1), index, bodies, line)
    except (KeyError, ValueError, IndexError, StopIteration, AttributeError):
        return 1  # not a loop of that shape (no LT compare, an init that is no tuple here...)
    return max(1, -(-(limit - start) // step))


def _constants(lines: list[str]) -> dict[str, int]:
    found = {}
    for line in lines:
        match = re.search(r"%([\w.\-]+) = [su]\d+\[\][^ ]* constant\((-?\d+)\)", line)
        if match:
            found[match.group(1)] = int(match.group(2))
    return found


def _tuple_indices(lines: list[str]) -> dict[str, int]:
    found = {}
    for line in lines:
        match = re.search(r"%([\w.\-]+) = [su]\d+\[\][^ ]* get-tuple-element\(.*?\), index=(\d+)", line)
        if match:
            found[match.group(1)] = int(match.group(2))
    return found


def _loop_limit(condition: list[str]) -> tuple[int, int]:
    """(tuple index of the counter, its limit) from `ROOT compare(counter, L), direction=LT`."""
    root = next(line for line in condition if "ROOT" in line and " compare(" in line and "direction=LT" in line)
    a, b = re.search(r"compare\(%?([\w.\-]+), %?([\w.\-]+)\)", root).groups()
    return _tuple_indices(condition)[a], _constants(condition)[b]


def _loop_step(body: list[str], index: int) -> int:
    """The constant the body adds to tuple element `index`: the body's ROOT tuple's
    element `index` is add(that element, a constant)."""
    elements, constants = _tuple_indices(body), _constants(body)
    root = next(line for line in body if "ROOT" in line and " tuple(" in line)
    out = _tuple_elements(root)[index]
    added = next(line for line in body if re.search(rf"%{re.escape(out)} = [su]\d+\[\][^ ]* add\(", line))
    a, b = re.search(r"add\(%?([\w.\-]+), %?([\w.\-]+)\)", added).groups()
    if elements.get(a) != index or b not in constants:
        raise ValueError("not a counted loop")
    return constants[b]


def _tuple_elements(line: str) -> list[str]:
    """The operand names of a `tuple(...)` instruction, in order."""
    inner = line.split(" tuple(", 1)[1].split(")", 1)[0]  # names hold no ")"; metadata after it may
    return [re.sub(r"^/\*index=\d+\*/", "", e.strip()).lstrip("%") for e in inner.split(",")]


def _loop_start(operand: str, index: int, bodies: dict[str, list[str]], while_line: str) -> int:
    """The counter's first value: the while's init tuple's element `index`, a constant
    (or a copy of one) in the computation holding the loop."""
    holder = next(lines for lines in bodies.values() if while_line in lines)
    tuple_line = next(line for line in holder if re.search(rf"%{re.escape(operand.lstrip('%'))} = .* tuple\(", line))
    name = _tuple_elements(tuple_line)[index]
    constants = _constants(holder)
    if name in constants:
        return constants[name]
    copy = next(line for line in holder if re.search(rf"%{re.escape(name)} = .* copy\(%?([\w.\-]+)\)", line))
    return constants[re.search(r"copy\(%?([\w.\-]+)\)", copy).group(1)]
