"""`bench backends`' probes, kept between calls while nothing they depend on changed.

A probe is a worker process that imports a framework (seconds each; 43 s for all of
them on a busy 2-core machine). Its answer depends on the interpreter, the packages it
sees, this checkout's code and the environment variables that pick devices; the cache
key is all of those, read without starting the interpreter: the interpreter file's
path and mtime, the `*.dist-info` names (package and version) and mtimes of its
site-packages folders, the files of `harness/` and `backends/` (path, size, mtime), and
the device-selecting variables. A key that matches answers from the cache; anything
changed, or an answer older than a day (a device can appear or be taken), probes again.
A run that names its backend reuses only an available CPU answer (probe_one): a CPU
cannot be taken since, while an accelerator's answer is always probed afresh.
A probe that timed out is never kept (the machine was busy, not the backend unable).

The cache is one JSON file: $BENCH_CACHE_DIR, else $XDG_CACHE_HOME/bench, else
~/.cache/bench, `probes.json`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from harness.basics.paths import PROJECT_ROOT
from harness.run.backend import Probe

MAX_AGE_S = 24 * 3600
# Environment variables that change which devices a probe sees.
DEVICE_ENV_PREFIXES = ("CUDA_", "NVIDIA_", "ROCR_", "HIP_", "TPU_", "PJRT_", "JAX_", "XLA_", "LIBTPU", "BENCH_PYTHON_")


def cache_file() -> Path:
    base = os.environ.get("BENCH_CACHE_DIR")
    if base:
        return Path(base) / "probes.json"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "bench" / "probes.json"


def _site_dirs(python: str) -> list[Path]:
    """The site-packages folders the interpreter sees, found from its path: a virtual
    environment's (pyvenv.cfg beside bin/), else its installation prefix's, and the user's."""
    exe = Path(python if os.sep in python else (shutil.which(python) or python)).absolute()
    root = exe.parent.parent
    if not (root / "pyvenv.cfg").exists():
        root = Path(os.path.realpath(exe)).parent.parent
    own = [d for d in [*root.glob("lib/python*/site-packages"), *root.glob("lib/python*/dist-packages")] if d.is_dir()]
    if not own:
        return []  # not an installation's interpreter (a launcher script): unknown packages
    return sorted([*own, *(d for d in Path.home().glob(".local/lib/python*/site-packages") if d.is_dir())])


def _packages(site: Path) -> list[str]:
    return sorted(e.name for e in os.scandir(site) if e.name.endswith((".dist-info", ".egg-info", ".pth")))


def _code() -> list[tuple[str, int, int]]:
    """This checkout's harness and backend sources: what a probe's worker imports."""
    out = []
    for folder in ("harness", "backends"):
        for path in sorted((PROJECT_ROOT / folder).rglob("*.py")):
            st = path.stat()
            out.append((str(path.relative_to(PROJECT_ROOT)), st.st_size, st.st_mtime_ns))
    return out


def _stat(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def key(name: str, python: str, code: list | None = None) -> str | None:
    """The cache key of one backend's probe with one interpreter (see the module); None
    where its site-packages cannot be found from its path (a launcher script such as a
    pyenv shim): its packages could change unseen, so it is always probed."""
    sites = _site_dirs(python)
    if not sites:
        return None
    parts: dict[str, Any] = {
        "backend": name,
        "python": str(Path(python).absolute()) if os.sep in python else python,
        "python_mtime": _stat(os.path.realpath(shutil.which(python) or python)),
        "sites": [(str(d), d.stat().st_mtime_ns, _packages(d)) for d in sites],
        "code": code if code is not None else _code(),
        "env": sorted((k, v) for k, v in os.environ.items() if k.startswith(DEVICE_ENV_PREFIXES)),
        "host_python": sys.version,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def load() -> dict[str, Any]:
    try:
        doc = json.loads(cache_file().read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def lookup(cache: dict[str, Any], cache_key: str) -> Probe | None:
    entry = cache.get(cache_key)
    if not isinstance(entry, dict) or time.time() - entry.get("at", 0) > MAX_AGE_S:
        return None
    try:
        return Probe(**entry["probe"])
    except (KeyError, TypeError):
        return None


def keep(cache: dict[str, Any], cache_key: str, probe: Probe) -> None:
    if probe.reason.startswith("probe timed out"):
        return
    cache[cache_key] = {"at": time.time(), "probe": probe.to_json()}


def save(cache: dict[str, Any]) -> str | None:
    """Write the cache (answers older than a day dropped); why it could not, or None."""
    from harness.basics.files import write_json_atomic

    now = time.time()
    fresh = {k: v for k, v in cache.items() if isinstance(v, dict) and now - v.get("at", 0) <= MAX_AGE_S}
    try:
        write_json_atomic(cache_file(), fresh)
    except OSError as exc:
        return f"the probe cache {cache_file()} cannot be written ({exc.strerror or exc}): the next call probes again"
    return None


def probe_all(names: list[str], interpreters: dict[str, str] | None, fresh: bool = False):
    """registry.probe_all, answered from the cache where its key matches (`fresh`: never).
    Returns the results in order, how many came from the cache, and a warning or None."""
    from harness.run import registry

    cache, code = load(), _code()
    jobs = [(name, registry.interpreter_for(name, interpreters)) for name in names]
    keys = [key(name, python, code) for name, python in jobs]
    hits = {i: hit for i, k in enumerate(keys) if k and not fresh and (hit := lookup(cache, k)) is not None}
    missing = [name for i, (name, _) in enumerate(jobs) if i not in hits]
    probed = iter(registry.probe_all(missing, interpreters) if missing else [])
    results = []
    for i, (name, python) in enumerate(jobs):
        result = registry.ProbeResult(name, python, hits[i]) if i in hits else next(probed)
        if keys[i]:
            keep(cache, keys[i], result.probe)
        results.append(result)
    return results, len(hits), save(cache)


def probe_one(name: str, python: str):
    """The probe of the backend a run names: an available CPU answer from the cache where
    its key matches (everything else it depends on is in the key, and a CPU cannot be
    taken since); an accelerator's answer, an unavailable one, or a miss, afresh, kept.
    Saves a run on the CPU one interpreter start (its framework's imports: seconds)."""
    from harness.run import registry

    cache = load()
    cache_key = key(name, python)
    hit = lookup(cache, cache_key) if cache_key else None
    if hit is not None and hit.available and hit.device_kind == "cpu":
        return registry.ProbeResult(name, python, hit)
    result = registry.probe(name, python)
    if cache_key:
        keep(cache, cache_key, result.probe)
        save(cache)
    return result
