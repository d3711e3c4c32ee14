"""benchmarks/device_suite.sh (#36): its dry run prints the runs in order of value, each
budget from its measured terms (recomputed here from the printed terms), a core total of
at most 420 s and where under $OUT each record lands; without the wheel folder it
stops before any work, naming the carry to pass. No run is executed."""

from __future__ import annotations

import math
import re
import subprocess

from conftest import ROOT

ORDER = [
    "W1 torchax",
    "W1 torch",
    "W1 gpu-fsdp",
    "W1 jax-tunix",
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
        timeout=120,
    )


def parse_plan(text: str) -> list[dict]:
    runs = []
    for block in re.split(r"\n(?=\d+\. )", text)[1:]:
        head = re.match(r"(\d+)\. (.+?) \[(core|if time remains)\] budget (\d+) s", block)
        terms = [(float(s), src) for s, src in re.findall(r"^   - [^:]+: ([\d.]+) s: (.+)$", block, re.M)]
        record = re.search(r"record: (\S+) -> (\S+)", block)
        runs.append(
            {
                "label": head[2],
                "core": head[3] == "core",
                "budget": int(head[4]),
                "terms": terms,
                "record": (record[1], record[2]),
            }
        )
    return runs


def test_dry_run_orders_the_runs_by_value_within_420_s_with_each_record_under_out():
    done = script("--dry-run")
    assert done.returncode == 0, done.stdout + done.stderr
    runs = parse_plan(done.stdout)
    assert [r["label"] for r in runs] == ORDER
    assert [r["core"] for r in runs] == [True] * 7 + [False] * 2  # the padding matrices only if time remains
    for run in runs:
        assert len(run["terms"]) >= 3 and all(src for _, src in run["terms"]), run
        assert all("measurements.md" in src or "allowance" in src for _, src in run["terms"]), run
        # 1.15 x the printed terms, rounded up to 5 s (terms printed to 0.1 s)
        low, high = (5 * math.ceil(1.15 * (sum(s for s, _ in run["terms"]) + d) / 5) for d in (-0.5, 0.5))
        assert low <= run["budget"] <= high, run
        assert run["record"][0] == "$OUT/records.tgz" and run["record"][1].endswith("/*.json"), run
    core_total = sum(r["budget"] for r in runs if r["core"])
    assert core_total <= 420
    assert re.search(rf"total \(core runs\): {core_total} s \(limit 420 s\)", done.stdout)
    assert len({r["record"][1] for r in runs}) == len(runs)  # one folder per run


def test_without_the_wheel_folder_it_stops_first_naming_the_carry(tmp_path):
    done = script(env={"OUT": str(tmp_path / "out"), "WHEELS": str(tmp_path / "no-wheels")})
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and 'carry: [".whl"]' in lines[0] and "harness.offline download .whl" in lines[0]
    assert (tmp_path / "out" / "suite.log").read_text().strip() == lines[0]
    assert not (tmp_path / "out" / "runs.tsv").exists()  # nothing ran
