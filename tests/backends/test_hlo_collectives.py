"""The HLO collective accounting's edge cases (backends/jax_common/hlo_collectives.py):
hand-written HLO in the shape XLA prints it, every expected count, byte and run
recomputed here by hand, never with another function of the module. The common cases
are in tests/harness/projection/test_projection.py."""

from __future__ import annotations

from backends.jax_common.hlo_collectives import (
    collective_ops,
    collectives,
    computation_runs,
    hlo_computations,
    largest_collectives,
    op_result_bytes,
    replica_group_size,
    shape_bytes,
    wire_factor,
)

# --------------------------------------------------------------------------- bytes and groups
TWO_OF_A_KIND_HLO = """HloModule jit_two, num_partitions=4

ENTRY %main.1 (p: bf16[2,640], q: f32[2,8]) -> f32[2,8] {
  %p = bf16[2,640]{1,0} parameter(0)
  %q = f32[2,8]{1,0} parameter(1)
  %all-gather.1 = bf16[8,640]{1,0} all-gather(bf16[2,640]{1,0} %p), replica_groups={{0,1,2,3}}, dimensions={0}
  %all-gather.2 = (bf16[8,640]{1,0}, f32[8,8]{1,0}) all-gather(bf16[2,640]{1,0} %p, f32[2,8]{1,0} %q), replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %all-reduce.3 = f32[2,8]{1,0} all-reduce(f32[2,8]{1,0} %q), replica_groups={{0,1},{2,3}}, to_apply=%sum
}
"""


def test_two_collectives_of_one_kind_add_their_counts_bytes_and_wire_bytes():
    """all-gather.1: 8 x 640 bf16 = 10,240 bytes; all-gather.2 (not a -start) returns a
    tuple: both arrays, 10,240 + 8 x 8 x 4 = 10,496; groups of 4 send 3/4 of each."""
    found = collectives(TWO_OF_A_KIND_HLO)
    assert found["all-gather"] == {"count": 2, "bytes": 10240 + 10496, "wire_bytes": 7680 + 7872}
    assert found["all-reduce"] == {"count": 1, "bytes": 64, "wire_bytes": 64}  # 2 x 8 f32, pairs: 2 x 1/2
    assert set(found) == {"all-gather", "all-reduce"}


def test_an_ops_name_is_what_precedes_its_equals_sign_root_or_not():
    ops = collective_ops(TWO_OF_A_KIND_HLO)
    assert [op["op"] for op in ops[:2]] == ["all-gather.1", "all-gather.2"]
    # a ROOT op: its name is the last word before the `=` (not the `ROOT`); the module
    # keeps the `ROOT %` in front for now, which this accepts
    assert ops[2]["op"].split()[-1].lstrip("%") == "all-reduce.3"
    assert [op["group"] for op in ops] == [4, 4, 2]


def test_a_tuple_types_arrays_add_up_and_a_type_the_table_lacks_counts_4_bytes_an_element():
    assert shape_bytes("(bf16[8,640]{1,0}, f32[8,8]{1,0}, u32[])") == 8 * 640 * 2 + 8 * 8 * 4 + 4
    assert shape_bytes("u3[5]{0}") == 5 * 4
    assert shape_bytes("pred[3]") == 3


SINGLE_DEVICE_HLO = """HloModule jit_single

ENTRY %main.1 (p: bf16[2,640]) -> bf16[2,640] {
  %p = bf16[2,640]{1,0} parameter(0)
  %all-gather.1 = bf16[2,640]{1,0} all-gather(bf16[2,640]{1,0} %p), dimensions={0}
  ROOT %copy.2 = bf16[2,640]{1,0} copy(bf16[2,640]{1,0} %all-gather.1)
}
"""


def test_without_num_partitions_or_replica_groups_an_op_is_alone_and_sends_nothing():
    assert collective_ops(SINGLE_DEVICE_HLO) == [
        {"op": "all-gather.1", "kind": "all-gather", "runs": 1, "result_bytes": 2560, "group": 1, "wire_bytes": 0}
    ]


def test_ring_factors_alone_or_in_no_group_are_zero_and_a_permute_always_sends():
    for kind in ("all-gather", "reduce-scatter", "all-reduce", "all-to-all"):
        assert wire_factor(kind, 1) == 0.0
        assert wire_factor(kind, 0) == 0.0
    assert wire_factor("collective-permute", 1) == 1.0
    assert wire_factor("reduce-scatter", 4) == 3.0


def test_an_iota_groups_size_is_its_last_dimension_in_two_or_three_dimensions():
    assert replica_group_size("x = f32[8] all-reduce(f32[8] %a), replica_groups=[2,4]<=[8]", 1) == 4
    assert replica_group_size("x = f32[8] all-reduce(f32[8] %a), replica_groups=[2,2,4]<=[16]", 1) == 4
    assert replica_group_size("x = f32[8] all-reduce(f32[8] %a), replica_groups=[4,2,8]<=[64]", 1) == 8
    assert replica_group_size("x = f32[8] all-reduce(f32[8] %a), replica_groups={}", 16) == 16


ASYNC_HLO = """HloModule jit_async, num_partitions=16

ENTRY %main.2 (p: bf16[2,640], q: f32[8], r: f32[16], s: bf16[4,4], t: f32[2]) -> f32[8] {
  %p = bf16[2,640]{1,0} parameter(0)
  %q = f32[8]{0} parameter(1)
  %r = f32[16]{0} parameter(2)
  %s = bf16[4,4]{1,0} parameter(3)
  %t = f32[2]{0} parameter(4)
  %all-gather-start.1 = (bf16[2,640]{1,0}, bf16[8,640]{1,0}) all-gather-start(bf16[2,640]{1,0} %p), replica_groups=[4,4]<=[16], dimensions={0}
  %all-gather-done.1 = bf16[8,640]{1,0} all-gather-done((bf16[2,640]{1,0}, bf16[8,640]{1,0}) %all-gather-start.1)
  %all-reduce-start.2 = (f32[8]{0}, f32[16]{0}) all-reduce-start(f32[8]{0} %q, f32[16]{0} %r), replica_groups=[2,2,4]<=[16], to_apply=%sum
  %all-reduce-done.2 = (f32[8]{0}, f32[16]{0}) all-reduce-done((f32[8]{0}, f32[16]{0}) %all-reduce-start.2)
  %collective-permute-start.3 = (bf16[4,4]{1,0}, bf16[4,4]{1,0}, u32[], u32[]) collective-permute-start(bf16[4,4]{1,0} %s), source_target_pairs={{0,1},{1,0}}
  %collective-permute-done.3 = bf16[4,4]{1,0} collective-permute-done((bf16[4,4]{1,0}, bf16[4,4]{1,0}, u32[], u32[]) %collective-permute-start.3)
  %collective-permute.4 = (bf16[4,4]{1,0}, f32[2]{0}) collective-permute(bf16[4,4]{1,0} %s, f32[2]{0} %t), source_target_pairs={{0,1},{1,0}}
  ROOT %out = f32[8]{0} get-tuple-element((f32[8]{0}, f32[16]{0}) %all-reduce-done.2), index=0
}
"""


def test_only_an_all_gather_or_permute_starts_tuple_is_halved_every_other_tuple_counts_whole():
    """all-gather-start: the second half, bf16[8,640] (10,240), over groups of 4 (3/4);
    all-reduce-start: both reduced arrays, 32 + 64 bytes, over the 3-d iota's groups of 4
    (2 x 3/4); collective-permute-start: the second of its two arrays (32), the u32[]
    context aside; a plain collective-permute's tuple: both arrays, 32 + 8."""
    found = collectives(ASYNC_HLO)
    assert found["all-gather"] == {"count": 1, "bytes": 10240, "wire_bytes": 7680}
    assert found["all-reduce"] == {"count": 1, "bytes": 96, "wire_bytes": 144}
    assert found["collective-permute"] == {"count": 2, "bytes": 32 + 40, "wire_bytes": 32 + 40}
    assert [(op["op"], op["group"]) for op in collective_ops(ASYNC_HLO)] == [
        ("all-gather-start.1", 4),
        ("all-reduce-start.2", 4),
        ("collective-permute-start.3", 16),
        ("collective-permute.4", 16),
    ]


def test_a_start_result_type_is_read_after_any_leading_space():
    assert op_result_bytes(" (bf16[2,640]{1,0}, bf16[8,640]{1,0})", True, "all-gather") == 8 * 640 * 2
    assert op_result_bytes("(bf16[2,640]{1,0}, bf16[8,640]{1,0})", True, "all-reduce") == 2 * 640 * 2 + 8 * 640 * 2


def test_the_largest_are_five_by_default_most_wire_bytes_first():
    sizes = [8, 48, 16, 40, 24, 32]  # bf16[k]: 2k bytes, halves of 2 send k
    lines = "\n".join(
        f"  %ag.{i} = bf16[{k}]{{0}} all-gather(bf16[{k // 2}]{{0}} %a), dimensions={{0}}" for i, k in enumerate(sizes)
    )
    text = f"HloModule jit_six, num_partitions=2\n\nENTRY %main (a: bf16[4]) -> bf16[4] {{\n{lines}\n}}\n"
    largest = largest_collectives(text)
    assert [(op["op"], op["wire_bytes"]) for op in largest] == [
        ("ag.1", 48),
        ("ag.3", 40),
        ("ag.5", 32),
        ("ag.4", 24),
        ("ag.2", 16),
    ]
    assert [op["op"] for op in largest_collectives(text, n=2)] == ["ag.1", "ag.3"]


# --------------------------------------------------------------------------- computations
def test_computations_are_read_wherever_entry_is_printed_tab_indented_and_with_trailing_space():
    text = (
        "HloModule m\n\n"
        "ENTRY %main.1 (a: f32[2]) -> f32[2] { \n"
        "\t%a = f32[2]{0} parameter(0)\n"
        "\tROOT %n = f32[2]{0} negate(f32[2]{0} %a)\n"
        "}\n\n"
        "%unused.2 (b: f32[2]) -> f32[2] {\n"
        "\t%b = f32[2]{0} parameter(0)\n"
        "\tROOT %c = f32[2]{0} copy(f32[2]{0} %b)\n"
        "}\n"
    )
    bodies, entry = hlo_computations(text)
    assert entry == "main.1"
    assert bodies == {
        "main.1": ["\t%a = f32[2]{0} parameter(0)", "\tROOT %n = f32[2]{0} negate(f32[2]{0} %a)"],
        "unused.2": ["\t%b = f32[2]{0} parameter(0)", "\tROOT %c = f32[2]{0} copy(f32[2]{0} %b)"],
    }


CALLS_HLO = """HloModule jit_calls, num_partitions=2

%f (x: f32[16]) -> f32[16] {
  %x = f32[16]{0} parameter(0)
  %all-reduce.7 = f32[16]{0} all-reduce(f32[16]{0} %x), replica_groups={{0,1}}, to_apply=%sum
  ROOT %copy = f32[16]{0} copy(f32[16]{0} %all-reduce.7)
}

%g (y: f32[16]) -> f32[16] {
  %y = f32[16]{0} parameter(0)
  ROOT %call.2 = f32[16]{0} call(f32[16]{0} %y), to_apply=%f
}

%b0 (z: f32[16]) -> f32[32] {
  %z = f32[16]{0} parameter(0)
  %ag.0 = f32[32]{0} all-gather(f32[16]{0} %z), replica_groups={{0,1}}, dimensions={0}
  ROOT %copy = f32[32]{0} copy(f32[32]{0} %ag.0)
}

%Xb1 (z: f32[16]) -> f32[32] {
  %z = f32[16]{0} parameter(0)
  %Xag.1 = f32[32]{0} all-gather(f32[16]{0} %z), replica_groups={{0,1}}, dimensions={0}
  ROOT %copy = f32[32]{0} copy(f32[32]{0} %Xag.1)
}

%c0 (z: f32[16]) -> f32[16] {
  %z = f32[16]{0} parameter(0)
  %a2a.0 = f32[16]{0} all-to-all(f32[16]{0} %z), replica_groups={{0,1}}, dimensions={0}
  ROOT %copy = f32[16]{0} copy(f32[16]{0} %a2a.0)
}

%c1 (z: f32[16]) -> f32[16] {
  %z = f32[16]{0} parameter(0)
  %a2a.1 = f32[16]{0} all-to-all(f32[16]{0} %z), replica_groups={{0,1}}, dimensions={0}
  ROOT %copy = f32[16]{0} copy(f32[16]{0} %a2a.1)
}

%dead (d: f32[16]) -> f32[16] {
  %d = f32[16]{0} parameter(0)
  %all-reduce.99 = f32[16]{0} all-reduce(f32[16]{0} %d), replica_groups={{0,1}}, to_apply=%sum
  ROOT %copy = f32[16]{0} copy(f32[16]{0} %all-reduce.99)
}

ENTRY %main.9 (a: f32[16], k: s32[]) -> f32[16] {
  %a = f32[16]{0} parameter(0)
  %k = s32[] parameter(1)
  %call.1 = f32[16]{0} call(f32[16]{0} %a), to_apply=%f
  %call.3 = f32[16]{0} call(f32[16]{0} %a), to_apply=%g
  %conditional.4 = f32[32]{0} conditional(s32[] %k, f32[16]{0} %a, f32[16]{0} %a), branch_computations={%b0, %Xb1}
  ROOT %conditional.5 = f32[16]{0} conditional(s32[] %k, f32[16]{0} %a, f32[16]{0} %a), branch_computations={c0,c1}
}
"""


def test_a_computation_called_from_two_places_runs_twice_and_an_uncalled_one_never():
    """%f: called by ENTRY and by %g (itself called by ENTRY): 2 runs; %dead, printed
    between them and ENTRY and called by nobody: 0; each branch once per conditional,
    named with or without `%`, with or without a space after the comma."""
    _, runs = computation_runs(CALLS_HLO)
    assert runs == {"f": 2, "g": 1, "b0": 1, "Xb1": 1, "c0": 1, "c1": 1, "dead": 0, "main.9": 1}
    found = collectives(CALLS_HLO)
    assert found["all-reduce"] == {"count": 2, "bytes": 2 * 64, "wire_bytes": 2 * 64}  # pairs: 2 x 1/2
    assert found["all-gather"] == {"count": 2, "bytes": 2 * 128, "wire_bytes": 2 * 64}
    assert found["all-to-all"] == {"count": 2, "bytes": 2 * 64, "wire_bytes": 2 * 32}
    assert [(op["op"], op["runs"]) for op in collective_ops(CALLS_HLO)] == [
        ("all-reduce.7", 2),
        ("ag.0", 1),
        ("Xag.1", 1),
        ("a2a.0", 1),
        ("a2a.1", 1),
    ]


def test_a_loop_whose_computations_are_not_in_the_text_still_counts_them_once():
    line = "  %w = (s32[], f32[8]{0}) while((s32[], f32[8]{0}) %t), condition=%cond, body=%body"
    bodies, runs = computation_runs(line + "\n")
    assert bodies == {"ENTRY": [line]}
    assert runs == {"ENTRY": 1, "cond": 1, "body": 1}


# --------------------------------------------------------------------------- while loops
LOOP_HLO = """HloModule jit_loop, num_partitions=4

%body.2 (p: (s32[], f32[8], s32[], s32[], s32[], s32[])) -> (s32[], f32[8], s32[], s32[], s32[], s32[]) {
  %p = (s32[], f32[8]{0}, s32[], s32[], s32[], s32[]) parameter(0)
  %a0 = s32[] get-tuple-element(%p), index=0
  %x = f32[8]{0} get-tuple-element(%p), index=1
  %a2 = s32[] get-tuple-element(%p), index=2
  %a3 = s32[] get-tuple-element(%p), index=3
  %a4 = s32[] get-tuple-element(%p), index=4
  %i = s32[] get-tuple-element(%p), index=5
  %step = s32[] constant(3)
  %Xnext = s32[] add(%i, %step)
  %pair = (s32[], f32[8]{0}) tuple(%a0, %x)
  %r = f32[8]{0} all-reduce(f32[8]{0} %x), replica_groups={{0,1,2,3}}, to_apply=%sum
  ROOT %tuple.9 = (s32[], f32[8]{0}, s32[], s32[], s32[], s32[]) tuple(%a0, %r, %a2, %a3, %a4, /*index=5*/%Xnext)
}

%cond.3 (p: (s32[], f32[8], s32[], s32[], s32[], s32[])) -> pred[] {
  %p = (s32[], f32[8]{0}, s32[], s32[], s32[], s32[]) parameter(0)
  %i = s32[] get-tuple-element(%p), index=5
  %limit = s32[] constant(11)
  ROOT %lt = pred[] compare(%i, %limit), direction=LT
}

ENTRY %main.4 (a: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %zero = s32[] constant(0)
  %one = s32[] constant(1)
  %start = s32[] copy(%one)
  %Xinit = (s32[], f32[8]{0}, s32[], s32[], s32[], s32[]) tuple(%zero, %a, %zero, %zero, %zero, /*index=5*/%start)
  %while.5 = (s32[], f32[8]{0}, s32[], s32[], s32[], s32[]) while(%Xinit), condition=%cond.3, body=%body.2
  ROOT %out = f32[8]{0} get-tuple-element(%while.5), index=1
}
"""


def test_a_counter_last_in_its_tuple_after_an_index_comment_is_read_through_a_copy():
    """The counter is element 5 (`/*index=5*/`, the tuples' last), starts at a copy of 1,
    steps by 3 below 11: 1, 4, 7, 10, four runs (ceil(10 / 3)); a tuple built in the body
    before its ROOT is not the ROOT's; the names start with a capital letter."""
    _, runs = computation_runs(LOOP_HLO)
    assert runs == {"body.2": 4, "cond.3": 4, "main.4": 1}
    assert collectives(LOOP_HLO)["all-reduce"] == {"count": 4, "bytes": 4 * 32, "wire_bytes": 4 * 32 * 3 // 2}


def test_a_counter_stepped_from_another_element_is_no_counted_loop():
    other = LOOP_HLO.replace("add(%i, %step)", "add(%a0, %step)")
    assert collectives(other)["all-reduce"]["count"] == 1


SIMPLE_LOOP_HLO = """HloModule jit_simple

%body (p: (s32[], bf16[4])) -> (s32[], bf16[4]) {
  %p = (s32[], bf16[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %x = bf16[4]{0} get-tuple-element(%p), index=1
  %c1 = s32[] constant(1)
  %next = s32[] add(%i, %c1)
  %cp = bf16[4]{0} collective-permute(bf16[4]{0} %x), source_target_pairs={{0,1},{1,0}}
  ROOT %t = (s32[], bf16[4]{0}) tuple(%next, %cp)
}

%cond (p: (s32[], bf16[4])) -> pred[] {
  %p = (s32[], bf16[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %n = s32[] constant(5)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (a: bf16[4]) -> (s32[], bf16[4]) {
  %a = bf16[4]{0} parameter(0)
  %c0 = s32[] constant(0)
  %init = (s32[], bf16[4]{0}) tuple(%c0, %a)
  ROOT %w = (s32[], bf16[4]{0}) while(%init), condition=%cond, body=%body
}
"""


def _permutes(text: str) -> dict:
    return collectives(text)["collective-permute"]


def test_a_counted_loop_runs_its_trip_count_and_a_one_trip_loop_once():
    assert _permutes(SIMPLE_LOOP_HLO) == {"count": 5, "bytes": 5 * 8, "wire_bytes": 5 * 8}  # 0..4 below 5
    assert _permutes(SIMPLE_LOOP_HLO.replace("constant(5)", "constant(1)"))["count"] == 1  # 0 only
    assert _permutes(SIMPLE_LOOP_HLO.replace("constant(5)", "constant(0)"))["count"] == 1  # none: counted once


def test_metadata_mentioning_tuple_after_the_roots_operands_does_not_move_them():
    text = SIMPLE_LOOP_HLO.replace(
        "tuple(%next, %cp)", 'tuple(%next, %cp), metadata={op_name="jit(f)/while/body/ tuple(i, x)"}'
    )
    assert _permutes(text)["count"] == 5


def test_loops_of_other_shapes_count_once():
    variants = {
        "init from a parameter": ("%c0 = s32[] constant(0)", "%c0 = s32[] parameter(1)"),
        "step not a constant": ("%c1 = s32[] constant(1)", "%c1 = s32[] multiply(%i, %i)"),
        "next not the counter plus a constant": ("add(%i, %c1)", "add(%c1, %c1)"),
        "compare not LT": ("direction=LT", "direction=LE"),
    }
    for why, (old, new) in variants.items():
        assert old in SIMPLE_LOOP_HLO, why
        assert _permutes(SIMPLE_LOOP_HLO.replace(old, new))["count"] == 1, why


def test_two_loops_sharing_a_body_add_their_trip_counts():
    """The counted loop's 5 and a second loop's stated 3: 8 runs of the shared body."""
    second = (
        "  %w2 = (s32[], bf16[4]{0}) while(%init), condition=%cond, body=%body,"
        ' backend_config={"known_trip_count":{"n":"3"}}\n  ROOT %w ='
    )
    text = SIMPLE_LOOP_HLO.replace("  ROOT %w =", second)
    _, runs = computation_runs(text)
    assert runs == {"body": 8, "cond": 8, "main": 1}
    assert _permutes(text) == {"count": 8, "bytes": 8 * 8, "wire_bytes": 8 * 8}


def test_fp8_and_int4_arrays_count_their_own_bytes():
    from backends.jax_common.hlo_collectives import shape_bytes

    # 16 one-byte floats, 8 half-byte ints, 3 two-byte floats
    assert shape_bytes("(f8e4m3fn[4,4]{1,0}, f8e5m2[0]{0}, s4[8]{0}, bf16[3]{0})") == 16 + 4 + 6


def test_a_root_collective_is_named_without_root_and_metadata_after_a_tuple_is_not_an_element():
    from backends.jax_common.hlo_collectives import _tuple_elements, collective_ops

    hlo = (
        "HloModule m, num_partitions=4\n"
        "ENTRY %main (p: f32[4]) -> f32[4] {\n"
        "  ROOT %all-reduce.3 = f32[4]{0} all-reduce(f32[4]{0} %p), replica_groups={{0,1,2,3}}, to_apply=%add\n"
        "}\n"
    )
    (op,) = collective_ops(hlo)
    assert op["op"] == "all-reduce.3"
    line = '  ROOT %t = (s32[], f32[]) tuple(%a, %b), metadata={op_name="jit(f)/while(body)"}'
    assert _tuple_elements(line) == ["a", "b"]
