"""Projections' formulas (harness/projection.py, harness/fine_tune.py, the HLO parsing of
backends/jax_common/aot.py), each recomputed here by hand or with numpy, never with the
code's own helper. The compiles themselves: tests/backends/test_tpu_aot.py."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.errors import SpecError
from harness.projection import (
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
    from harness.fine_tune import compile_costs, steady_step_s

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
    from harness.fine_tune import compile_costs

    raw = _raw([_step("warmup", 7.0, 2, (512, 256)), _step("measure", 1.0, 0), _step("measure", 1.0, 0)])
    assert compile_costs(raw, 1.0) == (pytest.approx(6.0), [256, 512], pytest.approx(3.0))


def test_every_measured_step_compiled_then_steady_is_time_less_compile_events():
    from harness.fine_tune import steady_step_s

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
    from harness.loader import resolve_runs

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
    from harness.fine_tune import fine_tune_work

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


def test_collectives_are_counted_once_with_their_result_bytes():
    from backends.jax_common.aot import collectives

    found = collectives(HLO)
    assert found["all-gather"] == {"count": 1, "bytes": 16 * 640 * 2}  # the gathered result, not the operand too
    assert found["all-reduce"] == {"count": 1, "bytes": 1024 * 4}
    assert found["reduce-scatter"] == {"count": 1, "bytes": 128 * 8 * 4}


def test_the_compilers_out_of_memory_message_gives_the_bytes():
    from backends.jax_common.aot import out_of_memory_bytes

    message = "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 20.50G of 15.75G hbm. Exceeded hbm capacity by 4.75G."
    assert out_of_memory_bytes(message) == (int(20.5 * GIB), int(15.75 * GIB))
    temporaries = "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO temporaries (89.23G) exceeds available HBM (15.75G)."
    assert out_of_memory_bytes(temporaries) == (int(89.23 * GIB), int(15.75 * GIB))
    assert out_of_memory_bytes("something else") is None


# --------------------------------------------------------------------------- executed FLOPs
def test_executed_flops_count_every_padded_key_by_hand():
    from harness.metrics import FlopsModel
    from harness.presets import MODEL_PRESETS

    arch = MODEL_PRESETS["tiny-gemma3"]
    adapters = 2 * 8 * ((64 + 64) + (64 + 16) + (64 + 16) + (64 + 64) + 3 * (64 + 128))
    model = FlopsModel(arch, lora=True, adapter_params=adapters)
    weights = 2 * (64 * 16 * (2 * 4 + 2 * 1) + 3 * 64 * 128) + 8192 * 64
    per_token = 4 * weights + 6 * adapters
    attention = 12 * 4 * 16 * 512 * 512 * 2  # every query x every key, both layers
    assert model.executed_flops([512, 512]) == pytest.approx(2 * (512 * per_token + attention))


# --------------------------------------------------------------------------- store
def test_projections_are_never_read_as_records(tmp_path):
    from harness.store import record_files

    shape = shape_projection(512, PLAN, [_program(4e12, 1e9, 2)], CHIP, 1.2, 3.9e12)
    record = ProjectionRecord(
        scenario={"name": "s", "variant": "default"},
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
