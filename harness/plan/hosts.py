"""Which host of a multi-host job this process is (`parallel.hosts` > 1).

bench schedules nothing across machines: every host of the job runs `bench run` of the
same scenario, and each framework's own runtime joins them (JAX's distributed runtime,
torchrun's rendezvous, a TPU slice's metadata). This module only reads what the host
was told, from two variables, and refuses to guess:

    BENCH_HOST_RANK=0..hosts-1        this host's place in the job (0 writes the record)
    BENCH_COORDINATOR=HOST:PORT       host 0's address, where the others meet it

SkyPilot states the same facts as SKYPILOT_NODE_RANK and SKYPILOT_NODE_IPS (its first
line is the head node); `bench launch` writes the task's `run` so that it exports them
under these names, explicitly. On a TPU VM of a slice JAX reads the slice's metadata
itself, so there both may be left unset for the JAX backends.

Pure Python: no framework is imported here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from harness.basics.errors import SpecError

RANK_ENV = "BENCH_HOST_RANK"
COORDINATOR_ENV = "BENCH_COORDINATOR"


@dataclass(frozen=True)
class HostRole:
    """This host's place in a job of `hosts` hosts; rank and coordinator are None where
    the environment left them to the platform (a TPU slice's metadata)."""

    hosts: int
    rank: int | None
    coordinator: str | None

    @property
    def secondary(self) -> bool:
        """A host other than 0: it takes part in the job and writes no record."""
        return self.rank is not None and self.rank > 0

    def coordinator_host_port(self) -> tuple[str, int]:
        host, _, port = (self.coordinator or "").rpartition(":")
        return host, int(port)


def role(hosts: int, env: dict[str, str] | None = None) -> HostRole:
    """This host's role in a job of `hosts` hosts, from the environment; a SpecError
    naming the variable when it is malformed or contradicts `parallel.hosts`."""
    env = os.environ if env is None else env
    raw_rank, coordinator = env.get(RANK_ENV), env.get(COORDINATOR_ENV) or None
    if hosts == 1:
        if raw_rank not in (None, "", "0"):
            raise SpecError(
                RANK_ENV,
                "",
                f"{raw_rank}: this host is told it is one of several, but the scenario's parallel.hosts is 1",
            )
        return HostRole(1, 0, None)
    rank = None
    if raw_rank not in (None, ""):
        if not raw_rank.isdigit() or int(raw_rank) >= hosts:
            raise SpecError(
                RANK_ENV, "", f"{raw_rank!r}: a host rank is a number from 0 to {hosts - 1} (parallel.hosts is {hosts})"
            )
        rank = int(raw_rank)
    if coordinator is not None:
        host, _, port = coordinator.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise SpecError(COORDINATOR_ENV, "", f"{coordinator!r}: expected HOST:PORT of host 0, e.g. 10.0.0.2:8476")
    if (rank is None) != (coordinator is None):
        missing = RANK_ENV if rank is None else COORDINATOR_ENV
        raise SpecError(
            missing,
            "",
            f"not set: parallel.hosts is {hosts}; set both {RANK_ENV} and "
            f"{COORDINATOR_ENV} on every host (or neither, on a TPU slice)",
        )
    return HostRole(hosts, rank, coordinator)


def require_explicit(r: HostRole, backend: str) -> HostRole:
    """Backends whose launcher needs the rendezvous stated (torchrun): both variables."""
    if r.hosts > 1 and r.rank is None:
        raise SpecError(
            RANK_ENV,
            "",
            f"not set: {backend} over {r.hosts} hosts meets at a rendezvous that "
            f"{RANK_ENV} and {COORDINATOR_ENV} name, on every host",
        )
    return r


def secondary_part(plan, outcome: dict) -> dict | None:
    """What this host did in a multi-host job when it is not the job's host 0, else None
    (host 0, or a one-host run: the runner writes the record as usual).

    A host is secondary when BENCH_HOST_RANK says so, or, on a TPU slice where JAX's
    runtime numbered the hosts itself, when its worker reports a process index > 0. A
    secondary host's worker writes no facts when it succeeds (rank 0 reports for the
    job), so its success is its exit status 0."""
    if plan is None or plan.hosts == 1:
        return None
    me = role(plan.hosts)
    facts = outcome.get("facts")
    index = ((facts or {}).get("extra") or {}).get("process_index")
    if not me.secondary and not (isinstance(index, int) and index > 0):
        return None
    failure = outcome.get("failure") or {}
    ok = facts is not None or (failure.get("kind") == "crash" and failure.get("exit_code") == 0)
    return {
        "host_rank": me.rank if me.rank is not None else index,
        "hosts": plan.hosts,
        "status": "ok" if ok else "failed",
        "reason": None if ok else failure.get("reason"),
        "log_tail": None if ok else failure.get("log_tail"),
    }
