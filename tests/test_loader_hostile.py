"""Scenario files come from other people: the loader either loads a valid scenario or
refuses with one line naming the file; never a traceback, never a hang."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SCENARIOS, bench, write_scenario
from harness.errors import SpecError
from harness.loader import validate_file

SHIPPED_TEXTS = [p.read_text() for p in sorted(SCENARIOS.glob("*.yaml"))]
KEYS = ["name", "model", "preset", "arch", "data", "train", "lora", "rank", "steps", "sequence", "padding",
        "max_length", "matrix", "profiles", "cpu", "repeats", "budgets", "metric", "max", "cost", "prices",
        "backend_options", "torch", "device", "optimizer", "lr", "parallel", "mesh", "fsdp", "train.steps",
        "sequence.padding", "tokenizer", "kind", "global_batch", "micro_batch", "run_timeout_s"]
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                    st.text(max_size=20), st.sampled_from(["static", "dynamic", "tiny-gemma3", "lora", "2e-5", "-1"]))
DOCS = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8), inner, max_size=6)),
    max_leaves=40)


@st.composite
def mutated_scenarios(draw):
    """A shipped scenario with a slice deleted, replaced or duplicated."""
    text = draw(st.sampled_from(SHIPPED_TEXTS))
    start = draw(st.integers(0, len(text)))
    stop = draw(st.integers(start, min(len(text), start + 40)))
    insert = draw(st.sampled_from(["", "-", ":", " ", "\n", "[", "{", "*a", "&a ", "!!", "0", "x: y\n", text[start:stop]]))
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


BILLION_LAUGHS = "name: x\n" + "\n".join(
    [f"l0: &l0 [{', '.join(['lol'] * 9)}]"] + [f"l{i}: &l{i} [{', '.join([f'*l{i-1}'] * 9)}]" for i in range(1, 9)]) + "\n"


@pytest.mark.parametrize("text, expected", [
    (BILLION_LAUGHS, "aliases expand to more than"),
    ("name: x\nmodel: !!python/object/apply:os.system ['echo pwned']\n", "unsupported YAML tag"),
    ("name: !!python/name:os.system x\n", "unsupported YAML tag"),
    ("name: x\ntrain: &t {steps: 3, extra: *t}\n", "aliases expand"),
])
def test_hostile_yaml_is_refused_with_a_clear_message(tmp_path, text, expected):
    path = write_scenario(tmp_path, text)
    done = bench("validate", str(path), timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert expected in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_a_huge_sweep_is_refused(tmp_path):
    axes = "\n".join(f"  train.seed{i}: [{', '.join(map(str, range(10)))}]" for i in range(4))
    with pytest.raises(SpecError, match="exceeds"):
        validate_file(write_scenario(tmp_path, f"name: x\nmatrix:\n{axes}\n"))
