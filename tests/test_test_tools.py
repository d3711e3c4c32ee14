"""The test suite's own tools (tests/conftest.py): one expensive run shared by the xdist
workers, and the longest files started first."""

from __future__ import annotations

import json
import uuid

import pytest

from conftest import ROOT, measured_file_seconds, shared_across_workers


def test_an_answer_shared_across_workers_is_computed_once_and_not_kept_when_it_fails(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_TESTRUNUID", f"tool-test-{uuid.uuid4().hex}")
    calls = []

    def compute():
        calls.append(1)
        return {"answer": len(calls)}

    assert shared_across_workers("probe", compute) == {"answer": 1}
    assert shared_across_workers("probe", compute) == {"answer": 1} and len(calls) == 1  # read, not run
    assert shared_across_workers("other", compute) == {"answer": 2}  # another name: its own run

    def broken():
        raise RuntimeError("no answer")

    with pytest.raises(RuntimeError):
        shared_across_workers("broken", broken)
    assert shared_across_workers("broken", compute) == {"answer": 3}  # the next asker runs it again


def test_the_measured_durations_name_files_that_exist_longest_first():
    recorded = json.loads((ROOT / "tests" / "file_durations.json").read_text())
    for tier in ("fast", "slow"):
        seconds = measured_file_seconds(tier)
        assert seconds == recorded[tier] and seconds, tier
        assert list(seconds.values()) == sorted(seconds.values(), reverse=True), tier
        assert all((ROOT / path).is_file() for path in seconds), tier
