"""Issue 38: `bench history`'s page renders offline in headless Chromium, with its series,
its change point and its budget line drawn (the suite's browser tests: test_report.py)."""

from __future__ import annotations

from harness.cli import main

from browser import offline_page


def test_the_history_page_renders_in_headless_chromium_with_its_budget_line(tmp_path, capsys):
    from history_series import run_records, store, values

    results = store(tmp_path / "results", run_records(values(seed=7, step=True)))
    budgets = tmp_path / "b.yaml"
    budgets.write_text("budgets:\n  - {metric: step_time_s, max: 0.65}\n")
    page_path = tmp_path / "history.html"
    assert main(["history", str(results), "--budgets", str(budgets), "-o", str(page_path)]) == 0
    with offline_page(page_path) as loaded:
        page, errors, outside = loaded.page, loaded.errors, loaded.outside
        legend = page.evaluate("Array.from(document.querySelectorAll('div.plot .legendtext')).map(t => t.textContent)")
        points = page.evaluate("document.querySelectorAll('div.plot .scatterlayer .trace .point').length")
        lines = page.evaluate("document.querySelectorAll('div.plot .scatterlayer .trace .js-line').length")
        annotations = page.evaluate(
            "Array.from(document.querySelectorAll('div.plot .annotation-text')).map(t => t.textContent)"
        )
        changes = page.evaluate("document.getElementById('changes').textContent")
    assert errors == [] and outside == []
    assert legend == ["step_time_s", "budget max 0.65 (s)"]
    assert points == 30 and lines == 2  # the series' 30 runs, its line and the budget's
    assert len(annotations) == 1 and annotations[0].startswith("step_time_s +1") and "at commit" in annotations[0]
    assert "tiny [default] torch@cpu: step_time_s +1" in changes
