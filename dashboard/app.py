"""xrt's dashboard: regressions first, every series one click away (docs/dashboard.md).

    XRT_DB=results/xrt.duckdb streamlit run dashboard/app.py    # or: xrt dashboard [--db PATH]

Reads the results database through ``xrt.db`` only (no torch, pycuda or Triton); writes only to
acknowledge or ignore a regression, through ``xrt.track`` (the database's single-writer path).
"""

from __future__ import annotations

import contextlib
import logging
import runpy
import sys
from pathlib import Path

import streamlit as st

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

log = logging.getLogger("xrt.dashboard")

# An emoji, not a ":material/...:" icon: Streamlit fetches a material favicon from fonts.gstatic.com on
# every page, which fails offline and tells a public server who reads the dashboard; an emoji is drawn
# in the page (a data: URL). The pages' own icons come from the font Streamlit serves itself.
PAGE_ICON = "📉"
st.set_page_config(page_title="xrt: regressions", page_icon=PAGE_ICON, layout="wide")
with contextlib.suppress(Exception):  # viewers never see tracebacks (`xrt dashboard` passes the flag too)
    st.set_option("client.showErrorDetails", "none")

VIEWS = HERE / "views"
PAGES = [
    # served at /; its url_path is reserved, not served (so /overview is a hidden alias, below)
    st.Page(VIEWS / "overview.py", title="Regressions", url_path="regressions", icon=":material/trending_down:",
            default=True),
    st.Page(VIEWS / "detail.py", title="Regression detail", url_path="regression", icon=":material/search:"),
    st.Page(VIEWS / "explorer.py", title="Series explorer", url_path="explorer", icon=":material/show_chart:"),
    st.Page(VIEWS / "compare.py", title="Compare", url_path="compare", icon=":material/compare_arrows:"),
    st.Page(VIEWS / "tuning.py", title="Tuning", url_path="tuning", icon=":material/tune:"),
]


def _overview_link() -> None:
    """``/overview``, the documented deep link: the default page's own url_path is ignored by
    Streamlit (it is served at ``/``), so the same script is also a hidden page at ``/overview``."""
    runpy.run_path(str(VIEWS / "overview.py"), run_name="__main__")


PAGES.append(st.Page(_overview_link, title="Regressions", url_path="overview", icon=":material/trending_down:",
                     visibility="hidden"))

page = st.navigation(PAGES)
try:
    page.run()
except Exception as e:  # viewers see one plain line; the traceback goes to the server's log
    log.exception("dashboard page %s failed", page.title)
    import dashui

    st.error(f"This view could not be shown: {dashui.lit(f'{type(e).__name__}: {e}', 300, code=True)}. "
             "The details are in the server's log.")
