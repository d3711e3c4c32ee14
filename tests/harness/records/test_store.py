"""The results store: atomic writes, tolerant readers, JSON without NaN."""

from __future__ import annotations

import json

from harness.records.store import SCHEMA, SCHEMA_VERSION, load_records, write_json_atomic

from records import make_record


def test_atomic_write_leaves_no_temp_file_and_stores_nan_as_null(tmp_path):
    path = write_json_atomic(
        tmp_path / "r.json", {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "x": float("nan")}
    )
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]
    assert json.loads(path.read_text())["x"] is None


def test_readers_skip_unreadable_foreign_and_future_records_with_a_warning(tmp_path):
    good = make_record([0.5] * 4)
    (tmp_path / "good.json").write_text(json.dumps(good))
    (tmp_path / "future.json").write_text(json.dumps({**good, "schema_version": SCHEMA_VERSION + 1}))
    (tmp_path / "torn.json").write_text('{"schema": "bench.res')
    (tmp_path / "other.json").write_text("[1, 2]")
    (tmp_path / ".tmp-partial.json").write_text("{")
    loaded = load_records([tmp_path])
    assert [r.status for r in loaded.records] == ["ok"]
    assert len(loaded.warnings) == 3
    assert any("newer than this bench" in w for w in loaded.warnings)
