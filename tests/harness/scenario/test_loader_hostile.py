"""Scenario files come from other people: the loader either loads a valid scenario or
refuses with one line naming the file; never a traceback, never a hang."""

from __future__ import annotations

import json
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.basics.errors import SpecError
from harness.run.registry import validate_file
from harness.scenario.limits import (
    MAX_BATCH,
    MAX_CONCURRENCY,
    MAX_DEVICES,
    MAX_EXAMPLES,
    MAX_LAYERS,
    MAX_LORA_RANK,
    MAX_LR,
    MAX_OUTPUT_TOKENS,
    MAX_REQUESTS,
    MAX_RUNS,
    MAX_SECONDS,
    MAX_SEED,
    MAX_SEQUENCE,
    MAX_STEPS,
    MAX_VOCAB,
    MAX_WIDTH,
)
from harness.scenario.loader import apply_overrides, document_from_text, parse_yaml, validate

from conftest import SCENARIOS, bench, write_scenario

SHIPPED_TEXTS = [p.read_text() for p in sorted(SCENARIOS.glob("*.yaml"))]
KEYS = [
    "name",
    "model",
    "preset",
    "arch",
    "data",
    "train",
    "lora",
    "rank",
    "steps",
    "sequence",
    "padding",
    "max_length",
    "matrix",
    "profiles",
    "cpu",
    "repeats",
    "budgets",
    "metric",
    "max",
    "cost",
    "prices",
    "backend_options",
    "torch",
    "device",
    "optimizer",
    "lr",
    "parallel",
    "mesh",
    "fsdp",
    "train.steps",
    "sequence.padding",
    "tokenizer",
    "kind",
    "global_batch",
    "micro_batch",
    "run_timeout_s",
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["static", "dynamic", "tiny-gemma3", "lora", "2e-5", "-1"]),
)
DOCS = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=6)
    ),
    max_leaves=40,
)


@st.composite
def mutated_scenarios(draw):
    """A shipped scenario with a slice deleted, replaced or duplicated."""
    text = draw(st.sampled_from(SHIPPED_TEXTS))
    start = draw(st.integers(0, len(text)))
    stop = draw(st.integers(start, min(len(text), start + 40)))
    insert = draw(
        st.sampled_from(["", "-", ":", " ", "\n", "[", "{", "*a", "&a ", "!!", "0", "x: y\n", text[start:stop]])
    )
    return text[:start] + insert + text[stop:]


def check(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.yaml"
        path.write_text(text)
        try:
            assert validate_file(path) >= 1
        except SpecError as exc:
            message = str(exc)
            assert "\n" not in message and message.startswith(str(path))


FUZZ = settings(max_examples=150, deadline=timedelta(seconds=5), suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(DOCS)
def test_generated_documents_load_or_fail_with_one_line(doc):
    check(yaml.safe_dump(doc, allow_unicode=True))


@FUZZ
@given(mutated_scenarios())
def test_mutated_scenarios_load_or_fail_with_one_line(text):
    check(text)


@FUZZ
@given(st.text(max_size=200))
def test_arbitrary_text_loads_or_fails_with_one_line(text):
    check(text)


BILLION_LAUGHS = (
    "name: x\n"
    + "\n".join(
        [f"l0: &l0 [{', '.join(['lol'] * 9)}]"]
        + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    )
    + "\n"
)


@pytest.mark.parametrize(
    "text, expected",
    [
        (BILLION_LAUGHS, "aliases expand to more than"),
        ("name: x\nmodel: !!python/object/apply:os.system ['echo pwned']\n", "unsupported YAML tag"),
        ("name: !!python/name:os.system x\n", "unsupported YAML tag"),
        ("name: x\ntrain: &t {steps: 3, extra: *t}\n", "aliases expand"),
    ],
)
def test_hostile_yaml_is_refused_with_a_clear_message(tmp_path, text, expected):
    path = write_scenario(tmp_path, text)
    done = bench("validate", str(path), timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_huge_sweep_is_refused(tmp_path):
    axes = "\n".join(f"  train.seed{i}: [{', '.join(map(str, range(10)))}]" for i in range(4))
    with pytest.raises(SpecError, match="exceeds"):
        validate_file(write_scenario(tmp_path, f"name: x\nmatrix:\n{axes}\n"))


# --------------------------------------------------------------------------- strictness
# What a lenient parser accepts but is almost certainly a mistake is refused, naming the
# field: a key twice (the YAML spec forbids it; PyYAML keeps the last), a YAML 1.1
# boolean (yes/no/on/off) where a number or a string is expected, and magnitudes past
# each field's generous bound.
TINY_DOC = document_from_text((SCENARIOS / "tiny.yaml").read_text(), "tiny.yaml")
TOP_KEYS = sorted(TINY_DOC)
# field -> (its bound, int or float): one past it is refused.
BOUNDS = {
    "train.steps": (MAX_STEPS, int),
    "train.window_steps": (MAX_STEPS, int),
    "data.num_examples": (MAX_EXAMPLES, int),
    "sequence.max_length": (MAX_SEQUENCE, int),
    "train.global_batch": (MAX_BATCH, int),
    "train.micro_batch": (MAX_BATCH, int),
    "train.lora.rank": (MAX_LORA_RANK, int),
    "train.optimizer.lr": (MAX_LR, float),
    "serve.num_requests": (MAX_REQUESTS, int),
    "serve.output_tokens": (MAX_OUTPUT_TOKENS, int),
    "serve.load.concurrency": (MAX_CONCURRENCY, int),
    "serve.request_timeout_s": (MAX_SECONDS, float),
    "repeats": (MAX_RUNS, int),
    "run_timeout_s": (MAX_SECONDS, float),
    "data.seed": (MAX_SEED, int),
    "train.seed": (MAX_SEED, int),
    "data.tokenizer.vocab_size": (MAX_VOCAB, int),
    "model.arch.hidden_size": (MAX_WIDTH, int),
    "model.arch.num_layers": (MAX_LAYERS, int),
    "parallel.devices": (MAX_DEVICES, int),
    "workload.fine_tunes": (1e6, float),
}
NUMERIC_FIELDS = sorted(BOUNDS) + [
    "train.warmup_steps",
    "train.grad_clip",
    "train.lora.alpha",
    "name",
    "serve.prompts.input_words",
    "parallel.fsdp",
]
YAML_BOOLEANS = ["yes", "no", "on", "off", "true", "false", "Yes", "NO", "On", "OFF", "True"]


def _refusal(doc: dict) -> SpecError:
    with pytest.raises(SpecError) as err:
        validate(doc, "s.yaml")
    return err.value


@FUZZ
@given(st.sampled_from(TOP_KEYS), st.sampled_from(["x", "1", "{}", "[]", "null"]), st.booleans())
def test_a_top_level_key_given_twice_is_refused_naming_it(key, value, at_end):
    text = (SCENARIOS / "tiny.yaml").read_text()
    text = text + f"{key}: {value}\n" if at_end else f"{key}: {value}\n" + text
    with pytest.raises(SpecError) as err:
        document_from_text(text, "s.yaml")
    assert err.value.field == key and "duplicate key" in err.value.message and "lines" in err.value.message


@FUZZ
@given(
    st.lists(
        st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=6), min_size=1, max_size=6, unique=True
    ),
    st.data(),
)
def test_a_nested_key_given_twice_is_refused_naming_its_path(keys, data):
    twice = data.draw(st.sampled_from(keys))
    quoted = lambda key: json.dumps(key, ensure_ascii=False)  # noqa: E731
    entries = [f"{quoted(k)}: {i}" for i, k in enumerate(keys)]
    entries.insert(data.draw(st.integers(0, len(entries))), f"{quoted(twice)}: 99")
    with pytest.raises(SpecError) as err:
        parse_yaml("name: x\ntrain:\n  lora: {" + ", ".join(entries) + "}\n", "s.yaml")
    assert err.value.field == f"train.lora.{twice}" and "duplicate key" in err.value.message


@FUZZ
@given(st.sampled_from(sorted(BOUNDS)), st.data())
def test_magnitudes_past_a_fields_bound_are_refused_naming_it(field, data):
    bound, kind = BOUNDS[field]
    value = (
        data.draw(st.integers(int(bound) + 1, int(bound) * 1000 + 1))
        if kind is int
        else data.draw(st.floats(bound * 1.0001, 1e300, allow_nan=False, allow_infinity=False))
    )
    error = _refusal(apply_overrides(TINY_DOC, {field: value}, "--set"))
    assert error.field == field and "less than or equal" in error.message


@FUZZ
@given(st.sampled_from(NUMERIC_FIELDS), st.sampled_from(YAML_BOOLEANS))
def test_a_yaml_boolean_where_a_number_or_string_is_expected_is_refused(field, spelling):
    value = parse_yaml(f"v: {spelling}\n", "s.yaml")["v"]
    assert isinstance(value, bool)  # what YAML 1.1 makes of it
    error = _refusal(apply_overrides(TINY_DOC, {field: value}, "--set"))
    assert error.field == field and "boolean" in error.message


@FUZZ
@given(st.floats(min_value=1e-300, max_value=1e300, allow_nan=False, allow_infinity=False), st.booleans())
def test_exponent_numbers_read_as_numbers(value, negative):
    """YAML 1.1 reads `1e3` as a string; here it is the number it looks like."""
    text = f"{-value if negative else value:e}".replace(".000000", "")
    assert parse_yaml(f"v: {text}\n", "s.yaml")["v"] == pytest.approx(float(text))


@pytest.mark.parametrize(
    "text, expected",
    [
        ("name: x\ntrain:\n  steps: 10\n  steps: 1000\n", "train.steps: duplicate key (lines 3 and 4)"),
        ("name: x\ntrain: {steps: on}\n", "train.steps: got the boolean true"),
        ("name: x\ntrain: {steps: 100000000}\n", "train.steps: Input should be less than or equal to 1000000"),
        ("name: x\ndata: {seed: -1}\n", "data.seed: Input should be greater than or equal to 0"),
        ("name: x\nsequence: {max_length: 1e7}\n", "sequence.max_length"),
        ("name: x\nbudgets: [{metric: step_time, max: 1}]\n", "budgets.0.metric: unknown metric 'step_time'"),
    ],
)
def test_likely_mistakes_are_refused_by_the_cli_with_one_line(tmp_path, text, expected):
    path = write_scenario(tmp_path, text)
    done = bench("validate", str(path), timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and expected in done.stderr, done.stderr


def test_the_shipped_scenarios_stay_valid():
    done = bench("validate", *sorted(str(p) for p in SCENARIOS.glob("*.yaml")), timeout=120)
    assert done.returncode == 0 and not done.stderr, done.stderr
