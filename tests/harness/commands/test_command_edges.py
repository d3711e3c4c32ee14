"""The commands' smaller edges a new user meets first (issue 39): a report path under a
file, misspelt keys and backends, a suite file given to `bench validate`, plans that
show every choice (profile, tasks, padding, attention, options), a TPU suite previewed
where its stacks are not installed, the padding scenario on a backend without an fsdp
axis, --compile-for without JAX, and `bench backends`' install hints at 80 columns.
In-process where the command's logic allows it; a subprocess only where the one-line
error of the CLI itself is the point (no backend is probed: seconds)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from harness.basics.errors import BackendUnavailable, SpecError
from harness.commands import backends as backends_command
from harness.commands.common import print_plans
from harness.commands.suite_file import load_suite, run_suite
from harness.run import registry
from harness.run.backend import Probe
from harness.run.registry import ProbeResult
from harness.run.runner import RunRequest, _plan_sweep
from harness.scenario.loader import resolve_runs

from conftest import ROOT, bench, write_scenario

GEMMA = str(ROOT / "scenarios" / "gemma270m.yaml")
PADDING = str(ROOT / "scenarios" / "padding.yaml")
ACCELERATOR_SUITE = ROOT / "scenarios" / "suites" / "accelerator.yaml"


def one_line_refusal(done: subprocess.CompletedProcess, *needles: str) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout[-1000:], done.stderr[-2000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bench: ") and "Traceback" not in done.stderr, done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def cpu_probe(name: str, count: int = 1) -> ProbeResult:
    """What a backend's probe says on this CPU host, without starting a worker."""
    return ProbeResult(name, sys.executable, Probe(True, device_kind="cpu", device_name="test CPU", device_count=count))


def printed(function, *args) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        function(*args)
    return out.getvalue()


# --------------------------------------------------------------------------- report -o
@pytest.mark.parametrize("under", ["r.html", "sub/r.html"])
def test_a_report_under_a_file_is_one_line_naming_o(tmp_path, under):
    (tmp_path / "FILE").write_text("not a folder")
    out = tmp_path / "FILE" / under
    done = bench("report", str(ROOT / "tests" / "fixtures" / "records_v1"), "-o", str(out))
    one_line_refusal(done, f"-o {out}", f"{tmp_path / 'FILE'} is a file")
    assert not out.exists()


# --------------------------------------------------------------------------- did you mean
@pytest.mark.parametrize(
    "key, hint",
    [
        ("train.stepz", "did you mean train.steps?"),
        ("train.lora.rnak", "did you mean train.lora.rank?"),
        ("trian", "did you mean train?"),
        ("serve.num_request", "did you mean serve.num_requests?"),
    ],
)
def test_a_misspelt_key_gets_the_nearest_known_one(key, hint):
    with pytest.raises(SpecError) as refused:
        resolve_runs(GEMMA, {key: 4})
    assert refused.value.field == key and refused.value.message == f"unknown key; {hint}"


def test_a_key_near_nothing_gets_no_guess():
    with pytest.raises(SpecError) as refused:
        resolve_runs(GEMMA, {"zz": 4})
    assert refused.value.message == "unknown key"


def test_a_misspelt_backend_gets_the_nearest_known_one():
    with pytest.raises(BackendUnavailable, match=r"unknown backend 'torchh' \(known: .*\); did you mean torch\?$"):
        registry.get("torchh")
    with pytest.raises(BackendUnavailable) as far:
        registry.get("jax")
    assert "did you mean" not in str(far.value)


def test_the_cli_refuses_a_misspelt_key_in_one_line_with_the_guess():
    done = bench("run", GEMMA, "--set", "train.stepz=4", "--backend", "torch", "--dry-run")  # refused before a probe
    one_line_refusal(done, "train.stepz: unknown key; did you mean train.steps?")


# --------------------------------------------------------------------------- validate suites
def test_validate_checks_a_suite_file_as_a_suite(tmp_path):
    done = bench("validate", "scenarios/suites/tpu.yaml", "scenarios/suites/accelerator.yaml", "scenarios/tiny.yaml")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "scenarios/suites/tpu.yaml: ok (suite tpu-suite: 5 entries, 11 runs)"
    assert lines[1].startswith("scenarios/suites/accelerator.yaml: ok (suite accelerator-suite: 9 entries")
    assert lines[2].startswith("scenarios/tiny.yaml: ok (1 run")
    bad = write_scenario(
        tmp_path,
        f"name: s\nruns:\n  - {{scenario: {GEMMA}, backend: torch}}\n  - {{scenario: {GEMMA}, backend: torch, "
        "set: {train.stepz: 3}}\n",
        "suite.yaml",
    )
    done = bench("validate", str(bad))
    one_line_refusal(done, f"{bad}: runs.1: ", "train.stepz: unknown key; did you mean train.steps?")


def test_a_misspelt_suite_key_gets_the_guess(tmp_path):
    bad = write_scenario(tmp_path, f"name: s\nruns:\n  - {{scenario: {GEMMA}, backend: torch, sett: {{}}}}\n")
    with pytest.raises(SpecError, match=r"runs\.0\.sett: unknown key; did you mean runs\.0\.set\?"):
        load_suite(str(bad))


# --------------------------------------------------------------------------- plans
def test_a_plan_says_the_profile_applied_and_every_task_serve_included():
    (run,) = resolve_runs(GEMMA, {}, "cpu")
    text = printed(print_plans, [(run, None)], False, "torch")
    assert "profile                 cpu applied (reduced: sequence.max_length=256," in text
    # what the profile changed, each key, with the value the profile gives it
    profile = yaml.safe_load(Path(GEMMA).read_text())["profiles"]["cpu"]
    for key, value in profile.items():
        assert f"{key}={value}" in text, key
    assert "tasks                   train, serve" in text
    serve = run.scenario.serve
    assert (
        f"serve                   engine {serve.engine}, {serve.num_requests} requests (+{serve.warmup_requests} "
        f"warm-up), {serve.output_tokens} output tokens each" in text
    )
    (as_written,) = resolve_runs(GEMMA, {}, None)
    assert "profile                 none: the file as written" in printed(
        print_plans, [(as_written, None)], False, None
    )


def test_suite_entries_that_differ_in_compile_attention_or_padding_print_different_plans():
    fast = {"tasks": ["train"], "model.attention": "sdpa", "backend_options.torch.compile": True}
    entries = {
        "torch compiled": ("torch", fast),
        "torch compiled, packed": ("torch", {**fast, "sequence.padding": "packed"}),
        "gpu-fsdp": ("gpu-fsdp", {"tasks": ["train"], "parallel.devices": 1}),
    }
    texts = {}
    for label, (backend, sets) in entries.items():
        (run,) = resolve_runs(GEMMA, dict(sets), None)
        texts[label] = printed(print_plans, [(run, None)], False, backend)
    compiled, packed, fsdp = texts.values()
    assert "attention               sdpa" in compiled and "backend options         compile: true" in compiled
    assert "padding static" in compiled and "padding packed" in packed
    assert "backend                 gpu-fsdp" in fsdp
    assert len(set(texts.values())) == 3
    # the accelerator suite's entries as written print distinct plans too
    suite = load_suite(str(ACCELERATOR_SUITE))
    written = [
        printed(
            print_plans,
            [(resolve_runs(str(ACCELERATOR_SUITE.parent / e.scenario), dict(e.set), None)[0], None)],
            False,
            e.backend,
        )
        for e in suite.runs[:5]
    ]
    assert len(set(written)) == 5
    (default,) = resolve_runs(GEMMA, {"tasks": ["train"]}, None)
    text = printed(print_plans, [(default, None)], False, "torch")
    assert "attention               auto" in text and "backend options         none (the backend's defaults)" in text


# --------------------------------------------------------------------------- suite preview
def test_a_suite_whose_backends_are_not_installed_is_previewed_by_a_dry_run(monkeypatch, tmp_path):
    """The TPU VM's suite read on a host without its stacks: every entry planned (on one
    device of this host), each saying its backend is not installed here; a real run of
    the same suite is still refused, naming the entry."""
    missing = "torch_xla not installed (pip install torch-xla)"
    probes = {
        "xla-fsdpv2": ProbeResult("xla-fsdpv2", sys.executable, Probe(False, missing)),
        "torchax": ProbeResult("torchax", sys.executable, Probe(False, "torchax not installed")),
        "jax-tunix": cpu_probe("jax-tunix"),
    }
    monkeypatch.setattr("harness.commands.suite_file._probe", lambda suite, interpreters: probes)
    suite = str(ROOT / "scenarios" / "suites" / "tpu.yaml")
    options = {"results_dir": tmp_path / "r", "interpreters": {}}
    result = run_suite(suite, None, options, dry_run=True)
    by_backend = {o.index: (o.entry.backend, o.not_installed, o.skipped_reason) for o in result.outcomes}
    assert by_backend[0] == ("xla-fsdpv2", f"xla-fsdpv2 is not available here: {missing}", None)
    assert by_backend[1][2] == "torchax is not available here: torchax not installed"  # optional: skipped
    assert by_backend[2] == ("jax-tunix", None, None)
    for outcome in result.outcomes:  # planned all the same: the file's shape, bf16, one device for W1
        plans = [plan for _, plan in outcome.result.plans]
        assert plans and all(p.precision.compute == "bf16" for p in plans)
        if outcome.entry.label.startswith("W1 "):
            assert (plans[0].devices, plans[0].rows_per_step) == (1, 32)
    padding = result.outcomes[3].result  # xla-fsdpv2 has no per-example attention: packed refused, as there
    assert [run.variant for run, _ in padding.plans] == ["padding=static", "padding=dynamic", "padding=bucketed"]
    assert [variant for variant, _ in padding.refused] == ["padding=packed"]
    with pytest.raises(SpecError, match=r"runs\.0\.backend: xla-fsdpv2 is not available here"):
        run_suite(suite, None, options, dry_run=False)


# --------------------------------------------------------------------------- padding
def test_the_padding_scenario_on_a_backend_without_fsdp_names_it_and_the_way():
    request = RunRequest(PADDING, dry_run=True, probed=cpu_probe("torch"))
    with pytest.raises(SpecError) as refused:
        _plan_sweep(request)
    message = str(refused.value)
    assert refused.value.field == "parallel.fsdp" and "this backend has no fsdp parallelism" in message
    assert "backend torch (the best available here; the scenario names none)" in message
    fsdp = [n for n, info in registry.all_backends().items() if "fsdp" in info.capabilities.axes]
    assert "--set parallel.devices=1 (one device: every axis 1), or a backend with a fsdp axis: --backend " in message
    assert all(name in message for name in fsdp) and "torch /" not in message
    # the way it names plans the four levels on the same backend
    way = RunRequest(PADDING, dry_run=True, probed=cpu_probe("torch"), overrides={"parallel.devices": 1})
    _, _, resolved, refused_cells, _ = _plan_sweep(way)
    assert [run.variant for run, _ in resolved] == [
        "padding=static",
        "padding=dynamic",
        "padding=bucketed",
        "padding=packed",
    ]
    assert refused_cells == [] and all(plan.devices == 1 for _, plan in resolved)


# --------------------------------------------------------------------------- --compile-for
def test_compile_for_without_jax_says_which_environment_to_install(monkeypatch):
    from harness.projection.projection import tpu_slice
    from harness.projection.tpu_plan import _worker_failure

    monkeypatch.delenv("BENCH_PYTHON_TPU", raising=False)  # the compile runs in this interpreter

    done = subprocess.CompletedProcess([], 1, "", "Traceback ...\nModuleNotFoundError: No module named 'jax'\n")
    why = _worker_failure(done, tpu_slice("tpu-v5e-8"))
    assert why.startswith(f"cannot compile for tpu-v5e-8 here: {sys.executable} has no jax.")
    assert "pip install -e '.[tpu,jax,torchax,torch]'" in why and "BENCH_PYTHON_TPU=" in why


# --------------------------------------------------------------------------- bench backends
def test_backends_prints_install_hints_whole_at_80_columns():
    hint = (
        "torchax, jax not installed (pip install torchax jax optax (with torch 2.9: the xla-fsdpv2 environment works))"
    )
    path = "/a/rather/long/path/to/an/environment/that/holds/the/stack/bin/python3.11"
    infos = {name: registry.get(name) for name in ("torch", "torchax")}
    results = [cpu_probe("torch"), ProbeResult("torchax", path, Probe(False, hint))]
    table, _ = backends_command._table(infos, results)
    out = io.StringIO()
    Console(file=out, width=80).print(table)
    assert "…" not in out.getvalue()  # folded, never cut
    python_cells = [line.split("│")[4].strip() for line in out.getvalue().splitlines() if line.count("│") == 6]
    assert path in "".join(python_cells)  # whole, folded over the cell's lines
    full = backends_command.reasons_in_full(infos, results)
    assert full == f"why not, in full:\n  torchax: {hint}\n"
    assert all(len(line) > 80 for line in full.splitlines()[1:])  # one line, however long
