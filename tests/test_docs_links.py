"""Every relative link in README.md and docs/*.md resolves: the file exists, and a
`#anchor` into a Markdown file names one of its headings by GitHub's slug rule
(lowercased; everything but letters, digits, `_`, `-` and spaces dropped; spaces to
`-`; a repeated slug gets `-1`, `-2`, ...). Fenced code and inline code are not links."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT

LINK = re.compile(r"\[[^\]]*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, as written (a heading's `code` is part of
    its slug; a link's inline code is removed where links are read)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings (fenced `#` lines are code)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(text):
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        base = slug(match.group(1))
        found.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return found


def broken_links(path: Path) -> list[str]:
    """`file: target (why)` for each relative link of a Markdown file that does not resolve."""
    problems = []
    for line in prose_lines(path.read_text()):
        for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto: ...
                continue
            file_part, _, anchor = target.partition("#")
            destination = (path.parent / file_part).resolve() if file_part else path
            if not destination.exists():
                problems.append(f"{path.name}: {target} (no such file)")
            elif anchor and destination.suffix == ".md" and anchor not in anchors(destination.read_text()):
                problems.append(f"{path.name}: {target} (no such heading)")
    return problems


def test_the_slug_rule_is_githubs():
    text = (
        "# Top\n## The plan: one meaning per field\n### `xla-fsdpv2` on a TPU VM\n## Top\n```\n# not a heading\n```\n"
    )
    assert anchors(text) == {"top", "the-plan-one-meaning-per-field", "xla-fsdpv2-on-a-tpu-vm", "top-1"}


def test_a_missing_file_and_a_wrong_anchor_are_found(tmp_path):
    (tmp_path / "b.md").write_text("# Real heading\n")
    page = tmp_path / "a.md"
    page.write_text(
        "[ok](b.md#real-heading) [web](https://x.org/y) [self](#here)\n## Here\n"
        "[gone](c.md) [wrong](b.md#unreal) `[code](nowhere.md)`\n```\n[fenced](nowhere.md)\n```\n"
    )
    assert broken_links(page) == ["a.md: c.md (no such file)", "a.md: b.md#unreal (no such heading)"]


def test_every_relative_link_in_the_readme_and_docs_resolves():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    assert len(pages) > 5  # the guides are there
    assert [problem for page in pages for problem in broken_links(page)] == []
