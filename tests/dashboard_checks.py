"""What the dashboard's AppTest tests share: opening a page, and finding the overview's tables."""

from __future__ import annotations

from conftest import ROOT
from streamlit.testing.v1 import AppTest

APP = ROOT / "dashboard" / "app.py"


def open_app(page: str | None = None, **query) -> AppTest:
    """The app (``XRT_DB`` set by the caller) with ``query`` parameters, on ``page``; no exception, no error."""
    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    if page:
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def steps_table(at: AppTest):
    """The overview's table of every step (the one with the first slow commit), after the alerts."""
    return next(d.value for d in at.dataframe if "first_slow" in d.value.columns)


def grid_of(at: AppTest):
    """The overview's grid of every benchmark (the one with a trend column)."""
    (g,) = [d.value for d in at.dataframe if "trend" in d.value.columns]
    return g


CHROMIUM = "/usr/bin/chromium"  # Debian's, driven by path: Playwright downloads no browser


def launch_chromium(playwright):
    """A headless Chromium for the browser tests (no GPU, no sandbox, nothing fetched in the background)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=[
        "--no-sandbox", "--disable-gpu", "--headless=new", "--disable-dev-shm-usage", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--disable-default-apps", "--disable-extensions"])
