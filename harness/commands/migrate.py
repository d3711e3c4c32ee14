"""`bench migrate DIR...`: older records rewritten to the current schema, originals kept."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.basics.errors import SpecError
from harness.commands.common import plural


def add_parser(sub) -> None:
    migrate = sub.add_parser("migrate", help="rewrite older result records to the current schema (originals kept)")
    migrate.add_argument("directories", nargs="+", metavar="DIR")


def run(args) -> int:
    """Originals kept under DIR/.orig/; exit 2 if any record could not be migrated (it is
    left as it was)."""
    from harness.records.store import SCHEMA_VERSION, migrate_directory

    refused = 0
    for target in args.directories:
        if not Path(target).is_dir():
            raise SpecError(target, "", "no such results directory")
        done = migrate_directory(Path(target))
        for path, why in done.refused:
            print(f"bench: {path}: not migrated: {why}", file=sys.stderr)
        refused += len(done.refused)
        kept = f" (originals kept under {done.originals})" if done.rewritten else ""
        print(
            f"{target}: {plural(len(done.rewritten), 'record')} migrated to schema {SCHEMA_VERSION}{kept}, "
            f"{len(done.current)} already schema {SCHEMA_VERSION}, {len(done.refused)} refused"
        )
    return 2 if refused else 0
