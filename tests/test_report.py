"""`bench report`: one offline HTML file, drawn in a real headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import ROOT, TINY, bench, write_scenario
from records import failed_record, make_record

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HOSTILE = "<script>window.__pwned = 1</script>"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """The padding matrix run for real on the torch backend, plus a TPU-like record, a
    record with a hostile name and a failed run."""
    tmp = tmp_path_factory.mktemp("report")
    path = write_scenario(tmp, TINY + "matrix:\n  sequence.padding: [static, dynamic, bucketed]\n")
    done = bench("run", str(path), "--results-dir", str(tmp / "results"), "--no-progress",
                 "--set", "train.steps=5", "--set", "train.window_steps=0")
    assert done.returncode == 0, done.stderr
    extra = [make_record([0.05] * 4, name="tiny", variant="padding=static", backend="xla-fsdpv2", kind="tpu",
                         device="TPU v5 lite", catalog_key="tpu-v5e", chips=8),
             make_record([0.5] * 4, name=HOSTILE, variant=HOSTILE), failed_record(name="crashy")]
    for i, record in enumerate(extra):
        (tmp / "results" / f"extra-{i}.json").write_text(json.dumps(record))
    return tmp / "results"


def report(results: Path, out: Path, *extra: str) -> str:
    done = bench("report", str(results), "-o", str(out), *extra)
    assert done.returncode == 0, done.stderr
    return out.read_text()


class _Tables(HTMLParser):
    """Cell texts of the summary tables, row by row."""

    def __init__(self):
        super().__init__()
        self.rows, self._in_summary, self._cell = [], False, None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self._in_summary = ("class", "summary") in attrs
        elif self._in_summary and tag == "tr":
            self.rows.append([])
        elif self._in_summary and tag == "td":
            self._cell = ""

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.rows[-1].append(" ".join(self._cell.split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def test_html_has_no_external_url_and_escapes_record_text(results, tmp_path):
    html = report(results, tmp_path / "index.html")
    outside_scripts = re.sub(r"<script>.*?</script>", "", html, flags=re.S)
    assert not re.search(r"https?://", outside_scripts)
    # Nothing is loaded from anywhere: no tag points at another file, local or remote.
    # (Plotly's inlined bundle holds URL strings for features we do not use, e.g. map
    # tiles; the browser test below proves none is requested.)
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b[^>]*\b(src|href|data)\s*=", outside_scripts)
    assert HOSTILE not in outside_scripts and "&lt;script&gt;window.__pwned" in outside_scripts


def test_markdown_holds_the_same_numbers_as_the_html_tables(results, tmp_path):
    html = report(results, tmp_path / "index.html")
    md = report(results, tmp_path / "index.md")
    parser = _Tables()
    parser.feed(html)
    html_rows = [row[1:] for row in parser.rows if row]
    md_rows = [[c.strip() for c in line.strip("|").split("|")][1:] for line in md.splitlines()
               if line.startswith("| ") and not line.startswith("| run ") and "---" not in line
               and line.count("|") == len(html_rows[0]) + 2]
    assert html_rows and html_rows == md_rows
    assert "x lower median step time" in md or "x higher median step time" in md
    assert "crashy" in md and "RuntimeError: boom" in md


def test_csv_has_one_row_per_record(results, tmp_path):
    import pandas as pd

    report(results, tmp_path / "runs.csv")
    frame = pd.read_csv(tmp_path / "runs.csv")
    assert len(frame) == 6 and set(frame["status"]) == {"ok", "failed"}
    assert "step_time_s.median" in frame.columns and "price_source" in frame.columns


@pytest.mark.slow
def test_report_renders_in_headless_chromium_offline(results, tmp_path):
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Chromium (.ci/run installs Debian's chromium)")
        pytest.skip("Chromium is not installed here (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    page_path = tmp_path / "index.html"
    report(results, page_path, "--baseline", "variant=padding=static")
    shot = ROOT / "reports" / "out" / "test-report.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport={"width": 1300, "height": 900}, offline=True)
        outside = []
        context.route("**/*", lambda route: (outside.append(route.request.url), route.abort())
                      if not route.request.url.startswith("file:") else route.continue_())
        page = context.new_page()
        errors = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.as_uri())
        page.wait_for_load_state("load")
        plots = page.evaluate("document.querySelectorAll('div.plot').length")
        drawn = page.evaluate("Array.from(document.querySelectorAll('div.plot')).filter(d => d.querySelector('svg.main-svg') && d.querySelector('.trace') && d.querySelector('.point')).length")
        pwned = page.evaluate("window.__pwned")
        headings = page.evaluate("Array.from(document.querySelectorAll('h2')).map(h => h.textContent)")
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert errors == [] and outside == []
    # tiny: timeline, distribution, price sensitivity (cpu vs tpu-v5e); hostile: timeline,
    # distribution; all: cost vs throughput. Drawn = an SVG with traces and data points.
    assert plots == 6 and drawn == plots
    assert pwned is None and HOSTILE in headings
    assert shot.stat().st_size > 10_000


def test_train_plus_serve_workload_is_priced_per_accelerator():
    from reports.model import _workloads
    from reports.render import markdown
    from reports.model import build

    workload = {"fine_tunes": 2, "fine_tune_tokens_millions": 0.9, "served_tokens_millions": 100}
    records, expected = [], {}
    for key, kind, chips, per_1m in (("cpu", "cpu", 1, 3.0), ("tpu-v5e", "tpu", 8, 1.5)):
        train = make_record([0.5] * 4, catalog_key=key, kind=kind, chips=chips)
        serve = make_record([0.5] * 4, catalog_key=key, kind=kind, chips=chips)
        serve.update(task="serve", cost={"usd_per_1m_output_tokens": per_1m})
        for r in (train, serve):
            r["scenario"]["resolved"]["workload"] = workload
        records += [train, serve]
        # a fine-tune: steady $/1M real tokens x its tokens + one-off setup and warm-up
        c = train["cost"]
        one = c["usd_per_1m_tokens_real"] * 0.9 + c["usd_setup"] + c["usd_warmup"]
        assert one != c["usd_run"]  # not the benchmark run's own cost
        expected[key] = 2 * one + 100 * per_1m
    rows = _workloads(records)
    assert {w.accelerator: w.total_usd for w in rows} == pytest.approx(expected)
    assert rows[1].ratio_to_first == pytest.approx(expected["tpu-v5e"] / expected["cpu"])
    assert _workloads([r for r in records if r.get("task") != "serve"]) == []  # needs both tasks
    report = build([r for r in records if r.get("task") != "serve"])
    report.workloads = rows
    assert "Train + serve workload" in markdown(report)
