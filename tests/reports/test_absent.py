"""Every `n/a` of the report carries its own cause (reports/absent.py), one test per cause:
the record is built with exactly that cause, and the page (the Markdown report: the same
cells as the HTML) shows `n/a [code]` in the figure's column and the cause in the legend."""

from __future__ import annotations

import copy
import html
import json

import pytest

from reports.absent import CAUSES

from conftest import ROOT
from records import make_record

# A real serve record of the current schema: the quick start's (tests/fixtures/quickstart).
SERVE = json.loads(next((ROOT / "tests" / "fixtures" / "quickstart").glob("*-serve-*.json")).read_text())


def _page(records) -> str:
    from reports.model import build
    from reports.render import markdown

    return markdown(build(records))


def _cell(page: str, header: str, row_start: str = "| 1. ") -> str:
    """The cell under `header` of the first table row starting with `row_start` below it."""
    lines = page.splitlines()
    for i, line in enumerate(lines):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| run |") and header in cells:
            table = lines[i + 2 : next((j for j in range(i, len(lines)) if not lines[j].strip()), len(lines))]
            row = next((r for r in table if r.startswith(row_start)), None)
            if row is not None:
                return [c.strip() for c in row.strip().strip("|").split("|")][cells.index(header)]
    raise AssertionError(f"no column {header!r} with a row {row_start!r}")


def _says(page: str, code: str) -> None:
    assert f"[{code}] {CAUSES[code]}" in page.replace("\\", ""), code  # Markdown escapes aside


def _serve(**metrics) -> dict:
    record = copy.deepcopy(SERVE)
    record["metrics"].update(metrics)
    return record


def test_no_window_measured():
    page = _page([make_record([0.5] * 4)])  # window_s None: train.window_steps 0
    assert _cell(page, "tok/s real (window, 1 sync)") == "n/a \\[w\\]"
    assert _cell(page, "$/1M real tok (window)") == "n/a \\[w\\]"
    _says(page, "w")
    # The headline falls back to the steady state and says why.
    assert "(steady \\[w\\])" in _cell(page, "tok/s real", "| default")


def test_no_device_peak_so_no_mfu():
    page = _page([make_record([0.5] * 4, window_s=2.0)])  # a CPU: no peak FLOP/s
    assert _cell(page, "MFU") == "n/a \\[p\\]"
    _says(page, "p")
    assert "\\[w\\]" not in page  # the window was measured: its figures are there


def test_mfu_withheld_above_one():
    record = make_record([0.5] * 4, kind="tpu", device="TPU v5 lite", catalog_key="tpu-v5e", chips=8)
    record["metrics"].update(mfu=None, mfu_invalid="computed 1.7 > 1: timing not synchronised")
    page = _page([record])
    assert _cell(page, "MFU") == "n/a \\[m\\]"
    _says(page, "m")


def test_no_steady_state():
    # Every measured step compiled (dynamic shapes): no steady step time, effective only.
    record = make_record([0.5] * 4, compiles=[1] * 5, warmup=[1.0], options={"compile": True}, backend="gpu-fsdp")
    assert record["metrics"]["step_time_s"] is None
    page = _page([record])
    assert _cell(page, "step median (s)") == "n/a \\[s\\]"
    assert _cell(page, "tok/s real (steady)") == "n/a \\[s\\]"
    _says(page, "s")
    assert "(effective \\[s\\])" in _cell(page, "tok/s real", "| default")


def test_no_price():
    record = make_record([0.5] * 4, window_s=2.0)
    record["cost"] = None
    page = _page([record])
    assert _cell(page, "$/1M real tok (window)") == "n/a \\[$\\]"
    assert _cell(page, "$/run total") == "n/a \\[$\\]"
    _says(page, "$")


def test_not_measured_by_an_older_bench():
    record = make_record([0.5] * 4, window_s=2.0)
    record["metrics"]["peak_memory_gib"] = None
    record["absent"] = {"metrics.peak_memory_gib": "not measured by bench 6f4a76e (schema 1)"}
    page = _page([record])
    assert "n/a \\[o\\]" in page
    _says(page, "o")


def test_serving_no_request_completed_and_no_slo():
    record = _serve(num_completed=0, ttft_s=None, tpot_s=None, output_throughput_tok_s=None, goodput_req_s=None, slo={})
    page = _page([record])
    assert _cell(page, "TTFT median (s)", "| gemma270m") == "n/a \\[r\\]"
    assert _cell(page, "goodput req/s", "| gemma270m") == "n/a \\[g\\]"  # no serve.slo
    _says(page, "r")
    _says(page, "g")


def test_serving_one_token_requests_have_no_tpot():
    page = _page([_serve(tpot_s=None)])
    assert _cell(page, "TPOT median (s)", "| gemma270m") == "n/a \\[t\\]"
    _says(page, "t")


def test_goodput_is_shown_with_its_slo():
    page = _page([_serve(goodput_req_s=0.0, slo={"ttft_s": 0.5, "tpot_s": 0.05, "e2el_s": None})])
    goodput = html.unescape(_cell(page, "goodput req/s", "| gemma270m"))  # Markdown writes < as &lt;
    assert goodput == "0 (SLO TTFT <= 0.5 s, TPOT <= 0.05 s)"


@pytest.mark.parametrize("code", sorted(CAUSES))
def test_every_cause_has_a_test_here(code):
    """A cause added to reports/absent.py without a test of its own fails here."""
    import inspect
    import sys

    source = inspect.getsource(sys.modules[__name__])
    tested = f"\\\\[{code}\\\\]" in source or f'_says(page, "{code}")' in source
    assert tested or code == "x", code  # x: the last resort, never expected on a current record


def test_serving_server_figures_the_server_did_not_report():
    """The quick start's record was served by the local engine, which offers no vLLM
    /metrics: the server's own figures read `n/a [v]`."""
    page = _page([_serve(server_figures=None)])
    assert _cell(page, "server queue mean (s)", "| gemma270m") == "n/a \\[v\\]"
    _says(page, "v")
