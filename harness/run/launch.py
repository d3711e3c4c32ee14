"""`bench launch`: one scenario on several accelerators through SkyPilot, reported together.

bench builds no scheduler: for each target (`--on tpu-v5p-8`, `--on H100:2`,
`--on H100:8x2` for two 8-GPU nodes) it writes one SkyPilot task file, and SkyPilot
provisions, runs, recovers (managed spot jobs) and tears down. Each task:

- resources: the target's accelerator (SkyPilot's own name, e.g. `tpu-v5p-8`, `H100:2`),
  spot if asked; `num_nodes` is the node count (a TPU slice is one SkyPilot node however
  many hosts it has: SkyPilot runs the task on every host of the slice);
- workdir: this checkout, synced to the VM;
- setup: bench installed with the target's extras; on a TPU VM two environments, since
  torch_xla pins torch and Tunix pins safetensors (docs/backends.md, "`xla-fsdpv2` on a TPU VM");
- run: `bench run` of the scenario on the target's backend; over several nodes each
  exports its host rank and host 0's address (SKYPILOT_NODE_RANK, SKYPILOT_NODE_IPS) as
  BENCH_HOST_RANK / BENCH_COORDINATOR (harness/plan/hosts.py), and sets `parallel.hosts`;
- results: written to a bucket mounted at /bench-results (`--bucket`), or kept on the
  VM and copied back with rsync before the cluster is taken down.

`--dry-run` writes the files and prints the commands, launching nothing; without the
SkyPilot package a launch says how to install it. Pure Python: SkyPilot is imported
(or run as `sky`) only to launch.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from harness.basics.errors import BenchError, SpecError

INSTALL_HINT = "pip install -e '.[launch]' (SkyPilot), then `sky check` to enable a cloud"
COORDINATOR_PORT = 8476  # JAX's default coordinator port; torchrun's master port here too
REMOTE_RESULTS = "/bench-results"
WORKDIR = "~/sky_workdir"  # where SkyPilot syncs `workdir`

# Chips per host of a TPU generation's multi-host slices; single-host slices of v5e
# and v6e hold up to 8 chips.
_TPU_CHIPS_PER_HOST = {"v4": 4, "v5p": 4, "v5litepod": 4, "v5e": 4, "v6e": 4}
_TPU_SINGLE_HOST_MAX = {"v5litepod": 8, "v5e": 8, "v6e": 8}
_TPU_CORES_PER_CHIP = {"v4": 2, "v5p": 2}  # slice names count TensorCores on these


@dataclass(frozen=True)
class Target:
    """One `--on` value: SkyPilot's accelerator name and count per node, the node count,
    the hosts bench's job spans (a TPU slice's VMs, or the nodes), and the backend."""

    text: str
    accelerator: str
    count: int
    nodes: int
    hosts: int
    backend: str | None

    @property
    def tpu(self) -> bool:
        return self.accelerator.startswith("tpu-")

    @property
    def slug(self) -> str:
        """From SkyPilot's spelling: `v5p-8` and `tpu-v5p-8` are one target."""
        canonical = self.accelerator + (f":{self.count}" if self.count != 1 else "")
        canonical += (f"x{self.nodes}" if self.nodes > 1 else "") + (f"={self.backend}" if self.backend else "")
        return re.sub(r"[^a-z0-9]+", "-", canonical.lower()).strip("-")

    @property
    def sky_accelerators(self) -> str:
        return self.accelerator if self.tpu else f"{self.accelerator}:{self.count}"


def parse_target(text: str) -> Target:
    """`ACCELERATOR[:COUNT][xNODES][=BACKEND]`: `tpu-v5p-8`, `H100:2`, `H100:8x2=gpu-fsdp`.
    A TPU slice is one SkyPilot node; its hosts follow from its size."""
    where = f"--on {text}"
    spec, _, backend = text.partition("=")
    match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9_.-]*?)(?::(\d+))?(?:x(\d+))?", spec.strip())
    if not match:
        raise SpecError(where, "", "expected ACCELERATOR[:COUNT][xNODES][=BACKEND], e.g. tpu-v5p-8, H100:2, H100:8x2")
    name, count, nodes = match[1], int(match[2] or 1), int(match[3] or 1)
    if count < 1 or nodes < 1:
        raise SpecError(where, "", "a count and a node count are >= 1")
    tpu = tpu_slice_name(name, int(match[2]) if match[2] else None, where)
    if tpu:
        if match[3] or (match[2] and not _TPU_GENERATION.fullmatch(name.lower())):
            raise SpecError(where, "", "a TPU slice's size is in its name (tpu-v5p-16), not :COUNT or xNODES")
        return Target(text, tpu, 1, 1, _tpu_hosts(tpu, where), backend or None)
    return Target(text, sky_gpu_name(name, where), count, nodes, nodes, backend or None)


# bench's accelerator keys (`bench cost --a h100-sxm:2`, prices.yaml, reports) -> the
# names SkyPilot's catalog gives the same GPUs (`sky gpus list`); SkyPilot's own names
# (H100, A10G, ...) pass unchanged. A bench key SkyPilot has no separate name for
# (h100-pcie: SkyPilot's H100 is the SXM part) is refused rather than swapped.
SKY_GPU_NAMES = {
    "h100-sxm": "H100",
    "h200": "H200",
    "a100-40gb": "A100",
    "a100-80gb": "A100-80GB",
    "l4": "L4",
    "l40s": "L40S",
    "b200": "B200",
}
_NO_SKY_NAME = ("h100-pcie", "h100-nvl", "gh200", "l40")
# A TPU generation as bench spells it (`v5p`, `tpu-v5e`), without a slice size.
_TPU_GENERATION = re.compile(r"(?:tpu-)?(v4|v5p|v5e|v5litepod|v6e)")


def sky_gpu_name(name: str, where: str) -> str:
    key = name.lower()
    if key in _NO_SKY_NAME:
        raise SpecError(
            where,
            "",
            f"SkyPilot has no separate name for {key} (its H100 is the SXM part; its names: "
            f"{', '.join(sorted(set(SKY_GPU_NAMES.values())))}, ... in `sky gpus list`): name SkyPilot's, e.g. H100:2",
        )
    return SKY_GPU_NAMES.get(key, name)


def tpu_slice_name(name: str, chips: int | None, where: str) -> str | None:
    """SkyPilot's name of a TPU slice (`tpu-v5p-8`, `tpu-v5litepod-8`) from any of bench's
    spellings: `v5p-8`, `tpu-v5p-8`, `v5e-8` / `tpu-v5e-8` (SkyPilot: v5litepod), or a
    generation and a chip count (`tpu-v5p:4`, as `bench cost` takes it: 4 v5p chips are
    tpu-v5p-8, its name counting TensorCores). None: not a TPU."""
    key = name.lower()
    generation = _TPU_GENERATION.fullmatch(key)
    if generation and chips is not None:
        gen = generation[1]
        size = chips * _TPU_CORES_PER_CHIP.get(gen, 1)
        return f"tpu-{'v5litepod' if gen == 'v5e' else gen}-{size}"
    match = re.fullmatch(r"(?:tpu-)?(v\d+[a-z]*)-(\d+)", key)
    if not match:
        if key.startswith("tpu-"):
            raise SpecError(where, "", "expected a TPU slice such as tpu-v5p-8, v5p-8, tpu-v5litepod-16, tpu-v6e-8")
        return None
    gen = "v5litepod" if match[1] == "v5e" else match[1]
    return f"tpu-{gen}-{match[2]}"


def _tpu_hosts(name: str, where: str) -> int:
    match = re.fullmatch(r"tpu-(v4|v5p|v5litepod|v5e|v6e)-(\d+)", name)
    if not match:
        raise SpecError(where, "", "expected a TPU slice such as tpu-v5p-8, tpu-v5litepod-16, tpu-v6e-8")
    generation, size = match[1], int(match[2])
    chips = size // _TPU_CORES_PER_CHIP.get(generation, 1)
    if chips <= _TPU_SINGLE_HOST_MAX.get(generation, _TPU_CHIPS_PER_HOST[generation]):
        return 1
    return max(1, chips // _TPU_CHIPS_PER_HOST[generation])


# --------------------------------------------------------------------------- the task
def setup_script(target: Target) -> str:
    """Install bench with the target's extras. A TPU VM gets two environments (torch_xla
    and JAX pin different packages); a GPU VM one, with PyTorch."""
    if target.tpu:
        return "\n".join(
            [
                "set -e",
                "python3 -m venv ~/bench-xla && ~/bench-xla/bin/pip install -q --upgrade pip",
                "~/bench-xla/bin/pip install -q 'torch-xla[tpu]' -e '.[torch]'",
                "python3 -m venv ~/bench-jax && ~/bench-jax/bin/pip install -q --upgrade pip",
                "~/bench-jax/bin/pip install -q 'jax[tpu]' -e '.[jax]'",
            ]
        )
    return "\n".join(
        [
            "set -e",
            "python3 -m venv ~/bench-venv && ~/bench-venv/bin/pip install -q --upgrade pip",
            "~/bench-venv/bin/pip install -q -e '.[torch]'",
        ]
    )


def run_script(target: Target, scenario: str, overrides: list[str], results: str) -> str:
    """`bench run` of the scenario on the target; over several nodes, each node's place
    in the job stated explicitly (harness/plan/hosts.py)."""
    lines = ["set -e"]
    if target.nodes > 1:
        lines += [
            'export BENCH_HOST_RANK="$SKYPILOT_NODE_RANK"',
            f'export BENCH_COORDINATOR="$(echo "$SKYPILOT_NODE_IPS" | head -n1):{COORDINATOR_PORT}"',
        ]
    bench = "~/bench-jax/bin/bench" if target.tpu else "~/bench-venv/bin/bench"
    command = [bench, "run", scenario, "--results-dir", results, "--no-progress"]
    if target.tpu:  # each backend's workers in its own environment
        command += [
            "--python",
            "xla-fsdpv2=$HOME/bench-xla/bin/python",
            "--python",
            "jax-tunix=$HOME/bench-jax/bin/python",
        ]
    if target.backend:
        command += ["--backend", target.backend]
    if target.hosts > 1:
        command += ["--set", f"parallel.hosts={target.hosts}"]
    for override in overrides:
        command += ["--set", override]
    lines.append(" ".join(_shell_word(a) for a in command))
    return "\n".join(lines)


def _shell_word(arg: str) -> str:
    """One shell word: `~` and `$HOME` left for the VM's shell to expand, the rest quoted."""
    if arg.startswith("~/") and shlex.quote(arg[2:]) == arg[2:]:
        return arg
    if "$HOME" in arg and shlex.quote(arg.replace("$HOME", "")) == arg.replace("$HOME", ""):
        return f'"{arg}"'
    return shlex.quote(arg)


def task(
    target: Target, scenario: str, overrides: list[str], workdir: Path, bucket: str | None, spot: bool
) -> dict[str, Any]:
    """The SkyPilot task (its YAML schema) for one target."""
    results = f"{REMOTE_RESULTS}/{target.slug}" if bucket else f"results/launch/{target.slug}"
    body: dict[str, Any] = {
        "name": f"bench-{target.slug}",
        "resources": {"accelerators": target.sky_accelerators, **({"use_spot": True} if spot else {})},
        "num_nodes": target.nodes,
        "workdir": str(workdir),
        "setup": setup_script(target),
        "run": run_script(target, scenario, overrides, results),
    }
    if bucket:
        body["file_mounts"] = {REMOTE_RESULTS: {"source": bucket, "mode": "MOUNT"}}
    return body


def cluster_name(target: Target) -> str:
    return f"bench-{target.slug}"[:40]


def commands(target: Target, path: Path, results_dir: Path, bucket: str | None, spot: bool) -> list[str]:
    """The shell commands that run the task and bring its records home."""
    quoted = shlex.quote(str(path))
    home = shlex.quote(str(results_dir))
    if spot:  # a managed job: SkyPilot relaunches it after a preemption; waits for it to end
        return [f"sky jobs launch -y -n {cluster_name(target)} {quoted}", bucket_copy(bucket, target.slug, home)]
    name = cluster_name(target)
    launch = f"sky launch -y -c {name} {quoted}"
    if bucket:
        return [launch, bucket_copy(bucket, target.slug, home), f"sky down -y {name}"]
    return [launch, f"rsync -az {name}:{WORKDIR}/results/launch/{target.slug}/ {home}/", f"sky down -y {name}"]


BUCKET_COPY = {"gs://": "gsutil -m rsync -r {src} {home}/", "s3://": "aws s3 sync {src} {home}/"}


def bucket_copy(bucket: str, slug: str, home: str) -> str:
    """The command that brings a target's records home from the bucket the job wrote
    them to (mounted at REMOTE_RESULTS: the target's folder there is BUCKET/SLUG)."""
    scheme = next(s for s in BUCKET_COPY if bucket.startswith(s))
    return BUCKET_COPY[scheme].format(src=shlex.quote(f"{bucket.rstrip('/')}/{slug}"), home=home)


class _Dumper(yaml.SafeDumper):
    """Scripts as YAML block literals (`|`), readable as the shell they are."""


_Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None),
)


# --------------------------------------------------------------------------- command
def prepare(
    scenario_path: str,
    targets: list[str],
    overrides: list[str],
    out_dir: Path,
    results_dir: Path,
    bucket: str | None,
    spot: bool,
) -> list[tuple[Target, Path, list[str]]]:
    """Write one task file per target; (target, file, commands) each."""
    from harness.basics.paths import PROJECT_ROOT as ROOT
    from harness.scenario.loader import read_document, validate

    if not targets:
        raise SpecError("--on", "", "name at least one target, e.g. --on tpu-v5p-8 --on H100:2")
    if spot and not bucket:
        raise SpecError(
            "--spot",
            "",
            "a managed spot job's cluster is gone when it ends: give --bucket (gs://..., s3://...) for its records",
        )
    if bucket and not bucket.startswith(tuple(BUCKET_COPY)):
        raise SpecError(
            "--bucket",
            "",
            f"expected gs://... or s3://... (its records are copied home with gsutil or aws), got {bucket!r}",
        )
    validate(read_document(scenario_path), scenario_path)  # a bad file fails here, not on the VM
    parsed = [parse_target(t) for t in targets]
    slugs = [t.slug for t in parsed]
    if len(set(slugs)) != len(slugs):
        raise SpecError(
            "--on", "", f"targets named twice: {', '.join(sorted({s for s in slugs if slugs.count(s) > 1}))}"
        )
    scenario = Path(scenario_path).resolve()
    try:
        remote_scenario = str(scenario.relative_to(ROOT))
    except ValueError:
        raise SpecError(
            scenario_path,
            "",
            f"the scenario must be inside the checkout ({ROOT}), which is what SkyPilot syncs to the VM",
        ) from None
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for target in parsed:
        path = out_dir / f"{Path(scenario_path).stem}-{target.slug}.yaml"
        path.write_text(
            yaml.dump(task(target, remote_scenario, overrides, ROOT, bucket, spot), Dumper=_Dumper, sort_keys=False)
        )
        written.append((target, path, commands(target, path, results_dir, bucket, spot)))
    return written


def launch(prepared, results_dir: Path) -> list[tuple[str, int]]:
    """Run every target's commands (targets at once, each target's in order) through
    SkyPilot's CLI; (target, exit status) each."""
    if shutil.which("sky") is None:
        raise BenchError(f"SkyPilot is not installed: {INSTALL_HINT}")
    results_dir.mkdir(parents=True, exist_ok=True)
    chains = {target.text: subprocess.Popen(["bash", "-c", " && ".join(cmds)]) for target, _, cmds in prepared}
    return [(name, proc.wait()) for name, proc in chains.items()]
