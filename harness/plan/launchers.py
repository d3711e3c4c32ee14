"""How a worker process is started, and what that means for ranks and their facts.

Two launchers: `single` (one process: `python -m harness.run.worker`) and `torchrun` (one
process per device, `python -m torch.distributed.run ... -m harness.run.worker`, over
several hosts with torchrun's static multi-node rendezvous). A launcher owns its
conventions in one place: the interpreter arguments, how a worker learns its rank
(torchrun's RANK), and where each rank's facts go (rank 0 reports; another rank writes
only its failure, next to rank 0's file, where the runner looks). The worker and the
runner ask it; the metrics never see a rank. Framework-free: torchrun is only named.
"""

from __future__ import annotations

import os
from pathlib import Path


class Single:
    """One worker process, rank 0."""

    name = "single"

    def command(self, plan) -> list[str]:
        """Interpreter arguments before `-m harness.run.worker`."""
        return []

    def rank(self) -> int:
        """This worker process's rank (in the worker)."""
        return 0

    def facts_path(self, facts_path: Path, rank: int) -> Path:
        """Where a rank writes: rank 0 the run's facts file, another rank its own."""
        return facts_path if rank == 0 else facts_path.with_name(f"{facts_path.stem}.rank{rank}.json")

    def rank_facts(self, facts_path: Path) -> list[Path]:
        """The other ranks' files, for the failure one of them reported."""
        return sorted(facts_path.parent.glob(f"{facts_path.stem}.rank*.json"))


class Torchrun(Single):
    """One worker per device of the plan through torchrun (a GPU each; gloo ranks on a CPU)."""

    name = "torchrun"

    def command(self, plan) -> list[str]:
        """Over several hosts, torchrun's multi-node launch: every host runs this with its
        own node rank. Static rendezvous (--master-addr/--node-rank), not c10d: c10d orders
        the nodes by whoever joins, so host 0 (which writes the record) might not hold rank
        0; static gives node r the ranks r x per-host ... and host 0 rank 0."""
        if plan.hosts == 1:
            return ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(plan.devices)]
        from harness.plan import hosts

        me = hosts.require_explicit(hosts.role(plan.hosts), "torchrun")
        address, port = me.coordinator_host_port()
        return [
            "-m",
            "torch.distributed.run",
            "--nnodes",
            str(plan.hosts),
            "--node-rank",
            str(me.rank),
            "--nproc-per-node",
            str(plan.devices // plan.hosts),
            "--master-addr",
            address,
            "--master-port",
            str(port),
        ]

    def rank(self) -> int:
        return int(os.environ["RANK"])  # torchrun sets it for every process it starts


LAUNCHERS = {launcher.name: launcher for launcher in (Single(), Torchrun())}


def get(name: str) -> Single:
    if name not in LAUNCHERS:
        raise ValueError(f"unknown launcher {name!r} (known: {', '.join(LAUNCHERS)})")
    return LAUNCHERS[name]
