"""The offline install, for real: the wheel set downloaded into a folder (from the
index here, as on a connected machine), installed from that folder alone into an empty
--target directory with no index, then everything the backends import imported from
there by an interpreter that has the image-typical packages but no bench, no pydantic."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from harness import offline

from conftest import ROOT

pytestmark = pytest.mark.slow
SITE = sysconfig.get_paths()["purelib"]  # this venv's packages: the "image"


def base_python() -> str:
    """The interpreter this venv was made from: no bench, no pydantic, no site-packages
    of ours unless PYTHONPATH names them (a .pth such as bench's editable finder is not
    read from a PYTHONPATH entry, so bench can only come from the target)."""
    return str(Path(sys._base_executable).resolve())


def run(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(args), capture_output=True, text=True, cwd=ROOT, timeout=timeout, env={**os.environ, **(env or {})}
    )


def test_stdlib_only_module_runs_without_pydantic():
    done = run(base_python(), "-c", "import harness.offline, sys; print('pydantic' in sys.modules)")
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


def test_download_install_without_an_index_and_import_from_the_target(tmp_path):
    wheels, target = tmp_path / "wheels", tmp_path / "target"
    target.mkdir()
    # The target "image": this venv's packages that a stock CUDA image has (torch, jax,
    # transformers, ...); everything bench adds is downloaded, as for a GPU image.
    have = tmp_path / "freeze.txt"
    have.write_text("\n".join(sorted(offline.installed_in(sys.executable) & offline.IMAGE)) + "\n")
    done = run(sys.executable, "-m", "harness.offline", "download", str(wheels), "--have", str(have))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    names = {p.name.split("-")[0].lower() for p in wheels.glob("*.whl")}
    assert {"pydantic", "pydantic_core", "torchax", "google_tunix", "qwix", "bench"} <= names, names
    assert "torch" not in names and "jax" not in names and "transformers" not in names  # the image's
    assert "safetensors" not in names  # tunix's <0.8 pin is not followed: the image's 0.8 stays

    # On the target: no index at all (PIP_NO_INDEX, and the machine's extra indexes and
    # find-links switched off), into an empty folder, with an interpreter without pydantic.
    no_index = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "", "PIP_CONFIG_FILE": os.devnull}
    done = run(
        base_python(),
        "-m",
        "harness.offline",
        "install",
        str(wheels),
        "--target",
        str(target),
        "--python",
        sys.executable,
        env=no_index,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert (target / "pydantic").is_dir() and (target / "tunix").is_dir() and (target / "harness").is_dir()

    done = run(
        base_python(),
        "-m",
        "harness.offline",
        "check",
        "--target",
        str(target),
        "--python",
        base_python(),
        env={"PYTHONPATH": SITE},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert f"bench from {target}" in done.stdout, done.stdout
