"""A report row is one configuration's runs: runs of two matrix variants are two rows
even where their records share a scenario hash (#30)."""

from __future__ import annotations

from harness.records.result import as_record
from reports.model import build

from records import make_record


def test_variants_sharing_a_scenario_hash_are_never_one_row():
    # Same hash, same resolved scenario, same backend and accelerator: only the variant differs
    # (a matrix key that changes nothing the record resolves, e.g. one bench does not keep).
    a = [make_record([0.10, 0.11, 0.12], variant="a", cell={}, repeat=i) for i in range(2)]
    b = [make_record([0.50, 0.51, 0.52], variant="b", cell={}, repeat=i) for i in range(2)]
    records = [as_record(r) for r in a + b]
    assert {r.scenario.hash for r in records} == {"h"}
    (section,) = build(records).sections
    assert sorted(r.records[0].scenario.variant for r in section.rows) == ["a", "b"]
    assert all(len(r.records) == 2 and len({x.scenario.variant for x in r.records}) == 1 for r in section.rows)
