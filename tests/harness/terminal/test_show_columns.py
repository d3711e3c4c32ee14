"""`bench show` of the quick start's records (tests/fixtures/quickstart: the README's first
command, run for real on a CPU), train and serve, at 80 and 120 columns: each figure,
recomputed here from the record's JSON, sits in its own row under its own header, and the
record's warnings are listed. The $/fine-tune is recomputed independently from the
scenario's stated work (workload.fine_tune_tokens_millions)."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from conftest import ROOT

QUICKSTART = ROOT / "tests" / "fixtures" / "quickstart"
TRAIN = json.loads(next(QUICKSTART.glob("*-torch-*.json")).read_text())
SERVE = json.loads(next(QUICKSTART.glob("*-serve-*.json")).read_text())


def shown(record: dict, width: int) -> list[str]:
    from harness.terminal.display import show_record

    console = Console(width=width, file=io.StringIO(), color_system=None, legacy_windows=False)
    show_record(record, console)
    return console.file.getvalue().splitlines()


def g4(value: float) -> str:
    return format(value, ".4g")


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.split("│")[1:-1]]


def row_of(lines: list[str], label: str) -> list[str]:
    """The cells of the table line where the row `label` starts (a label may wrap: its
    first words are on that line)."""
    for line in lines:
        parts = cells(line)
        if parts and parts[0] and label.startswith(parts[0]) and len(parts[0]) >= min(len(label), 12):
            return parts
    raise AssertionError(f"no row {label!r} in:\n" + "\n".join(lines))


def header_of(lines: list[str], first: str) -> list[str]:
    return next([c.strip() for c in line.split("┃")[1:-1]] for line in lines if f"┃ {first}" in line)


def fine_tune_usd(record: dict) -> float:
    """The docs' formula, from the JSON alone: the scenario's stated tokens (millions) x
    the window's $/1M real tokens + setup + warm-up."""
    tokens = record["scenario"]["resolved"]["workload"]["fine_tune_tokens_millions"]
    c = record["cost"]
    chips, per_hour = c["chips"], c["price"]["usd_per_chip_hour"]
    m = record["metrics"]
    per_1m = chips * per_hour * (1e6 / m["window_tokens_per_s_real"]) / 3600
    return tokens * per_1m + c["usd_setup"] + c["usd_warmup"]


@pytest.mark.parametrize("width", [80, 120])
def test_train_record_every_figure_under_value(width):
    lines = shown(TRAIN, width)
    m, c = TRAIN["metrics"], TRAIN["cost"]
    assert header_of(lines, "metric") == ["metric", "value"]
    expected = {
        "step time median (s), steady": g4(m["step_time_s"]["median"]),
        "step time p90 (s), steady": g4(m["step_time_s"]["p90"]),
        "window tokens/s real (1 sync)": g4(m["window_tokens_per_s_real"]),
        "tokens/s real, steady": g4(m["tokens_per_s_real"]),
        "compile time (s)": "n/a (eager)",  # torch compiles nothing: as the report says
        "MFU": "n/a (",  # a CPU: no peak
        "peak memory (GiB)": format(m["peak_memory_gib"], ".3g"),
        "$/1M real tokens, window (the headline)": g4(c["usd_per_1m_tokens_real_window"]),
        "$/1M real tokens, steady": g4(c["usd_per_1m_tokens_real"]),
        "$/run (whole run)": g4(c["usd_run"]),
        "$/fine-tune (workload)": g4(fine_tune_usd(TRAIN)),
    }
    for label, value in expected.items():
        row = row_of(lines, label)
        assert len(row) == 2 and row[1].startswith(value), (label, row)
    # Every figure the record holds is shown: its value, in one of the formats show uses.
    text = " ".join(lines)
    for name, value in m.items():
        if isinstance(value, bool) or value is None or isinstance(value, dict):
            continue
        if isinstance(value, str):
            assert " ".join(value.split()[:2]) in text, name
            continue
        forms = {format(value, f) for f in (".4g", ".3g", ".2g", ".2%", ".1%", ".4f")} | {str(value)}
        assert any(f in text for f in forms), (name, value)


@pytest.mark.parametrize("width", [80, 120])
def test_serve_record_each_statistic_under_its_header(width):
    lines = shown(SERVE, width)
    m, c = SERVE["metrics"], SERVE["cost"]
    header = header_of(lines, "latency (s)")
    assert header == ["latency (s)", "mean", "median", "p90", "p99"]
    for name in ("ttft_s", "tpot_s", "itl_s", "e2el_s"):
        row = row_of(lines, f"{name[:-2].upper()} (s)")
        assert row[1:] == [g4(m[name][k]) for k in ("mean", "median", "p90", "p99")], (name, row)
    assert header_of(lines, "metric") == ["metric", "value"]
    slo = ", ".join(f"{k[:-2].upper()} <= {v:g} s" for k, v in m["slo"].items() if k.endswith("_s") and v is not None)
    expected = {
        "output tok/s": g4(m["output_throughput_tok_s"]),
        "total tok/s (prompt + output)": g4(m["total_throughput_tok_s"]),
        "requests/s": g4(m["request_throughput_req_s"]),
        f"goodput req/s (SLO {slo})": format(m["goodput_req_s"], ".4g"),
        "$/1M output tokens": g4(c["usd_per_1m_output_tokens"]),
    }
    for label, value in expected.items():
        row = row_of(lines, label)
        assert len(row) == 2 and row[1].startswith(value), (label, row)


def test_warnings_are_listed():
    record = json.loads(json.dumps(TRAIN))
    record["warnings"] = ["load average 7.9 exceeded the 2 cores during the run"]
    said = " ".join(" ".join(shown(record, 80)).split())
    assert "warning: load average 7.9 exceeded the 2 cores during the run" in said
