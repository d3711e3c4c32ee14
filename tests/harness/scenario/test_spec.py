"""The scenario spec: every shipped file validates; bad input is one clear line."""

from __future__ import annotations

import pytest

from harness.basics.errors import SpecError
from harness.run.registry import validate_file
from harness.scenario.loader import resolve_runs, scenario_hash

from conftest import SCENARIOS, TINY, bench, write_scenario

SHIPPED = sorted(SCENARIOS.glob("*.yaml"))


@pytest.mark.parametrize("path", SHIPPED, ids=[p.name for p in SHIPPED])
def test_every_shipped_scenario_validates(path):
    assert validate_file(path) >= 1


def test_validate_cli_accepts_all_shipped_scenarios():
    done = bench("validate", *map(str, SHIPPED))
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(": ok") == len(SHIPPED)


BAD = {
    "unknown_key": ("name: x\ntrain:\n  lora:\n    rnak: 8\n", "train.lora.rnak: unknown key"),
    "wrong_type": ("name: x\ntrain:\n  steps: many\n", "train.steps:"),
    "negative_rank": ("name: x\ntrain:\n  lora:\n    rank: -1\n", "train.lora.rank:"),
    "invalid_yaml": ("name: x\ntrain: [\n", "invalid YAML"),
    "empty": ("", "empty file"),
    "not_a_mapping": ("- 1\n- 2\n", "top level must be a mapping"),
    "batch_not_divisible": ("name: x\ntrain: {global_batch: 3, micro_batch: 2}\n", "train.global_batch:"),
    "unknown_preset": ("name: x\nmodel: {preset: nope}\n", "model.preset:"),
    "too_long_for_model": (
        "name: x\nmodel: {preset: tiny-gemma3}\nsequence: {max_length: 4096}\n",
        "sequence.max_length:",
    ),
    "bad_backend_options": ("name: x\nbackend_options: {torch: {device: tpu}}\n", "backend_options.torch.device:"),
    "unknown_backend_block": ("name: x\nbackend_options: {nope: {}}\n", "backend_options.nope:"),
    "bad_profile": ("name: x\nprofiles: {cpu: {train.stepz: 3}}\n", "train.stepz: unknown key"),
    "bad_matrix_value": ("name: x\nmatrix: {sequence.padding: [static, sideways]}\n", "sequence.padding:"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_scenario_exits_2_with_one_line_naming_file_and_field(tmp_path, case):
    text, expected = BAD[case]
    path = write_scenario(tmp_path, text, f"{case}.yaml")
    done = bench("validate", str(path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"{case}.yaml" in lines[0] and expected in lines[0]
    assert "Traceback" not in done.stderr


def test_set_overrides_a_dotted_field_and_pins_a_matrix_axis(tmp_path):
    path = write_scenario(tmp_path, TINY + "matrix:\n  sequence.padding: [static, dynamic, bucketed]\n")
    assert len(resolve_runs(path)) == 3
    pinned = resolve_runs(path, {"sequence.padding": "dynamic", "train.steps": 5})
    assert len(pinned) == 1
    assert pinned[0].scenario.sequence.padding == "dynamic" and pinned[0].scenario.train.steps == 5


def test_repeats_multiply_runs_and_keep_the_same_hash(tmp_path):
    path = write_scenario(tmp_path, TINY + "repeats: 3\n")
    runs = resolve_runs(path)
    assert [r.repeat for r in runs] == [0, 1, 2]
    assert len({r.scenario_hash for r in runs}) == 1


def test_profile_is_applied_and_stated(tmp_path):
    path = write_scenario(tmp_path, TINY + "profiles:\n  cpu: {train.steps: 4}\n")
    (run,) = resolve_runs(path, profile="cpu")
    assert run.scenario.train.steps == 4
    assert run.profile == {"name": "cpu", "overrides": {"train.steps": 4}, "reduced": True}
    with pytest.raises(SpecError, match="profiles.gpu"):
        resolve_runs(path, profile="gpu")


def test_hash_follows_content(tmp_path):
    (a,) = resolve_runs(write_scenario(tmp_path, TINY))
    (b,) = resolve_runs(write_scenario(tmp_path, TINY), {"train.seed": 1})
    assert scenario_hash(a.scenario) != scenario_hash(b.scenario)


def test_yaml_floats_without_a_dot_are_accepted(tmp_path):
    # YAML 1.1 reads `2e-5` as a string; the spec must still take it as a number.
    (run,) = resolve_runs(write_scenario(tmp_path, TINY), {"train.optimizer.lr": "2e-5"})
    assert run.scenario.train.optimizer.lr == 2e-5


@pytest.mark.parametrize(
    ("doc", "first"),
    [
        # A field of a task's section is reported before a rule across the scenario.
        ({"sequence": {"max_length": 100000}, "train": {"steps": 0}}, "train.steps:"),
        ({"matrix": {"a": []}, "serve": {"bogus": 1}}, "serve.bogus: unknown key"),
        # The core's fields come in their order: model before the task sections.
        ({"model": {"preset": "zz"}, "train": {"steps": 0}}, "model.preset:"),
        ({"train": {"steps": 0}, "parallel": {"fsdp": 0}}, "train.steps:"),
        ({"zz": 1, "train": {"steps": 0}}, "train.steps:"),
        ({"sequence": {"max_length": 100000}, "zz": 1}, "zz: unknown key"),
    ],
)
def test_the_first_error_is_the_one_pydantic_would_report_first(doc, first):
    """Task sections are validated by their tasks' models (harness.scenario.spec), yet the one
    line a bad scenario gets names the same field as when the core declared them."""
    from harness.scenario.loader import validate

    with pytest.raises(SpecError) as refused:
        validate({"name": "x", **doc}, "s.yaml")
    assert str(refused.value).startswith(f"s.yaml: {first}"), str(refused.value)


def test_task_sections_dump_as_before_so_hashes_hold():
    """A scenario's dump (what its hash and every record's `scenario.resolved` hold) has
    the same top-level keys as when the core declared the task sections: train with its
    defaults, trace and serve as null when absent (a plug-in's absent section is not
    dumped: tests/harness/tasks), so the hashes of records already written hold."""
    from harness.scenario.loader import validate

    dumped = validate({"name": "x"}, "s.yaml").model_dump(mode="json")
    assert sorted(dumped) == sorted(
        "name description reference backend model data sequence train parallel serve tasks cost workload "
        "budgets repeats run_timeout_s backend_options matrix profiles trace".split()
    )
    assert dumped["serve"] is None and dumped["trace"] is None and dumped["train"]["global_batch"] == 8
