"""The device suite's runs, their budgets and their execution (#36), for
benchmarks/device_suite.sh: one short GPU slot (~15 min in all, minutes of it start-up;
one command at most 600 s) that returns W1 on every backend first.

    python benchmarks/device_suite.py --dry-run          # the plan, on any machine
    OUT=/dir python benchmarks/device_suite.py run       # the runs (device_suite.sh calls it)
    OUT=/dir DEVICE_SUITE_TINY=1 DEVICE_SUITE_ONLY=1 BUDGET_SCALE=6 python benchmarks/device_suite.py run  # CPU

First, in its first seconds, the optional kernels are smoke-tested on the device
(benchmarks/kernel_smoke.py: Liger, FlexAttention, cuDNN attention); a kernel that cannot
run is pinned off on the runs that could take it, the reason in $OUT/kernels.json and in
each run's line of $OUT/runs.tsv.

Order by value: the core W1 table (static, each backend's default fast path: the two
JAX-side backends first, their times measured on an H200, then torch, the default, whose
cold compile is still a guess), at most CORE_LIMIT_S; then gpu-fsdp's W1 (on one GPU it is
torch's model under an FSDP of one rank: the cell adding least to the table), torch
packed, the local engine at concurrency 1 and 32 and the padding matrices, each only
while the suite's deadline still leaves its slot. A second call on the still-warm machine
(its wheels and compile caches kept) can pick up where the first stopped:
DEVICE_SUITE_FROM=N runs entries N onwards.

Each run's budget is its terms (process start, setup, compile, steps x step time) times
a margin, rounded up to 1 s; every term says where its figure comes from and whether it
is a measurement of the same backend on a GPU of the suite's class (an H100 or H200:
`measured`) or a `guess` (another backend's figure, a CPU time, an allowance). The run gets the budget as
`bench run --timeout` (a run cut there is a failed record saying so); its slot in the
deadline adds the harness parent's own work, outside that timeout (PARENT). Every
run writes its record (and trace) into its own results folder; right after each run the
whole results tree is archived to `$OUT/records.tgz` (written beside, then renamed), and a
line per run is appended to `$OUT/runs.tsv`: a command cut at its limit still returns
every record of the runs that ended. The device tool returns at most 8 files from
`$OUT`, no deeper than 2 folders, hence one archive rather than a file per record.
The plan (plan.txt) and each run's output (<slug>/run.log: a refusal writes no record)
go into the archive too, and the archive is written again however the loop ends (a run
that fails, or the suite's own error).
"""

from __future__ import annotations

import json
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
MARGIN = 1.15  # over the terms: run-to-run spread, the record's own writing
CORE_LIMIT_S = 400  # the core W1 table's slots: the rest of a 600 s command is install (30 s), smoke, the rest
DEADLINE_S = 480  # default deadline for the runs, counted from the first run's start
SMOKE_LIMIT_S = 60  # the kernel smoke tests, all at once

H100 = "docs/measurements/device-suite.md, 'The accelerator suite on an H100 (2026-11-26)'"
H200 = "docs/measurements/device-suite.md, 'The device suite on an H200 (2026-11-28)'"
MEASURED_ON = ("h100", "h200")  # the suite's class of card: a figure from either is a measurement
# Figures (seconds): (seconds, the backend measured or None, the device, where from).
# A term is `measured` only for a run of that backend and on a card of MEASURED_ON; else a guess.
FIG = {
    "start": (
        5.0,
        None,
        "allowance",
        "process start and imports before setup: bench's own 0.8-1.1 s (docs/measurements/startup-and-code.md, "
        "'bench backends probe cache', #30) plus a 4 s allowance for torch's import",
    ),
    "torchax_setup": (34.5, "torchax", "h200", f"torchax W1 setup: the model built on the host, moved to JAX ({H200})"),
    "torchax_compile": (41.4, "torchax", "h200", f"torchax W1, 2 compiles, cold caches ({H200})"),
    "torchax_step": (0.103, "torchax", "h200", f"torchax W1 median step ({H200})"),
    "tunix_setup": (20.5, "jax-tunix", "h200", f"jax-tunix W1 setup, model build and Tunix init ({H200})"),
    "tunix_compile": (28.8, "jax-tunix", "h200", f"jax-tunix W1, 1 compile, cold cache ({H200})"),
    "tunix_step": (0.0978, "jax-tunix", "h200", f"jax-tunix W1 median step ({H200})"),
    "torch_compile": (
        100.0,
        None,
        "allowance",
        f"the cold inductor compile of W1 was never measured: torch and gpu-fsdp runs were cut at 58-88 s "
        f"on an H200 before their first step ended ({H200}); an allowance",
    ),
    "torch_step": (
        1.161,
        "torch",
        "h100",
        f"torch W1 eager median step ({H100}): an upper bound for the compiled step",
    ),
    "fsdp_step": (
        1.361,
        "gpu-fsdp",
        "h100",
        f"gpu-fsdp W1 eager median step ({H100}): an upper bound for the compiled step",
    ),
    "serve_request": (
        1.20,
        "torch",
        "h100",
        f"local engine, one request of 64 output tokens, E2EL median ({H100}; fp32, "
        "before the KV cache and batching: an upper bound)",
    ),
    "trace_summary": (
        3.0,
        None,
        "allowance",
        "benchmarks/trace_kernels.py over the traced run's profile, in the suite's process: an allowance",
    ),
}
# The harness parent's own work a run, outside its --timeout but inside the deadline:
# bench's CLI start, the backend's probe (afresh with --backend), the record's writing,
# and up to the runner's 10 s kill grace when a run is cut. Measured on the H200
# (2026-11-28): a run's wall minus its worker's process time, 9.6 s (jax-tunix) and
# 16.6 s (torchax); the larger is taken.
PARENT = (
    17.0,
    f"the harness parent: CLI start, the backend's probe, the record's writing, a cut run's kill grace "
    f"(wall minus worker process time, the larger of two runs: {H200})",
)
W1_STEPS = {"train.steps": 5, "train.warmup_steps": 2, "train.window_steps": 0}  # 2 warm-up + 3 measured
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


@dataclass
class Run:
    label: str
    scenario: str
    backend: str
    sets: dict
    terms: list  # [(what, seconds, source, kind)]: kind "measured" or "guess"
    core: bool = True
    trace: int | None = None
    cells: int = 1  # a matrix scenario's runs: the harness's --timeout is per run
    slug: str = ""
    budget_s: int = 0
    extra: dict = field(default_factory=dict)
    fallbacks: dict = field(default_factory=dict)  # {field: (value, why)} from the kernel smoke tests

    @property
    def slot_s(self) -> int:
        """The run's share of the deadline: its budget and the harness parent's work."""
        return self.budget_s + math.ceil(PARENT[0] * self.cells)

    def command(self, results: Path, tiny: bool, scale: float = 1.0) -> list[str]:
        """`bench run` of this entry; `tiny` swaps in a tiny model (the CPU check), `scale`
        stretches its time limit (a slow CPU)."""
        pins = {key: value for key, (value, _) in self.fallbacks.items()}
        sets = {**self.sets, **pins, **(TINY if tiny else {})}
        timeout = int(scale * self.budget_s // self.cells)
        args = [sys.executable, "-m", "harness.cli", "run", self.scenario, "--backend", self.backend]
        args += ["--profile", "none", "--results-dir", str(results), "--timeout", str(timeout)]
        args += ["--no-progress"]
        for key, value in sets.items():
            args += ["--set", f"{key}={value}"]
        if self.trace:
            args += ["--trace", str(self.trace)]
        return args


def term(name: str, backend: str, times: float = 1.0, what: str | None = None):
    """(what, seconds, source, kind) of FIG[name] in a run of `backend`: `measured` only
    where the figure is that backend's, on a card of MEASURED_ON."""
    seconds, measured_on, device, source = FIG[name]
    label = what or name
    if measured_on == backend and device in MEASURED_ON:
        kind = "measured"
    elif device == "allowance":
        kind = "guess: an allowance"
    elif device == "cpu":
        kind = f"guess: a CPU time of {measured_on}" + ("" if measured_on == backend else f", not {backend}")
    else:
        kind = f"guess: {measured_on}'s figure, not {backend}'s"
    return (f"{label} ({times:g} x {seconds:g} s)" if times != 1 else label, times * seconds, source, kind)


def w1(label, backend, sets, setup, compile_, step, trace=None) -> Run:
    sets = {**W1_STEPS, **sets}
    steps = sets["train.steps"] + sets["train.window_steps"]
    terms = [
        term("start", backend),
        setup,
        term(compile_, backend, what="compile"),
        term(step, backend, steps, "steps"),
    ]
    if trace:
        terms.append(term("trace_summary", backend, what="trace summary"))
    return Run(
        label,
        "scenarios/gemma270m.yaml",
        backend,
        {"tasks": "[train]", "parallel.devices": 1, **sets},
        terms,
        trace=trace,
    )


# The torch backends' defaults are the fast path on CUDA (`auto`: compile on, SDPA, the loss
# kernel for the device, FlexAttention for packed rows; #36, #45), so the suite pins
# nothing: it measures what a user gets, and each record's raw.execution.choices says the
# choices were defaults (a kernel whose smoke test failed is pinned off, said in runs.tsv).
TORCH_FAST: dict[str, str] = {}
FSDP_FAST: dict[str, str] = {}


def core_runs() -> list[Run]:
    """The core W1 table: W1 on every backend (static), then torch packed."""
    tunix = {"backend_options.jax-tunix.fuse_kv_lora": "true"}
    packed = {**TORCH_FAST, "sequence.padding": "packed"}

    def setup(backend):  # the host-side build of the same HF model: torchax's, measured
        return term("torchax_setup", backend, what="setup")

    # The traced run measures 5 steps after its warm-up so that 3 stay untraced for the
    # statistics (trace.steps must leave some: a scenario check).
    traced = {**TORCH_FAST, "train.steps": 7}
    optional = [
        w1("W1 gpu-fsdp", "gpu-fsdp", FSDP_FAST, setup("gpu-fsdp"), "torch_compile", "fsdp_step"),
        w1("W1 torch packed", "torch", packed, setup("torch"), "torch_compile", "torch_step"),
    ]
    for run in optional:
        run.core = False
    return [
        w1(
            "W1 jax-tunix",
            "jax-tunix",
            tunix,
            term("tunix_setup", "jax-tunix", what="setup"),
            "tunix_compile",
            "tunix_step",
        ),
        w1("W1 torchax", "torchax", {}, setup("torchax"), "torchax_compile", "torchax_step"),
        w1("W1 torch", "torch", traced, setup("torch"), "torch_compile", "torch_step", trace=2),
        *optional,
    ]


def serve_runs() -> list[Run]:
    """The local engine at concurrency 1 and 32, after the core table."""

    def serve(label, sets, rounds):
        terms = [term("start", "torch"), term("torchax_setup", "torch", what="setup")]
        terms.append(term("serve_request", "torch", rounds, "requests"))
        sets = {"tasks": "[serve]", "serve.engine": "local", **sets}
        return Run(label, "scenarios/gemma270m.yaml", "torch", sets, terms, core=False)

    # Concurrency 1: 16 + 2 warm-up requests one after another; 32: ceil(64 / 32) rounds + the warm-up.
    return [
        serve("W1 serve local c1", {**SERVE_C1, "serve.load.concurrency": 1}, 18),
        serve("W1 serve local c32", {**SERVE_C32, "serve.load.concurrency": 32}, 3),
    ]


PADDING_CELLS = 4  # scenarios/padding.yaml's matrix (a test resolves it)


def padding_runs() -> list[Run]:
    """The padding matrices (static, dynamic, bucketed, packed: PADDING_CELLS runs each), if time remains."""
    steps = PADDING_CELLS * W1_STEPS["train.steps"]
    fsdp_terms = [term("start", "gpu-fsdp"), term("torchax_setup", "gpu-fsdp", PADDING_CELLS, "setup")]
    fsdp_terms.append(term("torch_compile", "gpu-fsdp", PADDING_CELLS, "compiles"))
    tunix_terms = [term("start", "jax-tunix"), term("tunix_setup", "jax-tunix", PADDING_CELLS, "setup")]
    tunix_terms.append(term("tunix_compile", "jax-tunix", PADDING_CELLS, "compiles"))
    sets = {"parallel.devices": 1, **W1_STEPS}
    return [
        Run(
            "padding gpu-fsdp compiled",
            "scenarios/padding.yaml",
            "gpu-fsdp",
            {**sets, **FSDP_FAST},
            [*fsdp_terms, term("fsdp_step", "gpu-fsdp", steps, "steps")],
            core=False,
            cells=PADDING_CELLS,
        ),
        Run(
            "padding jax-tunix",
            "scenarios/padding.yaml",
            "jax-tunix",
            sets,
            [*tunix_terms, term("tunix_step", "jax-tunix", steps, "steps")],
            core=False,
            cells=PADDING_CELLS,
        ),
    ]


def runs() -> list[Run]:
    """The suite, in the order it runs, budgets computed."""
    found = core_runs() + serve_runs() + padding_runs()
    for index, run in enumerate(found, 1):
        run.slug = f"{index:02d}-" + "-".join(run.label.lower().replace(",", "").split())
        run.budget_s = math.ceil(MARGIN * sum(t[1] for t in run.terms))
    return found


def print_plan(found: list[Run], out: str, stream=None) -> int:
    core = sum(r.slot_s for r in found if r.core)
    say = lambda text="": print(text, file=stream or sys.stdout)  # noqa: E731
    say(f"device suite: {len(found)} runs in this order; budget = {MARGIN:g} x (the terms), rounded up to 1 s")
    say(f"slot = budget + {PARENT[0]:g} s a run ({PARENT[1]})")
    say(f"first: the kernel smoke tests (benchmarks/kernel_smoke.py, at most {SMOKE_LIMIT_S} s) -> {out}/kernels.json")
    for index, run in enumerate(found, 1):
        kind = "core" if run.core else "if time remains"
        per_run = f", {run.budget_s // run.cells} s a matrix cell" if run.cells > 1 else ""
        say(f"\n{index}. {run.label} [{kind}] budget {run.budget_s} s, slot {run.slot_s} s{per_run}")
        say(
            f"   bench run {run.scenario} --backend {run.backend} --profile none "
            + " ".join(f"--set {k}={v}" for k, v in run.sets.items())
            + (f" --trace {run.trace}" if run.trace else "")
        )
        for what, seconds, source, term_kind in run.terms:
            say(f"   - {what}: {seconds:.1f} s [{term_kind}]: {source}")
        say(f"   record: {out}/records.tgz -> {run.slug}/*.json (line in {out}/runs.tsv)")
    guesses = sum(1 for r in found if r.core for t in r.terms if t[3] != "measured")
    say(
        f"\ntotal (core W1 table): {core} s (limit {CORE_LIMIT_S} s; {guesses} of its terms are guesses); "
        f"the rest only while the deadline ({DEADLINE_S} s from the first run) leaves their slot"
    )
    say(
        f"then, while the deadline leaves >= 60 s: the projection's GPU calibration of the JAX W1 records "
        f"(benchmarks/gpu_calibration.py) -> {out}/calibration.txt and <run_id>.calibration.json in records.tgz"
    )
    return 0 if core <= CORE_LIMIT_S else 1


def archive(results: Path, out: Path) -> None:
    """Every record and trace so far as $OUT/records.tgz, replaced in one rename."""
    results.mkdir(parents=True, exist_ok=True)
    part = out / "records.tgz.part"
    with tarfile.open(part, "w:gz") as tar:
        tar.add(results, arcname=".")
        if calibration_dir(results).is_dir():
            tar.add(calibration_dir(results), arcname="calibration")
    os.replace(part, out / "records.tgz")


def apply_smoke(found: list[Run], kernels: dict) -> None:
    """Each failed kernel's fallback pinned on the runs of the backends it names."""
    for name, result in kernels.items():
        for key, value in result.get("fallback", {}).items():
            backend = key.split(".")[1]
            for run in found:
                if run.backend == backend:
                    run.fallbacks[key] = (value, f"{name}: {result['reason']}")


def smoke_kernels(found: list[Run], out: Path) -> None:
    """The kernel smoke tests (benchmarks/kernel_smoke.py) into $OUT/kernels.json and the
    runs' fallbacks; a smoke run that itself fails leaves the runs as they are, said."""
    target = out / "kernels.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "kernel_smoke.py"), str(target), str(SMOKE_LIMIT_S)]
    try:
        subprocess.run(command, cwd=ROOT, timeout=SMOKE_LIMIT_S + 30)
        apply_smoke(found, json.loads(target.read_text()))
    except (subprocess.TimeoutExpired, OSError, ValueError) as error:
        print(f"kernel smoke tests did not complete ({type(error).__name__}: {error}); no fallbacks pinned", flush=True)


def execute(
    found: list[Run], out: Path, results: Path, tiny: bool, only: int | None, deadline_s: float, first: int = 1
) -> int:
    """Each run in order (from entry `first`, or entry `only` alone) while the deadline
    leaves its slot; after each, its line in $OUT/runs.tsv and every record so far in
    $OUT/records.tgz, and the archive again however the loop ends."""
    out.mkdir(parents=True, exist_ok=True)
    results.mkdir(parents=True, exist_ok=True)
    ledger = out / "runs.tsv"
    if not ledger.exists():
        ledger.write_text("run\tlabel\tbudget_s\twall_s\texit\toutcome\tfallbacks\n")
    begun = time.monotonic()
    try:
        for index, run in enumerate(found, 1):
            if (only is None and index >= first) or index == only:
                run_one(run, out, results, tiny, deadline_s - (time.monotonic() - begun))
        if not tiny:
            calibrate(results, out, deadline_s - (time.monotonic() - begun))
    finally:
        archive(results, out)
    return 0


def run_one(run: Run, out: Path, results: Path, tiny: bool, left: float) -> None:
    """One run (or its skip), its trace summary, the archive and its ledger line."""
    scale = float(os.environ.get("BUDGET_SCALE", "1"))
    if scale * run.slot_s > left:
        outcome, code, wall = f"skipped: slot {run.slot_s} s > {left:.0f} s left before the deadline", "-", 0.0
    else:
        print(f"=== {run.slug} (budget {run.budget_s} s, {time.strftime('%H:%M:%S')})", flush=True)
        started = time.monotonic()
        # The harness's --timeout cuts the worker and writes a failed record; this
        # guard only stops a harness that would hang after it.
        folder = results / run.slug
        folder.mkdir(parents=True, exist_ok=True)
        try:
            limit = scale * run.budget_s + 60
            done = subprocess.run(
                run.command(folder, tiny, scale), cwd=ROOT, timeout=limit, capture_output=True, text=True
            )
            code, said = str(done.returncode), done.stdout + done.stderr
            outcome = "ok" if done.returncode == 0 else "failed (the record or run.log says why)"
        except subprocess.TimeoutExpired as cut:
            code, outcome = "killed", "cut by the suite's guard: no record written by the harness"
            said = "".join(
                part.decode() if isinstance(part, bytes) else part or "" for part in (cut.stdout, cut.stderr)
            )
        # What the run said, in the archive beside its records (a refusal writes no record).
        (folder / "run.log").write_text(said)
        print(said, end="", flush=True)
        wall = time.monotonic() - started
        if run.trace:
            trace_summary(results / run.slug, out / f"{run.slug}-trace.txt")
        archive(results, out)
    fallbacks = "; ".join(f"{k}={v} ({why})" for k, (v, why) in run.fallbacks.items()) or "-"
    with (out / "runs.tsv").open("a") as stream:
        stream.write(f"{run.slug}\t{run.label}\t{run.budget_s}\t{wall:.1f}\t{code}\t{outcome}\t{fallbacks}\n")
    print(f"--- {run.slug}: {outcome} ({wall:.1f} s)", flush=True)


CALIBRATED = ("w1-torchax", "w1-jax-tunix")  # the JAX backends' W1 runs (issue 37, calibration (a))


def calibration_dir(results: Path) -> Path:
    """Where the calibration files go: beside the results folder, not in it (no record)."""
    return results.parent / f"{results.name}-calibration"


def calibrate(results: Path, out: Path, left_s: float) -> None:
    """The projection's calibration on this card (benchmarks/gpu_calibration.py): each JAX
    W1 record's step compiled here, bounded with the card's peak, HBM and NVLink, beside the
    measured step; printed into $OUT/calibration.txt, each .calibration.json in a folder
    beside the results (archived as calibration/ in records.tgz; outside the results,
    which `bench report` reads as records). Only while the deadline leaves time: a
    compile is ~30 s."""
    lines = []
    into = calibration_dir(results)
    for slug_dir in sorted(p for p in results.glob("*") if p.name.endswith(CALIBRATED)):
        for record in sorted(r for r in slug_dir.rglob("*.json") if not r.name.endswith(".calibration.json")):
            if left_s < 60:
                lines.append(f"{record.name}: not calibrated, {left_s:.0f} s left before the deadline")
                continue
            started = time.monotonic()
            into.mkdir(parents=True, exist_ok=True)
            command = [sys.executable, str(ROOT / "benchmarks" / "gpu_calibration.py"), str(record), "--out", str(into)]
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
    first = int(os.environ.get("DEVICE_SUITE_FROM", "1"))
    deadline = float(os.environ.get("DEADLINE_S", DEADLINE_S))
    results = Path(os.environ.get("RESULTS", "/tmp/bench-results"))
    print(f"runs: {shlex.join(r.slug for r in found)}", flush=True)
    Path(out).mkdir(parents=True, exist_ok=True)
    smoke_kernels(found, Path(out))  # before the plan is written: it names the fallbacks
    results.mkdir(parents=True, exist_ok=True)
    with (results / "plan.txt").open("w") as stream:  # in records.tgz: $OUT returns at most 8 files
        print_plan(found, out, stream)
    return execute(found, Path(out), results, tiny, only, deadline, first)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
