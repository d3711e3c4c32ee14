"""The device suite's runs, their budgets and their execution (#36), for
benchmarks/device_suite.sh: one short GPU slot (~15 min in all, minutes of it start-up;
one command at most 600 s) that returns W1 on every backend first.

    python benchmarks/device_suite.py --dry-run          # the plan, on any machine
    OUT=/dir python benchmarks/device_suite.py run       # the runs (device_suite.sh calls it)
    OUT=/dir DEVICE_SUITE_TINY=1 DEVICE_SUITE_ONLY=1 BUDGET_SCALE=6 python benchmarks/device_suite.py run  # CPU

Order by value: W1 train (static, each backend's default fast path) on torchax, torch,
gpu-fsdp, jax-tunix; torch packed; the local engine at concurrency 1 and 32; then the
padding matrices, each only while the suite's deadline still leaves its budget.

Each run's budget is its terms (process start, setup, compile, steps x step time), each
a measured figure with where it was measured, times a margin, rounded up to 5 s; the run
gets it as `bench run --timeout` (a run cut there is a failed record saying so). Every
run writes its record (and trace) into its own results folder; right after each run the
whole results tree is archived to `$OUT/records.tgz` (written beside, then renamed), and a
line per run is appended to `$OUT/runs.tsv`: a command cut at its limit still returns
every record of the runs that ended. The device tool returns at most 8 files from
`$OUT`, no deeper than 2 folders, hence one archive rather than a file per record.
"""

from __future__ import annotations

import math
import os
import shlex
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARGIN = 1.15  # over the measured terms: run-to-run spread, the record's own writing
CORE_LIMIT_S = 420  # the core runs' total (#36): the rest of a 600 s command is install and report
DEADLINE_S = 480  # default deadline for the runs, counted from the first run's start

# Measured figures (seconds) and where each was measured.
H100 = "docs/measurements.md, 'The accelerator suite on an H100 (2026-11-26)'"
FIG = {
    "start": (
        5.0,
        "process start and imports before setup: bench's own 0.8-1.1 s (docs/measurements.md, "
        "'bench backends probe cache', #30) plus a 4 s allowance for torch's import",
    ),
    "hf_setup": (
        8.9,
        "W1 setup on the torch backend, 2-core CPU (docs/measurements.md, 'bench run "
        "scenarios/gemma270m.yaml on the CPU': 8.9 s setup): the same host-side model build",
    ),
    "torchax_compile": (27.9, f"torchax W1, 2 compiles ({H100})"),
    "torchax_step": (0.1337, f"torchax W1 median step ({H100})"),
    "tunix_setup": (77.0, f"jax-tunix W1 setup, model build and Tunix init, before #36 ({H100})"),
    "tunix_compile": (30.2, f"jax-tunix W1, 1 compile ({H100})"),
    "tunix_step": (0.2947, f"jax-tunix W1 median step ({H100})"),
    "torch_compile": (
        30.2,
        f"no cold inductor compile of W1 was measured: jax-tunix's W1 compile ({H100}) "
        "stands in (gpu-fsdp's padding cell compiled in 10.2 s with a warm cache, same page)",
    ),
    "torch_step": (1.161, f"torch W1 eager median step ({H100}): an upper bound for the compiled step"),
    "fsdp_step": (1.361, f"gpu-fsdp W1 eager median step ({H100}): an upper bound for the compiled step"),
    "serve_request": (
        1.20,
        f"local engine, one request of 64 output tokens, E2EL median ({H100}; fp32, "
        "before the KV cache and batching: an upper bound)",
    ),
}
W1_STEPS = {"train.steps": 8, "train.warmup_steps": 2, "train.window_steps": 0}  # 2 warm-up + 6 measured
SERVE_C1 = {"serve.num_requests": 16, "serve.warmup_requests": 2}
SERVE_C32 = {"serve.num_requests": 64, "serve.warmup_requests": 2}
TINY = {
    "model.preset": "tiny-gemma3",
    "sequence.max_length": 64,
    "train.global_batch": 4,
    "train.steps": 2,
    "train.warmup_steps": 1,
    "train.window_steps": 0,
    "train.precision": "fp32",
    "parallel.devices": 1,
}


def tunix_setup_ratio() -> float:
    """setup before / after #36 on the CPU at W1's dimensions (docs/measurements.md)."""
    return TUNIX_SETUP_MEASURED["setup_before_s"] / TUNIX_SETUP_MEASURED["setup_after_s"]


# benchmarks/tunix_setup_time.py, 2-core CPU, 2026-11-27 (docs/measurements.md, '#36').
TUNIX_SETUP_MEASURED = {"setup_before_s": 710.76, "setup_after_s": 107.57}


@dataclass
class Run:
    label: str
    scenario: str
    backend: str
    sets: dict
    terms: list  # [(what, seconds, source)]
    core: bool = True
    trace: int | None = None
    cells: int = 1  # a matrix scenario's runs: the harness's --timeout is per run
    slug: str = ""
    budget_s: int = 0
    extra: dict = field(default_factory=dict)

    def command(self, results: Path, tiny: bool, scale: float = 1.0) -> list[str]:
        """`bench run` of this entry; `tiny` swaps in a tiny model (the CPU check), `scale`
        stretches its time limit (a slow CPU)."""
        sets = {**self.sets, **(TINY if tiny else {})}
        timeout = int(scale * self.budget_s // self.cells)
        args = [sys.executable, "-m", "harness.cli", "run", self.scenario, "--backend", self.backend]
        args += ["--profile", "none", "--results-dir", str(results), "--timeout", str(timeout)]
        args += ["--no-progress"]
        for key, value in sets.items():
            args += ["--set", f"{key}={value}"]
        if self.trace:
            args += ["--trace", str(self.trace)]
        return args


def term(name: str, times: float = 1.0, what: str | None = None):
    seconds, source = FIG[name]
    label = what or name
    return (f"{label} ({times:g} x {seconds:g} s)" if times != 1 else label, times * seconds, source)


def w1(label, backend, sets, setup, compile_, step, trace=None) -> Run:
    steps = W1_STEPS["train.steps"] + W1_STEPS["train.window_steps"]
    terms = [term("start"), setup, term(compile_, what="compile"), term(step, steps, "steps")]
    return Run(
        label,
        "scenarios/gemma270m.yaml",
        backend,
        {"tasks": "[train]", "parallel.devices": 1, **W1_STEPS, **sets},
        terms,
        trace=trace,
    )


def tunix_setup_term():
    before, source = FIG["tunix_setup"]
    ratio = tunix_setup_ratio()
    return (
        "setup",
        before / ratio,
        f"{source}, divided by the CPU's before/after ratio {ratio:.2f} "
        "(benchmarks/tunix_setup_time.py, docs/measurements.md '#36 JAX side and device suite')",
    )


# The torch backends' defaults are the fast path on CUDA (`auto`: compile on, SDPA, the loss
# kernel for the device; #36), so the suite pins nothing: it measures what a user gets, and
# each record's raw.execution.choices says the choices were defaults.
TORCH_FAST: dict[str, str] = {}
FSDP_FAST: dict[str, str] = {}


def core_runs() -> list[Run]:
    """W1 on every backend (static), torch packed, the local engine at 1 and 32."""
    hf_setup = term("hf_setup", what="setup")
    tunix = {"backend_options.jax-tunix.fuse_kv_lora": "true"}
    packed = {**TORCH_FAST, "sequence.padding": "packed"}

    def serve(label, sets, rounds):
        terms = [term("start"), hf_setup, term("serve_request", rounds, "requests")]
        return Run(
            label, "scenarios/gemma270m.yaml", "torch", {"tasks": "[serve]", "serve.engine": "local", **sets}, terms
        )

    return [
        w1("W1 torchax", "torchax", {}, hf_setup, "torchax_compile", "torchax_step"),
        w1("W1 torch", "torch", TORCH_FAST, hf_setup, "torch_compile", "torch_step", trace=3),
        w1("W1 gpu-fsdp", "gpu-fsdp", FSDP_FAST, hf_setup, "torch_compile", "fsdp_step"),
        w1("W1 jax-tunix", "jax-tunix", tunix, tunix_setup_term(), "tunix_compile", "tunix_step"),
        w1("W1 torch packed", "torch", packed, hf_setup, "torch_compile", "torch_step"),
        # Concurrency 1: 16 + 2 warm-up requests one after another; 32: ceil(64 / 32) rounds + the warm-up.
        serve("W1 serve local c1", {**SERVE_C1, "serve.load.concurrency": 1}, 18),
        serve("W1 serve local c32", {**SERVE_C32, "serve.load.concurrency": 32}, 3),
    ]


def padding_runs() -> list[Run]:
    """The padding matrices (static, dynamic, bucketed: three runs each), if time remains."""
    steps = 3 * W1_STEPS["train.steps"]
    setup_what, setup_s, setup_source = tunix_setup_term()
    fsdp_terms = [term("start"), term("hf_setup", 3, "setup"), term("torch_compile", 3, "compiles")]
    tunix_terms = [term("start"), (f"setup (3 x {setup_s:.1f} s)", 3 * setup_s, setup_source)]
    tunix_terms.append(term("tunix_compile", 3, "compiles"))
    sets = {"parallel.devices": 1, **W1_STEPS}
    return [
        Run(
            "padding gpu-fsdp compiled",
            "scenarios/padding.yaml",
            "gpu-fsdp",
            {**sets, **FSDP_FAST},
            [*fsdp_terms, term("fsdp_step", steps, "steps")],
            core=False,
            cells=3,
        ),
        Run(
            "padding jax-tunix",
            "scenarios/padding.yaml",
            "jax-tunix",
            sets,
            [*tunix_terms, term("tunix_step", steps, "steps")],
            core=False,
            cells=3,
        ),
    ]


def runs() -> list[Run]:
    """The suite, in the order it runs, budgets computed."""
    found = core_runs() + padding_runs()
    for index, run in enumerate(found, 1):
        run.slug = f"{index:02d}-" + "-".join(run.label.lower().replace(",", "").split())
        run.budget_s = int(5 * math.ceil(MARGIN * sum(seconds for _, seconds, _ in run.terms) / 5))
    return found


def print_plan(found: list[Run], out: str) -> int:
    core = sum(r.budget_s for r in found if r.core)
    print(f"device suite: {len(found)} runs in this order; budget = {MARGIN:g} x (the terms), rounded up to 5 s")
    for index, run in enumerate(found, 1):
        kind = "core" if run.core else "if time remains"
        per_run = f", {run.budget_s // run.cells} s a matrix cell" if run.cells > 1 else ""
        print(f"\n{index}. {run.label} [{kind}] budget {run.budget_s} s{per_run}")
        print(
            f"   bench run {run.scenario} --backend {run.backend} --profile none "
            + " ".join(f"--set {k}={v}" for k, v in run.sets.items())
            + (f" --trace {run.trace}" if run.trace else "")
        )
        for what, seconds, source in run.terms:
            print(f"   - {what}: {seconds:.1f} s: {source}")
        print(f"   record: {out}/records.tgz -> {run.slug}/*.json (line in {out}/runs.tsv)")
    print(
        f"\ntotal (core runs): {core} s (limit {CORE_LIMIT_S} s); the rest only while the deadline "
        f"({DEADLINE_S} s from the first run) leaves their budget"
    )
    print(
        f"then, while the deadline leaves >= 60 s: the projection's GPU calibration of the JAX W1 records "
        f"(benchmarks/gpu_calibration.py) -> {out}/calibration.txt and <run_id>.calibration.json in records.tgz"
    )
    return 0 if core <= CORE_LIMIT_S else 1


def archive(results: Path, out: Path) -> None:
    """Every record and trace so far as $OUT/records.tgz, replaced in one rename."""
    part = out / "records.tgz.part"
    with tarfile.open(part, "w:gz") as tar:
        tar.add(results, arcname=".")
    os.replace(part, out / "records.tgz")


def execute(found: list[Run], out: Path, results: Path, tiny: bool, only: int | None, deadline_s: float) -> int:
    """Each run in order while the deadline leaves its budget; after each, its line in
    $OUT/runs.tsv and every record so far in $OUT/records.tgz."""
    scale = float(os.environ.get("BUDGET_SCALE", "1"))
    out.mkdir(parents=True, exist_ok=True)
    results.mkdir(parents=True, exist_ok=True)
    ledger = out / "runs.tsv"
    if not ledger.exists():
        ledger.write_text("run\tlabel\tbudget_s\twall_s\texit\toutcome\n")
    begun = time.monotonic()
    for index, run in enumerate(found, 1):
        if only is not None and index != only:
            continue
        left = deadline_s - (time.monotonic() - begun)
        if scale * run.budget_s > left:
            outcome, code, wall = f"skipped: budget {run.budget_s} s > {left:.0f} s left before the deadline", "-", 0.0
        else:
            print(f"=== {run.slug} (budget {run.budget_s} s, {time.strftime('%H:%M:%S')})", flush=True)
            started = time.monotonic()
            # The harness's --timeout cuts the worker and writes a failed record; this
            # guard only stops a harness that would hang after it.
            try:
                limit = scale * run.budget_s + 60
                done = subprocess.run(run.command(results / run.slug, tiny, scale), cwd=ROOT, timeout=limit)
                code = str(done.returncode)
                outcome = "ok" if done.returncode == 0 else "failed (the record says why; a timeout is a failed record)"
            except subprocess.TimeoutExpired:
                code, outcome = "killed", "cut by the suite's guard: no record written by the harness"
            wall = time.monotonic() - started
            if run.trace:
                trace_summary(results / run.slug, out / f"{run.slug}-trace.txt")
            archive(results, out)
        with ledger.open("a") as stream:
            stream.write(f"{run.slug}\t{run.label}\t{run.budget_s}\t{wall:.1f}\t{code}\t{outcome}\n")
        print(f"--- {run.slug}: {outcome} ({wall:.1f} s)", flush=True)
    if not tiny:
        calibrate(results, out, deadline_s - (time.monotonic() - begun))
        archive(results, out)
    return 0


CALIBRATED = ("w1-torchax", "w1-jax-tunix")  # the JAX backends' W1 runs (issue 37, calibration (a))


def calibrate(results: Path, out: Path, left_s: float) -> None:
    """The projection's calibration on this card (benchmarks/gpu_calibration.py): each JAX
    W1 record's step compiled here, bounded with the card's peak, HBM and NVLink, beside the
    measured step; printed into $OUT/calibration.txt, each .calibration.json beside its
    record (so in records.tgz). Only while the deadline leaves time: a compile is ~30 s."""
    lines = []
    for slug_dir in sorted(p for p in results.glob("*") if p.name.endswith(CALIBRATED)):
        for record in sorted(r for r in slug_dir.rglob("*.json") if not r.name.endswith(".calibration.json")):
            if left_s < 60:
                lines.append(f"{record.name}: not calibrated, {left_s:.0f} s left before the deadline")
                continue
            started = time.monotonic()
            command = [sys.executable, str(ROOT / "benchmarks" / "gpu_calibration.py"), str(record)]
            try:
                done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=left_s)
                lines.append((done.stdout + done.stderr).strip() or f"{record.name}: exit {done.returncode}")
            except subprocess.TimeoutExpired:
                lines.append(f"{record.name}: calibration cut at {left_s:.0f} s")
            left_s -= time.monotonic() - started
    (out / "calibration.txt").write_text("\n".join(lines) + "\n")


def trace_summary(results: Path, target: Path) -> None:
    """The traced run's GPU busy fraction and top kernels (benchmarks/trace_kernels.py)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "trace_kernels.py"), str(results)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    target.write_text(done.stdout + done.stderr)


def environment(cache: Path) -> None:
    """Compile caches kept across the runs (each run is its own process)."""
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache / "inductor"))
    os.environ.setdefault("TRITON_CACHE_DIR", str(cache / "triton"))
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(cache / "jax"))
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


def main(argv: list[str]) -> int:
    found = runs()
    out = os.environ.get("OUT", str(ROOT / "device-out"))
    if argv[:1] == ["--dry-run"]:
        return print_plan(found, out if "OUT" in os.environ else "$OUT")
    if argv[:1] != ["run"]:
        print(__doc__)
        return 2
    environment(Path(os.environ.get("CACHE", "/tmp/bench-cache")))
    tiny = os.environ.get("DEVICE_SUITE_TINY") == "1"
    only = int(os.environ["DEVICE_SUITE_ONLY"]) if os.environ.get("DEVICE_SUITE_ONLY") else None
    deadline = float(os.environ.get("DEADLINE_S", DEADLINE_S))
    results = Path(os.environ.get("RESULTS", "/tmp/bench-results"))
    print(f"runs: {shlex.join(r.slug for r in found)}", flush=True)
    return execute(found, Path(out), results, tiny, only, deadline)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
