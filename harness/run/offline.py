"""Install bench where there is no package index: an air-gapped cluster node, or a GPU
or TPU image whose only network is none. Standard library only, so it runs on a target
that has no pydantic yet (`harness/__init__.py` imports nothing).

On a machine with internet (any OS; the wheels are chosen for the target's Python and
platform):

    python -m harness.run.offline download WHEELS/ [--python-version 3.12] [--platform manylinux_2_28_x86_64]
                                               [--have FREEZE.txt | --have-python PY]

On the target, with WHEELS/ copied over (keep it out of git: a few tens of MiB):

    python -m harness.run.offline install WHEELS/                  # into the running environment
    python -m harness.run.offline install WHEELS/ --target DIR     # read-only environment: then PYTHONPATH=DIR
    python -m harness.run.offline check [--target DIR]             # import everything the backends import

What is downloaded: `WHEELS` below (the core's pins here, each backend's from its
`backends/<name>/pins.toml`; bench's own wheel too) less what the target already
has: by default a stock CUDA image with torch, JAX, transformers, peft, flax, optax,
rich, httpx, jinja2, pandas and scipy (`IMAGE`); `--have` reads the target's
`pip freeze`, `--have-python` asks an interpreter here. Every wheel is pinned to a
version checked together, and everything installs with `--no-deps`, on purpose:
google-tunix requires `safetensors<0.8` (an image's transformers wants 0.8) and a
dataset/download stack bench never imports (tensorflow-datasets, datasets, grain,
kagglehub, numba). Its modules that bench imports run with the image's safetensors
0.8 (`check` imports them); installing its declared dependencies would downgrade the
image's safetensors, or fail without an index. What the imports really need is in
`WHEELS`, and `check` proves it on the target.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

# (distribution, version, group, why). Versions resolved and imported together on
# Python 3.11 in November 2026 (the jax-tunix and torch environments of .ci/run). The
# core's here; each backend's in its own `backends/<name>/pins.toml` (backend_pins).
CORE_WHEELS: tuple[tuple[str, str, str, str], ...] = (
    ("pydantic", "2.14.4", "core", "scenario and record models"),
    ("pydantic-core", "2.50.5", "core", "pydantic's compiled core (a binary wheel: per Python and platform)"),
    ("annotated-types", "0.8.0", "core", "pydantic"),
    ("typing-inspection", "0.4.5", "core", "pydantic"),
    ("typing-extensions", "4.16.0", "core", "pydantic needs >= 4.16; images often have older"),
    ("plotly", "7.1.0", "core", "report plots"),
    ("narwhals", "2.29.0", "core", "plotly"),
)

# What a stock CUDA image for this work already has (torch 2.11 CUDA 13, JAX 0.11 CUDA,
# transformers 5.17, peft, flax, optax, rich, httpx, jinja2, pandas, scipy) with the
# packages those install: never downloaded unless --have/--have-python says otherwise.
IMAGE = frozenset(
    {
        "torch",
        "jax",
        "jaxlib",
        "transformers",
        "tokenizers",
        "safetensors",
        "huggingface-hub",
        "peft",
        "accelerate",
        "flax",
        "orbax-checkpoint",
        "tensorstore",
        "msgpack",
        "treescope",
        "etils",
        "humanize",
        "simplejson",
        "protobuf",
        "nest-asyncio",
        "aiofiles",
        "optax",
        "chex",
        "absl-py",
        "ml-dtypes",
        "opt-einsum",
        "numpy",
        "rich",
        "pygments",
        "markdown-it-py",
        "mdurl",
        "httpx",
        "httpcore",
        "anyio",
        "h11",
        "idna",
        "certifi",
        "sniffio",
        "jinja2",
        "markupsafe",
        "pandas",
        "python-dateutil",
        "pytz",
        "tzdata",
        "six",
        "scipy",
        "pyyaml",
        "packaging",
        "filelock",
        "fsspec",
        "tqdm",
        "regex",
        "requests",
        "urllib3",
        "charset-normalizer",
        "psutil",
        "triton",  # a dependency of every CUDA torch wheel (liger-kernel's kernels)
    }
)

PINS_FIELDS = ("group", "check", "wheels")


def backend_pins(backends_dir: Path = ROOT / "backends") -> list[dict[str, Any]]:
    """Every backend's `pins.toml` (its group name, the modules `check` imports, and its
    wheels as [distribution, version, why]), by the backend's folder name. tomllib is
    the standard library's: this runs before pydantic is installed."""
    import tomllib

    found = []
    for path in sorted(backends_dir.glob("*/pins.toml")):
        with path.open("rb") as f:
            pins = tomllib.load(f)
        if sorted(pins) != sorted(PINS_FIELDS):
            raise SystemExit(f"offline: {path}: needs exactly the fields {', '.join(PINS_FIELDS)}")
        for i, wheel in enumerate(pins["wheels"]):
            if not (isinstance(wheel, list) and len(wheel) == 3 and all(isinstance(x, str) for x in wheel)):
                raise SystemExit(f"offline: {path}: wheels[{i}]: not [distribution, version, why]")
        found.append(pins)
    return found


BACKEND_PINS = backend_pins()
WHEELS = CORE_WHEELS + tuple((n, v, p["group"], why) for p in BACKEND_PINS for n, v, why in p["wheels"])
# What each group imports (bench's own modules first: it must load from the wheel).
CHECK_MODULES = {
    "core": ("harness.cli", "harness.scenario.spec", "harness.run.runner", "reports.render", "pydantic", "plotly"),
    **{p["group"]: tuple(p["check"]) for p in BACKEND_PINS},
}
GROUPS = tuple(CHECK_MODULES)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_in(python: str) -> set[str]:
    """The distributions an interpreter has, by normalized name."""
    code = "import importlib.metadata as m\nfor d in m.distributions():\n    print(d.metadata['Name'])"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout
    return {normalize(n) for n in out.split()}


def read_freeze(path: str) -> set[str]:
    """Names from `pip freeze` / `pip list --format=freeze` output (editable lines too)."""
    names = set()
    for line in Path(path).read_text().splitlines():
        line = line.strip()
        if line and not line.startswith(("#", "-e ")):
            names.add(normalize(re.split(r"[=<>!~ @\[;]", line, maxsplit=1)[0]))
    return names


def wanted(have: set[str], groups: tuple[str, ...]) -> list[tuple[str, str, str, str]]:
    return [w for w in WHEELS if w[2] in groups and normalize(w[0]) not in have]


def default_platforms() -> list[str]:
    machine = {"arm64": "aarch64", "amd64": "x86_64"}.get(platform.machine().lower(), platform.machine().lower())
    return [f"manylinux_2_28_{machine}", f"manylinux_2_17_{machine}", f"manylinux2014_{machine}"]


def download(
    dest: Path, have: set[str], groups: tuple[str, ...], python_version: str, platforms: list[str], pip: list[str]
) -> list[str]:
    """Every wanted wheel for the target (binary ones for its Python and platform), and
    bench's own wheel. Returns the requirement lines downloaded."""
    dest.mkdir(parents=True, exist_ok=True)
    picks = [f"{name}=={version}" for name, version, _, _ in wanted(have, groups)]
    if picks:
        plat = [arg for p in platforms for arg in ("--platform", p)]
        subprocess.run(
            [
                *pip,
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--dest",
                str(dest),
                "--python-version",
                python_version,
                "--implementation",
                "cp",
                *plat,
                *picks,
            ],
            check=True,
        )
    build_bench_wheel(dest, pip)
    (dest / "bench-wheels.txt").write_text("".join(f"{p}\n" for p in picks))
    return picks


# What bench's own wheel is built from (pyproject.toml's packages, package data, readme).
BENCH_SOURCES = ("pyproject.toml", "README.md", "harness", "backends", "reports")


def build_bench_wheel(dest: Path, pip: list[str]) -> None:
    """bench itself: pure Python, built from a copy of this checkout's sources, so that
    setuptools' build/ and egg-info folders land in a temporary folder, never in the
    checkout (where a stale build/lib could ship deleted modules in a later wheel)."""
    import shutil

    with tempfile.TemporaryDirectory(prefix="bench-wheel-") as tmp:
        for name in BENCH_SOURCES:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(source, Path(tmp) / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(source, Path(tmp) / name)
        subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir", str(dest), tmp], check=True)


def install(source: Path, target: Path | None, pip: list[str]) -> None:
    """Every wheel of the folder, no index, no dependency resolution (see the docstring)."""
    wheels = sorted(str(p) for p in source.glob("*.whl"))
    if not wheels:
        raise SystemExit(f"offline: no wheels in {source}")
    where = ["--target", str(target)] if target else []
    subprocess.run(
        [*pip, "install", "--no-index", "--find-links", str(source), "--no-deps", *where, *wheels], check=True
    )


def check(target: Path | None, groups: tuple[str, ...], python: str) -> int:
    """Import every module the chosen groups need in a fresh interpreter, away from this
    checkout (so bench loads from what was installed), and say where bench came from."""
    modules = [m for g in groups for m in CHECK_MODULES[g]]
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "import harness\n"
        "print('bench from', harness.__file__)\n"
        f"print('imported', len({modules!r}), 'modules')\n"
    )
    env = dict(os.environ)
    if target:
        env["PYTHONPATH"] = os.pathsep.join([str(target), *filter(None, [env.get("PYTHONPATH")])])
    with tempfile.TemporaryDirectory() as away:
        return subprocess.run([python, "-c", code], cwd=away, env=env).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.run.offline", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("download", help="on a machine with internet: the wheels the target lacks, into a folder")
    d.add_argument("dest", type=Path)
    have = d.add_mutually_exclusive_group()
    have.add_argument("--have", help="the target's `pip freeze` output (default: a stock CUDA image)")
    have.add_argument("--have-python", help="an interpreter here whose packages the target has")
    d.add_argument(
        "--python-version",
        default=f"{sys.version_info.major}.{sys.version_info.minor}",
        help="the target's Python (default: this one's)",
    )
    d.add_argument("--platform", action="append", help="the target's platform tags (default: manylinux, this CPU)")
    i = sub.add_parser("install", help="on the target: install the folder's wheels without an index")
    i.add_argument("source", type=Path)
    i.add_argument("--target", type=Path, help="install into this folder (then PYTHONPATH=it); for read-only envs")
    c = sub.add_parser("check", help="import everything the backends import, from what was installed")
    c.add_argument("--target", type=Path)
    for p in (d, c):
        p.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated of {', '.join(GROUPS)}")
    for p in (d, i, c):
        p.add_argument("--python", default=sys.executable, help="the interpreter whose pip (or imports) to use")
    args = parser.parse_args(argv)
    pip = [args.python, "-m", "pip"]
    if args.command == "install":
        install(args.source, args.target, pip)
        return 0
    groups = tuple(g.strip() for g in args.groups.split(",") if g.strip())
    unknown = [g for g in groups if g not in GROUPS]
    if unknown:
        parser.error(f"--groups: unknown {', '.join(unknown)} (known: {', '.join(GROUPS)})")
    if args.command == "check":
        return check(args.target, groups, args.python)
    have_names = (
        read_freeze(args.have) if args.have else installed_in(args.have_python) if args.have_python else set(IMAGE)
    )
    picks = download(args.dest, have_names, groups, args.python_version, args.platform or default_platforms(), pip)
    print(f"downloaded {len(picks)} wheels and bench's own into {args.dest}: {' '.join(picks) or '(none needed)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
