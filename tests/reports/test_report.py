"""`bench report`: one offline HTML file, drawn in a real headless Chromium."""

from __future__ import annotations

import copy
import json
import random
import re
import statistics
from html.parser import HTMLParser
from pathlib import Path

import pytest

from browser import offline_page
from conftest import ROOT, TINY, bench, records_in, write_scenario
from records import failed_record, make_record

HOSTILE = "<script>window.__pwned = 1</script>"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """The padding matrix run for real on the torch backend, plus a TPU-like record (the
    static run's configuration on 8 v5e chips), a record with a hostile name and a failed run.
    Three measured steps a run (one warm-up) give each side of a comparison its samples."""
    tmp = tmp_path_factory.mktemp("report")
    path = write_scenario(tmp, TINY + "matrix:\n  sequence.padding: [static, dynamic, bucketed]\n")
    steps = ["--set", "train.steps=4", "--set", "train.warmup_steps=1", "--set", "train.window_steps=0"]
    done = bench("run", str(path), "--results-dir", str(tmp / "results"), "--backend", "torch", "--no-progress", *steps)
    assert done.returncode == 0, done.stderr
    static = next(r for r in records_in(tmp / "results") if r["scenario"]["variant"] == "padding=static")
    tpu = make_record(
        [0.05] * 4,
        name="tiny",
        variant="padding=static",
        backend="xla-fsdpv2",
        kind="tpu",
        device="TPU v5 lite",
        catalog_key="tpu-v5e",
        chips=8,
    )
    tpu["scenario"] = copy.deepcopy(static["scenario"])
    extra = [tpu, make_record([0.5] * 4, name=HOSTILE, variant=HOSTILE), failed_record(name="crashy")]
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


@pytest.mark.slow  # reads the real training run (`results`): built once, in the slow tier
def test_html_has_no_external_url_and_escapes_record_text(results, tmp_path):
    html = report(results, tmp_path / "index.html")
    outside_scripts = re.sub(r"<script>.*?</script>", "", html, flags=re.S)
    assert not re.search(r"https?://", outside_scripts)
    # Nothing is loaded from anywhere: no tag points at another file, local or remote.
    # (Plotly's inlined bundle holds URL strings for features we do not use, e.g. map
    # tiles; the browser test below proves none is requested.)
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b[^>]*\b(src|href|data)\s*=", outside_scripts)
    assert HOSTILE not in outside_scripts and "&lt;script&gt;window.__pwned" in outside_scripts


@pytest.mark.slow  # reads the real training run (`results`): built once, in the slow tier
def test_markdown_holds_the_same_numbers_as_the_html_tables(results, tmp_path):
    html = report(results, tmp_path / "index.html")
    md = report(results, tmp_path / "index.md")
    parser = _Tables()
    parser.feed(html)
    html_rows = [row[1:] for row in parser.rows if row]
    md_rows = [
        [c.strip().replace("\\[", "[").replace("\\]", "]") for c in line.strip("|").split("|")][1:]  # md escapes
        for line in md.splitlines()
        if line.startswith("| ")
        and not line.startswith("| run ")
        and "---" not in line
        and line.count("|") == len(html_rows[0]) + 2
    ]
    assert html_rows and html_rows == md_rows
    assert re.search(r"padding=dynamic vs padding=static \(1x cpu · torch · fp32\): [\d.]+x (faster|slower)", md)
    assert "n/a (eager)" in md  # the torch backend compiles nothing
    assert "crashy" in md and "RuntimeError: boom" in md


@pytest.mark.slow  # reads the real training run (`results`): built once, in the slow tier
def test_csv_has_one_row_per_record(results, tmp_path):
    import pandas as pd

    report(results, tmp_path / "runs.csv")
    frame = pd.read_csv(tmp_path / "runs.csv")
    assert len(frame) == 6 and set(frame["status"]) == {"ok", "failed"}
    assert "step_time_s.median" in frame.columns and "price_source" in frame.columns


# The step-time axis's tick labels, each point label's box against its plot's drawing
# area, and the headline box: read from the page Chromium rendered.
READ_PAGE = """() => {
  const plots = Array.from(document.querySelectorAll('div.plot'));
  const timeline = plots.find(d => d._fullLayout && d._fullLayout.yaxis.title.text === 'step time (s)');
  const ticks = Array.from(timeline.querySelectorAll('.ytick text')).map(t => t.textContent);
  const overflow = [];
  let labels = 0;
  for (const d of plots) {
    const box = d.getBoundingClientRect(), size = d._fullLayout._size;
    const area = {left: box.left + size.l, right: box.left + size.l + size.w,
                  top: box.top + size.t, bottom: box.top + size.t + size.h};
    for (const t of d.querySelectorAll('.textpoint text')) {
      labels += 1;
      const r = t.getBoundingClientRect();
      if (r.left < area.left || r.right > area.right || r.top < area.top || r.bottom > area.bottom)
        overflow.push(t.textContent);
    }
  }
  const headline = document.querySelector('#headline');
  return {ticks, range: timeline._fullLayout.yaxis.range, overflow, labels,
          headline: headline ? headline.innerText : null,
          headlineTop: headline ? headline.getBoundingClientRect().top : null,
          firstSectionTop: document.querySelector('section').getBoundingClientRect().top};
}"""


@pytest.mark.slow
def test_report_renders_in_headless_chromium_offline(results, tmp_path):
    page_path = tmp_path / "index.html"
    report(results, page_path, "--baseline", "variant=padding=static accelerator=cpu")
    shot = tmp_path / "test-report.png"
    with offline_page(page_path) as loaded:
        page, errors, outside = loaded.page, loaded.errors, loaded.outside
        plots = page.evaluate("document.querySelectorAll('div.plot').length")
        drawn = page.evaluate(
            "Array.from(document.querySelectorAll('div.plot')).filter(d => d.querySelector('svg.main-svg') && d.querySelector('.trace') && d.querySelector('.point')).length"
        )
        pwned = page.evaluate("window.__pwned")
        headings = page.evaluate("Array.from(document.querySelectorAll('h2')).map(h => h.textContent)")
        seen = page.evaluate(READ_PAGE)
        page.screenshot(path=str(shot), full_page=True)
    assert errors == [] and outside == []
    # tiny: timeline, distribution, cost vs throughput, price sensitivity (cpu vs v5e-8);
    # hostile: timeline, distribution, cost vs throughput. Drawn = an SVG with traces and points.
    assert plots == 7 and drawn == plots
    assert pwned is None and HOSTILE in headings
    # Log axis: every power of ten in the axis's range is labelled in full, not a minor-tick digit.
    low, high = seen["range"]
    decades = [f"{10.0**e:g}" for e in range(round(low), round(high) + 1)]
    assert len(decades) >= 2 and set(decades) <= set(seen["ticks"]), seen["ticks"]
    assert seen["labels"] >= 5 and seen["overflow"] == []
    assert seen["headline"].startswith("At a glance") and seen["headlineTop"] < seen["firstSectionTop"]
    assert "v5e-8 · xla-fsdpv2 vs 1x cpu · torch" in seen["headline"]
    assert shot.stat().st_size > 10_000


SERVE_METRICS = next(
    json.loads(p.read_text())["metrics"] for p in (ROOT / "tests" / "fixtures" / "records_v1").glob("*serve*.json")
)


def test_train_plus_serve_workload_is_priced_per_accelerator():
    from harness.records.result import as_records
    from reports.model import _workloads, build
    from reports.render import markdown

    workload = {"fine_tunes": 2, "fine_tune_tokens_millions": 0.9, "served_tokens_millions": 100}
    records, expected = [], {}
    for key, kind, chips, per_1m in (("cpu", "cpu", 1, 3.0), ("tpu-v5e", "tpu", 8, 1.5)):
        train = make_record([0.5] * 4, catalog_key=key, kind=kind, chips=chips)
        serve = make_record([0.5] * 4, catalog_key=key, kind=kind, chips=chips)
        # a serve record's metrics: a real one's (tests/fixtures/records_v1)
        cost = {"usd_per_1m_output_tokens": per_1m, "chips": chips, "price": train["cost"]["price"]}
        serve.update(task="serve", cost=cost, metrics=copy.deepcopy(SERVE_METRICS))
        for r in (train, serve):
            r["scenario"]["resolved"]["workload"] = workload
        records += [train, serve]
        # a fine-tune: steady $/1M real tokens x its tokens + one-off setup and warm-up
        c = train["cost"]
        one = c["usd_per_1m_tokens_real"] * 0.9 + c["usd_setup"] + c["usd_warmup"]
        assert one != c["usd_run"]  # not the benchmark run's own cost
        expected[key] = 2 * one + 100 * per_1m
    rows = _workloads(as_records(records))
    assert {w.accelerator: w.total_usd for w in rows} == pytest.approx(expected)
    assert rows[1].ratio_to_first == pytest.approx(expected["tpu-v5e"] / expected["cpu"])
    assert _workloads(as_records([r for r in records if r.get("task") != "serve"])) == []  # needs both tasks
    # Through build(), as `bench report` does: the section appears with both tasks only.
    assert "Train + serve workload" in markdown(build(records))
    assert "Train + serve workload" not in markdown(build([r for r in records if r.get("task") != "serve"]))


# --------------------------------------------------------------------------- factor-aware comparisons
TPU = dict(backend="xla-fsdpv2", kind="tpu", device="TPU v5", catalog_key="tpu-v5p", chips=4)
GPU = dict(backend="gpu-fsdp", kind="cuda", device="NVIDIA H100 80GB HBM3", catalog_key="h100-sxm", chips=2)
# Median step time (s) of each cell: static is 2.5x faster on the TPU, 1.1x on the GPU.
STEP_S = {("tpu", "static"): 0.10, ("tpu", "dynamic"): 0.25, ("gpu", "static"): 0.16, ("gpu", "dynamic"): 0.176}


def _matrix_records(repeats: int = 3, seed: int = 0) -> list[dict]:
    """TPU/GPU x static/dynamic x repeats, each run's steps jittered by up to +-3%."""
    rng, out, minute = random.Random(seed), [], 0
    for device, spec in (("tpu", TPU), ("gpu", GPU)):
        for padding in ("static", "dynamic"):
            for repeat in range(repeats):
                base = STEP_S[device, padding] * rng.uniform(0.97, 1.03)
                minute += 1
                out.append(
                    make_record(
                        [base * rng.uniform(0.99, 1.01) for _ in range(6)],
                        variant=f"padding={padding}",
                        repeat=repeat,
                        precision="bf16",
                        started_at=f"2026-11-25T00:{minute:02d}:00+00:00",
                        **spec,
                    )
                )
    return out


def _side(records, device: str, padding: str) -> list[dict]:
    key = {"tpu": "tpu-v5p", "gpu": "h100-sxm"}[device]
    return [
        r
        for r in records
        if r["accelerator"]["catalog_key"] == key and r["scenario"]["cell"]["sequence.padding"] == padding
    ]


def _expected(records, a: tuple[str, str], b: tuple[str, str]) -> tuple[float, float]:
    """(a's speed-up over b, how many times cheaper a is), from the records by hand."""
    tok = lambda side: statistics.median(r["metrics"]["tokens_per_s_real"] for r in _side(records, *side))  # noqa: E731
    usd = lambda side: statistics.median(r["cost"]["usd_per_1m_tokens_real"] for r in _side(records, *side))  # noqa: E731
    return tok(a) / tok(b), usd(b) / usd(a)


def test_each_factor_is_compared_with_the_others_held_fixed():
    from reports.model import build
    from reports.render import markdown

    records = _matrix_records()
    report = build(records, "variant=padding=dynamic accelerator=h100-sxm:2")
    section = report.sections[0]
    assert [row.label for row in section.rows] == [
        "padding=static · xla-fsdpv2 · v5p-8",
        "padding=dynamic · xla-fsdpv2 · v5p-8",
        "padding=static · gpu-fsdp · 2x h100-sxm",
        "padding=dynamic · gpu-fsdp · 2x h100-sxm",
    ]
    assert section.baseline is section.rows[3] and section.factors == ["accelerator", "backend", "sequence.padding"]
    by_title = {c.title: c for c in section.comparisons}
    # Padding: static against dynamic on each accelerator, never across accelerators.
    for device, context in (("tpu", "v5p-8 · xla-fsdpv2 · bf16"), ("gpu", "2x h100-sxm · gpu-fsdp · bf16")):
        c = by_title[f"padding=static vs padding=dynamic ({context})"]
        speedup, cheaper = _expected(records, (device, "static"), (device, "dynamic"))
        assert c.speed.value == pytest.approx(speedup) and c.cost.value == pytest.approx(cheaper)
        assert c.speed.runs == (3, 3) and c.speed.low <= c.speed.value <= c.speed.high
        assert c.sentence.startswith(
            f"padding=static vs padding=dynamic ({context}): {speedup:.2f}x faster "
            f"(95% CI {c.speed.low:.2f}-{c.speed.high:.2f}); {cheaper:.2f}x cheaper per 1M real tokens"
        )
    # Accelerator (the backend goes with it: neither ran on the other's hardware), padding held.
    for padding in ("static", "dynamic"):
        c = by_title[f"v5p-8 · xla-fsdpv2 vs 2x h100-sxm · gpu-fsdp (padding={padding} · bf16)"]
        speedup, cheaper = _expected(records, ("tpu", padding), ("gpu", padding))
        assert c.speed.value == pytest.approx(speedup) and c.cost.value == pytest.approx(cheaper)
    assert len(section.comparisons) == 4  # nothing that changes two factors at once
    # The headline: W3's form for the accelerators, one line per padding level.
    speedup, cheaper = _expected(records, ("tpu", "static"), ("gpu", "static"))
    c = by_title["v5p-8 · xla-fsdpv2 vs 2x h100-sxm · gpu-fsdp (padding=static · bf16)"]
    line = next(line for line in section.headline if "(padding=static · bf16)" in line)
    assert line.startswith(
        f"v5p-8 · xla-fsdpv2 vs 2x h100-sxm · gpu-fsdp (padding=static · bf16): {speedup:.2f}x faster "
        f"(95% CI {c.speed.low:.2f}-{c.speed.high:.2f}) and "
    )
    # At list prices the 1.6x faster TPU costs about as much per token as the GPU: the
    # interval says whether that difference is real.
    cost_words = (
        f"cost per 1M real tokens not distinguishable ({cheaper:.2f}x cheaper, 95% CI "
        if c.cost.distinguishable is False
        else f"{cheaper:.2f}x cheaper per 1M real tokens (95% CI "
    )
    assert cost_words + f"{c.cost.low:.2f}-{c.cost.high:.2f})" in line
    tpu, gpu = (_expected(records, (d, "static"), (d, "dynamic"))[0] for d in ("tpu", "gpu"))
    padding_line = next(line for line in section.headline if line.startswith("padding=static vs padding=dynamic: "))
    assert f"on v5p-8 · xla-fsdpv2 · bf16: {tpu:.2f}x faster" in padding_line
    assert f"on 2x h100-sxm · gpu-fsdp · bf16: {gpu:.2f}x faster" in padding_line
    md = markdown(report)
    assert md.index("## At a glance") < md.index("## tiny") and "percentile bootstrap" in md
    assert "n/a (eager)" in md  # gpu-fsdp without compile: no compile columns


def test_the_interval_is_right_where_the_answer_is_known():
    from reports.stats import ratio_of_medians, ratio_sentence

    rng = random.Random(1)
    a = [1.0 + rng.uniform(-0.02, 0.02) for _ in range(9)]
    # b is exactly 2x a, run by run: the ratio of medians is 2, the interval close around it.
    doubled = ratio_of_medians([2 * x for x in a], a)
    assert doubled.value == pytest.approx(2.0) and 1.9 < doubled.low < 2.0 < doubled.high < 2.1
    assert doubled.distinguishable is True and "not distinguishable" not in ratio_sentence(doubled, "faster", "slower")
    # The same distribution on both sides: the interval spans 1.
    same = ratio_of_medians(a, list(reversed(a)))
    assert same.low < 1 < same.high and same.distinguishable is False
    assert ratio_sentence(same, "faster", "slower", quantity="speed").startswith("speed not distinguishable (")
    # Seeded: the same records give the same report.
    assert ratio_of_medians([2 * x for x in a], a) == doubled
    # One run per side: no interval, and the comparison says noise was not measured.
    single = ratio_of_medians([2.0], [1.0])
    assert single.low is None and single.distinguishable is None


def test_one_run_per_side_says_between_run_noise_was_not_measured():
    from reports.model import build

    records = [r for r in _matrix_records() if r["scenario"]["repeat"] == 0]
    section = build(records).sections[0]
    assert all("1 vs 1 run: between-run noise not measured" in c.sentence for c in section.comparisons)
    assert all("CI" not in c.sentence for c in section.comparisons)


def test_rows_are_whole_configurations_and_their_differences_are_shown():
    from reports.model import build

    plain = [make_record([0.5] * 4, variant="padding=static", repeat=i) for i in range(2)]
    override = make_record([0.2] * 4, variant="padding=static", overrides={"train.window_steps": 0})
    section = build(plain + [override]).sections[0]
    assert [len(row.records) for row in section.rows] == [2, 1]  # never one median of both
    assert section.differences == ["train.window_steps"]
    assert [row.label for row in section.rows] == [
        "padding=static · torch · 1x cpu · train.window_steps=unset",
        "padding=static · torch · 1x cpu · train.window_steps=0",
    ]
    assert section.comparisons == []


def test_eager_backends_show_compile_columns_as_not_applicable():
    from reports.model import SUMMARY_HEADERS, build

    eager = make_record(
        [0.5] * 4, backend="gpu-fsdp", kind="cuda", device="NVIDIA H100 80GB HBM3", catalog_key="h100-sxm"
    )
    compiled = make_record(
        [0.5] * 4,
        backend="gpu-fsdp",
        kind="cuda",
        device="NVIDIA H100 80GB HBM3",
        catalog_key="h100-sxm",
        options={"compile": True},
        variant="padding=dynamic",
    )
    section = build([eager, compiled]).sections[0]
    cells = {
        row.records[0].backend.options.get("compile", False): dict(zip(SUMMARY_HEADERS, row.cells))
        for row in section.rows
    }
    assert cells[False]["compile (s)"] == cells[False]["recompiles"] == "n/a (eager)"
    assert cells[True]["compile (s)"] == "0" and cells[True]["recompiles"] == "0"


def test_sensitivity_uses_the_records_prices_and_names_each_pair():
    from reports.model import build
    from reports.plots import sensitivity

    tpu = make_record([0.1] * 4, variant="padding=static", usd_per_chip_hour=2.0, **TPU)
    gpu = make_record([0.2] * 4, variant="padding=static", usd_per_chip_hour=3.0, **GPU)
    section = build([gpu, tpu]).sections[0]  # the GPU row is the baseline (first run made: same time, sorted)
    s = section.sensitivity[0]
    # $ per 1M real tokens on the TPU / on the GPU, at the records' own (custom) prices.
    expected = (4 * 2.0 / tpu["metrics"]["tokens_per_s_real"]) / (2 * 3.0 / gpu["metrics"]["tokens_per_s_real"])
    sides = {s["a"]: s["a_scaled"], s["b"]: s["b_scaled"]}
    assert (
        sides["v5p-8 · xla-fsdpv2"][2] == pytest.approx(expected) == pytest.approx(sides["2x h100-sxm · gpu-fsdp"][2])
    )
    comparison = section.comparisons[0]
    assert comparison.cost.value == pytest.approx(1 / expected if s["a"].startswith("v5p") else expected)
    names = [trace.name for trace in sensitivity(section).data]
    assert len(names) == len(set(names)) == 2 and all(
        s["pair"].replace("·", "&middot;") in n or s["pair"] in n for n in names
    )


def test_w3_headline_has_speed_cost_workload_and_ttft():
    from reports.model import build

    workload = {"fine_tunes": 2, "fine_tune_tokens_millions": 0.9, "served_tokens_millions": 100}
    records = []
    for spec, ttft, per_1m in ((TPU, 0.235, 1.0), (GPU, 0.475, 2.0)):
        train = make_record([0.1 if spec is TPU else 0.16] * 4, variant="padding=static", **spec)
        serve = make_record([0.1] * 4, variant="padding=static", **spec)
        cost = {"usd_per_1m_output_tokens": per_1m, "chips": spec["chips"], "price": train["cost"]["price"]}
        serve.update(task="serve", cost=cost, metrics=copy.deepcopy(SERVE_METRICS))  # a serve record's metrics
        serve["metrics"].update(
            ttft_s={**serve["metrics"]["ttft_s"], "median": ttft, "p99": ttft},
            output_throughput_tok_s=100.0,
            request_throughput_req_s=1.0,
            goodput_req_s=1.0,
            num_errors=0,
        )
        for r in (train, serve):
            r["scenario"]["resolved"]["workload"] = workload
        records += [train, serve]
    report = build(records)
    line = report.sections[0].headline[0]
    totals = {w.accelerator: w.total_usd for w in report.workloads}
    assert line.startswith("v5p-8 · xla-fsdpv2 vs 2x h100-sxm · gpu-fsdp: ")
    assert f"train + serve workload {totals['h100-sxm'] / totals['tpu-v5p']:.2f}x cheaper" in line
    assert "TTFT 235 vs 475 ms" in line and "1 vs 1 run: between-run noise not measured" in line


# --------------------------------------------------------------------------- the command line
@pytest.fixture
def matrix_results(tmp_path) -> Path:
    directory = tmp_path / "results"
    directory.mkdir()
    for i, record in enumerate(_matrix_records(repeats=2)):
        (directory / f"{i}.json").write_text(json.dumps(record))
    return directory


@pytest.mark.parametrize(
    "selector, needles",
    [
        (
            "variant=padding=static",
            [
                "matches 2 rows",
                "[padding=static · xla-fsdpv2 · v5p-8]",
                "[padding=static · gpu-fsdp · 2x h100-sxm]",
                "accelerator=v5p-8 or accelerator=h100-sxm:2",
            ],
        ),
        ("variant=nonexistent", ["matches no row", "variant: padding=static, padding=dynamic"]),
        ("accelerator=v5p-8", ["matches 2 rows", "sequence.padding=static or sequence.padding=dynamic"]),
        ("accelerator=a100-80gb", ["matches no row", "accelerator: v5p-8 (= tpu-v5p:4), h100-sxm:2"]),
        ("chips=4", ["unknown key"]),
    ],
)
def test_a_baseline_that_names_no_row_or_several_exits_2_naming_the_candidates(
    matrix_results, tmp_path, selector, needles
):
    done = bench("report", str(matrix_results), "-o", str(tmp_path / "r.md"), "--baseline", selector)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and done.stderr.startswith("bench: --baseline")
    assert all(n in done.stderr for n in needles), done.stderr
    assert not (tmp_path / "r.md").exists()


def test_a_slice_name_picks_the_baseline_and_compare_adds_a_pair(matrix_results, tmp_path):
    md = report(
        matrix_results,
        tmp_path / "r.md",
        "--baseline",
        "accelerator=v5p-8 variant=padding=static",
        "--compare",
        "accelerator=h100-sxm:2 sequence.padding=dynamic",
    )
    assert "| 1. padding=static · xla-fsdpv2 · v5p-8 (baseline) |" in md
    assert (
        "padding=dynamic · gpu-fsdp · 2x h100-sxm vs padding=static · xla-fsdpv2 · v5p-8 (differ in accelerator, "
        "backend, sequence.padding, price): " in md
    )
    done = bench("report", str(matrix_results), "-o", str(tmp_path / "r.md"), "--compare", "variant=padding=dynamic")
    assert done.returncode == 2 and "--compare" in done.stderr and "matches 2 rows" in done.stderr


def test_the_output_format_is_the_extension_and_others_are_refused(matrix_results, tmp_path):
    from reports.render import output_format

    assert output_format(None, None) == (Path("reports/index.html"), "html")
    assert output_format(None, "md") == (Path("reports/index.md"), "md")
    assert output_format(None, "csv") == (Path("reports/index.csv"), "csv")
    assert output_format("x/r.MD", None) == (Path("x/r.MD"), "md")
    for args, needle in (
        (["-o", str(tmp_path / "r.txt")], ".html, .md or .csv"),
        (["-o", str(tmp_path / "r.html"), "--format", "md"], "contradicts"),
    ):
        done = bench("report", str(matrix_results), *args)
        assert done.returncode == 2 and needle in done.stderr and not list(tmp_path.glob("r.*"))
    assert report(matrix_results, tmp_path / "r.md").startswith("# bench report")


def test_a_serve_dollar_from_the_local_engine_is_labelled_wherever_the_report_shows_it():
    """The local engine's $ (cost.label, set when the local engine served) says "reference
    engine, not a production server" in the serving table, the workload's $/1M and its
    total; a server's $ (no label) says nothing of the kind."""
    from reports.model import build as build_report
    from reports.render import markdown

    workload = {"fine_tunes": 1, "fine_tune_tokens_millions": 0.9, "served_tokens_millions": 100}
    label = "reference engine, not a production server"
    tables = {}
    for labelled in (True, False):
        train = make_record([0.5] * 4)
        serve = make_record([0.5] * 4)
        cost = {"usd_per_1m_output_tokens": 3.0, "chips": 1, "price": train["cost"]["price"]}
        cost["label"] = label if labelled else None
        serve.update(task="serve", cost=cost, metrics=copy.deepcopy(SERVE_METRICS))
        for r in (train, serve):
            r["scenario"]["resolved"]["workload"] = workload
        tables[labelled] = markdown(build_report([train, serve]))
    text = tables[True]
    serving = text.split("## Serving", 1)[1].split("\n## ", 1)[0]
    assert f"3 ({label})" in serving
    section = text.split("## Train + serve workload", 1)[1].split("\n## ", 1)[0]
    workload_rows = [line for line in section.splitlines() if "|" in line][2:]
    assert workload_rows and all(f"3 ({label})" in row and f"(serve $ from a {label})" in row for row in workload_rows)
    assert label not in tables[False]
