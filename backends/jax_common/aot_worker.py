"""The worker of `bench plan --compile-for`: one backend's step compiled for one TPU slice.

    python -m backends.jax_common.aot_worker REQUEST.json FACTS.json

Runs in the environment with libtpu (the `tpu` extra; BENCH_PYTHON_TPU), in a process of
its own like every worker: JAX is started on the host's CPU (the topology is only
described), and whatever the compiles leave behind dies with the process. REQUEST holds
the resolved scenario, the plan on the slice, the slice and the lengths to compile;
FACTS gets, per length, the compiler's facts of each program (backends/jax_common/aot.py).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from pathlib import Path

AOT_MODULES = {"jax-tunix": "backends.jax_tunix.aot", "torchax": "backends.torchax_jax.aot"}


def main(request_path: str, facts_path: str) -> int:
    os.environ["JAX_PLATFORMS"] = "cpu"  # this host's runtime; the TPU is described, not opened
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    from harness.plan.plan import Plan
    from harness.scenario.loader import validate

    request = json.loads(Path(request_path).read_text())
    scenario = validate(request["scenario"], request["source"])
    plan = Plan.model_validate(request["plan"])
    chip = request["slice"]
    begun = time.perf_counter()
    from backends.jax_common.aot import topology_devices

    devices = topology_devices(chip["topology"], tuple(chip["host_bounds"]), chip["chips"])
    module = importlib.import_module(AOT_MODULES[request["backend"]])
    shapes = module.compile_shapes(scenario, plan, devices, request["seq_lens"])
    facts = {"shapes": shapes, "libraries": _versions(), "worker_s": time.perf_counter() - begun}
    Path(facts_path).write_text(json.dumps(facts))
    return 0


def _versions() -> dict[str, str]:
    from importlib import metadata

    found = {}
    for name in ("jax", "jaxlib", "libtpu", "torch", "torchax", "google-tunix", "qwix", "flax"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
