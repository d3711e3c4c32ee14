"""Regenerate tests/file_durations.json (each test file's measured time, per tier) from
the JUnit XML of a tier's run: tests/conftest.py starts the longest files first.

    pytest -m slow --junitxml=/tmp/slow.xml && python tests/file_durations.py slow /tmp/slow.xml
    pytest --junitxml=/tmp/fast.xml && python tests/file_durations.py fast /tmp/fast.xml
"""

from __future__ import annotations

import collections
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

TARGET = Path(__file__).with_name("file_durations.json")


def file_seconds(junit: Path) -> dict[str, float]:
    """Setup + call time of every test case, summed by the file its class name names."""
    seconds: collections.Counter = collections.Counter()
    for case in ET.parse(junit).getroot().iter("testcase"):
        parts = case.get("classname", "").split(".")
        last = max((i for i, part in enumerate(parts) if part.startswith("test_")), default=None)
        if last is not None:
            seconds["/".join(parts[: last + 1]) + ".py"] += float(case.get("time") or 0)
    return {name: round(value, 1) for name, value in seconds.most_common()}


def main(tier: str, *junits: str) -> int:
    found = json.loads(TARGET.read_text()) if TARGET.exists() else {}
    merged: collections.Counter = collections.Counter()
    for junit in junits:
        merged.update(file_seconds(Path(junit)))
    found[tier] = dict(merged.most_common())
    TARGET.write_text(json.dumps(found, indent=1) + "\n")
    print(f"{TARGET}: {len(merged)} files in the {tier} tier, {sum(merged.values()):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
