"""The docs' command examples are what the code prints: every `$ bench ...` line of a
console block in docs/reports-and-gates.md is run and its output compared with the block
(whitespace aside: rich wraps at the terminal's width), and every inline `bench ...`
names a real command whose arguments the CLI accepts."""

from __future__ import annotations

import re
import shlex

import pytest

from conftest import ROOT, bench

DOC = ROOT / "docs" / "reports-and-gates.md"


def console_examples(text: str) -> list[tuple[str, str]]:
    """(command, the output printed under it) for each `$ bench` line of each console block."""
    found = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        parts = re.split(r"^\$ (bench .*)$", block, flags=re.M)
        found += [(parts[i], parts[i + 1]) for i in range(1, len(parts), 2)]
    return found


def inline_commands(text: str) -> list[str]:
    outside_blocks = re.sub(r"```.*?```", "", text, flags=re.S)
    return re.findall(r"`(bench [^`]*)`", outside_blocks)


EXAMPLES = console_examples(DOC.read_text())


def test_the_doc_has_the_cost_examples_it_promises():
    commands = [c for c, _ in EXAMPLES]
    assert "bench cost --speedup 1.61 --a v5p-8 --b h100-sxm:2" in commands
    assert "bench cost --speedup 1.61 --a v5p-8 --b h100-sxm:2 --prices w3" in commands


@pytest.mark.parametrize("command, printed", EXAMPLES, ids=[c for c, _ in EXAMPLES])
def test_every_console_example_prints_what_the_doc_shows(command, printed):
    done = bench(*shlex.split(command)[1:], env={"COLUMNS": "100"}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == printed.split()


def test_w3s_prices_give_w3s_published_ratio():
    """W3: v5p-8 at $16.80/h, 2x H100 at $22.12/h, 1.61x faster: 2.12x cheaper, computed here
    from those prices, not read from bench."""
    expected = 1 / ((16.80 / 22.12) / 1.61)
    assert f"{expected:.2f}" == "2.12"
    printed = dict(EXAMPLES)["bench cost --speedup 1.61 --a v5p-8 --b h100-sxm:2 --prices w3"]
    assert "$16.80/h vs $22.12/h" in printed and f"{expected:.2f}x cheaper" in printed


def test_every_inline_command_names_a_real_command_with_arguments_it_accepts():
    from harness.cli import build_parser

    parser = build_parser()
    commands = sorted(parser._subparsers._group_actions[0].choices)  # argparse keeps them here
    inline = inline_commands(DOC.read_text())
    assert len(inline) >= 5
    for text in inline:
        words = shlex.split(text)
        assert words[1] in commands, text
        if "[" not in text and len(words) > 2:  # a complete example, not a synopsis
            parser.parse_args(words[1:])
