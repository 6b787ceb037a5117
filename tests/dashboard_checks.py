"""What the dashboard's AppTest tests share: opening a page, and finding the overview's tables."""

from __future__ import annotations

import functools

from conftest import ROOT
from streamlit.testing.v1 import AppTest, app_test

APP = ROOT / "dashboard" / "app.py"


def _share_what_a_server_builds_once() -> None:
    """A served dashboard scans the installed packages for Streamlit components once, and parses and
    compiles each script once. AppTest redoes both on every run (about half of a run's CPU time here).
    The tests share one scan and one script cache per process, as a server does. A Streamlit without
    these hooks is left as it is (its runs are only slower)."""
    try:
        from streamlit.components.v2 import manifest_scanner
    except ImportError:
        manifest_scanner = None
    scan = getattr(manifest_scanner, "scan_component_manifests", None)
    if scan is not None and not hasattr(scan, "cache_info"):
        manifest_scanner.scan_component_manifests = functools.cache(scan)
    if isinstance(getattr(app_test, "ScriptCache", None), type):
        shared = app_test.ScriptCache()
        app_test.ScriptCache = lambda: shared


_share_what_a_server_builds_once()


def open_app(page: str | None = None, **query) -> AppTest:
    """The app (``XRT_DB`` set by the caller) opened by a link to ``page`` with ``query`` parameters; no
    exception, no error. The detail page's url_path (regression) is not its file's name: it is reached by
    a switch after a first run, as a click does; every other page is the first run's."""
    at = AppTest.from_file(str(APP), default_timeout=60)
    if page == "detail":
        at.run()
        at.query_params.clear()
    if page:
        at.switch_page(f"views/{page}.py")
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
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


H100 = "vm-nvidia-h100-80gb-hbm3-0"
SQUARE_4096 = ("bench_ops.Square.time_op", "'4096', 'float32', 'cuda', 'default'")


def committed_results_db(tmp) -> tuple:
    """What a fresh clone's dashboard shows: the repository's committed GPU results (results/asv, the
    tuner's journals in results/tuned) ingested by ``xrt db ingest``, plus two things a new user met:
    the H100's previous commit skips what its newest one skips (a CPU machine skips every GPU-only
    benchmark at both commits), and 3 slow outliers of 690 µs in each side of the 4 µs Square's
    suspected step. Returns ``(db, previous commit, newest commit)`` of the H100."""
    from xrt.cli import main
    from xrt.db import store
    from xrt.db.query import query

    db = tmp / "xrt.duckdb"
    assert main(["db", "ingest", str(ROOT / "results" / "asv"), "--db", str(db), "--repo", str(ROOT)]) == 0
    _, rows = query(db, "SELECT previous_commit, \"commit\" FROM regressions WHERE machine = ? AND benchmark = ? "
                    "AND param_key = ?", [H100, *SQUARE_4096])
    prev, head = rows[0]

    def plant(con):
        con.execute("INSERT INTO results (run_id, machine, commit_hash, env_name, benchmark, param_index, params, "
                    "param_key, value, status, unit) SELECT (SELECT any_value(run_id) FROM results WHERE machine = $m "
                    "AND commit_hash = $prev), machine, $prev, env_name, benchmark, param_index, params, param_key, "
                    "NULL, 'skipped', unit FROM results WHERE machine = $m AND commit_hash = $head "
                    "AND status = 'skipped'", {"m": H100, "prev": prev, "head": head})
        con.execute("UPDATE results SET samples = list_concat(samples, [690e-6, 690e-6, 690e-6]) WHERE machine = ? "
                    "AND benchmark = ? AND param_key = ? AND commit_hash IN (?, ?)", [H100, *SQUARE_4096, prev, head])

    store.write(db, plant)
    return db, prev, head
