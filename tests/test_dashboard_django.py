"""The dashboard on a database built from the django-asv corpus: AppTest, and a real headless Chromium.

The browser test starts ``streamlit run dashboard/app.py`` on a free localhost port, waits for
``/_stcore/health``, drives Debian's ``/usr/bin/chromium`` with Playwright (by executable path: no
browser download), checks that the regressions list and a chart rendered, and saves a screenshot in
the test's tmp dir (and to ``results/screenshots/overview.png`` when ``XRT_SCREENSHOTS=1``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from conftest import extract_django, ro, rw  # noqa: E402
from dashboard_checks import APP, open_app, steps_table  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402
from streamlit_server import streamlit_server  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
# ubuntu-latest holds 93 % of the corpus' files; the other three machines keep the test quick
SKIP_MACHINES = ("ubuntu-latest",)


@pytest.fixture(scope="session")
def django_db(tmp_path_factory) -> Path:
    from xrt.db.ingest import ingest
    from xrt.track import diag, regressions

    out = extract_django(tmp_path_factory.mktemp("django-dash"), skip_machines=SKIP_MACHINES)
    db = out / "django.duckdb"
    ingest(out, db, echo=lambda s: None)
    recs = regressions.detect_db(ro(db))  # what `xrt regressions --db DB` stores
    rw(db, lambda con: regressions.save(con, recs,
                                        diag_for=lambda rs: [diag.as_json(c) for c in diag.checklists(con, rs)]))
    assert any(r.kind == "regression" and r.status == "new" for r in recs)
    return db


def _app(db: Path, monkeypatch) -> AppTest:
    monkeypatch.setenv("XRT_DB", str(db))
    return open_app()


def test_overview_lists_django_regressions(django_db, monkeypatch):
    at = _app(django_db, monkeypatch)
    assert not at.exception and not at.error
    assert at.title[0].value.endswith("Regressions")
    regs = steps_table(at)  # every step: the alerts come first, the grid last
    assert len(at.expander) == len(set(zip(regs["machine"], regs["first_slow"]))) < len(regs)
    assert len(regs) > 0 and (regs["ratio"] > 1).all() and set(regs["status"]) <= {"new", "acknowledged"}
    assert regs["benchmark"].str.contains(r"\.time_").all()


def test_explorer_works_on_foreign_benchmark_names(django_db, monkeypatch):
    """django's names are module.sub.benchmark.Class.time_x and every benchmark is plain."""
    monkeypatch.setenv("XRT_DB", str(django_db))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["op"] = "QueryAll"
    at.query_params["m"] = ["macos-12", "ubuntu-22.04"]
    at.run()
    at.switch_page("views/explorer.py").run()
    assert not at.exception and not at.error
    assert at.sidebar.selectbox(key="ex:op").value == "QueryAll"
    assert at.sidebar.multiselect(key="ex:m").value == ["macos-12", "ubuntu-22.04"]
    assert at.sidebar.multiselect == [] or all(w.key == "ex:m" for w in at.sidebar.multiselect)  # no param filters
    assert len(at.get("vega_lite_chart")) == 1


@pytest.fixture
def served(django_db, tmp_path):
    env = dict(os.environ, XRT_DB=str(django_db), STREAMLIT_BROWSER_GATHER_USAGE_STATS="false")
    with streamlit_server(APP, tmp_path, env, tmp_path, "--server.address", "127.0.0.1",
                          "--browser.gatherUsageStats", "false", "--client.showErrorDetails", "none",
                          "--client.toolbarMode", "viewer", timeout=30) as (url, _):
        yield url


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                    "(apt-get install -y chromium); Playwright drives it by path, it downloads no browser")
def test_overview_in_headless_chromium(served, django_db, tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]' (playwright)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=[
            "--no-sandbox", "--disable-gpu", "--headless=new", "--disable-dev-shm-usage", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-default-apps", "--disable-extensions"])
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1500})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(served + "/", wait_until="domcontentloaded")
            page.get_by_role("heading", name="Regressions").first.wait_for(timeout=30_000)
            # the regressions list (a glide data grid) and the chart (vega-embed draws a canvas or svg)
            page.locator("[data-testid='stDataFrame']:visible").nth(1).wait_for(timeout=30_000)
            page.locator("[data-testid='stVegaLiteChart'] canvas, [data-testid='stVegaLiteChart'] svg, "
                         ".vega-embed canvas, .vega-embed svg").first.wait_for(timeout=30_000)
            page.wait_for_timeout(500)  # let the grid paint its cells
            text = page.inner_text("body")
            assert "Open regressions (" in text and "When they started" in text
            assert "Traceback" not in text and "could not be shown" not in text
            shot = tmp_path / "overview.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 20_000
            if os.environ.get("XRT_SCREENSHOTS"):
                dest = ROOT / "results" / "screenshots" / "overview.png"
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(shot, dest)
            assert not errors, errors
            _more_pages(browser, served, django_db)
        finally:
            browser.close()


def _more_pages(browser, served: str, db: Path) -> None:
    """The same browser session: /overview (the documented deep link) with its grid of every benchmark,
    a regression's deep link with its stored checklist, and the compare page across its step."""
    from urllib.parse import quote

    from xrt.db.query import query

    _, rows = query(db, "SELECT id, machine, previous_commit, \"commit\" FROM regressions WHERE kind = 'regression' "
                    "AND status = 'new' AND diag IS NOT NULL ORDER BY ratio DESC LIMIT 1")
    rid, m, prev, cur = rows[0]
    page = browser.new_page(viewport={"width": 1400, "height": 1500})
    page.goto(served + "/overview", wait_until="domcontentloaded")
    page.get_by_role("heading", name="Every benchmark").first.wait_for(timeout=30_000)
    page.locator("[data-testid='stDataFrame']").last.wait_for(timeout=30_000)  # the grid (alerts' tables fold)
    page.wait_for_timeout(500)
    text = page.inner_text("body")
    assert "Page not found" not in text and "Open regressions (" in text and "series · change = latest" in text

    page.goto(served + f"/regression?id={rid}", wait_until="domcontentloaded")
    page.get_by_text("Likely causes").first.wait_for(timeout=30_000)
    page.wait_for_timeout(500)
    text = page.inner_text("body")
    assert "Page not found" not in text and "No checklist stored" not in text
    assert "driver and toolkit versions" in text and "CPU load" in text  # the stored checklist's items

    page.goto(served + f"/compare?ma={quote(m)}&ca={prev}&mb={quote(m)}&cb={cur}&rows=all",
              wait_until="domcontentloaded")
    page.get_by_role("heading", name="Compare").first.wait_for(timeout=30_000)
    page.locator("[data-testid='stDataFrame']").first.wait_for(timeout=30_000)
    page.wait_for_timeout(500)
    text = page.inner_text("body")
    assert "slower (+)" in text and "skipped at B" in text and "fixed at B" in text
    assert "Traceback" not in text and "could not be shown" not in text
    page.close()


def test_compare_on_the_corpus_takes_benchmarks_without_a_unit(django_db, monkeypatch):
    """Some corpus benchmarks have no unit (NULL beside 'seconds': NaN in the page's table); the
    Compare page judges and shows them all."""
    import duckdb

    with duckdb.connect(str(django_db), read_only=True) as con:
        machine, a, b = con.execute("""
            SELECT machine, arg_min(commit_hash, position), arg_max(commit_hash, position)
            FROM results JOIN commits ON hash = commit_hash GROUP BY machine
            HAVING bool_or(unit IS NULL) AND bool_or(unit IS NOT NULL) ORDER BY machine LIMIT 1""").fetchone()
    monkeypatch.setenv("XRT_DB", str(django_db))
    at = open_app("compare", ma=machine, ca=a, mb=machine, cb=b, rows="all")
    table = at.dataframe[0].value
    assert len(table) > 0 and table["ratio"].notna().any()
