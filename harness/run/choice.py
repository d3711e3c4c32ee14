"""Which backend a run uses: the one asked for, if it can run here; else the best available
one (an accelerator backend by priority, else the least specialised CPU one).

Kept apart from harness.run.registry (what the backends are, how one is probed) and
harness.run.probe_cache (probes kept between calls), which it uses both of."""

from __future__ import annotations

from harness.basics.errors import BackendUnavailable
from harness.run import probe_cache, registry
from harness.run.registry import ProbeResult


def choose_backend(requested: str | None, interpreters: dict[str, str] | None) -> ProbeResult:
    """The requested backend if it can run; otherwise the best available one."""
    if requested:
        name = registry.get(requested).name
        result = probe_cache.probe_one(name, registry.interpreter_for(name, interpreters))
        if not result.probe.available:
            raise BackendUnavailable(f"backend {requested!r} is not available: {result.probe.reason}")
        return result
    ranked = [info.name for info in sorted(registry.all_backends().values(), key=lambda info: -info.priority)]
    if registry.exclusive_accelerator():  # one at a time, stopping at the first accelerator
        return _best(registry.probe(name, registry.interpreter_for(name, interpreters)) for name in ranked)
    # The probe cache ranks them (harness.run.probe_cache: one probe per backend, kept while
    # its interpreter, packages and code are unchanged); the one chosen is probed afresh,
    # since a device can be taken since (not a CPU). Only where it no longer runs, all afresh.
    cached, hits, _ = probe_cache.probe_all(ranked, interpreters)
    try:
        chosen = _best(iter(cached))
    except BackendUnavailable:
        chosen = None
    if chosen is not None and (not hits or chosen.probe.device_kind == "cpu"):
        return chosen  # every answer was probed just now, or the CPU, which cannot be taken
    if chosen is not None:
        fresh = registry.probe(chosen.name, chosen.python)
        if fresh.probe.available and fresh.probe.device_kind == chosen.probe.device_kind:
            return fresh
    return _best(iter(registry.probe_all(ranked, interpreters)))


def _best(results) -> ProbeResult:
    """The first available accelerator backend, else the last available one (ranked by
    descending priority: the least specialised); each unavailable one says why."""
    fallback, reasons = None, []
    for result in results:
        if result.probe.available and result.probe.device_kind != "cpu":
            return result
        if result.probe.available:  # ranked by descending priority: the last is the least specialised
            fallback = result
        reasons.append(f"{result.name}: {result.probe.reason or 'available'}")
    if fallback is None:
        raise BackendUnavailable(
            f"no backend is available ({'; '.join(reasons)}): install one, e.g. pip install -e '.[torch]'"
        )
    return fallback
