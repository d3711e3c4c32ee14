"""Headless Chromium on a page of ours, offline: the one scaffolding every browser test
uses (the report, the quick start's report, the history page)."""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def need_chromium() -> None:
    """Skip where Chromium is missing, saying how to get it; in CI, fail (.ci/run installs it)."""
    if CHROMIUM is None:
        if os.environ.get("CI"):
            pytest.fail("CI must install Chromium (.ci/run installs Debian's chromium)")
        pytest.skip("Chromium is not installed here (apt-get install chromium)")


@dataclass
class Loaded:
    page: object
    outside: list[str] = field(default_factory=list)  # requests that tried to leave the file
    errors: list[str] = field(default_factory=list)  # console errors and uncaught exceptions


@contextlib.contextmanager
def offline_page(path: Path, width: int = 1300, height: int = 900):
    """`path` loaded in headless Chromium with the network refused: every request that is
    not a file: URL is recorded in `outside` and aborted, console errors in `errors`."""
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport={"width": width, "height": height}, offline=True)
        loaded = Loaded(context.new_page())
        context.route(
            "**/*",
            lambda route: (
                (loaded.outside.append(route.request.url), route.abort())
                if not route.request.url.startswith("file:")
                else route.continue_()
            ),
        )
        loaded.page.on("console", lambda m: loaded.errors.append(m.text) if m.type == "error" else None)
        loaded.page.on("pageerror", lambda e: loaded.errors.append(str(e)))
        loaded.page.goto(path.as_uri())
        loaded.page.wait_for_load_state("load")
        try:
            yield loaded
        finally:
            browser.close()
