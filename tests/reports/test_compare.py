"""Comparisons read from either side: the subject slower than the baseline, so the
sentence flips to "slower" and the headline swaps the sides; every figure recomputed
from the records by hand (statistics.median, numpy's bootstrap), never by the report."""

from __future__ import annotations

import random
import statistics

import numpy as np
import pytest

from reports.stats import Ratio

from records import make_record

TPU = dict(backend="xla-fsdpv2", kind="tpu", device="TPU v5", catalog_key="tpu-v5p", chips=4, usd_per_chip_hour=4.0)
GPU = dict(
    backend="gpu-fsdp",
    kind="cuda",
    device="NVIDIA H100 80GB HBM3",
    catalog_key="h100-sxm",
    chips=2,
    usd_per_chip_hour=3.0,
)


def _runs(spec: dict, step_s: float, repeats: int, seed: int, minute: int) -> list[dict]:
    """`repeats` runs of one configuration, each run's median jittered by up to +-3%."""
    rng = random.Random(seed)
    out = []
    for repeat in range(repeats):
        base = step_s * rng.uniform(0.97, 1.03)
        out.append(
            make_record(
                [base * rng.uniform(0.99, 1.01) for _ in range(6)],
                variant="padding=static",
                repeat=repeat,
                precision="bf16",
                started_at=f"2026-11-25T00:{minute + repeat:02d}:00+00:00",
                **spec,
            )
        )
    return out


def np_interval(a: list[float], b: list[float]) -> tuple[float, float]:
    """The stated convention, restated with numpy: 2,000 resamples of each side (seed 0,
    side a's draws first), the 2.5th and 97.5th percentiles of the ratio of medians."""
    rng = np.random.default_rng(0)
    a, b = np.asarray(a), np.asarray(b)
    ma = np.median(a[rng.integers(0, len(a), (2000, len(a)))], axis=1)
    mb = np.median(b[rng.integers(0, len(b), (2000, len(b)))], axis=1)
    low, high = np.percentile(ma / mb, [2.5, 97.5])
    return float(low), float(high)


@pytest.fixture
def swapped():  # per test: mutmut maps a test to the code its own setup ran
    """The TPU (3.2x faster, cheaper per token) is the baseline, the GPU the subject: the
    subject is slower, so every headline path swaps."""
    from reports.model import build

    records = _runs(TPU, 0.05, 4, seed=1, minute=0) + _runs(GPU, 0.16, 4, seed=2, minute=10)
    report = build(records, "accelerator=v5p-8")
    tok = {
        k: [r["metrics"]["tokens_per_s_real"] for r in records if r["accelerator"]["catalog_key"] == k]
        for k in ("tpu-v5p", "h100-sxm")
    }
    usd = {
        k: [r["cost"]["usd_per_1m_tokens_real"] for r in records if r["accelerator"]["catalog_key"] == k]
        for k in ("tpu-v5p", "h100-sxm")
    }
    return report.sections[0], tok, usd


def test_a_slower_subject_reads_slower_with_its_interval_inverted(swapped):
    section, tok, usd = swapped
    (c,) = section.comparisons
    assert (c.subject_level, c.reference_level) == ("2x h100-sxm · gpu-fsdp", "v5p-8 · xla-fsdpv2")
    slower = statistics.median(tok["tpu-v5p"]) / statistics.median(tok["h100-sxm"])
    low, high = np_interval(tok["h100-sxm"], tok["tpu-v5p"])  # subject / reference, < 1
    assert c.speed.value == pytest.approx(1 / slower) and (c.speed.low, c.speed.high) == pytest.approx((low, high))
    dearer = statistics.median(usd["h100-sxm"]) / statistics.median(usd["tpu-v5p"])
    cost_low, cost_high = np_interval(usd["tpu-v5p"], usd["h100-sxm"])  # > 1: the subject cheaper
    assert c.cost.value == pytest.approx(1 / dearer)
    assert c.sentence.startswith(
        f"2x h100-sxm · gpu-fsdp vs v5p-8 · xla-fsdpv2 (bf16): {slower:.2f}x slower "
        f"(95% CI {1 / high:.2f}-{1 / low:.2f}); {dearer:.2f}x dearer per 1M real tokens (steady state) "
        f"(95% CI {1 / cost_high:.2f}-{1 / cost_low:.2f})"
    )
    assert 3.0 < slower < 3.4 and 1.1 < dearer < 1.3  # the records are what the fixture says


def test_the_headline_puts_the_faster_side_first_and_inverts_both_ratios(swapped):
    section, tok, usd = swapped
    speedup = statistics.median(tok["tpu-v5p"]) / statistics.median(tok["h100-sxm"])
    cheaper = statistics.median(usd["h100-sxm"]) / statistics.median(usd["tpu-v5p"])
    low, high = np_interval(tok["h100-sxm"], tok["tpu-v5p"])
    cost_low, cost_high = np_interval(usd["tpu-v5p"], usd["h100-sxm"])
    assert section.headline[0] == (
        f"v5p-8 · xla-fsdpv2 vs 2x h100-sxm · gpu-fsdp (bf16): {speedup:.2f}x faster "
        f"(95% CI {1 / high:.2f}-{1 / low:.2f}) and {cheaper:.2f}x cheaper per 1M real tokens "
        f"(95% CI {1 / cost_high:.2f}-{1 / cost_low:.2f})"
    )


def test_oriented_swaps_rows_levels_and_inverts_speed_and_cost(swapped):
    from reports.compare import oriented

    section, _, _ = swapped
    (c,) = section.comparisons
    first, second, first_level, second_level, speed, cost = oriented(c)
    assert (first, second) == (c.reference, c.subject)
    assert (first_level, second_level) == (c.reference_level, c.subject_level)
    assert (speed.value, speed.low, speed.high) == pytest.approx((1 / c.speed.value, 1 / c.speed.high, 1 / c.speed.low))
    assert (cost.value, cost.low, cost.high) == pytest.approx((1 / c.cost.value, 1 / c.cost.high, 1 / c.cost.low))
    assert speed.runs == (4, 4) and cost.runs == (4, 4)


# --------------------------------------------------------------------------- sentences, by hand
XLA = dict(backend="xla-fsdpv2", kind="tpu", device="TPU v5", catalog_key="tpu-v5p", chips=4, usd_per_chip_hour=4.0)
NOISE = "1 vs 1 run: between-run noise not measured"


def _row(*records):
    from harness.records.result import as_records
    from reports import factors
    from reports.model import Row

    rs = as_records(list(records))
    return Row(rs, factors.attributes(rs[0]))


def _padding(a, b, context="v5p-8"):
    from reports.compare import compare_rows

    return compare_rows(a, b, "sequence.padding", "padding=dynamic", "padding=static", context)


def test_without_a_steady_state_both_sides_use_effective_figures_and_say_so():
    """a compiles every measured step: 3 steps of 1000 real tokens in 0.75 s (4000 tok/s)
    against b's 3 in 1.8 s (1667 tok/s): 2.40x faster, and at one price 2.40x cheaper."""
    a = _row(make_record([0.2, 0.3, 0.25], compiles=[1, 1, 1, 1], variant="padding=dynamic", **XLA))
    b = _row(make_record([0.6] * 3, variant="padding=static", **XLA))
    c = _padding(a, b)
    speedup = (3000 / 0.75) / (3000 / 1.8)
    assert c.basis == "effective" and c.with_recompiles is None
    assert c.speed.value == pytest.approx(speedup) and c.cost.value == pytest.approx(speedup)
    assert c.sentence == (
        f"padding=dynamic vs padding=static (v5p-8): {speedup:.2f}x faster with compiles included; "
        f"{speedup:.2f}x cheaper per 1M real tokens (every measured step); recompiles after warm-up 3 vs 0; "
        "no steady state in padding=dynamic (1 of 1 runs: every measured step compiled), so effective figures on "
        f"both sides; {NOISE}"
    )
    assert compare_module().w3_sentence(c, lambda first, second: ["extra"]) == (
        f"padding=dynamic vs padding=static (v5p-8): {speedup:.2f}x faster with compiles included and "
        f"{speedup:.2f}x cheaper per 1M real tokens; extra; {NOISE}"
    )
    assert compare_module().factor_headline([c]) == [
        f"padding=dynamic vs padding=static: on v5p-8: {speedup:.2f}x faster with compiles included ({NOISE})"
    ]


def compare_module():
    from reports import compare

    return compare


def test_a_recompiling_subject_gets_steady_and_with_recompiles_ratios():
    """a: measured steps 0.2 s, 0.9 s (recompiled), 0.2 s; steady 2000 tok in 0.4 s, every
    step 3000 in 1.3 s; b: 2000 tok/s both ways."""
    a = _row(make_record([0.2, 0.9, 0.2], compiles=[1, 0, 1, 0], variant="padding=dynamic", **XLA))
    b = _row(make_record([0.5] * 3, variant="padding=static", **XLA))
    c = _padding(a, b)
    steady, effective = (2000 / 0.4) / 2000, (3000 / 1.3) / 2000
    assert c.basis == "steady" and c.with_recompiles.value == pytest.approx(effective)
    assert c.sentence == (
        f"padding=dynamic vs padding=static (v5p-8): {steady:.2f}x faster in steady state; {steady:.2f}x cheaper "
        f"per 1M real tokens (steady state); {effective:.2f}x faster with recompiles included; recompiles after "
        f"warm-up 1 vs 0; {NOISE}"
    )
    assert compare_module().factor_headline([c]) == [
        f"padding=dynamic vs padding=static: on v5p-8: {steady:.2f}x faster in steady state, {effective:.2f}x "
        f"faster with recompiles included ({NOISE})"
    ]
    assert (
        compare_module()
        .w3_sentence(c, lambda first, second: [])
        .startswith(
            f"padding=dynamic vs padding=static (v5p-8): {steady:.2f}x faster and {steady:.2f}x cheaper per 1M real tokens"
        )
    )


def test_with_repeats_on_both_sides_nothing_is_said_about_noise():
    a = _row(*[make_record([0.25 + 0.01 * i] * 3, variant="padding=dynamic", repeat=i, **XLA) for i in range(2)])
    b = _row(*[make_record([0.5 + 0.01 * i] * 3, variant="padding=static", repeat=i, **XLA) for i in range(2)])
    c = _padding(a, b, context="")
    assert c.noise() is None and c.title == "padding=dynamic vs padding=static"
    assert c.sentence.startswith("padding=dynamic vs padding=static: ") and "noise" not in c.sentence
    assert c.sentence.endswith("; recompiles after warm-up 0 vs 0")


def test_factor_headline_joins_contexts_of_one_pair_of_levels():
    from reports.compare import Comparison

    r = Ratio(1.5, None, None, (1, 2))
    one = Comparison("f", None, None, "x=1", "x=0", "on-a", "steady", r, None, None, "", "")
    two = Comparison("f", None, None, "x=1", "x=0", "", "steady", None, Ratio(0.5, None, None, (2, 1)), None, "", "")
    none = Comparison("f", None, None, "x=2", "x=0", "ctx", "steady", None, None, None, "", "")
    assert compare_module().factor_headline([one, two, none]) == [
        "x=1 vs x=0: on on-a: 1.50x faster (1 vs 2 runs: between-run noise not measured); 2.00x dearer per 1M real "
        "tokens (steady state) (2 vs 1 runs: between-run noise not measured)",
        "x=2 vs x=0: on ctx: no figures",
    ]
    assert compare_module().w3_sentence(none, lambda first, second: [None, "w"]) == "x=2 vs x=0 (ctx): no figures; w"


def test_recompile_words_say_when_a_backend_compiles_nothing():
    from reports.compare import recompile_words

    eager = _row(make_record([0.5] * 3, variant="padding=static"))  # torch: compiles nothing
    compiled = _row(make_record([0.5] * 3, compiles=[1, 0, 2, 0], variant="padding=static", **XLA))
    assert recompile_words(eager, eager) == "recompiles n/a (eager: the backends compile nothing)"
    assert recompile_words(eager, compiled) == "recompiles after warm-up n/a (eager) vs 2"
    assert recompile_words(compiled, eager) == "recompiles after warm-up 2 vs n/a (eager)"


def test_why_a_factor_was_not_compared():
    from reports.compare import factor_comparisons
    from reports.factors import factors

    gpu = dict(
        backend="gpu-fsdp",
        kind="cuda",
        device="NVIDIA H100 80GB HBM3",
        catalog_key="h100-sxm",
        chips=2,
        usd_per_chip_hour=4.0,
    )
    rows = [
        _row(make_record([0.5] * 3, variant="padding=static", **XLA)),
        _row(make_record([0.4] * 3, variant="padding=dynamic", **gpu)),
    ]
    names = factors(rows)
    assert factor_comparisons(rows, rows[0], "sequence.padding", names, []) == (
        [],
        "padding: padding=static, padding=dynamic not compared: no two rows differ in it alone (the closest pair also differs in "
        "accelerator, backend)",
    )
    same_padding = [rows[0], _row(make_record([0.4] * 3, variant="padding=static", **gpu))]
    assert factor_comparisons(same_padding, rows[0], "backend", factors(same_padding), []) == (
        [],
        "backend: xla-fsdpv2, gpu-fsdp: each ran on its own accelerator, so it is compared with the accelerator",
    )
    comparisons, why = factor_comparisons(same_padding, rows[0], "accelerator", factors(same_padding), [])
    (c,) = comparisons
    assert why is None and c.title == "2x h100-sxm · gpu-fsdp vs v5p-8 · xla-fsdpv2"
    assert c.speed.value == pytest.approx(0.5 / 0.4)


def test_requested_names_what_differs():
    from reports.compare import requested

    a, b = (
        _row(make_record([0.25] * 3, variant="padding=dynamic", **XLA)),
        _row(make_record([0.5] * 3, variant="padding=static")),
    )
    a.label, b.label = "A", "B"
    c = requested(a, b)
    assert c.factor == "requested" and c.title == "A vs B (differ in accelerator, backend, sequence.padding, price)"
    assert c.speed.value == pytest.approx(2.0)


def _serve_row(ttft):
    import copy
    import json

    from conftest import ROOT

    path = next((ROOT / "tests" / "fixtures" / "records_v1").glob("*serve*.json"))
    record = make_record([0.5] * 3)
    metrics = copy.deepcopy(json.loads(path.read_text())["metrics"])
    metrics["ttft_s"] = None if ttft is None else {**metrics["ttft_s"], "median": ttft}
    record.update(task="serve", metrics=metrics, cost=None)
    return _row(record)


def test_ttft_words_from_one_serving_configuration_a_side():
    from reports.compare import ttft_words

    fast, slow = _serve_row(0.2354), _serve_row(0.4751)
    assert ttft_words([fast], [slow], "a", "b") == "TTFT 235 vs 475 ms"
    assert ttft_words([], [slow], "a", "b") is None and ttft_words([fast], [], "a", "b") is None
    assert ttft_words([fast, slow], [slow], "a", "b") == "TTFT: several serving configurations on a, see Serving"
    assert ttft_words([fast], [slow, fast], "a", "b") == "TTFT: several serving configurations on b, see Serving"
    assert ttft_words([_serve_row(None)], [slow], "a", "b") is None


def test_oriented_keeps_a_faster_or_equal_subject_first_and_copes_with_missing_ratios():
    from reports.compare import Comparison, oriented

    def comparison(speed, cost):
        return Comparison("f", "S", "R", "s", "r", "", "steady", speed, cost, None, "", "")

    for value in (1.0, 1.5):
        kept = comparison(Ratio(value, None, None, (1, 1)), None)
        assert oriented(kept) == ("S", "R", "s", "r", kept.speed, None)
    slower = comparison(Ratio(0.5, None, None, (1, 2)), None)
    assert oriented(slower) == ("R", "S", "r", "s", Ratio(2.0, None, None, (2, 1)), None)
    cost_only = comparison(None, Ratio(0.5, None, None, (1, 1)))
    assert oriented(cost_only) == ("S", "R", "s", "r", None, cost_only.cost)


def test_a_record_without_metrics_or_cost_has_no_figure():
    from harness.records.result import as_records
    from reports.compare import _cost, _metric

    bare = make_record([0.5] * 3)
    bare.update(metrics=None, cost=None)
    (record,) = as_records([bare])
    assert _metric(record, "tokens_per_s_real") is None and _cost(record, "usd_per_1m_tokens_real") is None
    a = _row(make_record([0.25] * 3, variant="padding=dynamic", catalog_key="cpu-unknown"))
    b = _row(make_record([0.5] * 3, variant="padding=static", catalog_key="cpu-unknown"))
    c = _padding(a, b)
    assert c.cost is None and c.speed.value == pytest.approx(2.0) and c.cost_words() is None


def _comparison(speed, cost=None, with_recompiles=None, basis="steady", context="ctx"):
    from reports.compare import Comparison

    return Comparison("f", "S", "R", "x=1", "x=0", context, basis, speed, cost, with_recompiles, "", "")


def test_an_interval_spanning_1_names_the_quantity_not_distinguishable():
    """Each sentence's quantity, with the interval read in the sentence's direction
    (0.98x with 0.90-1.05 reads 1.02x dearer, 1/1.05 to 1/0.90)."""
    same_speed, same_cost = Ratio(1.02, 0.95, 1.1, (3, 3)), Ratio(0.98, 0.9, 1.05, (3, 3))
    c = _comparison(same_speed, same_cost, with_recompiles=Ratio(0.8, 0.7, 0.9, (3, 3)))
    assert c.speed_words() == "speed in steady state not distinguishable (1.02x faster, 95% CI 0.95-1.10)"
    assert c.cost_words() == (
        "cost per 1M real tokens (steady state) not distinguishable (1.02x dearer, 95% CI 0.95-1.11)"
    )
    assert compare_module().factor_headline([c]) == [
        "x=1 vs x=0: on ctx: speed in steady state not distinguishable (1.02x faster, 95% CI 0.95-1.10), "
        "1.25x slower with recompiles included (95% CI 1.11-1.43)"
    ]
    blurred = _comparison(same_speed, with_recompiles=Ratio(0.95, 0.9, 1.05, (3, 3)))
    assert (
        compare_module()
        .factor_headline([blurred])[0]
        .endswith(", speed with recompiles included not distinguishable (1.05x slower, 95% CI 0.95-1.11)")
    )
    plain = _comparison(same_speed, Ratio(1.01, 0.9, 1.1, (3, 3)), context="")
    assert plain.speed_words() == "speed not distinguishable (1.02x faster, 95% CI 0.95-1.10)"
    assert compare_module().w3_sentence(plain, lambda first, second: []) == (
        "x=1 vs x=0: speed not distinguishable (1.02x faster, 95% CI 0.95-1.10) and cost per 1M real tokens not "
        "distinguishable (1.01x cheaper, 95% CI 0.90-1.10)"
    )
    effective = _comparison(same_speed, Ratio(0.98, 0.9, 1.05, (3, 3)), basis="effective")
    assert (
        effective.speed_words() == "speed with compiles included not distinguishable (1.02x faster, 95% CI 0.95-1.10)"
    )
    assert compare_module().w3_sentence(effective, lambda first, second: []) == (
        "x=1 vs x=0 (ctx): speed with compiles included not distinguishable (1.02x faster, 95% CI 0.95-1.10) and "
        "cost per 1M real tokens not distinguishable (1.02x dearer, 95% CI 0.95-1.11)"
    )
    assert effective.cost_words().startswith("cost per 1M real tokens (every measured step) not distinguishable")


def test_a_note_names_each_side_without_a_steady_state():
    b = _row(make_record([0.25] * 3, compiles=[1, 1, 1, 1], variant="padding=static", **XLA))
    a = _row(make_record([0.5] * 3, variant="padding=dynamic", **XLA))
    assert _padding(a, b).note == (
        "no steady state in padding=static (1 of 1 runs: every measured step compiled), so effective figures on both sides"
    )
    a = _row(make_record([0.5] * 3, compiles=[1, 1, 1, 1], variant="padding=dynamic", **XLA))
    assert _padding(a, b).note == (
        "no steady state in padding=dynamic (1 of 1 runs: every measured step compiled), so effective figures on "
        "both sides; no steady state in padding=static (1 of 1 runs: every measured step compiled), so effective "
        "figures on both sides"
    )


V5E = dict(
    backend="xla-fsdpv2", kind="tpu", device="TPU v5 lite", catalog_key="tpu-v5e", chips=8, usd_per_chip_hour=1.0
)
H100 = dict(
    backend="gpu-fsdp",
    kind="cuda",
    device="NVIDIA H100 80GB HBM3",
    catalog_key="h100-sxm",
    chips=2,
    usd_per_chip_hour=3.0,
)


def test_contexts_name_every_factor_held_and_the_equal_differences():
    """Padding compared on one accelerator: the context holds accelerator and backend;
    an accelerator compared with one backend: no backend in the levels, held in the context."""
    from reports.compare import factor_comparisons
    from reports.factors import factors

    rows = [
        _row(make_record([0.5] * 3, variant="padding=static", precision="bf16", overrides={"train.steps": 5}, **XLA)),
        _row(make_record([0.4] * 3, variant="padding=dynamic", precision="bf16", overrides={"train.steps": 5}, **XLA)),
        _row(make_record([0.3] * 3, variant="padding=static", precision="bf16", overrides={"train.steps": 5}, **V5E)),
        _row(
            make_record(
                [0.3] * 3,
                variant="padding=static",
                precision="bf16",
                overrides={"train.steps": 5},
                **{**XLA, "backend": "torchax"},
            )
        ),
    ]
    names = factors(rows)
    (padding,), _ = factor_comparisons(rows, rows[0], "sequence.padding", names, ["train.steps", "seed"])
    assert padding.title == "padding=dynamic vs padding=static (v5p-8 · xla-fsdpv2 · bf16 · train.steps=5 · seed=unset)"
    (accelerator,), _ = factor_comparisons(rows, rows[0], "accelerator", names, [])
    assert accelerator.title == "v5e-8 vs v5p-8 (xla-fsdpv2 · padding=static · bf16)"
    (c,), _ = factor_comparisons(rows, rows[0], "accelerator", names, ["price", "train.steps"])
    assert c.context == "xla-fsdpv2 · padding=static · bf16 · train.steps=5"  # the prices differ: not held


def test_accelerators_are_compared_like_with_like_when_one_backend_ran_on_both():
    from reports.compare import factor_comparisons
    from reports.factors import factors

    rows = [
        _row(make_record([0.5] * 3, variant="padding=static", **XLA)),
        _row(make_record([0.4] * 3, variant="padding=static", **H100)),
        _row(make_record([0.45] * 3, variant="padding=static", **{**H100, "backend": "xla-fsdpv2"})),
    ]
    comparisons, _ = factor_comparisons(rows, rows[0], "accelerator", factors(rows), [])
    assert [c.title for c in comparisons] == ["2x h100-sxm vs v5p-8 (xla-fsdpv2)"]


def test_why_not_picks_the_closest_pair_and_words_each_case():
    from reports.compare import _why_not

    rows = [
        _row(make_record([0.5] * 3, variant="padding=static", overrides={"seed": 1, "train.steps": 3}, **XLA)),
        _row(make_record([0.5] * 3, variant="padding=dynamic", overrides={"seed": 2, "train.steps": 3}, **XLA)),
        _row(make_record([0.5] * 3, variant="padding=bucketed", overrides={"seed": 2, "train.steps": 4}, **XLA)),
    ]
    assert _why_not(rows, "sequence.padding") == (
        "padding: padding=static, padding=dynamic, padding=bucketed not compared: no two rows differ in it alone "
        "(the closest pair also differs in seed)"
    )
    on_two = [
        rows[0],
        _row(make_record([0.5] * 3, variant="padding=dynamic", overrides={"seed": 1, "train.steps": 3}, **V5E)),
    ]
    assert _why_not(on_two, "sequence.padding") == (
        "padding: padding=static, padding=dynamic not compared: no two rows differ in it alone (the closest pair "
        "also differs in accelerator, price)"
    )
    tpu = _row(make_record([0.5] * 3, overrides={"parallel.devices": 4}, **XLA))
    gpu = _row(make_record([0.5] * 3, overrides={"parallel.devices": 2}, **H100))
    assert _why_not([tpu, gpu], "backend") == (
        "backend: xla-fsdpv2, gpu-fsdp: each ran on its own accelerator, so it is compared with the accelerator"
    )
    option = "backend_options.xla-fsdpv2.spmd"
    swept = [_row(make_record([0.5] * 3, cell={option: v}, overrides={"seed": v}, **XLA)) for v in (1, 2)]
    assert _why_not(swept, option).startswith("spmd: spmd=1, spmd=2 not compared")


def test_with_a_window_on_every_run_both_sides_use_it_and_say_so():
    """a: a window of 4 x 1000 real tokens in 0.4 s (10,000 tok/s), b: in 1.0 s (4,000):
    2.5x faster and, at one price, 2.5x cheaper over the unsynced window, whatever the
    synchronised steps say (a's are the slower here)."""
    a = _row(make_record([0.6] * 3, variant="padding=dynamic", window_s=0.4, **XLA))
    b = _row(make_record([0.5] * 3, variant="padding=static", window_s=1.0, **XLA))
    c = _padding(a, b)
    speedup = (4000 / 0.4) / (4000 / 1.0)
    # $/1M real tokens at the window's tokens/s, by hand: 4 chips x $4.00 per chip-hour.
    usd = {side: 4 * 4.0 * (1e6 / (4000 / t)) / 3600 for side, t in (("a", 0.4), ("b", 1.0))}
    assert a.records[0].cost.usd_per_1m_tokens_real_window == pytest.approx(usd["a"])
    assert c.basis == "window" and c.speed.value == pytest.approx(speedup)
    assert c.cost.value == pytest.approx(usd["b"] / usd["a"])
    assert c.sentence == (
        f"padding=dynamic vs padding=static (v5p-8): {speedup:.2f}x faster over the unsynced window; "
        f"{speedup:.2f}x cheaper per 1M real tokens (unsynced window); recompiles after warm-up 0 vs 0; {NOISE}"
    )
    assert (
        compare_module()
        .w3_sentence(c, lambda first, second: [])
        .startswith(
            f"padding=dynamic vs padding=static (v5p-8): {speedup:.2f}x faster over the unsynced window and "
            f"{speedup:.2f}x cheaper per 1M real tokens"
        )
    )


def test_a_window_on_one_side_only_leaves_both_on_steady_state():
    a = _row(make_record([0.25] * 3, variant="padding=dynamic", window_s=0.4, **XLA))
    b = _row(make_record([0.5] * 3, variant="padding=static", **XLA))
    c = _padding(a, b)
    assert c.basis == "steady" and c.speed.value == pytest.approx(2.0)
