"""The README's two commands as a newcomer types them: `.ci/run` builds its main
environment with the README's install line verbatim (no pin before it), and the
dependency ranges keep out the releases known to break us (issue 39)."""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement

from conftest import ROOT

README = (ROOT / "README.md").read_text()
CI_RUN = (ROOT / ".ci" / "run").read_text()
# torch 2.14 drops aten ops torchax's op tables name at import ('cholesky').
BROKEN_TORCH = ("2.14.0", "2.14.1", "2.15.0")


def readme_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", README, re.S).group(1)
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_ci_installs_the_main_environment_with_the_readme_line_verbatim():
    install, test = readme_commands()[1].split(" && ")
    assert (install, test) == ("pip install -e '.[torch,test]'", "pytest")
    lines = [line.strip() for line in CI_RUN.splitlines()]
    assert install in lines  # a command line of its own, as written
    assert readme_commands()[1] in lines  # and the README's test command itself, as written
    assert lines.index(install) < lines.index(readme_commands()[1])
    # then the slow tier, which the README's `pytest` (the fast tier) leaves out
    assert lines.index(readme_commands()[1]) < lines.index("pytest -m slow")
    # nothing pins or pre-installs the main environment's torch before the README's line
    before = "\n".join(lines[: lines.index(install)])
    assert not re.search(r"\.venv/bin/python\S* +torch", before) and 'editable "$PWD/.venv' not in before


def test_every_extra_that_names_torch_keeps_out_the_releases_that_break_torchax():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    torch_ranges = {
        name: req.specifier for name, reqs in extras.items() for req in map(Requirement, reqs) if req.name == "torch"
    }
    # the README's line installs torch and torchax (test) together: both extras bound it
    assert {"torch", "torchax", "test"} <= set(torch_ranges)
    for name, spec in torch_ranges.items():
        assert not any(spec.contains(v) for v in BROKEN_TORCH), (name, str(spec))
        assert spec.contains("2.13.0") and spec.contains("2.13.0+cpu", prereleases=False), (name, str(spec))
