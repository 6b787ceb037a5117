"""What only a browser shows, in a real headless Chromium: the dashboard a new user opens on a fresh
clone's committed results (``dashboard_checks.committed_results_db``).

Each page is drawn by ``streamlit run`` and Debian's ``/usr/bin/chromium`` (Playwright drives it by
path); the checks read what was drawn (Vega's SVG, the data grid's cells, their positions): the
colour scale's direction, the axes' order and ticks, what is above the fold. Each page's screenshot
is kept in ``$XRT_TEST_ARTIFACTS`` when set, else in the test's tmp dir (the path is printed).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from dashboard_checks import APP, CHROMIUM, H100, SQUARE_4096, committed_results_db, launch_chromium  # noqa: E402
from streamlit_server import streamlit_server  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium); "
    "Playwright drives it by path, it downloads no browser")]

WIDTH, FOLD = 1400, 900  # a laptop's window: what is above FOLD is seen without scrolling

# every SVG chart on the page: its axes (Vega's aria-label and the labels left to right), rect and
# text marks with their fill and box (the page's coordinates)
CHARTS_JS = """() => [...document.querySelectorAll("[data-testid='stVegaLiteChart'] svg")].map(svg => {
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; };
  return {
    axes: [...svg.querySelectorAll('g.role-axis')].filter(a => a.getAttribute('aria-label')).map(a => ({
      aria: a.getAttribute('aria-label'),
      labels: [...a.querySelectorAll('g.role-axis-label text')].map(t => [t.textContent, box(t)[0]])
        .sort((p, q) => p[1] - q[1]).map(p => p[0]).filter(s => s !== '')})),
    rects: [...svg.querySelectorAll('g.mark-rect.role-mark path')].map(e => [e.getAttribute('fill'), box(e)]),
    texts: [...svg.querySelectorAll('g.mark-text.role-mark text')].map(e => [e.textContent, e.getAttribute('fill'),
                                                                              box(e)])};
})"""


def _rgb(fill: str) -> tuple[float, ...]:
    named = {"white": (255, 255, 255), "black": (0, 0, 0)}
    if fill in named:
        return named[fill]
    if fill.startswith("#"):
        return tuple(int(fill[i:i + 2], 16) for i in (1, 3, 5))
    return tuple(float(x) for x in re.findall(r"[\d.]+", fill)[:3])


def luminance(fill: str) -> float:
    """WCAG's relative luminance of a CSS colour (0 black .. 1 white)."""
    c = [v / 255 for v in _rgb(fill)]
    c = [v / 12.92 if v <= 0.03928 else ((v + 0.055) / 1.055) ** 2.4 for v in c]
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]


def contrast(a: str, b: str) -> float:
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    return committed_results_db(tmp_path_factory.mktemp("clone-browser"))


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> Path:
    out = Path(os.environ["XRT_TEST_ARTIFACTS"]) if os.environ.get("XRT_TEST_ARTIFACTS") else \
        tmp_path_factory.mktemp("screenshots")
    out.mkdir(parents=True, exist_ok=True)
    print(f"screenshots in {out}")
    return out


@pytest.fixture(scope="module")
def browser(clone, tmp_path_factory):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]' (playwright)")
    db = clone[0]
    logs = tmp_path_factory.mktemp("server")
    env = dict(os.environ, XRT_DB=str(db), STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    with streamlit_server(APP, logs, env, logs, "--server.address", "127.0.0.1", "--browser.gatherUsageStats",
                          "false", "--client.toolbarMode", "viewer", timeout=60) as (url, _):
        with sync_api.sync_playwright() as p:
            b = launch_chromium(p)
            try:
                yield b, url
            finally:
                b.close()


def _open(browser, path: str, ready: str, artifacts: Path, name: str, height: int = FOLD):
    """The page at ``path`` once ``ready`` (a CSS selector) is drawn, and its screenshot kept."""
    b, url = browser
    page = b.new_page(viewport={"width": WIDTH, "height": height})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url + path, wait_until="domcontentloaded")
    page.locator(ready).first.wait_for(state="attached", timeout=60_000)  # a grid's cell table is hidden
    page.wait_for_timeout(1500)  # vega and the data grid paint after they mount
    page.screenshot(path=str(artifacts / f"{name}.png"))
    text = page.inner_text("body")
    assert "Traceback" not in text and "could not be shown" not in text and not errors, (text[-500:], errors)
    return page


def test_tuning_heat_map_and_convergence(browser, artifacts):
    page = _open(browser, "/tuning?op=layernorm", "[data-testid='stVegaLiteChart'] svg >> nth=1", artifacts, "tuning",
                 height=1800)
    conv, heat = page.evaluate(CHARTS_JS)
    # whole evaluations only on the convergence chart's x axis
    (x,) = [a for a in conv["axes"] if a["aria"].startswith("X-axis")]
    assert x["labels"] and all(re.fullmatch(r"\d+", s) for s in x["labels"]), x["labels"]
    # the heat map's block sizes by value, "auto" last
    (hx,) = [a for a in heat["axes"] if a["aria"].startswith("X-axis")]
    assert hx["labels"] == ["128", "256", "512", "1024", "auto"], hx["labels"]

    # each cell's value (its label) and colour: the fastest cell is the darkest ("Darker is faster")
    def cell_of(box):
        cx, cy = box[0] + box[2] / 2, box[1] + box[3] / 2
        return next(f for f, (x0, y0, w, h) in heat["rects"] if x0 <= cx <= x0 + w and y0 <= cy <= y0 + h)

    cells = [(float(t), ink, cell_of(box)) for t, ink, box in heat["texts"]]
    fastest, slowest = min(cells), max(cells)
    assert luminance(fastest[2]) < luminance(slowest[2]), (fastest, slowest)
    assert "Darker is faster" in page.inner_text("body")
    # every label readable on its cell (WCAG's 3:1 for large text; white on yellow is about 1.1)
    low = [(t, ink, fill, round(contrast(ink, fill), 2)) for t, ink, fill in cells if contrast(ink, fill) < 3]
    assert not low, low
    page.close()


def test_compare_changed_rows_show_the_slower_ones_above_the_fold(browser, clone, artifacts):
    _, prev, head = clone
    m = quote(H100)
    page = _open(browser, f"/compare?ma={m}&ca={prev}&mb={m}&cb={head}&rows=changed",
                 "[data-testid='stDataFrame'] table", artifacts, "compare")
    grid = page.locator("[data-testid='stDataFrame']").first
    assert grid.bounding_box()["y"] + 38 * 3 < FOLD  # its first rows are above the fold
    rows = page.evaluate("""() => [...document.querySelector("[data-testid='stDataFrame'] table")
                                    .querySelectorAll('tr')].slice(1, 4).map(r => r.innerText)""")
    # the first rows are the slower ones (+), not benchmarks skipped at both commits
    assert len(rows) == 3 and all(r.startswith("+") for r in rows), rows
    page.close()


def test_regression_detail_boxes_ticks_and_icons(browser, clone, artifacts):
    from xrt.db.query import query

    db, _, head = clone
    _, rows = query(db, "SELECT id FROM regressions WHERE machine = ? AND benchmark = ? AND param_key = ?",
                    [H100, *SQUARE_4096])
    page = _open(browser, f"/regression?id={rows[0][0]}", "[data-testid='stVegaLiteChart'] svg >> nth=1", artifacts,
                 "regression", height=2600)
    series, box = page.evaluate(CHARTS_JS)[:2]
    # the first slow commit has a tick labelled with its hash on the series chart
    (x,) = [a for a in series["axes"] if a["aria"].startswith("X-axis")]
    assert head[:7] in x["labels"], x["labels"]
    # 690 µs outliers beside 4 µs samples: on a log axis each side's box is drawn apart from 0, not flat
    (bx,) = [a for a in box["axes"] if a["aria"].startswith("X-axis")]
    assert "log scale" in bx["aria"]
    boxes = [b for f, b in box["rects"] if b[2] >= 3]  # the interquartile boxes (the medians are 1 px ticks)
    assert len(boxes) == 2, box["rects"]
    left = page.evaluate("""() => document.querySelectorAll("[data-testid='stVegaLiteChart'] svg")[1]
                              .querySelector('g.role-axis g.role-axis-label text').getBoundingClientRect().left""")
    assert all(b[0] > left + 50 for b in boxes), (boxes, left)  # well right of the axis' first label (1 µs)
    # the checklist's marks are Material icons in Streamlit's own font, never emoji (boxes without an emoji font)
    page.get_by_text("Likely causes").first.wait_for(timeout=30_000)
    fonts = page.evaluate("""() => [...document.querySelectorAll(
                                   "[data-testid='stMarkdownContainer'] span[role='img']")]
                               .filter(s => s.getAttribute('aria-label').endsWith(' icon'))
                               .map(s => getComputedStyle(s).fontFamily)""")
    assert len(fonts) >= 5 and all("Material Symbols" in f for f in fonts), fonts
    assert page.evaluate("() => document.fonts.check('16px \"Material Symbols Rounded\"', 'check_circle')")
    assert not re.search("[\u2705\u26a0\u2139]", page.inner_text("body"))
    page.close()


def test_regression_page_without_an_id_says_what_to_do(browser, artifacts):
    page = _open(browser, "/regression", "[data-testid='stAlert']", artifacts, "regression-no-id")
    hint = page.locator("[data-testid='stAlert']").first
    assert "Pick one of the" in hint.inner_text() and hint.bounding_box()["y"] < FOLD
    page.close()


def test_explorer_opens_on_a_timed_series(browser, artifacts):
    page = _open(browser, "/explorer", "[data-testid='stVegaLiteChart'] svg", artifacts, "explorer", height=1400)
    (chart, *_) = page.evaluate(CHARTS_JS)
    (y,) = [a for a in chart["axes"] if a["aria"].startswith("Y-axis")]
    assert "time (µs)" in y["aria"]  # not an allocator's MiB
    legend = page.evaluate("""() => [...document.querySelectorAll("[data-testid='stVegaLiteChart'] svg")[0]
                                .querySelectorAll('g.role-legend-label text')].map(t => t.textContent)""")
    assert legend and all("=" in s for s in legend), legend  # shape=4096, ... not a bare value
    page.close()


def test_front_page_tables_fit_and_dates_read(browser, artifacts):
    page = _open(browser, "/", "[data-testid='stVegaLiteChart'] svg", artifacts, "front", height=2400)
    body = page.inner_text("body")
    assert "every GPU machine" not in body
    # "Machines: last run" fits 1400 px: every column shown, no horizontal scrolling
    sw, cw = page.evaluate("""() => { const s = document.querySelector("[data-testid='stDataFrame'] .dvn-scroller");
                                      return [s.scrollWidth, s.clientWidth]; }""")
    assert sw <= cw, (sw, cw)
    # "When they started": dates on the axis, not hours alone
    started = next(c for c in page.evaluate(CHARTS_JS) if any("first slow commit" in a["aria"] for a in c["axes"]))
    (x,) = [a for a in started["axes"] if a["aria"].startswith("X-axis")]
    assert x["labels"] and all(re.match(r"\d{4}-\d{2}-\d{2}", s) for s in x["labels"]), x["labels"]
    page.close()
