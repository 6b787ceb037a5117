"""The dashboard works offline: what it serves names no other host, and a browser that opens its pages
asks nothing of any server but the dashboard's own (no font, icon or script from the network)."""

from __future__ import annotations

import os
import re
import urllib.request
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import numpy as np
import pytest

pytest.importorskip("streamlit")
pytest.importorskip("duckdb")

from dashboard_checks import APP, CHROMIUM, launch_chromium  # noqa: E402
from streamlit_server import streamlit_server  # noqa: E402

from xrt.db.ingest import ingest  # noqa: E402
from xrt.track import synth  # noqa: E402

# where a served page or style sheet loads something from (HTML attributes, CSS url() and @import)
LOADS = re.compile(r"""(?:\bsrc|\bhref)\s*=\s*["']([^"']+)["']|url\(\s*["']?([^"')]+)|@import\s+["']([^"']+)""")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("offline")
    repo, root, db = tmp / "repo", tmp / "results", tmp / "xrt.duckdb"
    commits = synth.git_history(repo, 3)
    rng = np.random.default_rng(2)
    for i, c in enumerate(commits):
        synth.write_run(root, "cpu-vm", c, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), i)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    env = dict(os.environ, XRT_DB=str(db))
    with streamlit_server(APP, tmp, env, tmp) as (url, _):
        yield url


def _external(base: str, refs: list[str]) -> list[str]:
    """The references that leave ``base``'s host (data: and blob: URLs stay in the page)."""
    out = []
    for ref in refs:
        if ref.startswith(("data:", "blob:", "#", "%23")):
            continue
        full = urljoin(base, ref)
        if urlsplit(full).scheme in ("http", "https") and urlsplit(full).netloc != urlsplit(base).netloc:
            out.append(ref)
    return out


def test_the_served_html_and_css_load_nothing_from_another_host(served):
    html = urllib.request.urlopen(served + "/", timeout=10).read().decode()
    html = re.sub(r"<!--.*?-->", "", html, flags=re.S)  # the licence's address in a comment loads nothing
    refs = [next(g for g in m.groups() if g) for m in LOADS.finditer(html)]
    assert refs and _external(served, refs) == []
    sheets = [urljoin(served + "/", r) for r in refs if r.split("?")[0].endswith(".css")]
    for sheet in sheets:
        css = urllib.request.urlopen(sheet, timeout=10).read().decode()
        assert _external(sheet, [next(g for g in m.groups() if g) for m in LOADS.finditer(css)]) == [], sheet


@pytest.fixture(scope="module")
def browser():
    """One headless Chromium for the module's pages. Each test's page has a context of its own (no cache
    or cookies of another test's), so each asks for everything as a first visit does."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]' (playwright)")
    with sync_api.sync_playwright() as p:
        b = launch_chromium(p)
        try:
            yield b
        finally:
            b.close()


@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                    "(apt-get install -y chromium); Playwright drives it by path, it downloads no browser")
@pytest.mark.parametrize("path", ["/", "/compare", "/explorer"])
def test_a_browser_asks_nothing_of_another_host(served, browser, path):
    page = browser.new_page()
    try:
        requests: list[str] = []
        page.on("request", lambda rq: requests.append(rq.url))
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(served)
                   else route.abort())  # offline: nothing else answers
        page.goto(served + path, wait_until="domcontentloaded")
        page.locator("h1").first.wait_for(timeout=30_000)
        page.wait_for_timeout(2000)  # the favicon and fonts are asked for after the first render
        icons = page.eval_on_selector_all("link[rel~=icon]", "els => els.map(e => e.href)")
    finally:
        page.context.close()
    assert _external(served, requests) == []
    assert icons and _external(served, icons) == []
