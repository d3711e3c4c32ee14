"""The shared data pipeline: deterministic examples, assistant-only loss, padding."""

from __future__ import annotations

import json

import numpy as np

from harness.data.batches import IGNORE_INDEX, build_batches
from harness.data.function_calling import generate
from harness.scenario.loader import resolve_runs

from conftest import TINY, write_scenario


def scenario(tmp_path, **overrides):
    (run,) = resolve_runs(write_scenario(tmp_path, TINY), overrides)
    return run.scenario


def test_generator_is_deterministic_and_covers_every_kind():
    mix = {"single": 1, "multiple": 1, "parallel": 1, "irrelevance": 1}
    a, b, c = generate(200, 0, mix), generate(200, 0, mix), generate(200, 1, mix)
    assert a == b and a != c
    assert {e.kind for e in a} == set(mix)
    parallel = next(e for e in a if e.kind == "parallel")
    assert parallel.messages[2]["content"].count("<start_function_call>") >= 2
    irrelevant = next(e for e in a if e.kind == "irrelevance")
    assert "<start_function_call>" not in irrelevant.messages[2]["content"]


def test_loss_is_taken_on_assistant_tokens_only(tmp_path):
    plan = build_batches(scenario(tmp_path))
    micro = plan.steps[0].micro_batches[0]
    row_ids, row_labels = micro.input_ids[0], micro.labels[0]
    trained = row_ids[row_labels != IGNORE_INDEX]
    text = plan.tokenizer.tokenizer.decode(trained.tolist(), skip_special_tokens=False)
    assert "<end_of_turn>" in text
    assert "developer" not in text and "You are a model" not in text
    assert (row_labels[micro.attention_mask[0] == 0] == IGNORE_INDEX).all()


def test_static_and_dynamic_padding_see_the_same_real_tokens(tmp_path):
    static = build_batches(scenario(tmp_path, **{"sequence.padding": "static"}))
    dynamic = build_batches(scenario(tmp_path, **{"sequence.padding": "dynamic"}))
    max_length = 512
    for s, d in zip(static.steps, dynamic.steps):
        assert s.tokens_real == d.tokens_real
        assert s.tokens_padded == sum(m.input_ids.shape[0] * max_length for m in s.micro_batches)
        longest = [int(m.attention_mask.sum(axis=1).max()) for m in d.micro_batches]
        assert d.seq_lens == tuple(longest)
        assert d.tokens_padded == sum(m.input_ids.shape[0] * n for m, n in zip(d.micro_batches, longest))
    assert sum(s.tokens_padded for s in static.steps) > sum(d.tokens_padded for d in dynamic.steps)


def test_packing_holds_the_same_examples_in_fewer_rows_with_restarting_positions(tmp_path):
    unpacked = build_batches(scenario(tmp_path, **{"sequence.padding": "static", "train.micro_batch": 4}))
    packed = build_batches(scenario(tmp_path, **{"sequence.padding": "packed", "train.micro_batch": 4}))
    fewer = 0
    for u, p in zip(unpacked.steps, packed.steps):
        (um,), (pm,) = u.micro_batches, p.micro_batches
        assert (p.tokens_real, p.rows, p.num_loss_tokens) == (u.tokens_real, u.rows, u.num_loss_tokens)
        assert pm.input_ids.shape[1] == 512 and pm.input_ids.shape[0] <= um.input_ids.shape[0]
        fewer += pm.input_ids.shape[0] < um.input_ids.shape[0]
        # Each unpacked row appears whole in a packed row, its positions 0.., its first
        # token no target; its trained tokens are the unpacked row's.
        lengths = [int(n) for n in um.attention_mask.sum(axis=1)]
        assert sorted(p.row_tokens) == sorted(lengths) and p.row_tokens != [512] * len(p.row_tokens)
        found = 0
        for row in range(pm.input_ids.shape[0]):
            starts = [i for i in range(512) if pm.position_ids[row, i] == 0 and pm.attention_mask[row, i]]
            for a in starts:
                n = next(k for k in range(a + 1, 513) if k == 512 or pm.position_ids[row, k] == 0) - a
                match = [
                    r
                    for r in range(um.input_ids.shape[0])
                    if lengths[r] == n and (um.input_ids[r, :n] == pm.input_ids[row, a : a + n]).all()
                ]
                assert match, (row, a)
                assert list(pm.position_ids[row, a : a + n]) == list(range(n))
                assert pm.labels[row, a] == IGNORE_INDEX
                assert (pm.labels[row, a + 1 : a + n] == um.labels[match[0], 1:n]).all()
                found += 1
        assert found == um.input_ids.shape[0] == pm.examples
    assert fewer > 0  # packing saved rows somewhere


def test_packed_rows_split_evenly_over_the_data_parallel_shards(tmp_path):
    """Over shards that do not divide the packed row count, every packed pass holds the
    same multiple of the shards (the added rows all padding, positions 0..), the
    examples and loss tokens unchanged."""
    run = scenario(tmp_path, **{"sequence.padding": "packed", "train.micro_batch": 4})
    one = build_batches(run)
    most = max(m.input_ids.shape[0] for s in one.steps for m in s.micro_batches)
    shards = most + 1 if most > 1 else 2
    split = build_batches(run, shards=shards)
    rows = {m.input_ids.shape[0] for s in split.steps for m in s.micro_batches}
    assert rows == {-(-most // shards) * shards} and most % shards  # rounded up: rows were added
    for a, b in zip(one.steps, split.steps):
        assert (a.tokens_real, a.num_loss_tokens, a.micro_batches[0].examples) == (
            b.tokens_real,
            b.num_loss_tokens,
            b.micro_batches[0].examples,
        )
        extra = b.micro_batches[0]
        added = slice(a.micro_batches[0].input_ids.shape[0], None)
        assert not extra.attention_mask[added].any() and (extra.labels[added] == IGNORE_INDEX).all()
        assert (extra.position_ids[added] == range(extra.seq_len)).all()


def test_bucketed_padding_uses_only_the_buckets(tmp_path):
    plan = build_batches(scenario(tmp_path, **{"sequence.padding": "bucketed", "sequence.buckets": [128, 256, 512]}))
    lengths = {n for step in plan.steps for n in step.seq_lens}
    assert lengths <= {128, 256, 512}


def test_gradient_accumulation_splits_the_global_batch(tmp_path):
    plan = build_batches(scenario(tmp_path, **{"train.global_batch": 8, "train.micro_batch": 2}))
    assert plan.description["grad_accum"] == 4
    assert all(m.input_ids.shape[0] == 2 for m in plan.steps[0].micro_batches)
    counted = sum(int((m.labels[:, 1:] != IGNORE_INDEX).sum()) for m in plan.steps[0].micro_batches)
    assert plan.steps[0].num_loss_tokens == counted


def test_truncation_keeps_the_trained_answer(tmp_path):
    plan = build_batches(scenario(tmp_path, **{"sequence.max_length": 96}))
    assert plan.description["num_truncated"] > 0
    for step in plan.steps:
        for m in step.micro_batches:
            assert ((m.labels != IGNORE_INDEX).sum(axis=1) > 0).all()


def test_jsonl_source_with_tools_as_a_json_string(tmp_path):
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"steps on day {i}?"},
                {"role": "assistant", "content": "<start_function_call>call:get_steps{}<end_function_call>"},
            ],
            "tools": json.dumps([{"name": "get_steps", "parameters": {}}]),
        }
        for i in range(8)
    ]
    data = tmp_path / "train.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows))
    plan = build_batches(scenario(tmp_path, **{"data.source": "jsonl", "data.path": str(data)}))
    assert plan.description["num_examples"] == 8
    first = plan.tokenizer.tokenizer.decode(
        plan.steps[0].micro_batches[0].input_ids[0].tolist(), skip_special_tokens=False
    )
    assert "get_steps" in first and "developer" in first  # tools listed in a developer turn


def test_same_seed_same_batches(tmp_path):
    a, b = build_batches(scenario(tmp_path)), build_batches(scenario(tmp_path))
    assert all(
        np.array_equal(x.micro_batches[0].input_ids, y.micro_batches[0].input_ids) for x, y in zip(a.steps, b.steps)
    )
