"""The offline install, for real: the wheel set downloaded into a folder (from the
index here, as on a connected machine), installed from that folder alone into an empty
--target directory with no index, then everything the backends import imported from
there by an interpreter that has only the image-typical packages: no bench, no pydantic."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from harness.run import offline

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


def image_only_site(tmp_path: Path) -> Path:
    """A site folder holding only this venv's image-typical distributions (offline.IMAGE
    and what they require, not their extras), less every distribution the wheel set ships
    (a stock image has no pydantic even where its transformers' typer would pull it): the
    image the check imports beside the target, so that nothing the wheel set lacks can
    come from the rest of the venv."""
    from importlib import metadata

    shipped = {offline.normalize(w[0]) for w in offline.WHEELS} | {"bench"}
    by_name = {offline.normalize(d.metadata["Name"]): d for d in metadata.distributions()}
    by_name = {name: dist for name, dist in by_name.items() if name not in shipped}
    wanted: set[str] = set()
    todo = [name for name in offline.IMAGE if name in by_name]
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        wanted.add(name)
        for requirement in by_name[name].requires or []:
            if "extra ==" not in requirement:
                dep = offline.normalize(re.match(r"[A-Za-z0-9._-]+", requirement).group(0))
                todo += [dep] if dep in by_name else []
    site = tmp_path / "image-site"
    site.mkdir()
    for name in wanted:
        for file in by_name[name].files or []:
            top = file.parts[0]
            if top != ".." and not top.endswith(".pth") and (Path(SITE) / top).exists():
                if not (site / top).exists():
                    (site / top).symlink_to(Path(SITE) / top)
    assert not (site / "pydantic").exists() and not (site / "harness").exists() and (site / "torch").exists()
    return site


def test_stdlib_only_module_runs_without_pydantic():
    done = run(base_python(), "-c", "import harness.run.offline, sys; print('pydantic' in sys.modules)")
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


def test_download_install_without_an_index_and_import_from_the_target(tmp_path):
    wheels, target = tmp_path / "wheels", tmp_path / "target"
    target.mkdir()
    # The target "image": this venv's packages that a stock CUDA image has (torch, jax,
    # transformers, ...); everything bench adds is downloaded, as for a GPU image.
    have = tmp_path / "freeze.txt"
    have.write_text("\n".join(sorted(offline.installed_in(sys.executable) & offline.IMAGE)) + "\n")
    done = run(sys.executable, "-m", "harness.run.offline", "download", str(wheels), "--have", str(have))
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
        "harness.run.offline",
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
        "harness.run.offline",
        "check",
        "--target",
        str(target),
        "--python",
        base_python(),
        env={"PYTHONPATH": str(image_only_site(tmp_path))},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert f"bench from {target}" in done.stdout, done.stdout
