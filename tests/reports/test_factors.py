"""Rows and factors: what a row's configuration is, which rows may be compared, and how
a selector picks one; each answer stated by hand."""

from __future__ import annotations

import pytest

from harness.basics.errors import SpecError
from harness.records.result import as_records
from reports import factors
from reports.model import Row

from records import make_record

TPU = dict(backend="xla-fsdpv2", kind="tpu", device="TPU v5", catalog_key="tpu-v5p", chips=4)
GPU = dict(backend="gpu-fsdp", kind="cuda", device="NVIDIA H100 80GB HBM3", catalog_key="h100-sxm", chips=2)


def record(**kwargs):
    (r,) = as_records([make_record([0.5] * 3, **kwargs)])
    return r


def row(**kwargs) -> Row:
    r = record(**kwargs)
    return Row([r], factors.attributes(r))


@pytest.mark.parametrize(
    "spec, label",
    [
        (TPU, "v5p-8"),  # 4 chips, 2 TensorCores each
        (dict(kind="tpu", device="TPU v5 lite", catalog_key="tpu-v5e", chips=8), "v5e-8"),
        (dict(kind="tpu", device="TPU v4", catalog_key="tpu-v4", chips=1), "v4-2"),
        (dict(kind="tpu", device="TPU7x", catalog_key="tpu-7x", chips=4), "4x tpu-7x"),  # no slice names
        (GPU, "2x h100-sxm"),
        (dict(kind="cpu", device="AMD EPYC", catalog_key="cpu", chips=1), "1x cpu"),
    ],
)
def test_accelerator_labels_are_slice_names_for_tpus(spec, label):
    assert factors.accelerator_label(record(**spec).accelerator) == label


def test_flatten_makes_dotted_keys_and_json_text():
    doc = {"a": {"b": 1, "c": {"d": "x"}}, "e": [1, 2], "f": {}, "g": None, "h": True}
    assert factors.flatten(doc) == {"a.b": "1", "a.c.d": "x", "e": "[1, 2]", "f": "{}", "g": "null", "h": "true"}
    assert factors.flatten({"k": {"z": 1, "y": 2}}, "p.") == {"p.k.z": "1", "p.k.y": "2"}
    # A value that is not a mapping is its JSON text, keys sorted: one configuration, one text.
    assert factors.flatten({"s": [{"b": 1, "a": 2}]}) == {"s": '[{"a": 2, "b": 1}]'}


def test_backend_label_names_its_options_but_not_the_matrix_ones():
    plain = record(backend="gpu-fsdp")
    assert factors.backend_label(plain) == "gpu-fsdp"
    with_options = record(backend="gpu-fsdp", options={"compile": True, "mode": "fsdp2"})
    assert factors.backend_label(with_options) == "gpu-fsdp {compile: true, mode: fsdp2}"
    swept = record(
        backend="gpu-fsdp", options={"compile": True, "mode": "fsdp2"}, cell={"backend_options.gpu-fsdp.compile": True}
    )
    assert factors.backend_label(swept) == "gpu-fsdp {mode: fsdp2}"
    dotted = record(backend="gpu-fsdp", options={"a.b": 1, "a": 2}, cell={"backend_options.gpu-fsdp.a.b": 1})
    assert factors.backend_label(dotted) == "gpu-fsdp {a: 2}"  # the option named `a.b` is the matrix's


def test_price_label_and_profile_name():
    assert factors.price_label(record(usd_per_chip_hour=2.5)) == "$2.5/chip-h custom"
    assert factors.price_label(record(catalog_key="cpu-unknown")) == "unpriced"
    assert factors.profile_name(record()) is None
    assert factors.profile_name(record(profile={"name": "cpu", "reduced": True})) == "cpu"


def test_attributes_in_display_order():
    r = record(variant="padding=dynamic", precision="bf16", usd_per_chip_hour=2.0, overrides={"train.steps": 7}, **TPU)
    attrs = factors.attributes(r)
    assert list(attrs)[:4] == ["accelerator", "backend", "sequence.padding", "train.precision"]
    assert list(attrs)[-2:] == ["profile", "price"]
    assert attrs["accelerator"] == "v5p-8" and attrs["backend"] == "xla-fsdpv2"
    assert attrs["sequence.padding"] == "dynamic" and attrs["train.precision"] == "bf16"
    assert attrs["train.steps"] == "7" and attrs["profile"] == "none" and attrs["price"] == "$2/chip-h custom"
    assert "name" not in attrs and "budgets" not in attrs  # bookkeeping, not configuration


def test_a_record_of_zero_chips_reads_as_one():
    acc = record(kind="cpu", device="AMD EPYC", catalog_key="cpu", chips=1).accelerator.model_copy(update={"count": 0})
    assert factors.accelerator_label(acc) == "1x cpu"
    assert factors.accelerator_matches(acc, "cpu:1") and not factors.accelerator_matches(acc, "cpu:2")


def test_precision_is_a_factor_when_it_varies_outside_the_matrix():
    rows = [row(precision="bf16"), row(precision="fp32")]
    assert factors.factors(rows) == ["train.precision"]


def test_factors_are_the_fields_that_vary():
    rows = [row(variant="padding=static", **TPU), row(variant="padding=dynamic", **TPU)]
    assert factors.factors(rows) == ["sequence.padding"]
    rows.append(row(variant="padding=static", **GPU))
    assert factors.factors(rows) == ["accelerator", "backend", "sequence.padding"]
    assert factors.factors(rows[:1]) == []


def test_a_field_that_reads_the_same_on_every_row_is_no_difference():
    """Rows are told apart by what their labels show: a row without a field shows it as
    `unset` (factors.UNSET), so a row whose field reads `unset` looks the same and is not
    listed as differing (a label pair that would read identically explains nothing)."""
    plain = row(variant="padding=static")
    reads_unset = row(variant="padding=static", overrides={"train.window_steps": factors.UNSET})
    assert factors.differences([plain, reads_unset], []) == []
    assert factors.differences([plain, row(variant="padding=static", overrides={"train.window_steps": 0})], []) == [
        "train.window_steps"
    ]


def test_differences_are_non_factor_fields_that_set_rows_apart():
    plain = row(variant="padding=static")
    override = row(variant="padding=static", overrides={"train.window_steps": 0})
    assert factors.differences([plain, override], []) == ["train.window_steps"]
    assert factors.differences([plain, plain], []) == []
    # A price differs with the accelerator: not a difference when each accelerator has one.
    tpu, gpu = row(usd_per_chip_hour=2.0, **TPU), row(usd_per_chip_hour=3.0, **GPU)
    assert factors.differences([tpu, gpu], ["accelerator", "backend"]) == []
    # A field the accelerator does not own differs across accelerators too.
    window = row(overrides={"train.window_steps": 0}, usd_per_chip_hour=3.0, **GPU)
    assert factors.differences([tpu, window], ["accelerator", "backend"]) == ["train.window_steps"]
    dearer_tpu = row(usd_per_chip_hour=2.5, **TPU)
    assert factors.differences([tpu, dearer_tpu, gpu], ["accelerator", "backend"]) == ["price"]


@pytest.mark.parametrize(
    "key, value, text",
    [
        ("accelerator", "v5p-8", "v5p-8"),
        ("backend", "torch", "torch"),
        ("train.precision", "bf16", "bf16"),
        ("sequence.padding", "static", "padding=static"),
        ("seed", "3", "seed=3"),
        ("backend_options.gpu-fsdp.compile", "true", "compile=true"),
    ],
)
def test_level_text(key, value, text):
    assert factors.level_text(key, value) == text
    if "=" in text:  # a matrix key reads by its last dotted part
        assert factors.short(key) == text.split("=")[0]


def test_comparable_rows_differ_in_the_factor_alone():
    static, dynamic = row(variant="padding=static", **TPU), row(variant="padding=dynamic", **TPU)
    gpu_static = row(variant="padding=static", **GPU)
    by_acc = {"v5p-8": {"xla-fsdpv2"}, "2x h100-sxm": {"gpu-fsdp"}}
    assert factors.comparable(static, dynamic, "sequence.padding", by_acc)
    other_backend = row(variant="padding=static", **{**TPU, "backend": "torchax"})
    assert factors.comparable(static, other_backend, "backend", {"v5p-8": {"xla-fsdpv2", "torchax"}})
    assert not factors.comparable(static, static, "sequence.padding", by_acc)  # same level
    assert not factors.comparable(dynamic, gpu_static, "sequence.padding", by_acc)  # accelerator differs too
    # Accelerators: the backend goes with them when neither ran on the other's hardware...
    assert factors.comparable(static, gpu_static, "accelerator", by_acc)
    # ... and not when one backend ran on both: compare like with like.
    assert not factors.comparable(
        static, gpu_static, "accelerator", {**by_acc, "2x h100-sxm": {"gpu-fsdp", "xla-fsdpv2"}}
    )
    assert not factors.comparable(static, gpu_static, "accelerator", {**by_acc, "v5p-8": {"gpu-fsdp", "xla-fsdpv2"}})
    # The price is the accelerator's: free in an accelerator comparison, held otherwise.
    priced = row(variant="padding=static", usd_per_chip_hour=9.0, **GPU)
    assert factors.comparable(static, priced, "accelerator", by_acc)
    priced_dynamic = row(variant="padding=dynamic", usd_per_chip_hour=9.0, **TPU)
    assert not factors.comparable(static, priced_dynamic, "sequence.padding", by_acc)


def test_comparable_treats_a_missing_field_as_a_difference():
    a, b = row(variant="padding=static"), row(variant="padding=dynamic", overrides={"train.steps": 3})
    assert not factors.comparable(a, b, "sequence.padding", {"1x cpu": {"torch"}})


@pytest.mark.parametrize(
    "text, terms",
    [
        ("variant=padding=static", [("variant", "padding=static")]),
        ("  backend=torch   accelerator=v5p-8 ", [("backend", "torch"), ("accelerator", "v5p-8")]),
    ],
)
def test_parse_selector(text, terms):
    assert factors.parse_selector(text, "--baseline") == terms


@pytest.mark.parametrize("text, term", [("variant", "variant"), ("=x", "=x"), ("k=", "k="), ("", ""), ("  ", "")])
def test_a_selector_term_that_is_not_key_value_is_refused(text, term):
    with pytest.raises(SpecError) as err:
        factors.parse_selector(text, "--baseline")
    assert (err.value.source, err.value.field) == ("--baseline", term.strip())
    assert err.value.message == "expected KEY=VALUE terms, e.g. 'variant=padding=static accelerator=v5p-8'"


@pytest.mark.parametrize(
    "wanted, matches",
    [
        ("tpu-v5p", True),
        ("v5p-8", True),
        ("tpu-v5p:4", True),
        ("tpu-v5p:2", False),
        ("v5p-16", False),
        ("h100-sxm", False),
        ("not a fleet", False),
    ],
)
def test_accelerator_matches(wanted, matches):
    assert factors.accelerator_matches(record(**TPU).accelerator, wanted) is matches


def test_accelerator_matches_the_reports_own_gpu_label():
    acc = record(**GPU).accelerator
    assert factors.accelerator_matches(acc, "2x h100-sxm") and factors.accelerator_matches(acc, "h100-sxm:2")
    assert not factors.accelerator_matches(acc, "h100-sxm:1")


def test_terms_match_variant_backend_accelerator_precision_and_any_field():
    r = row(
        variant="padding=static",
        precision="bf16",
        options={"compile": True},
        backend="gpu-fsdp",
        **{k: v for k, v in GPU.items() if k != "backend"},
    )
    assert factors.term_matches(r, "variant", "padding=static") and not factors.term_matches(r, "variant", "x")
    assert factors.term_matches(r, "backend", "gpu-fsdp")
    assert factors.term_matches(r, "backend", "gpu-fsdp {compile: true}") and not factors.term_matches(
        r, "backend", "torch"
    )
    assert factors.term_matches(r, "accelerator", "h100-sxm:2") and not factors.term_matches(r, "accelerator", "v5p-8")
    assert factors.term_matches(r, "precision", "bf16") and not factors.term_matches(r, "precision", "fp32")
    assert factors.term_matches(r, "sequence.padding", "static") and not factors.term_matches(
        r, "sequence.padding", "x"
    )
    assert factors.known_key([r], "variant") and factors.known_key([r], "sequence.padding")
    assert not factors.known_key([r], "chips")


def test_candidates_list_each_value_once_in_order():
    rows = [
        row(variant="padding=static", precision="bf16", **TPU),
        row(variant="padding=dynamic", precision="fp32", **TPU),
        row(variant="padding=static", precision="bf16", **GPU),
    ]
    assert factors.candidates(rows, "variant") == ["padding=static", "padding=dynamic"]
    assert factors.candidates(rows, "backend") == ["xla-fsdpv2", "gpu-fsdp"]
    assert factors.candidates(rows, "precision") == ["bf16", "fp32"]
    assert factors.candidates(rows, "accelerator") == ["v5p-8", "2x h100-sxm"]
    assert factors.candidates(rows, "nope") == [""]
    with_options = [row(options={"compile": True}, **GPU), row(**TPU)]
    assert factors.candidates(with_options, "backend") == ["gpu-fsdp", "xla-fsdpv2"]  # names, not labels
    assert factors.candidates(with_options, "precision") == [""]
