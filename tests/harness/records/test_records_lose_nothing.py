"""Issue 38, records that lose nothing: a schema-1 record without a section of its
resolved scenario loads with what needs that section absent; a failed run's reason
carries its cause on the first line whatever its length."""

from __future__ import annotations

import json
import shutil

from harness.cli import main
from harness.records.failure_text import REASON_CHARS, cause_line, explained, first_line

from conftest import ROOT
from records import make_record

HISTORY = ROOT / "tests" / "fixtures" / "records_history"


def test_a_schema_1_record_without_its_train_section_loads_with_the_flops_figures_absent(tmp_path, capsys):
    (source,) = (HISTORY / "664e19d").glob("*-tiny-torch-*.json")
    doc = json.loads(source.read_text())
    del doc["scenario"]["resolved"]["train"]
    (tmp_path / "r.json").write_text(json.dumps(doc))
    assert main(["show", str(tmp_path / "r.json")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    median = sorted(
        s["time_s"] for s in doc["raw"]["loop"]["steps"] if s["phase"] == "measure" and not s.get("num_compiles")
    )
    assert f"{median[len(median) // 2]:.4g}" in out  # the steady step time, from the raw steps (3 of them)
    assert "step time median (s), steady" in out
    assert "its resolved scenario has no `train` section (method, gradient_checkpointing)):" in out
    assert (
        "metrics.model_flops_per_token, metrics.hardware_flops_per_token, metrics.model_tflops_per_s, metrics.mfu, metrics.hfu"
        in out
    )


# --------------------------------------------------------------------------- the cause first
def test_the_cause_of_a_wrapped_log_is_its_last_error_line():
    text = "RuntimeError: server exited with status 1 before becoming healthy; log tail:\nINFO a\nINFO b\nValueError: no model x"
    assert cause_line(text) == "ValueError: no model x"
    assert first_line(explained(text)) == (
        "RuntimeError: server exited with status 1 before becoming healthy; log tail: … ValueError: no model x"
    )
    assert explained("RuntimeError: boom") == "RuntimeError: boom"
    assert cause_line("Killed\nsomething after") == "Killed"  # a first line that does not introduce a log stays


def test_a_long_reason_keeps_its_head_and_tail_within_the_limit():
    text = "E: start\n" + "\n".join(f"line {i}" for i in range(2000)) + "\nline end"
    kept = explained(text)
    assert len(kept) == REASON_CHARS and "line 0\n" in kept and kept.endswith("line end") and "characters cut" in kept


def _failed_run(tmp_path):
    """A worker's failure (harness.run.worker.failure_from) of 10,000 characters, its cause last."""
    from harness.run.worker import failure_from

    lines = "\n".join(f"INFO loading shard {i:05d}" for i in range(400))
    message = f"the server stopped; log tail:\n{lines}\n{CAUSE}"
    message = message[len(message) - 10_000 + len("RuntimeError: ") :]  # "RuntimeError: " + 10,000 characters
    assert len(f"RuntimeError: {message}") == 10_000
    try:
        raise RuntimeError(message)
    except RuntimeError as exc:
        failure = failure_from(exc)
    record = make_record([1.0], status="failed", failure={**failure, "exit_code": 1, "log_tail": ""})
    results = tmp_path / "results"
    results.mkdir()
    (results / "f.json").write_text(json.dumps(record))
    return results, record


CAUSE = "OSError: model weights not found at /models/x"


def test_a_10000_character_failure_shows_its_cause_in_the_summary_show_and_report(tmp_path, capsys):
    from rich.console import Console

    from harness.terminal.display import summary

    results, record = _failed_run(tmp_path)
    assert first_line(record["failure"]["reason"]).endswith(f"… {CAUSE}")
    console = Console(width=200, record=True)
    console.print(summary([record], console))
    assert CAUSE in " ".join(console.export_text().split())
    assert main(["show", str(results)]) == 0
    assert CAUSE in " ".join(capsys.readouterr().out.split())
    assert main(["report", str(results), "-o", str(tmp_path / "r.md")]) == 0
    assert CAUSE in (tmp_path / "r.md").read_text()
    shutil.rmtree(results)
