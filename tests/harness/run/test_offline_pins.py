"""Per-backend package pins (backends/<name>/pins.toml), collected by harness/run/offline.py
with the standard library alone: it runs where pydantic is not installed yet."""

import subprocess
import sys

import pytest

from conftest import ROOT


def test_offline_collects_each_backends_pins_without_any_third_party_import():
    code = (
        "import sys\n"
        "from harness import offline\n"
        "print(sorted(m for m in ('pydantic', 'yaml', 'torch', 'jax') if m in sys.modules))\n"
        "print(offline.GROUPS)\n"
        "print([w for w in offline.WHEELS if w[0] in ('torchax', 'google-tunix', 'pydantic', 'liger-kernel')])\n"
    )
    out = subprocess.run([sys.executable, "-S", "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    imported, groups, picked = out.stdout.splitlines()
    assert imported == "[]"
    assert groups == "('core', 'jax-tunix', 'torch', 'torchax')"
    assert "('torchax', '0.0.13', 'torchax', 'the torchax backend')" in picked
    assert "('google-tunix', '0.1.7', 'jax-tunix'," in picked and "('pydantic', '2.14.4', 'core'," in picked
    assert "('liger-kernel', '0.8.5', 'torch'," in picked


def test_each_pins_file_sits_beside_a_backend_package():
    for path in (ROOT / "backends").glob("*/pins.toml"):
        assert (path.parent / "__init__.py").is_file() and (path.parent / "backend.yaml").is_file(), path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('group = "x"\ncheck = []\n', "needs exactly the fields group, check, wheels"),
        ('group = "x"\ncheck = []\nwheels = [["a", "1"]]\n', r"wheels\[0\]: not \[distribution, version, why\]"),
    ],
)
def test_a_malformed_pins_file_is_refused_naming_it(tmp_path, text, message):
    from harness.run.offline import backend_pins

    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "pins.toml").write_text(text)
    with pytest.raises(SystemExit, match=rf"demo/pins.toml: {message}"):
        backend_pins(tmp_path)
