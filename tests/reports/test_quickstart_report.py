"""`bench report` of the quick start's records (tests/fixtures/quickstart: the README's
first command, `bench run scenarios/gemma270m.yaml`, run for real on a 2-core CPU): "At a
glance" answers with the train task's tokens/s and $/1M and the serve task's TTFT and
$/1M; every `n/a` says why; the workload's $/fine-tune is the docs' formula recomputed
here; and in a real browser at a laptop's 1366 px the headline is visible without
scrolling and the main table needs no horizontal scroll."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from browser import offline_page
from conftest import ROOT, bench

QUICKSTART = ROOT / "tests" / "fixtures" / "quickstart"
TRAIN = json.loads(next(QUICKSTART.glob("*-torch-*.json")).read_text())
SERVE = json.loads(next(QUICKSTART.glob("*-serve-*.json")).read_text())


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("quickstart") / "r.html"
    done = bench("report", str(QUICKSTART), "-o", str(out))
    assert done.returncode == 0, done.stderr
    return out


def text_of(html: str) -> str:
    body = re.sub(r"<script>.*?</script>|<style>.*?</style>", "", html, flags=re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", body).replace("&amp;", "&").replace("&lt;", "<").split())


def glance_of(html: str) -> str:
    return text_of(html.split('id="headline"', 1)[1].split("</div>", 1)[0])


def g4(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1e4 else format(value, ".4g")


def test_at_a_glance_answers_train_and_serve(page):
    glance = glance_of(page.read_text())
    m, c = TRAIN["metrics"], TRAIN["cost"]
    # The headline: over the unsynced window (the cpu profile measures one).
    assert g4(m["window_tokens_per_s_real"]) in glance and g4(c["usd_per_1m_tokens_real_window"]) in glance
    assert g4(m["step_time_s"]["median"]) in glance and "n/a [p]" in glance  # MFU: why not
    s, sc = SERVE["metrics"], SERVE["cost"]
    assert g4(s["ttft_s"]["median"]) in glance and g4(s["tpot_s"]["median"]) in glance
    assert g4(s["output_throughput_tok_s"]) in glance and g4(sc["usd_per_1m_output_tokens"]) in glance
    assert "local (reference engine, not a production server)" in glance  # the engine named
    assert "[p] no peak FLOP/s for this device" in glance


def test_every_na_on_the_page_says_why(page):
    text = text_of(page.read_text())
    # "n/a [code]", "n/a (eager)" / "n/a (why)", or a legend's "Why n/a:" / "why n/a,".
    bare = [m.start() for m in re.finditer(r"n/a(?! \[[a-z$]\]| \(|:|,)", text)]
    assert bare == [], [text[max(0, i - 60) : i + 20] for i in bare]
    for code in set(re.findall(r"n/a \[([a-z$])\]", text)):
        assert f"[{code}] " in text.replace(f"n/a [{code}]", ""), code  # its legend


def test_the_page_refers_only_to_plots_it_has_and_spells_chips_one_way(page):
    html = page.read_text()
    text = text_of(html)
    assert "sensitivity plots" not in text  # one accelerator: no price sensitivity plot
    assert "cpu x1" not in text and "1x cpu" in text


def test_fine_tune_is_the_docs_formula_recomputed(page):
    """$/fine-tune = fine_tune_tokens_millions x window $/1M real tokens + setup +
    warm-up, from the record's JSON and the scenario's stated work; the page, the docs'
    formula and `bench show` say the same."""
    from harness.figures.cost import FINE_TUNE_FORMULA

    tokens = TRAIN["scenario"]["resolved"]["workload"]["fine_tune_tokens_millions"]
    assert tokens == 0.9  # scenarios/gemma270m.yaml's stated work
    c, m = TRAIN["cost"], TRAIN["metrics"]
    per_1m = c["chips"] * c["price"]["usd_per_chip_hour"] / 3600 * 1e6 / m["window_tokens_per_s_real"]
    expected = tokens * per_1m + c["usd_setup"] + c["usd_warmup"]
    text = text_of(page.read_text())
    workload = text.split("Train + serve workload", 1)[1]
    assert f"{expected:.4g} (0.9M real tokens x window $/1M + setup + warm-up)" in workload
    assert FINE_TUNE_FORMULA in workload
    for doc in ("records.md", "reports-and-gates.md"):
        said = " ".join((ROOT / "docs" / doc).read_text().split())
        assert FINE_TUNE_FORMULA.removeprefix("$/fine-tune = ") in said, doc
    shown = bench("show", str(next(QUICKSTART.glob("*-torch-*.json"))), env={"COLUMNS": "200"})
    assert f"{expected:.4g} (0.9M real tokens x ${per_1m:.4g}/1M (window)" in " ".join(shown.stdout.split())


READ_LAYOUT = """() => {
  const headline = document.querySelector('#headline');
  const tables = Array.from(headline.querySelectorAll('table.glance'));
  const main = document.querySelector('table.summary');
  return {
    viewport: [window.innerWidth, window.innerHeight],
    glanceBottom: Math.max(...tables.map(t => t.getBoundingClientRect().bottom)),
    glanceTables: tables.length,
    pageScrollWidth: document.documentElement.scrollWidth,
    mainRight: main.getBoundingClientRect().right,
    mainScroll: [main.scrollWidth, main.clientWidth],
  };
}"""


@pytest.mark.slow
def test_headline_visible_without_scrolling_at_1366_px(page, tmp_path):
    shot = tmp_path / "quickstart-1366.png"
    with offline_page(page, 1366, 768) as loaded:
        seen = loaded.page.evaluate(READ_LAYOUT)
        loaded.page.screenshot(path=str(shot))  # the first screen, as a user sees it
    assert loaded.errors == [] and loaded.outside == []
    width, height = seen["viewport"]
    assert seen["glanceTables"] == 2  # train and serve
    assert seen["glanceBottom"] <= height, seen  # both answer tables on the first screen
    assert seen["pageScrollWidth"] <= width and seen["mainRight"] <= width, seen  # no horizontal scroll
    assert shot.stat().st_size > 10_000
