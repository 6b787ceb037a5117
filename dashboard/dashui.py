"""Widgets shared by the pages: deep links (query parameters), empty states, the database header."""

from __future__ import annotations

import ipaddress
import os
import re
import sys
from typing import Any

import dashdata as D
import streamlit as st

# ---------------------------------------------------------------------- strings from users and data

_PLAIN = re.compile(r"[^\W_][\w-]*(?: [^\W_][\w-]*)*")


def lit(s: Any, limit: int | None = 200, code: bool = False) -> str:
    """``s`` (a name, a parameter, a message, a note, a URL's value) for a Markdown body or a label,
    shown as it is: never a link, an image, HTML, emphasis, a directive, an icon or a formula.

    Words (letters, digits, ``-`` and ``_`` inside words, single spaces) stay plain unless ``code``;
    anything else becomes one inline code span whose fence is longer than any run of backticks
    inside (CommonMark), so nothing in it is parsed. Whitespace runs, newlines included, become one
    space (a blank line would end the span); past ``limit`` characters it is cut with "…".
    """
    t = " ".join(str(s).split())
    if limit and len(t) > limit:
        t = t[: limit - 1] + "…"
    if not t:
        return ""
    if not code and _PLAIN.fullmatch(t):
        return t
    fence = "`" * (max((len(m) for m in re.findall("`+", t)), default=0) + 1)
    return f"{fence} {t} {fence}"  # CommonMark drops one space each side: a leading/trailing ` stays safe


def reader() -> D.Reader | None:
    """The database, or an empty state that says what to run (and ``None``)."""
    r = D.Reader.open()
    if r is None:
        st.info(f"No results database at {lit(D.db_path(), code=True)} yet. Build one with "
                "`xrt db ingest results/asv --db results/xrt.duckdb` (after `xrt bench run`), or run `make demo`; "
                "or open another with `XRT_DB=path/to/xrt.duckdb streamlit run dashboard/app.py`.")
        return None
    if r.n_results() == 0:
        st.info(f"{lit(r.path, code=True)} holds no benchmark results yet. Run `xrt bench run` and then "
                f"{lit(f'xrt db ingest results/asv --db {r.path}', None, code=True)}.")
        return None
    return r


def no_regressions_yet(r: D.Reader) -> None:
    st.info(f"Regressions have not been computed for this database yet. Run "
            f"{lit(f'xrt regressions --db {r.path}', None, code=True)} "
            "(it detects every step, stores them and keeps their status); then reload this page.")


# ---------------------------------------------------------------------- deep links

def _seed(key: str, value: Any) -> None:
    if key not in st.session_state:
        st.session_state[key] = value


def _qp(key: str) -> str:
    """Widget keys are ``page:name`` (pages keep their own state); the query parameter is ``name``."""
    return key.rsplit(":", 1)[-1]


def select(label: str, options: list, key: str, default: Any = None, fmt=None, where=st, **kw) -> Any:
    """A selectbox whose value is the query parameter ``key`` (so the URL reopens it)."""
    if not options:
        return None
    q = st.query_params.get(_qp(key))
    want = q if q in options else (default if default in options else options[0])
    if st.session_state.get(key) not in options:
        st.session_state.pop(key, None)
    _seed(key, want)
    v = where.selectbox(label, options, key=key, format_func=fmt or str, **kw)
    st.query_params[_qp(key)] = str(v)
    return v


def multi(label: str, options: list, key: str, default: list | None = None, where=st, **kw) -> list:
    """A multiselect bound to the repeated query parameter ``key``."""
    q = [v for v in st.query_params.get_all(_qp(key)) if v in options]
    want = q or [v for v in (default or []) if v in options]
    cur = st.session_state.get(key)
    if cur is not None and not all(v in options for v in cur):
        st.session_state.pop(key)
    _seed(key, want)
    v = where.multiselect(label, options, key=key, **kw)
    st.query_params[_qp(key)] = [str(x) for x in v]
    return list(v)


def radio(label: str, options: list, key: str, default: Any = None, where=st, **kw) -> Any:
    q = st.query_params.get(_qp(key))
    want = q if q in options else (default if default in options else options[0])
    if st.session_state.get(key) not in options:
        st.session_state.pop(key, None)
    _seed(key, want)
    v = where.radio(label, options, key=key, horizontal=True, **kw)
    st.query_params[_qp(key)] = str(v)
    return v


def number(label: str, key: str, default: float, where=st, **kw) -> float:
    try:
        want = float(st.query_params.get(_qp(key), default))
    except ValueError:
        want = default
    _seed(key, want)
    v = where.number_input(label, key=key, **kw)
    st.query_params[_qp(key)] = str(v)
    return v


def text(label: str, key: str, default: str = "", where=st, **kw) -> str:
    _seed(key, st.query_params.get(_qp(key), default))
    v = where.text_input(label, key=key, **kw)
    if v:
        st.query_params[_qp(key)] = v
    else:
        st.query_params.pop(_qp(key), None)
    return v


# ---------------------------------------------------------------------- may this server write?

def _loopback(addr: str | None) -> bool:
    """Whether Streamlit bound only this machine: a loopback address or ``localhost`` (no DNS asked).
    An empty address is Streamlit's default, every interface."""
    a = (addr or "").strip().strip("[]")
    if a.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(a).is_loopback
    except ValueError:
        return False


def writes() -> tuple[bool, str]:
    """Whether the acknowledge / ignore form is offered, and if not, why (one sentence).

    Read-only when ``XRT_DASHBOARD_READONLY`` is set (``xrt dashboard --read-only``); else writable
    when the server is bound to loopback, or when the operator said so for an exposed server
    (``XRT_DASHBOARD_WRITES=1``, or ``streamlit run dashboard/app.py -- --allow-writes``)."""
    if os.environ.get("XRT_DASHBOARD_READONLY"):
        return False, "This dashboard is served read-only (XRT_DASHBOARD_READONLY)."
    addr = st.get_option("server.address")
    if _loopback(addr):
        return True, ""
    if os.environ.get("XRT_DASHBOARD_WRITES") == "1" or "--allow-writes" in sys.argv[1:]:
        return True, ""
    where = lit(addr, code=True) if addr else "every interface"
    return False, (f"This dashboard is served beyond this machine ({where}), so it is read-only. Whoever "
                   "starts it can allow the form with `XRT_DASHBOARD_WRITES=1` (or `-- --allow-writes`).")


def footer(r: D.Reader) -> None:
    st.caption(f"Database {lit(r.path, None, code=True)} · read-only, each query on its own short-lived connection · "
               "the address bar's link reopens this view as it is.")


STATUS_ICON = {"ok": "✅", "warn": "⚠️", "info": "ℹ️"}
