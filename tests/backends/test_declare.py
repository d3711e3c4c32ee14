"""backends/declare.py: a backend's facts from its backend.yaml, exactly or refused."""

import pytest

from backends.declare import declared_backend
from harness.basics.errors import SpecError
from harness.run.backend import BackendOptions, Capabilities

DECLARED = """
name: demo
summary: "a demo: nothing to run"
requires: [demo_framework]
install: pip install demo
backend_class: "harness.run.backend:BackendOptions"
priority: 7
capabilities:
  axes: [data, fsdp]
  max_devices: null
  packing_why: null
"""


def _declare(tmp_path, text):
    (tmp_path / "backend.yaml").write_text(text)
    return declared_backend(str(tmp_path / "__init__.py"), BackendOptions)


def test_the_file_becomes_the_backend_info_with_tuples_nulls_and_defaults(tmp_path):
    info = _declare(tmp_path, DECLARED)
    assert (info.name, info.requires, info.priority, info.launcher) == ("demo", ("demo_framework",), 7, "single")
    expected = Capabilities(axes=("data", "fsdp"), max_devices=None, packing_why=None)
    assert info.capabilities == expected and info.options is BackendOptions and info.eager is None
    assert info.load() is BackendOptions  # imported when called


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (DECLARED + "colour: red\n", "backend.yaml: colour: unknown field"),
        (DECLARED + "  max_ranks: 2\n", "backend.yaml: capabilities.max_ranks: unknown field"),
        (DECLARED + "load: x\n", "backend.yaml: load: unknown field"),
        (
            DECLARED.replace('backend_class: "harness.run.backend:BackendOptions"\n', ""),
            "backend.yaml: backend_class: required",
        ),
    ],
)
def test_a_field_it_does_not_know_or_lacks_is_refused_naming_the_file_and_field(tmp_path, text, where):
    with pytest.raises(SpecError, match=where):
        _declare(tmp_path, text)
