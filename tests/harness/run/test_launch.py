"""`bench launch --dry-run`: one SkyPilot task file per target that SkyPilot's own parser
(sky.Task.from_yaml) loads with the accelerator, node count, setup and run intended.
SkyPilot pins click, uvicorn and bcrypt, so it lives in its own environment
(BENCH_PYTHON_SKYPILOT; .ci/run builds .venv-sky); the parse runs there in a subprocess.
Nothing is launched: no cloud here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, bench

W3 = "scenarios/w3_gemma_lora_tunix.yaml"

# Every field SkyPilot parsed, as JSON: what the test compares with the intent.
PARSE = """
import json, sys
import sky
out = {}
for path in sys.argv[1:]:
    task = sky.Task.from_yaml(path)
    (resources,) = task.resources
    out[path] = {"name": task.name, "num_nodes": task.num_nodes, "accelerators": resources.accelerators,
                 "use_spot": resources.use_spot, "setup": task.setup, "run": task.run, "workdir": task.workdir,
                 "mounts": {k: v.source for k, v in (task.storage_mounts or {}).items()}}
print(json.dumps(out))
"""


def skypilot_python() -> str:
    """The interpreter that has SkyPilot; CI must have one (a skip there would hide a gap)."""
    named = os.environ.get("BENCH_PYTHON_SKYPILOT") or str(ROOT / ".venv-sky" / "bin" / "python")
    if Path(named).exists():
        return named
    if os.environ.get("CI"):
        pytest.fail("CI must provide SkyPilot: .ci/run builds .venv-sky (BENCH_PYTHON_SKYPILOT)")
    pytest.skip("SkyPilot is not installed (python3 -m venv .venv-sky && .venv-sky/bin/pip install skypilot)")


def parsed_by_skypilot(paths: list[Path]) -> dict[str, dict]:
    done = subprocess.run(
        [skypilot_python(), "-c", PARSE, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=paths[0].parent,
    )
    assert done.returncode == 0, done.stderr
    return {Path(k).name: v for k, v in json.loads(done.stdout.splitlines()[-1]).items()}


def test_dry_run_writes_one_task_per_target_that_skypilot_loads_as_intended(tmp_path):
    done = bench(
        "launch",
        W3,
        "--on",
        "tpu-v5p-8",
        "--on",
        "H100:2",
        "--on",
        "H100:8x2=gpu-fsdp",
        "--on",
        "tpu-v5p-16",
        "--out-dir",
        str(tmp_path),
        "--set",
        "train.steps=20",
        "--dry-run",
    )
    assert done.returncode == 0, done.stderr
    files = sorted(tmp_path.glob("*.yaml"))
    assert [f.name for f in files] == [
        "w3_gemma_lora_tunix-h100-2.yaml",
        "w3_gemma_lora_tunix-h100-8x2-gpu-fsdp.yaml",
        "w3_gemma_lora_tunix-tpu-v5p-16.yaml",
        "w3_gemma_lora_tunix-tpu-v5p-8.yaml",
    ]
    for f in files:  # the commands printed: launch, copy the records home, tear down
        assert f"sky launch -y -c bench-{f.stem.split('-', 1)[1]} {f}" in done.stdout
    assert "rsync -az bench-h100-2:~/sky_workdir/results/launch/h100-2/ results/" in done.stdout
    assert "bench report results -o reports/w3_gemma_lora_tunix.html" in done.stdout
    tasks = parsed_by_skypilot(files)

    gpu = tasks["w3_gemma_lora_tunix-h100-2.yaml"]
    assert gpu["accelerators"] == {"H100": 2} and gpu["num_nodes"] == 1 and gpu["use_spot"] is False
    assert gpu["workdir"] == str(ROOT) and gpu["mounts"] == {}
    assert "~/bench-venv/bin/pip install -q -e '.[torch]'" in gpu["setup"]
    assert gpu["run"].splitlines()[-1] == (
        "~/bench-venv/bin/bench run scenarios/w3_gemma_lora_tunix.yaml "
        "--results-dir results/launch/h100-2 --no-progress --set train.steps=20"
    )

    nodes = tasks["w3_gemma_lora_tunix-h100-8x2-gpu-fsdp.yaml"]
    assert nodes["accelerators"] == {"H100": 8} and nodes["num_nodes"] == 2
    assert 'export BENCH_HOST_RANK="$SKYPILOT_NODE_RANK"' in nodes["run"]
    assert 'export BENCH_COORDINATOR="$(echo "$SKYPILOT_NODE_IPS" | head -n1):8476"' in nodes["run"]
    assert nodes["run"].endswith("--backend gpu-fsdp --set parallel.hosts=2 --set train.steps=20")

    tpu = tasks["w3_gemma_lora_tunix-tpu-v5p-8.yaml"]
    assert tpu["accelerators"] == {"tpu-v5p-8": 1} and tpu["num_nodes"] == 1
    # Two environments on a TPU VM: torch_xla's and JAX's; each backend's workers in its own.
    assert "~/bench-xla/bin/pip install -q 'torch-xla[tpu]' -e '.[torch]'" in tpu["setup"]
    assert "~/bench-jax/bin/pip install -q 'jax[tpu]' -e '.[jax]'" in tpu["setup"]
    assert tpu["run"].splitlines()[-1] == (
        "~/bench-jax/bin/bench run scenarios/w3_gemma_lora_tunix.yaml --results-dir results/launch/tpu-v5p-8 "
        '--no-progress --python "xla-fsdpv2=$HOME/bench-xla/bin/python" '
        '--python "jax-tunix=$HOME/bench-jax/bin/python" --set train.steps=20'
    )
    assert "BENCH_HOST_RANK" not in tpu["run"]  # one host

    # A v5p-16 slice is one SkyPilot node of 2 hosts (8 chips, 4 a host): the job spans
    # both, JAX reading the slice's metadata (no BENCH_* needed there).
    pod = tasks["w3_gemma_lora_tunix-tpu-v5p-16.yaml"]
    assert pod["accelerators"] == {"tpu-v5p-16": 1} and pod["num_nodes"] == 1
    assert "--set parallel.hosts=2" in pod["run"] and "BENCH_HOST_RANK" not in pod["run"]


def test_benchs_accelerator_spellings_become_skypilots_names_and_set_up_their_stacks(tmp_path):
    """`bench cost`'s spellings (v5p-8, h100-sxm:2, tpu-v5p:4) and v5e's (SkyPilot:
    v5litepod) as SkyPilot reads them; a TPU slice however spelt gets the TPU stacks."""
    targets = ["v5p-8", "h100-sxm:2", "tpu-v5e-8", "tpu-v6e:8=jax-tunix"]
    done = bench("launch", W3, *[a for t in targets for a in ("--on", t)], "--out-dir", str(tmp_path), "--dry-run")
    assert done.returncode == 0, done.stderr
    tasks = parsed_by_skypilot(sorted(tmp_path.glob("*.yaml")))
    assert {name: task["accelerators"] for name, task in tasks.items()} == {
        "w3_gemma_lora_tunix-tpu-v5p-8.yaml": {"tpu-v5p-8": 1},
        "w3_gemma_lora_tunix-h100-2.yaml": {"H100": 2},
        "w3_gemma_lora_tunix-tpu-v5litepod-8.yaml": {"tpu-v5litepod-8": 1},
        "w3_gemma_lora_tunix-tpu-v6e-8-jax-tunix.yaml": {"tpu-v6e-8": 1},
    }
    for name, task in tasks.items():
        tpu = name.startswith("w3_gemma_lora_tunix-tpu-")
        assert ("~/bench-xla/bin/pip install -q 'torch-xla[tpu]'" in task["setup"]) is tpu, task["setup"]
        assert ("~/bench-jax/bin/pip install -q 'jax[tpu]' -e '.[jax]'" in task["setup"]) is tpu
        assert ("~/bench-venv/bin/pip install -q -e '.[torch]'" in task["setup"]) is not tpu
    # one target however spelt; a bench key SkyPilot has no name for is refused, not swapped
    twice = bench("launch", W3, "--on", "v5p-8", "--on", "tpu-v5p-8", "--out-dir", str(tmp_path / "b"), "--dry-run")
    assert twice.returncode == 2 and "targets named twice: tpu-v5p-8" in twice.stderr
    pcie = bench("launch", W3, "--on", "h100-pcie:2", "--out-dir", str(tmp_path / "c"), "--dry-run")
    assert pcie.returncode == 2 and pcie.stderr.startswith("bench: --on h100-pcie:2: SkyPilot has no separate name")


def test_spot_with_a_bucket_mounts_it_and_uses_managed_jobs(tmp_path):
    done = bench(
        "launch",
        W3,
        "--on",
        "H100:2",
        "--out-dir",
        str(tmp_path),
        "--bucket",
        "gs://bench-w3/run1",
        "--spot",
        "--dry-run",
    )
    assert done.returncode == 0, done.stderr
    (path,) = tmp_path.glob("*.yaml")
    assert f"sky jobs launch -y -n bench-h100-2 {path}" in done.stdout and "rsync -az" not in done.stdout
    # the records come home from the bucket, into the local results directory the report reads
    assert "gsutil -m rsync -r gs://bench-w3/run1/h100-2 results/" in done.stdout
    (task,) = parsed_by_skypilot([path]).values()
    assert task["use_spot"] is True and task["mounts"] == {"/bench-results": "gs://bench-w3/run1"}
    assert "--results-dir /bench-results/h100-2" in task["run"]


@pytest.mark.parametrize(
    "args, field",
    [
        (["--on", "H100:two"], "--on H100:two"),
        (["--on", "tpu-v5p-8:4"], "--on tpu-v5p-8:4"),
        (["--on", "H100:2", "--on", "h100:2"], "--on"),
        (["--on", "H100:2", "--spot"], "--spot"),
        (["--on", "H100:2", "--bucket", "/mnt/results"], "--bucket"),
        ([], "--on"),
    ],
)
def test_bad_launch_input_is_refused_naming_the_flag(tmp_path, args, field):
    done = bench("launch", W3, *args, "--out-dir", str(tmp_path), "--dry-run")
    assert done.returncode == 2 and done.stderr.startswith(f"bench: {field}"), done.stderr
    assert not list(tmp_path.glob("*.yaml"))


def test_without_skypilot_a_launch_says_how_to_install_it(tmp_path):
    # This environment has no SkyPilot (it lives in .venv-sky): no `sky` on the PATH.
    path = os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    done = bench("launch", W3, "--on", "H100:2", "--out-dir", str(tmp_path), env={"PATH": path})
    assert done.returncode == 2, done.stderr
    assert "SkyPilot is not installed: pip install -e '.[launch]'" in done.stderr


FAKE_TOOL = """#!/bin/sh
echo "$(basename "$0") $*" >> "$FAKE_LOG"
if [ "$(basename "$0")" = gsutil ]; then  # gsutil -m rsync -r SRC DEST/: the job's records
  mkdir -p "$5" && cp "$FAKE_BUCKET"/*.json "$5"
fi
"""


def test_a_launch_runs_each_target_brings_its_records_home_and_reports(tmp_path):
    """Without --dry-run: SkyPilot's `sky` (faked on the PATH, as is gsutil) launches,
    the records come home from the bucket, the cluster goes down, and the report is
    written from the local results directory, in that order."""
    tools = tmp_path / "bin"
    tools.mkdir()
    for name in ("sky", "gsutil"):
        (tools / name).write_text(FAKE_TOOL)
        (tools / name).chmod(0o755)
    bucket = tmp_path / "bucket"
    bucket.mkdir()
    record = next((ROOT / "tests" / "fixtures" / "records_v1").glob("*torch*.json"))
    (bucket / record.name).write_text(record.read_text())
    log = tmp_path / "calls.log"
    env = {
        **os.environ,
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "FAKE_LOG": str(log),
        "FAKE_BUCKET": str(bucket),
    }
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "launch", str(ROOT / W3), "--on", "H100:2", "--bucket", "gs://b/run1",
         "--out-dir", str(tmp_path / "tasks"), "--results-dir", "res"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (task,) = (tmp_path / "tasks").glob("*.yaml")
    assert log.read_text().splitlines() == [
        f"sky launch -y -c bench-h100-2 {task}",
        "gsutil -m rsync -r gs://b/run1/h100-2 res/",
        "sky down -y bench-h100-2",
    ]
    assert [p.name for p in (tmp_path / "res").glob("*.json")] == [record.name]
    report = tmp_path / "reports" / "w3_gemma_lora_tunix.html"
    assert report.is_file() and "tiny-v1" in report.read_text()
