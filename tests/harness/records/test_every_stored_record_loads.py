"""After the move into rooms (issue 46): every record ever written and kept in this
repository still loads through today's readers, and the old import path of the backend
interface still works, with a warning naming the new one."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from harness.projection.projection import load_projection
from harness.projection.serving import load_stored
from harness.records.store import load_record

from conftest import ROOT

# Fixture files that are not records: a captured vLLM stream.
NOT_RECORDS = {"tests/fixtures/serving/vllm_stream.json"}


def stored(pattern: str) -> list[Path]:
    # results/ is the default store: nothing in it is committed (scratch runs stay local)
    roots = [ROOT / "tests" / "fixtures", ROOT / "benchmarks", ROOT / "harness"]
    return sorted(p for root in roots for p in root.rglob(pattern) if str(p.relative_to(ROOT)) not in NOT_RECORDS)


def test_every_run_record_loads():
    runs = [p for p in stored("*.json") if not p.name.endswith(("projection.json", "published.json"))]
    assert len(runs) >= 13  # the quick start's, the history fixtures' and the schema-1 records
    for path in runs:
        record = load_record(path)
        assert record.run_id and record.status in ("ok", "failed"), path


def test_every_projection_record_loads():
    tpu = stored("*.projection.json")  # the calibration points' compiles (not *.serve-projection.json)
    assert len(tpu) >= 3
    for path in tpu:
        assert load_projection(path).shapes, path
    served = stored("*.serve-projection.json")
    assert len(load_stored(served)) == len(served)


def test_the_backend_interface_imports_from_its_old_path_with_a_warning():
    """A third-party backend written against bench 0.1.0 (`from harness.backend import ...`)."""
    code = (
        "import warnings, sys\n"
        "warnings.simplefilter('error')\n"  # the warning must be raised, not only printed
        "try:\n"
        "    import harness.backend\n"
        "except DeprecationWarning as w:\n"
        "    print(w)\n"
        "warnings.simplefilter('ignore')\n"
        "from harness.backend import Backend, BackendInfo, Probe\n"
        "from harness.run import backend\n"
        "print(Backend is backend.Backend and BackendInfo is backend.BackendInfo and Probe is backend.Probe)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    warning, same = done.stdout.splitlines()
    assert "harness.backend moved to harness.run.backend" in warning and same == "True"


@pytest.mark.parametrize("old", ["harness.loop", "harness.spec", "harness.metrics", "harness.store"])
def test_each_moved_module_keeps_its_old_path_for_one_release(old):
    import harness

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sys.modules.pop(old, None)
        module = importlib.import_module(old)
    assert [str(w.message).split(" moved")[0] for w in caught if w.category is DeprecationWarning] == [old]
    new = importlib.import_module(harness.MOVED[old])
    assert set(dir(new)) <= set(dir(module)) and all(
        getattr(module, n) is getattr(new, n) for n in dir(new) if not n.startswith("__")
    )
