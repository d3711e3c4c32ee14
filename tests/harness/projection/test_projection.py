"""Projections' formulas (harness/projection/projection.py, harness/projection/fine_tune.py, the HLO parsing of
backends/jax_common/hlo_collectives.py), each recomputed here by hand or with numpy, never with the
code's own helper. The compiles themselves: tests/backends/test_tpu_aot.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.basics.errors import SpecError
from harness.projection.projection import (
    Program,
    ProjectionRecord,
    TpuSlice,
    fine_tune,
    fine_tune_steps,
    load_projections,
    shape_projection,
    tpu_slice,
    usd_per_1m_tokens,
)

GIB = 1024**3


# --------------------------------------------------------------------------- slices
@pytest.mark.parametrize(
    "text, chips, topology, hbm_gib",
    [("tpu-v5e-8", 8, "v5e:2x4", 16), ("v5p-8", 4, "v5p:2x2x1", 95), ("tpu-v6e-8", 8, "v6e:2x4", 32)],
)
def test_slices_name_their_topology_and_datasheet(text, chips, topology, hbm_gib):
    chip = tpu_slice(text)
    assert (chip.chips, chip.topology, chip.hbm_bytes) == (chips, topology, hbm_gib * GIB)


def test_an_unknown_slice_is_refused_naming_the_option():
    with pytest.raises(SpecError, match="--compile-for: h100-8"):
        tpu_slice("h100-8")
    with pytest.raises(SpecError, match="no tpu-v5e topology"):
        tpu_slice("tpu-v5e-6")


# --------------------------------------------------------------------------- roofline
CHIP = TpuSlice("tpu-v5e-8", "tpu-v5e", 8, "v5e:2x4", (2, 4, 1), 16 * GIB, 819e9, 197e12)
PLAN = {"rows_per_step": 32, "rows_per_forward": 16, "accumulation": 2, "devices": 8}


def _program(flops, bytes_accessed, runs, memory=GIB, oom=None):
    return Program(
        name="p",
        runs_per_step=runs,
        compile_s=3.0,
        memory_bytes=memory,
        out_of_memory=oom,
        flops=flops,
        bytes_accessed=bytes_accessed,
    )


def test_step_bound_is_the_slower_of_compute_and_memory_per_program():
    # compute-bound micro-batch program (2 runs) + memory-bound update (1 run)
    micro, update = _program(4e12, 1e9, 2), _program(1e6, 8.19e9, 1)
    shape = shape_projection(512, PLAN, [micro, update], CHIP, 1.20, 3.9e12)
    expected = 2 * (4e12 / 197e12) + 1 * (8.19e9 / 819e9)
    assert shape.step_time_bound_s == pytest.approx(expected, rel=1e-12)
    tokens_per_chip = 32 * 512 / expected / 8
    assert shape.tokens_per_s_per_chip_bound == pytest.approx(tokens_per_chip, rel=1e-12)
    # $ per 1M tokens: the hours 1M tokens take on one chip, at its hourly price
    assert shape.usd_per_1m_tokens_bound == pytest.approx(1e6 / tokens_per_chip / 3600 * 1.20, rel=1e-12)
    assert shape.fits and shape.compile_s == 6.0


def test_a_program_past_hbm_does_not_fit_and_has_no_bound():
    too_big = _program(4e12, 1e9, 1, memory=20 * GIB)
    shape = shape_projection(512, PLAN, [too_big], CHIP, 1.20, None)
    assert not shape.fits and shape.memory_bytes_per_device == 20 * GIB
    assert shape.step_time_bound_s is None and shape.usd_per_1m_tokens_bound is None
    refused = _program(None, None, 1, memory=10 * GIB, oom="Used 30G of 15.75G hbm")
    assert not shape_projection(512, PLAN, [refused], CHIP, 1.20, None).fits


def test_usd_per_1m_tokens_without_a_price_is_none():
    assert usd_per_1m_tokens(1000.0, None) is None
    assert usd_per_1m_tokens(1000.0, 3.6) == pytest.approx(1.0)  # 1000 s of one chip at $3.6/h


# --------------------------------------------------------------------------- fine-tune formula
def test_fine_tune_time_and_cost_by_hand():
    ft = fine_tune(
        examples=1000,
        epochs=3,
        steps=fine_tune_steps(1000, 3, 32),
        shapes=[512, 256, 384],
        setup_s=12.0,
        compile_s_per_shape=40.0,
        step_time_s=0.25,
        basis="test",
        chips=4,
        usd_per_chip_hour=4.2,
    )
    assert ft.steps == 94  # ceil(3000 / 32): the last, partial batch is a step too
    assert ft.compiles == 3
    assert ft.time_s == pytest.approx(12.0 + 3 * 40.0 + 94 * 0.25)
    assert ft.usd == pytest.approx(4 * (12.0 + 120.0 + 23.5) / 3600 * 4.2)


def test_fine_tune_steps_round_up():
    assert [fine_tune_steps(n, 1, 8) for n in (8, 9, 16, 1)] == [1, 2, 2, 1]


# --------------------------------------------------------------------------- from a record
def _raw(steps):
    return {"setup_s": 5.0, "loop": {"steps": steps}}


def _step(phase, time_s, compiles, lengths=(512,)):
    return {"phase": phase, "time_s": time_s, "num_compiles": compiles, "seq_lens": list(lengths)}


def test_first_compile_and_compile_seconds_per_new_shape_from_step_times():
    from harness.projection.fine_tune import compile_costs, steady_step_s

    raw = _raw(
        [
            _step("warmup", 9.0, 2, (512, 384)),  # two programs compiled for the first lengths
            _step("warmup", 1.0, 0),
            _step("measure", 1.2, 0),
            _step("measure", 0.8, 0),
            _step("measure", 5.0, 1, (256,)),  # a new length
        ]
    )
    steady = steady_step_s(raw)
    assert steady == pytest.approx(1.0)  # mean of 1.2 and 0.8
    first, lengths, per_shape = compile_costs(raw, steady)
    assert first == pytest.approx((9.0 - 1.0) + (1.0 - 1.0))
    assert lengths == [384, 512]
    assert per_shape == pytest.approx(5.0 - 1.0)


def test_without_a_new_shape_measured_a_shape_costs_the_first_compile_per_length():
    from harness.projection.fine_tune import compile_costs

    raw = _raw([_step("warmup", 7.0, 2, (512, 256)), _step("measure", 1.0, 0), _step("measure", 1.0, 0)])
    assert compile_costs(raw, 1.0) == (pytest.approx(6.0), [256, 512], pytest.approx(3.0))


def test_every_measured_step_compiled_then_steady_is_time_less_compile_events():
    from harness.projection.fine_tune import steady_step_s

    steps = [dict(_step("measure", t, 1), compile_s=c) for t, c in ((4.0, 3.0), (6.0, 4.5))]
    assert steady_step_s(_raw(steps)) == pytest.approx(((4.0 - 3.0) + (6.0 - 4.5)) / 2)


def test_fine_tune_counts_the_first_compile_once_and_new_shapes_each():
    ft = fine_tune(
        examples=64,
        epochs=1,
        steps=8,
        shapes=[512, 384, 256],
        setup_s=2.0,
        first_compile_s=10.0,
        shapes_compiled_first=2,
        compile_s_per_shape=4.0,
        step_time_s=1.5,
        basis="test",
    )
    assert ft.compiles == 3 and ft.time_s == pytest.approx(2.0 + 10.0 + 1 * 4.0 + 8 * 1.5)
    assert ft.usd is None  # no price, no $


# --------------------------------------------------------------------------- the padding matrix
def _padding_scenario(policy: str):
    from harness.scenario.loader import resolve_runs

    overrides = {"sequence.padding": policy, "data.num_examples": 48, "model.preset": "tiny-gemma3"}
    return resolve_runs("scenarios/padding.yaml", overrides)[0].scenario


def _lengths_by_hand(scenario, rows_per_forward: int, steps: int) -> list[int]:
    """Every micro-batch's longest row, in the run's data order (a fresh seeded numpy
    permutation per epoch), recomputed from the tokenized examples."""
    from harness.data.batches import tokenize
    from harness.data.tokenizer import load_tokenizer

    tok = scenario.data.tokenizer
    encoded, _ = tokenize(scenario, load_tokenizer(tok.kind, tok.vocab_size, tok.path))
    rng, order = np.random.default_rng(scenario.train.seed), []
    while len(order) < steps * scenario.train.global_batch:
        order.extend(rng.permutation(len(encoded)).tolist())
    order = order[: steps * scenario.train.global_batch]
    return [
        max(len(encoded[i][0]) for i in order[c : c + rows_per_forward]) for c in range(0, len(order), rows_per_forward)
    ]


def test_padding_matrix_fine_tune_one_compile_static_one_per_length_dynamic():
    from harness.projection.fine_tune import fine_tune_work

    static = fine_tune_work(_padding_scenario("static"), rows_per_forward=4)
    dynamic_scenario = _padding_scenario("dynamic")
    dynamic = fine_tune_work(dynamic_scenario, rows_per_forward=4)
    assert static.steps == dynamic.steps == math.ceil(48 / 8)
    assert static.shapes == [512]
    by_hand = _lengths_by_hand(dynamic_scenario, 4, dynamic.steps)
    assert sorted(dynamic.shapes) == sorted(set(by_hand))
    assert len(dynamic.shapes) > 1  # the lever: every distinct length is a compile
    assert static.padded_tokens_per_step == 8 * 512
    assert dynamic.padded_tokens_per_step == pytest.approx(np.mean(np.reshape(by_hand, (-1, 2)).sum(axis=1) * 4))


# --------------------------------------------------------------------------- HLO parsing
HLO = """
  %all-gather-start.1 = (bf16[2,640]{1,0}, bf16[16,640]{1,0}) all-gather-start(bf16[2,640]{1,0} %p), dimensions={0}
  %all-gather-done.1 = bf16[16,640]{1,0} all-gather-done(%all-gather-start.1)
  %all-reduce.3 = f32[1024]{0} all-reduce(f32[1024]{0} %g), to_apply=%add
  %reduce-scatter = f32[128,8]{1,0} reduce-scatter(f32[1024,8]{1,0} %x), dimensions={0}
  %fusion.2 = f32[4]{0} fusion(f32[4]{0} %all-reduce.3), kind=kLoop
"""


def _counts(found: dict) -> dict:
    """A kind's count and result bytes (wire bytes are tested on their own)."""
    return {"count": found["count"], "bytes": found["bytes"]}


def test_collectives_are_counted_once_with_their_result_bytes():
    from backends.jax_common.hlo_collectives import collectives

    found = collectives(HLO)
    assert _counts(found["all-gather"]) == {
        "count": 1,
        "bytes": 16 * 640 * 2,
    }  # the gathered result, not the operand too
    assert _counts(found["all-reduce"]) == {"count": 1, "bytes": 1024 * 4}
    assert _counts(found["reduce-scatter"]) == {"count": 1, "bytes": 128 * 8 * 4}


GROUPS_HLO = """HloModule jit_step, num_partitions=8

ENTRY %main (a: bf16[2,640]) -> bf16[16,640] {
  %ag = bf16[16,640]{1,0} all-gather(bf16[2,640]{1,0} %a), replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}
  %rs = f32[128]{0} reduce-scatter(f32[512]{0} %g), replica_groups=[2,4]<=[8], dimensions={0}, to_apply=%add
  %ar = f32[1024]{0} all-reduce(f32[1024]{0} %h), replica_groups={}, to_apply=%add
  %a2a = bf16[64]{0} all-to-all(bf16[64]{0} %k), replica_groups={{0,1},{2,3},{4,5},{6,7}}, dimensions={0}
  %cp = bf16[32]{0} collective-permute(bf16[32]{0} %m), source_target_pairs={{0,1}}
}
"""


def test_wire_bytes_are_ring_factors_over_each_ops_replica_group():
    """What one device sends, recomputed by hand: all-gather of 8: 7/8 of the gathered
    result; reduce-scatter over groups of 4 (iota form): 3 shards; all-reduce over every
    partition (empty groups: num_partitions, 8): 2 x 7/8; all-to-all in pairs: 1/2; a
    permute: its result once."""
    from backends.jax_common.hlo_collectives import collectives, largest_collectives

    found = collectives(GROUPS_HLO)
    assert found["all-gather"]["wire_bytes"] == int(16 * 640 * 2 * 7 / 8)
    assert found["reduce-scatter"]["wire_bytes"] == 128 * 4 * 3
    assert found["all-reduce"]["wire_bytes"] == int(1024 * 4 * 2 * 7 / 8)
    assert found["all-to-all"]["wire_bytes"] == 64 * 2 // 2
    assert found["collective-permute"]["wire_bytes"] == 32 * 2
    largest = largest_collectives(GROUPS_HLO, n=2)
    assert [op["kind"] for op in largest] == ["all-gather", "all-reduce"]  # 17,920 and 7,168 bytes
    assert largest[0] == {
        "op": "ag",
        "kind": "all-gather",
        "runs": 1,
        "result_bytes": 16 * 640 * 2,
        "group": 8,
        "wire_bytes": 17920,
    }


def test_the_collectives_term_divides_wire_bytes_by_a_rings_ports_and_bench_show_lists_the_largest():
    from harness.projection.projection import Collective
    from harness.terminal.display import projection_lines

    largest = [{"op": "ag", "kind": "all-gather", "runs": 4, "result_bytes": 2**20, "group": 8, "wire_bytes": 3670016}]
    program = Program(
        name="grad",
        runs_per_step=1,
        compile_s=1.0,
        memory_bytes=GIB,
        flops=1e9,
        bytes_accessed=1e6,
        collectives={"all-gather": Collective(count=4, bytes=4 * 2**20, wire_bytes=3670016)},
        largest_collectives=largest,
    )
    (terms,) = shape_projection(512, PLAN, [program], ICI_CHIP, 1.2, 1e9).terms
    assert terms.collectives_s == pytest.approx(3670016 / 100e9)  # 400 GB/s over 4 ports, a ring's 2 both ways
    assert terms.collectives_basis == "wire bytes over 2 of 4 ICI ports" and terms.bound_by == "collectives"
    v5p = tpu_slice("tpu-v5p-8")
    assert program.terms(v5p).collectives_s == pytest.approx(3670016 / (1200e9 / 6))  # 3D torus: 6 ports
    record = ProjectionRecord(
        scenario={"name": "s", "variant": "default", "resolved": {"train": {"method": "full"}}},
        backend="torchax",
        slice=ICI_CHIP.to_json(),
        price=None,
        plan=PLAN,
        shapes=[shape_projection(512, PLAN, [program], ICI_CHIP, 1.2, 1e9)],
        fine_tune=None,
        provenance={},
    )
    text = "\n".join(projection_lines(record))
    assert "all-gather 4x 4.0 MiB, 3.5 MiB on the wire" in text
    assert "largest collectives of grad (wire bytes a device sends, all runs):" in text
    assert "all-gather ag: 3.5 MiB (4 runs x 1.00 MiB result, group of 8)" in text


def test_the_hbm_bytes_check_uses_benchs_floor_where_the_compiler_counts_less():
    from harness.projection.projection import bytes_check
    from harness.terminal.display import projection_shape_lines

    assert bytes_check(3e9, 1e9) == (3.0, 3e9, None)  # above the floor: the compiler's count, as expected
    assert bytes_check(None, 1e9) == (None, None, None) and bytes_check(2e9, None) == (None, 2e9, None)
    ratio, used, flag = bytes_check(0.5e9, 2e9)
    assert ratio == 0.25 and used == 2e9 and flag.startswith("HBM bytes check: compiled 5e+08 / bench's floor 2e+09")
    # the micro-batch program's HBM term then uses the floor: 2e9 / 819e9, not 0.5e9 / 819e9
    program = _collective_program(1e9, 0.5e9, 0)
    shape = shape_projection(512, PLAN, [program], CHIP, 1.2, 1e9, bench_bytes=2e9)
    assert shape.terms[0].hbm_s == pytest.approx(2e9 / 819e9) and shape.bytes_flag == flag
    assert shape.bench_bytes_per_device_per_forward == 2e9 and shape.bytes_ratio == 0.25
    text = "\n".join(projection_shape_lines(shape))
    assert "HBM bytes per device per forward pass: 5e+08 compiled (bench's floor 2e+09: compiled / floor 0.250)" in text
    assert f"FLAGGED: {flag}" in text
    unflagged = shape_projection(512, PLAN, [program], CHIP, 1.2, 1e9, bench_bytes=0.25e9)
    assert unflagged.terms[0].hbm_s == pytest.approx(0.5e9 / 819e9) and unflagged.bytes_flag is None


def test_the_compilers_out_of_memory_message_gives_the_bytes():
    from backends.jax_common.aot import out_of_memory_bytes

    message = "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 20.50G of 15.75G hbm. Exceeded hbm capacity by 4.75G."
    assert out_of_memory_bytes(message) == (int(20.5 * GIB), int(15.75 * GIB))
    temporaries = "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (89.23G) exceeds available HBM (15.75G)."
    assert out_of_memory_bytes(temporaries) == (int(89.23 * GIB), int(15.75 * GIB))
    assert out_of_memory_bytes("something else") is None


# --------------------------------------------------------------------------- executed FLOPs
def test_executed_flops_count_every_padded_key_by_hand():
    from harness.figures.metrics import FlopsModel
    from harness.scenario.presets import MODEL_PRESETS

    arch = MODEL_PRESETS["tiny-gemma3"]
    adapters = 2 * 8 * ((64 + 64) + (64 + 16) + (64 + 16) + (64 + 64) + 3 * (64 + 128))
    model = FlopsModel(arch, lora=True, adapter_params=adapters)
    weights = 2 * (64 * 16 * (2 * 4 + 2 * 1) + 3 * 64 * 128) + 8192 * 64
    per_token = 4 * weights + 6 * adapters
    attention = 12 * 4 * 16 * 512 * 512 * 2  # every query x every key, both layers
    assert model.executed_flops([512, 512]) == pytest.approx(2 * (512 * per_token + attention))


# --------------------------------------------------------------------------- store
def test_projections_are_never_read_as_records(tmp_path):
    from harness.records.store import record_files

    shape = shape_projection(512, PLAN, [_program(4e12, 1e9, 2)], CHIP, 1.2, 3.9e12)
    record = ProjectionRecord(
        scenario={"name": "s", "variant": "default", "resolved": {"train": {"method": "full"}}},
        backend="torchax",
        slice={"name": "tpu-v5e-8"},
        price=None,
        plan=PLAN,
        shapes=[shape],
        provenance={},
    )
    path = tmp_path / "s__default__torchax__tpu-v5e-8.projection.json"
    path.write_text(json.dumps(record.to_json()))
    assert record_files([tmp_path]) == []
    (loaded,) = load_projections([tmp_path])
    assert loaded.shapes[0].step_time_bound_s == shape.step_time_bound_s and loaded.fits


# --------------------------------------------------------------------------- the command line
def test_compile_for_refuses_a_backend_without_an_aot_step_and_an_unknown_slice():
    from conftest import SCENARIOS, bench

    done = bench("plan", str(SCENARIOS / "tiny.yaml"), "--backend", "torch", "--compile-for", "tpu-v5e-8", timeout=120)
    assert done.returncode == 2 and "--backend: torch: --compile-for compiles the JAX backends' step" in done.stderr
    done = bench("plan", str(SCENARIOS / "tiny.yaml"), "--backend", "torchax", "--compile-for", "v9z-8", timeout=120)
    assert done.returncode == 2 and "--compile-for: v9z-8" in done.stderr
    # Packed rows run on the JAX backends (#45) but are not compiled ahead of time: refused
    # before any compile, naming the field.
    packed = ("--set", "sequence.padding=packed", "--set", "train.micro_batch=1")
    done = bench("plan", str(SCENARIOS / "tiny.yaml"), "--backend", "torchax", "--compile-for", "tpu-v5e-8", *packed)
    assert done.returncode == 2 and "sequence.padding: packed: --compile-for compiles a pass" in done.stderr, (
        done.stderr
    )


# --------------------------------------------------------------------------- issue 37: the three terms
ICI_CHIP = TpuSlice("tpu-v5e-8", "tpu-v5e", 8, "v5e:2x4", (2, 4, 1), 16 * GIB, 819e9, 197e12, 400e9, int(15.75 * GIB))


def _collective_program(flops, bytes_accessed, moved, runs=1, memory=GIB, kept=0):
    from harness.projection.projection import Collective

    return Program(
        name="grad",
        runs_per_step=runs,
        compile_s=1.0,
        memory_bytes=memory,
        flops=flops,
        bytes_accessed=bytes_accessed,
        collectives={"all-gather": Collective(count=3, bytes=moved)},
        resident_outside_bytes=kept,
    )


def test_a_program_moving_more_over_ici_than_it_computes_or_reads_is_bounded_by_its_collectives():
    # 1e11 bytes over a ring's 100 GB/s = 1 s, against 1e12 / 197e12 = 5.1 ms and 1e9 / 819e9 = 1.2 ms
    program = _collective_program(1e12, 1e9, int(1e11), runs=2)
    shape = shape_projection(512, PLAN, [program], ICI_CHIP, 1.2, 1e12)
    (terms,) = shape.terms
    assert terms.bound_by == "collectives"
    # a record without wire bytes: its result bytes over a ring's 2 of v5e's 4 ports, 400 GB/s / 4 = 100 GB/s
    assert terms.collectives_s == pytest.approx(1e11 / (400e9 / 4))
    assert terms.collectives_basis == "result bytes (old record) over 2 of 4 ICI ports"
    assert terms.compute_s == pytest.approx(1e12 / 197e12) and terms.hbm_s == pytest.approx(1e9 / 819e9)
    assert shape.step_time_bound_s == pytest.approx(2 * 1.0)
    # without an ICI figure the term is absent, not zero, and HBM bounds it
    no_ici = shape_projection(512, PLAN, [program], CHIP, 1.2, 1e12)
    assert no_ici.terms[0].collectives_s is None and no_ici.terms[0].bound_by == "compute"


def test_every_tpu_generation_with_a_slice_has_its_ici_bandwidth_and_usable_hbm():
    from harness.figures.accelerators import usable_hbm

    assert [tpu_slice(s).ici_bytes_per_s for s in ("tpu-v5e-8", "v5p-8", "tpu-v6e-8")] == [400e9, 1200e9, 800e9]
    assert tpu_slice("tpu-v5e-8").usable_hbm == int(15.75 * GIB)  # the compiler's own limit
    assert tpu_slice("v5p-8").usable_hbm == 95 * GIB
    assert usable_hbm("tpu-v6e")[0] == int(31.25 * GIB)  # the compiler's own limit (an 8B compile's message)
    assert usable_hbm("tpu-v4")[0] == int(32 * GIB * 63 / 64)  # datasheet less the stated 1/64 reserve
    assert usable_hbm("h100-sxm") is None


ASYNC_HLO = """HloModule m, entry_computation_layout={()->()}

%body (p: (s32[], bf16[8,128])) -> (s32[], bf16[8,128]) {
  %p = (s32[], bf16[8,128]{1,0}) parameter(0)
  %ar = bf16[8,128]{1,0} all-reduce(bf16[8,128]{1,0} %x), to_apply=%add
}

%cond (p: (s32[], bf16[8,128])) -> pred[] {
  %p = (s32[], bf16[8,128]{1,0}) parameter(0)
}

ENTRY %main (a: bf16[2,640]) -> bf16[16,640] {
  %ags = (bf16[2,640]{1,0}, bf16[16,640]{1,0}) all-gather-start(bf16[2,640]{1,0} %a), dimensions={0}
  %agd = bf16[16,640]{1,0} all-gather-done((bf16[2,640]{1,0}, bf16[16,640]{1,0}) %ags)
  %cps = (bf16[4,4]{1,0}, bf16[4,4]{1,0}, u32[], u32[]) collective-permute-start(bf16[4,4]{1,0} %b), source_target_pairs={{0,1}}
  %cpd = bf16[4,4]{1,0} collective-permute-done(%cps)
  %w = (s32[], bf16[8,128]{1,0}) while(%t), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"12"}}
}
"""


def test_async_start_done_pairs_count_once_with_their_result_bytes():
    from backends.jax_common.hlo_collectives import collectives

    found = collectives(ASYNC_HLO)
    assert _counts(found["all-gather"]) == {"count": 1, "bytes": 16 * 640 * 2}  # not the operand, not the done again
    assert _counts(found["collective-permute"]) == {"count": 1, "bytes": 4 * 4 * 2}  # not the u32[] context


def test_a_collective_inside_a_while_loop_counts_trip_count_times():
    from backends.jax_common.hlo_collectives import collectives

    assert _counts(collectives(ASYNC_HLO)["all-reduce"]) == {"count": 12, "bytes": 12 * 8 * 128 * 2}


COUNTED_LOOP_HLO = """HloModule m

%body (p: (u32[], f32[4])) -> (u32[], f32[4]) {
  %p = (u32[], f32[4]{0}) parameter(0)
  %i = u32[] get-tuple-element(%p), index=0
  %two = u32[] constant(2)
  %one = u32[] constant(1)
  %other = u32[] add(%i, %one)
  %next = u32[] add(%i, %two)
  %x = f32[4]{0} get-tuple-element(%p), index=1
  %r = f32[4]{0} all-reduce(f32[4]{0} %x), to_apply=%add
  ROOT %t = (u32[], f32[4]{0}) tuple(%next, %r)
}

%cond (p: (u32[], f32[4])) -> pred[] {
  %p = (u32[], f32[4]{0}) parameter(0)
  %i = u32[] get-tuple-element(%p), index=0
  %limit = u32[] constant(7)
  ROOT %lt = pred[] compare(%i, %limit), direction=LT
}

ENTRY %main (a: f32[4]) -> f32[4] {
  %zero = u32[] constant(1)
  %start = u32[] copy(%zero)
  %init = (u32[], f32[4]{0}) tuple(%start, %a)
  %w = (u32[], f32[4]{0}) while(%init), condition=%cond, body=%body
}
"""


def test_a_loop_without_a_stated_trip_count_is_read_from_its_counter():
    from backends.jax_common.hlo_collectives import collectives

    # i = 1, 3, 5: three iterations below 7 (the add of 1 elsewhere in the body is not the counter's)
    assert _counts(collectives(COUNTED_LOOP_HLO)["all-reduce"]) == {"count": 3, "bytes": 3 * 16}


def test_a_loop_of_another_shape_counts_once_instead_of_failing_the_compile():
    """An 8B compile's HLO held loops the counter reader did not know (a condition that
    is no `compare LT`, an init that is no tuple in its caller): its StopIteration failed
    a 7.5-minute compile. Such a loop counts once, as cost_analysis counts it."""
    from backends.jax_common.hlo_collectives import collectives

    other_condition = COUNTED_LOOP_HLO.replace("direction=LT", "direction=NE")
    assert _counts(collectives(other_condition)["all-reduce"]) == {"count": 1, "bytes": 16}
    init_from_parameter = COUNTED_LOOP_HLO.replace("while(%init)", "while(%a)")
    assert _counts(collectives(init_from_parameter)["all-reduce"]) == {"count": 1, "bytes": 16}


# --------------------------------------------------------------------------- FLOPs checked
@pytest.mark.parametrize("compiled, flagged", [(0.71e12, True), (1.0e12, False), (1.6e12, True)])
def test_the_flops_check_flags_a_ratio_outside_the_range_and_uses_the_larger(compiled, flagged):
    program = _program(compiled, 1e6, 1)  # compute-bound: the FLOPs count sets the bound
    shape = shape_projection(512, PLAN, [program], CHIP, 1.2, 1.0e12)
    assert shape.flops_ratio == pytest.approx(compiled / 1.0e12)
    assert (shape.flops_flag is not None) == flagged
    used = max(compiled, 1.0e12) if flagged else compiled
    assert shape.step_time_bound_s == pytest.approx(used / 197e12)
    if compiled < 1e12:
        assert "0.710" in shape.flops_flag and "bench's 1e+12" in shape.flops_flag


# --------------------------------------------------------------------------- fit
def test_the_optimizer_state_kept_beside_the_grad_program_is_counted_and_refused():
    # 14 GiB peak fits the 15.75 GiB the compiler allows; with 2 GiB of optimizer state
    # kept on device outside it, 16 GiB does not (the old check took 14 against 16).
    alone = _collective_program(1e12, 1e9, 0, memory=14 * GIB)
    with_state = _collective_program(1e12, 1e9, 0, memory=14 * GIB, kept=2 * GIB)
    assert shape_projection(512, PLAN, [alone], ICI_CHIP, 1.2, 1e12).fits
    refused = shape_projection(512, PLAN, [with_state], ICI_CHIP, 1.2, 1e12)
    assert not refused.fits and refused.fit_bytes_per_device == 16 * GIB
    assert refused.usable_hbm_bytes_per_device == int(15.75 * GIB) and refused.step_time_bound_s is None


def test_the_compilers_stated_limit_wins_over_the_datasheet():
    stated = Program(
        name="p", runs_per_step=1, compile_s=1.0, memory_bytes=15 * GIB, memory={"compiler_hbm_bytes": 14 * GIB}
    )
    shape = shape_projection(512, PLAN, [stated], CHIP, 1.2, None)
    assert not shape.fits and shape.usable_hbm_source.startswith("the compiler's limit")


# --------------------------------------------------------------------------- real-token units
def test_projected_rates_are_per_real_token_with_the_padded_beside():
    shape = shape_projection(512, PLAN, [_program(4e12, 1e9, 2)], CHIP, 1.20, 3.9e12, real_fraction=0.5)
    padded = 32 * 512 / shape.step_time_bound_s / 8
    assert shape.tokens_per_s_per_chip_bound == pytest.approx(padded)
    assert shape.real_tokens_per_s_per_chip_bound == pytest.approx(padded / 2)
    assert shape.usd_per_1m_real_tokens_bound == pytest.approx(2 * shape.usd_per_1m_tokens_bound)


# --------------------------------------------------------------------------- the fine-tune's compile and lengths
def test_a_tpu_fine_tune_names_its_compile_host_and_never_adds_its_seconds():
    ft = fine_tune(
        examples=100,
        epochs=1,
        steps=10,
        shapes=[512, 256],
        setup_s=None,
        compile_s_per_shape=475.0,
        step_time_s=0.07,
        basis="t",
        compile_host="cpu-2c (not a TPU VM)",
        compile_in_time=False,
    )
    assert ft.time_s == pytest.approx(10 * 0.07)  # no 2 x 475 s, no setup
    assert ft.compile_s == pytest.approx(2 * 475.0) and ft.compile_host == "cpu-2c (not a TPU VM)"
    assert ft.setup_s is None


def test_every_length_met_has_a_bound_compiled_or_interpolated():
    from harness.projection.projection import length_bounds

    bounds, basis = length_bounds({512: 0.05, 384: 0.04}, [512, 448, 256, 600, 384])
    assert bounds[512] == 0.05 and basis[512] == "compiled"
    assert bounds[448] == pytest.approx(0.045) and basis[448] == "interpolated between 384 and 512"
    assert bounds[256] == pytest.approx(0.04 - 128 * 0.01 / 128) and basis[256].startswith("extrapolated")
    assert bounds[600] == pytest.approx(0.05 + 88 * 0.01 / 128)
    one, why = length_bounds({512: 0.05}, [256])
    assert one[256] == pytest.approx(0.025) and why[256] == "scaled by length from 512"
    assert length_bounds({512: 0.05, 384: 0.04}, [16])[0][16] == pytest.approx(0.04 - 368 * 0.01 / 128)


def test_the_steady_step_is_the_mean_of_the_steps_not_their_median():
    from harness.projection.fine_tune import steady_step_s

    raw = _raw([_step("measure", 1.0, 0), _step("measure", 1.0, 0), _step("measure", 4.0, 0)])
    assert steady_step_s(raw) == pytest.approx(2.0)  # the median would say 1.0


def test_bench_show_states_the_flag_the_terms_the_fit_and_both_token_units():
    from harness.terminal.display import projection_lines

    shape = shape_projection(
        512, PLAN, [_collective_program(0.71e12, 1e9, int(1e9), kept=GIB)], ICI_CHIP, 1.2, 1e12, real_fraction=0.5
    )
    ft = fine_tune(
        examples=10,
        epochs=1,
        steps=2,
        shapes=[512],
        setup_s=None,
        compile_s_per_shape=475.0,
        step_time_s=0.1,
        basis="b",
        compile_host="cpu-2c (not a TPU VM)",
        compile_in_time=False,
        length_bounds={512: 0.05},
        length_basis={512: "compiled"},
    )
    record = ProjectionRecord(
        scenario={"name": "s", "variant": "default", "resolved": {"train": {"method": "full"}}},
        backend="torchax",
        slice=ICI_CHIP.to_json(),
        price=None,
        plan=PLAN,
        shapes=[shape],
        fine_tune=ft,
        provenance={},
    )
    text = "\n".join(projection_lines(record))
    assert "FLAGGED: FLOPs check: compiled 7.1e+11 / bench 1e+12 = 0.710" in text
    # 1e9 result bytes (no wire bytes in this program) over 400 GB/s / 4 ports = 0.01 s
    assert (
        "grad x1: compute 0.005076 s, HBM 0.001221 s, collectives 0.01 s (result bytes (old record) over 2 of 4 "
        "ICI ports): bound by collectives" in text
    )
    assert "fit: 2.00 GiB per device" in text and "of 15.75 GiB usable" in text
    assert "real tokens/s per chip" in text and "padded tokens/s per chip" in text
    assert "setup not projected" in text
    assert "compile, apart (not in the time): 1 shapes x 475 s per shape = 7.9 min on cpu-2c (not a TPU VM)" in text
    assert "512: 0.05 s (compiled)" in text


# --------------------------------------------------------------------------- accelerators (issue 37's figures)
def test_a_tpu_vm_is_known_by_its_device_files(tmp_path):
    from harness.figures.accelerators import on_tpu_vm

    assert not on_tpu_vm(tmp_path)
    (tmp_path / "vfio").mkdir()
    (tmp_path / "vfio" / "vfio").touch()  # the VFIO control node alone: no chip bound
    assert not on_tpu_vm(tmp_path)
    (tmp_path / "vfio" / "0").touch()
    assert on_tpu_vm(tmp_path)
    (accel := tmp_path / "accel").mkdir()
    (accel / "accel0").touch()
    assert on_tpu_vm(accel)


def test_interconnect_peaks_and_unknown_keys():
    from harness.figures.accelerators import interconnect_bytes_per_s, is_unknown, peak_flops, usable_hbm

    assert interconnect_bytes_per_s("tpu-v5p") == 1200e9 and interconnect_bytes_per_s("h100-sxm") == 900e9
    assert interconnect_bytes_per_s("h200") == 900e9 and interconnect_bytes_per_s("cpu") is None
    assert peak_flops("tpu-v5e") == 197e12 and peak_flops("cpu") is None
    assert is_unknown("cuda-unknown") and not is_unknown("h100-sxm")
    assert usable_hbm("tpu-v4") == (
        int(32 * GIB * 63 / 64),
        "datasheet less a 1.5625% reserve (v5e's compiler's share)",
    )
    assert usable_hbm("tpu-v5e")[1].startswith("the TPU compiler's limit")


def test_a_projections_file_name_and_a_bad_file_refused_naming_it(tmp_path):
    from harness.projection.projection import load_projection, projection_filename

    shape = shape_projection(512, PLAN, [_program(4e12, 1e9, 2)], CHIP, 1.2, 3.9e12)
    record = ProjectionRecord(
        scenario={"name": "w1", "variant": "padding=dynamic, x/y", "resolved": {"train": {"method": "lora"}}},
        backend="torchax",
        slice={"name": "tpu-v5e-8"},
        price=None,
        plan=PLAN,
        shapes=[shape],
        provenance={},
    )
    assert projection_filename(record) == "w1__padding=dynamic-x-y__torchax__tpu-v5e-8.projection.json"
    no_variant = record.model_copy(update={"scenario": {"name": "w1"}})
    assert projection_filename(no_variant) == "w1__default__torchax__tpu-v5e-8.projection.json"
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    good = nested / projection_filename(record)
    good.write_text(json.dumps(record.to_json()))
    (tmp_path / "a" / "other.json").write_text("{}")  # not a projection's name: not read
    (loaded,) = load_projections([tmp_path])
    assert loaded.path == str(good) and loaded.scenario["variant"] == "padding=dynamic, x/y"
    assert [p.path for p in load_projections([good, tmp_path / "a" / "other.json"])] == [str(good)]
    wrong = tmp_path / "wrong.projection.json"
    wrong.write_text(json.dumps({"schema": "bench.result"}))
    with pytest.raises(ValueError, match=rf"^{wrong}: not a bench projection$"):
        load_projection(wrong)
    broken = tmp_path / "broken.projection.json"
    broken.write_text("{not json")
    with pytest.raises(ValueError, match=rf"^{broken}: Expecting property name"):
        load_projection(broken)
    with pytest.raises(ValueError, match="missing.projection.json: "):
        load_projection(tmp_path / "missing.projection.json")


def test_refusals_name_the_slice_and_what_is_known():
    with pytest.raises(SpecError) as raised:
        tpu_slice("gpu-8")
    assert str(raised.value).endswith("gpu-8: expected a TPU slice such as tpu-v5e-8, tpu-v5p-8 or tpu-v6e-8")
    with pytest.raises(SpecError) as raised:
        tpu_slice("v3-8", source="slices[0]")
    assert str(raised.value) == (
        "slices[0]: v3-8: no HBM and peak figures for tpu-unknown (known: tpu-v4, tpu-v5e, tpu-v5p, tpu-v6e)"
    )
    lite = tpu_slice("tpu-v5litepod-16")
    assert (lite.catalog_key, lite.chips, lite.topology, lite.host_bounds) == ("tpu-v5e", 16, "v5e:4x4", (2, 4, 1))
    assert tpu_slice("v4-16").topology == "v4:2x2x2" and tpu_slice("v4-16").host_bounds == (2, 2, 1)


def test_lengths_between_four_compiled_ones_use_their_two_neighbours():
    from harness.projection.projection import length_bounds

    compiled = {128: 0.02, 256: 0.03, 384: 0.05, 512: 0.08}
    bounds, basis = length_bounds(compiled, [300, 200, 600, 64])
    assert bounds[300] == pytest.approx(0.03 + 44 * 0.02 / 128) and basis[300] == "interpolated between 256 and 384"
    assert bounds[200] == pytest.approx(0.02 + 72 * 0.01 / 128) and basis[200] == "interpolated between 128 and 256"
    assert bounds[600] == pytest.approx(0.08 + 88 * 0.03 / 128) and basis[600] == "extrapolated from 384 and 512"
    assert bounds[64] == pytest.approx(0.02 - 64 * 0.01 / 128) and basis[64] == "extrapolated from 128 and 256"
    one, _ = length_bounds({512: 0.05}, [256, 128, 512])
    assert one == {256: pytest.approx(0.025), 128: pytest.approx(0.0125), 512: 0.05}
    assert length_bounds({100: 0.5, 200: 0.1}, [300])[0][300] == 0.0  # a falling line stops at zero


# --------------------------------------------------------------------------- exact words and edges (the mutation check)
def test_the_flops_flag_says_which_count_and_why_in_both_directions():
    from harness.projection.projection import flops_check

    assert flops_check(0.9e12, 1e12) == (pytest.approx(0.9), 0.9e12, None)  # the range's ends are inside
    assert flops_check(1.5e12, 1e12) == (pytest.approx(1.5), 1.5e12, None)
    assert flops_check(None, 1e12) == (None, None, None) and flops_check(1e12, None) == (None, 1e12, None)
    low = flops_check(0.5e12, 1e12)
    assert low[1] == 1e12 and low[2] == (
        "FLOPs check: compiled 5e+11 / bench 1e+12 = 0.500, outside [0.9, 1.5]: the compute term uses the larger, "
        "bench's 1e+12, because the compiler counts less work than the step does (a while loop's body counted once: "
        "docs/measurements/projections-and-calibration.md, issue 37)"
    )
    high = flops_check(2e12, 1e12)
    assert high[1] == 2e12 and high[2] == (
        "FLOPs check: compiled 2e+12 / bench 1e+12 = 2.000, outside [0.9, 1.5]: the compute term uses the larger, "
        "the compiler's 2e+12, because the compiler counts work bench's convention leaves out (recomputation, "
        "padding, extra ops)"
    )


def test_a_program_filling_usable_hbm_exactly_fits_and_one_without_flops_has_no_terms():
    exact = _collective_program(1e12, 1e9, 0, memory=int(15.75 * GIB))
    shape = shape_projection(512, PLAN, [exact], ICI_CHIP, 1.2, 1e12)
    assert shape.fits and shape.flops_per_device_per_forward == 1e12
    assert Program(name="p", runs_per_step=1, compile_s=0, memory_bytes=1, bytes_accessed=1e9).terms(CHIP) is None
    assert Program(name="p", runs_per_step=1, compile_s=0, memory_bytes=1, flops=1e9).terms(CHIP) is None


def test_a_fine_tune_is_paid_for_one_chip_unless_told():
    ft = fine_tune(
        examples=1,
        epochs=1,
        steps=1,
        shapes=[8],
        setup_s=0.0,
        compile_s_per_shape=0.0,
        step_time_s=3600.0,
        basis="b",
        usd_per_chip_hour=2.0,
    )
    assert ft.usd == pytest.approx(2.0)


def test_the_compile_costs_read_every_kind_of_step():
    from harness.projection.fine_tune import compile_costs, steady_step_s

    steps = [
        {"phase": "warmup", "time_s": 7.0, "num_compiles": 3, "seq_len": 128},  # an old record: one length a step
        {"phase": "warmup", "time_s": 4.0, "num_compiles": 1, "seq_lens": [256, 64]},
        {"phase": "measure", "time_s": 1.0, "num_compiles": 0, "seq_lens": [256]},
        {"phase": "measure", "time_s": 0.5, "num_compiles": 0, "seq_lens": [256]},  # faster than steady: no compile
    ]
    first, lengths, per_shape = compile_costs({"loop": {"steps": steps}}, 1.0)
    assert (first, lengths) == (pytest.approx(6.0 + 3.0), [64, 128, 256])
    assert per_shape == pytest.approx(9.0 / 3)  # no measured step compiled: the first compile per length
    steps.append({"phase": "measure", "time_s": 2.5, "num_compiles": 2, "seq_lens": [512]})
    assert compile_costs({"loop": {"steps": steps}}, 1.0)[2] == pytest.approx(1.5 / 2)
    cheap = [{"phase": "warmup", "time_s": 0.5, "num_compiles": 1, "seq_lens": [8]}, *steps[2:4]]
    assert compile_costs({"loop": {"steps": cheap}}, 1.0)[0] == 0.0  # never below nothing
    # every measured step compiled: the steps less their compile seconds; a step without them is left out
    compiled = [
        {"phase": "measure", "time_s": 3.0, "num_compiles": 1, "compile_s": 2.0},
        {"phase": "measure", "time_s": 5.0, "num_compiles": 1},
    ]
    assert steady_step_s({"loop": {"steps": compiled}}) == pytest.approx(1.0)
    assert steady_step_s({"loop": {"steps": compiled[1:]}}) is None


def test_the_fine_tunes_epochs_are_the_workloads():
    from types import SimpleNamespace

    from harness.projection.fine_tune import epochs_of

    assert epochs_of(SimpleNamespace(workload=SimpleNamespace(epochs=3))) == 3
    assert epochs_of(SimpleNamespace(workload=None)) == 1


def test_slice_names_count_chips_and_devices_have_keys():
    from harness.figures.accelerators import catalog_key, chips_in_slice, identify

    assert chips_in_slice("V5LITEPOD-16") == 16 and chips_in_slice("v5litepod-4") == 4
    with pytest.raises(ValueError, match=r"^not a TPU slice name: 'h100-8'$"):
        chips_in_slice("h100-8")
    assert catalog_key("cpu", "anything") == "cpu" and catalog_key("gpu", "x") == "gpu-unknown"
    assert identify("cuda", None) is None and identify("metal", "TPU v4") is None


def test_larger_slices_lay_out_their_hosts_and_a_missing_size_lists_the_known():
    big = tpu_slice("v5p-64")  # 32 chips: 2x4x4, 4 chips a host as 2x2x1
    assert (big.topology, big.host_bounds) == ("v5p:2x4x4", (2, 2, 1))
    wide = tpu_slice("tpu-v5e-32")
    assert (wide.topology, wide.host_bounds) == ("v5e:4x8", (2, 4, 1))
    with pytest.raises(SpecError) as raised:
        tpu_slice("tpu-v5e-6")
    assert str(raised.value) == (
        "--compile-for: tpu-v5e-6: 6 chips: no tpu-v5e topology known here (chips: 1, 4, 8, 16, 32, 64, 128, 256)"
    )
    from harness.projection.projection import projection_filename

    record = ProjectionRecord(
        scenario={"name": "w1", "variant": "Padding=Dynamic"},
        backend="b",
        slice={"name": "s"},
        price=None,
        plan=PLAN,
        shapes=[],
        provenance={},
    )
    assert projection_filename(record) == "w1__Padding=Dynamic__b__s.projection.json"


def test_small_compile_excesses_and_a_single_first_length():
    from harness.projection.fine_tune import compile_costs

    steps = [
        {"phase": "warmup", "time_s": 5.0, "num_compiles": 1, "seq_lens": [128]},
        {"phase": "measure", "time_s": 1.0, "num_compiles": 0, "seq_lens": [128]},
    ]
    assert compile_costs({"loop": {"steps": steps}}, 1.0) == (pytest.approx(4.0), [128], pytest.approx(4.0))
    steps.append({"phase": "measure", "time_s": 1.5, "num_compiles": 1, "seq_lens": [64]})
    assert compile_costs({"loop": {"steps": steps}}, 1.0)[2] == pytest.approx(0.5)
