"""benchmarks/device_suite.sh (#36, #45): its dry run prints the runs in order of value,
each budget from its terms (recomputed here from the printed terms), each term labelled
measured (the same backend, on an H100 or H200) or a guess, a core W1 table of at most 400 s
and where under $OUT each record lands; without the wheel folder it stops before any
work, naming the carry to pass. On the CPU: the kernel smoke tests fall back with their
reason, and $OUT gets the plan, the kernels, the ledger and the records even when a run
fails or the suite itself errs."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import tarfile

import pytest

from conftest import ROOT

ORDER = [
    "W1 jax-tunix",
    "W1 torchax",
    "W1 torch",
    "W1 gpu-fsdp",
    "W1 torch packed",
    "W1 serve local c1",
    "W1 serve local c32",
    "padding gpu-fsdp compiled",
    "padding jax-tunix",
]


def script(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "device_suite.sh"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHON": __import__("sys").executable, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=300,
    )


def parse_plan(text: str) -> list[dict]:
    runs = []
    for block in re.split(r"\n(?=\d+\. )", text)[1:]:
        head = re.match(r"(\d+)\. (.+?) \[(core|if time remains)\] budget (\d+) s, slot (\d+) s", block)
        terms = re.findall(r"^   - ([^:]+): ([\d.]+) s \[([^\]]+)\]: (.+)$", block, re.M)
        record = re.search(r"record: (\S+) -> (\S+)", block)
        runs.append(
            {
                "label": head[2],
                "core": head[3] == "core",
                "budget": int(head[4]),
                "slot": int(head[5]),
                "terms": [(what, float(s), kind, src) for what, s, kind, src in terms],
                "backend": re.search(r"--backend (\S+)", block)[1],
                "record": (record[1], record[2]),
            }
        )
    return runs


def test_dry_run_orders_the_runs_by_value_with_a_core_table_within_400_s_and_each_record_under_out():
    done = script("--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    runs = parse_plan(done.stdout)
    assert [r["label"] for r in runs] == ORDER
    assert [r["core"] for r in runs] == [True] * 3 + [False] * 6  # the rest only if time remains
    parent = float(re.search(r"slot = budget \+ ([\d.]+) s a run", done.stdout)[1])
    for run in runs:
        assert len(run["terms"]) >= 3 and all(src for *_, src in run["terms"]), run
        # 1.15 x the printed terms, rounded up to 1 s (each term printed to 0.1 s)
        total = sum(s for _, s, _, _ in run["terms"])
        slack = 0.05 * len(run["terms"])
        assert math.ceil(1.15 * (total - slack)) <= run["budget"] <= math.ceil(1.15 * (total + slack)), run
        cells = 4 if run["label"].startswith("padding") else 1  # padding.yaml: static, dynamic, bucketed, packed
        assert run["slot"] == run["budget"] + math.ceil(parent * cells), run
        assert run["record"][0] == "$OUT/records.tgz" and run["record"][1].endswith("/*.json"), run
    core_total = sum(r["slot"] for r in runs if r["core"])
    assert core_total <= 400
    assert re.search(
        rf"total \(core W1 table\): {core_total} s \(limit 400 s; \d+ of its terms are guesses\)", done.stdout
    )
    assert len({r["record"][1] for r in runs}) == len(runs)  # one folder per run


def test_every_budget_term_is_a_measurement_of_the_same_backend_or_labelled_a_guess():
    done = script("--dry-run")
    runs = parse_plan(done.stdout)
    kinds = {kind for run in runs for _, _, kind, _ in run["terms"]}
    assert "measured" in kinds and any(k.startswith("guess") for k in kinds)
    for run in runs:
        for what, _, kind, source in run["terms"]:
            assert kind == "measured" or kind.startswith("guess: "), (run["label"], what, kind)
            if kind == "measured":  # a GPU record of this very backend (the local engine runs on torch)
                assert re.search(r"suite on an H[12]00 \(2026-11-2\d\)", source), (run["label"], what)
                assert run["backend"] in source or (run["backend"] == "torch" and "local engine" in source), what
    # Recomputed from the figures themselves: a term is measured only where its figure is
    # the run's backend's, on an H100 or H200.
    sys.path.insert(0, str(ROOT))
    from benchmarks import device_suite

    for run in device_suite.runs():
        for what, _, _, kind in run.terms:
            names = [n for n, f in device_suite.FIG.items() if f[3] in [t[2] for t in run.terms if t[0] == what]]
            for name in names:
                _, backend, device, _ = device_suite.FIG[name]
                assert (kind == "measured") == (backend == run.backend and device in ("h100", "h200")), (
                    run.label,
                    what,
                )


def test_every_entry_is_a_valid_scenario_with_its_sets_and_trace():
    """Each entry's `bench run` resolves as the harness would resolve it here (an H200
    run of the suite lost its traced entry to a trace.steps refusal: 3 traced of 3)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import device_suite
    from harness.scenario.loader import parse_override, resolve_runs

    for run in device_suite.runs():
        sets = dict(parse_override(f"{key}={value}") for key, value in run.sets.items())
        if run.trace:
            sets["trace.steps"] = run.trace
        resolved = resolve_runs(ROOT / run.scenario, sets)
        assert len(resolved) == run.cells, run.label


def test_a_second_call_starts_from_the_entry_named_and_a_failed_record_is_not_calibrated(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT))
    from benchmarks import device_suite

    started = []
    monkeypatch.setattr(device_suite, "run_one", lambda run, *args: started.append(run.label))
    device_suite.execute(
        device_suite.runs(), tmp_path / "out", tmp_path / "res", tiny=True, only=None, deadline_s=480, first=4
    )
    assert started == ORDER[3:]
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps({"run_id": "x", "status": "failed", "failure": {"reason": "exceeded 49 s"}}))
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_calibration.py"), str(failed)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0 and "failed.json: not calibrated: the run failed (exceeded 49 s)" in done.stdout


def test_without_the_wheel_folder_it_stops_first_naming_the_carry(tmp_path):
    done = script(env={"OUT": str(tmp_path / "out"), "WHEELS": str(tmp_path / "no-wheels")})
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and 'carry: [".whl"]' in lines[0] and "harness.run.offline download .whl" in lines[0]
    assert (tmp_path / "out" / "suite.log").read_text().strip() == lines[0]
    assert not (tmp_path / "out" / "runs.tsv").exists()  # nothing ran


def test_a_failed_kernel_smoke_test_pins_its_fallback_on_the_runs_of_its_backends_with_the_reason():
    sys.path.insert(0, str(ROOT))
    from benchmarks import device_suite

    found = device_suite.runs()
    kernels = {
        "flex_attention": {
            "ok": False,
            "reason": "no CUDA device",
            "fallback": {"backend_options.torch.flex_attention": "false"},
        },
        "liger": {"ok": True, "reason": "ran", "fallback": {}},
    }
    device_suite.apply_smoke(found, kernels)
    for run in found:
        pinned = run.fallbacks.get("backend_options.torch.flex_attention")
        if run.backend == "torch":
            assert pinned == ("false", "flex_attention: no CUDA device"), run.label
            assert "backend_options.torch.flex_attention=false" in run.command(ROOT, tiny=False)
        else:
            assert pinned is None, run.label


def test_the_archive_is_written_even_when_the_suite_itself_errs(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT))
    from benchmarks import device_suite

    results, out = tmp_path / "results", tmp_path / "out"
    (results / "01-x").mkdir(parents=True)
    (results / "01-x" / "r.json").write_text("{}")
    device_suite.calibration_dir(results).mkdir()  # beside the results, never read as records
    (device_suite.calibration_dir(results) / "x.calibration.json").write_text("{}")

    def broken(*args):
        raise RuntimeError("the suite's own error")

    monkeypatch.setattr(device_suite, "run_one", broken)
    with pytest.raises(RuntimeError):
        device_suite.execute(device_suite.runs(), out, results, tiny=True, only=None, deadline_s=480)
    with tarfile.open(out / "records.tgz") as tar:
        assert "./01-x/r.json" in tar.getnames() and "calibration/x.calibration.json" in tar.getnames()


@pytest.mark.slow
def test_on_the_cpu_a_failing_run_still_leaves_kernels_ledger_plan_and_its_words_in_out(tmp_path):
    """A tiny jax-tunix run (entry 1), which this environment cannot run (no Tunix), in
    the real script: the smoke tests find no CUDA device and say so, the run fails, and
    $OUT still holds the kernels, the ledger line and the archive (the plan and
    the run's own words in it)."""
    out = tmp_path / "out"
    env = {"OUT": str(out), "DEVICE_SUITE_TINY": "1", "DEVICE_SUITE_ONLY": "1", "RESULTS": str(tmp_path / "res")}
    done = script(env={**env, "CACHE": str(tmp_path / "cache")})
    assert (tmp_path / "res" / "plan.txt").read_text().count("[core]") == 3, done.stdout[-2000:]
    kernels = json.loads((out / "kernels.json").read_text())
    assert set(kernels) == {"liger", "flex_attention", "cudnn_attention"}
    for name, found in kernels.items():
        assert found["ok"] is False and found["reason"] and found["fallback"], (name, found)
    lines = (out / "runs.tsv").read_text().splitlines()
    assert lines[0].split("\t")[-1] == "fallbacks" and len(lines) == 2
    slug, label, _, _, code, outcome, fallbacks = lines[1].split("\t")
    assert label == "W1 jax-tunix" and code not in ("0", "-") and outcome.startswith("failed")
    assert "backend_options.jax-tunix.attention=xla (cudnn_attention: " in fallbacks
    with tarfile.open(out / "records.tgz") as tar:
        assert "./plan.txt" in tar.getnames()
        said = tar.extractfile(f"./{slug}/run.log").read().decode()
    assert "backend 'jax-tunix' is not available" in said  # a refusal: no record, its words kept
