"""The dispatcher table: each `bench` command's parser is declared by the module that
runs it, under the name the table dispatches on, in `bench --help`'s order."""

from __future__ import annotations

import argparse

from harness import cli


def subcommand_names(parser: argparse.ArgumentParser) -> list[str]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(action.choices)


def test_every_command_is_declared_by_the_module_the_table_dispatches_to():
    for name, module in cli.COMMANDS.items():
        parser = argparse.ArgumentParser()
        module.add_parser(parser.add_subparsers())
        assert subcommand_names(parser) == [name], module.__name__
        assert callable(module.run)


def test_help_lists_the_commands_in_the_tables_order():
    names = subcommand_names(cli.build_parser())
    assert names == list(cli.COMMANDS)
    assert names[:3] == ["run", "plan", "launch"]  # bench --help's order since the first CLI
