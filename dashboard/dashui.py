"""Widgets shared by the pages: deep links (query parameters), empty states, the database header."""

from __future__ import annotations

import ipaddress
import logging
import math
import os
import sys
from typing import Any

import dashdata
import streamlit as st

from xrt.commands.dashboard import READONLY_ENV
from xrt.track.markdown import lit  # noqa: F401  (the pages escape names through dashui.lit)

log = logging.getLogger("xrt.dashboard")


def reader(allow_empty: bool = False) -> dashdata.Reader | None:
    """The database, or an empty state that says what to run (and ``None``). ``allow_empty``: a
    database without benchmark results is returned too (the Tuning page's data is the tuner's)."""
    r = dashdata.Reader.open()
    if r is None:
        st.info(f"No results database at {lit(dashdata.db_path(), code=True)} yet. Build one with "
                "`xrt db ingest results/asv --db results/xrt.duckdb` (after `xrt bench run`), or run `make demo`; "
                "or open another with `XRT_DB=path/to/xrt.duckdb streamlit run dashboard/app.py`.")
        return None
    try:  # the first query opens the file: not DuckDB, damaged, no permission
        n = r.n_results()
    except Exception as e:  # noqa: BLE001 - any failure to open is the same one line for the viewer
        log.warning("cannot read %s: %s", r.path, e)
        st.error(f"The results database {lit(r.path, None, code=True)} cannot be read: "
                 f"{lit(f'{type(e).__name__}: {e}', 300, code=True)}. Check `XRT_DB` (or `xrt dashboard --db`).")
        return None
    if n == 0 and not allow_empty:
        st.info(f"{lit(r.path, code=True)} holds no benchmark results yet. Run `xrt bench run` and then "
                f"{lit(f'xrt db ingest results/asv --db {r.path}', None, code=True)}.")
        return None
    return r


def no_regressions_yet(r: dashdata.Reader) -> None:
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


def _choices(options: list, n: int = 6) -> str:
    shown = ", ".join(lit(o, 40) for o in options[:n])
    return f"one of {shown}" + (f" (or {len(options) - n} more)" if len(options) > n else "")


def bad_param(name: str, value: Any, why: str, fallback: Any = None) -> None:
    """One warning for a link's query parameter that cannot be used: its name, the value (cut,
    shown literally), why, and what the page shows instead."""
    if isinstance(value, list):
        shown = ", ".join("(empty)" if v == "" else lit(v, 60, code=True) for v in value[:4])
    else:
        shown = "(empty)" if value == "" else lit(value, 80, code=True)
    if isinstance(fallback, list):
        instead = ", ".join(lit(v, 60) for v in fallback) or "nothing selected"
    else:
        instead = None if fallback is None else lit(fallback, 80)
    st.warning(f"The link's {lit(name, 60, code=True)} = {shown} was ignored: {why}."
               + (f" Showing {instead} instead." if instead else ""))


def one(name: str) -> str | None:
    """The value of a one-value query parameter, or ``None`` when absent (or given more than once,
    which is warned about)."""
    vals = st.query_params.get_all(name)
    if len(vals) > 1:
        bad_param(name, vals, f"given {len(vals)} times; it takes one value")
        return None
    return vals[0] if vals else None


def _choice(q: str | None, name: str, options: list, default: Any) -> Any:
    fallback = default if default in options else options[0]
    if q is None:
        return fallback
    if q in options:
        return q
    bad_param(name, q, f"expected {_choices(options)}", fallback)
    return fallback


def select(label: str, options: list, key: str, default: Any = None, fmt=None, where=st, **kw) -> Any:
    """A selectbox whose value is the query parameter ``key`` (so the URL reopens it). A value that
    is not an option is warned about and the default shown."""
    if not options:
        return None
    want = _choice(one(_qp(key)), _qp(key), options, default)
    if st.session_state.get(key) not in options:
        st.session_state.pop(key, None)
    _seed(key, want)
    v = where.selectbox(label, options, key=key, format_func=fmt or str, **kw)
    st.query_params[_qp(key)] = str(v)
    return v


def multi(label: str, options: list, key: str, default: list | None = None, where=st, **kw) -> list:
    """A multiselect bound to the repeated query parameter ``key``; values that are not options are
    warned about and dropped (the default when none is left)."""
    given = st.query_params.get_all(_qp(key))
    good = [v for v in dict.fromkeys(given) if v in options]
    want = good or [v for v in (default or []) if v in options]
    wrong = [v for v in given if v not in options]
    if wrong:
        bad_param(_qp(key), wrong, f"expected {_choices(options)}", want)
    cur = st.session_state.get(key)
    if cur is not None and not all(v in options for v in cur):
        st.session_state.pop(key)
    _seed(key, want)
    v = where.multiselect(label, options, key=key, **kw)
    st.query_params[_qp(key)] = [str(x) for x in v]
    return list(v)


def radio(label: str, options: list, key: str, default: Any = None, where=st, **kw) -> Any:
    want = _choice(one(_qp(key)), _qp(key), options, default)
    if st.session_state.get(key) not in options:
        st.session_state.pop(key, None)
    _seed(key, want)
    v = where.radio(label, options, key=key, horizontal=True, **kw)
    st.query_params[_qp(key)] = str(v)
    return v


def number(label: str, key: str, default: float, where=st, **kw) -> float:
    """A number input bound to the query parameter ``key``: a finite number within the widget's
    ``min_value`` / ``max_value`` (a whole one when ``default`` is an int), else the default."""
    q, lo, hi = one(_qp(key)), kw.get("min_value"), kw.get("max_value")
    whole = isinstance(default, int)
    want = default
    if q is not None:
        try:
            x = float(q)
        except ValueError:
            x = math.nan
        if not math.isfinite(x):
            why = "not a finite number"
        elif (lo is not None and x < lo) or (hi is not None and x > hi):
            why = f"outside {lo if lo is not None else '-∞'} … {hi if hi is not None else '∞'}"
        elif whole and x != int(x):
            why = "not a whole number"
        else:
            why, want = None, int(x) if whole else x
        if why:
            bad_param(_qp(key), q, why, default)
    _seed(key, want)
    v = where.number_input(label, key=key, **kw)
    st.query_params[_qp(key)] = str(v)
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
    if os.environ.get(READONLY_ENV):
        return False, f"This dashboard is served read-only ({READONLY_ENV})."
    addr = st.get_option("server.address")
    if _loopback(addr):
        return True, ""
    if os.environ.get("XRT_DASHBOARD_WRITES") == "1" or "--allow-writes" in sys.argv[1:]:
        return True, ""
    where = lit(addr, code=True) if addr else "every interface"
    return False, (f"This dashboard is served beyond this machine ({where}), so it is read-only. Whoever "
                   "starts it can allow the form with `XRT_DASHBOARD_WRITES=1` (or `-- --allow-writes`).")


def footer(r: dashdata.Reader) -> None:
    st.caption(f"Database {lit(r.path, None, code=True)} · read-only, each query on its own short-lived connection · "
               "the address bar's link reopens this view as it is.")


# Material Symbols, which Streamlit serves with its own files: emoji need a font the viewer may lack
STATUS_ICON = {"ok": ":green[:material/check_circle:]", "warn": ":orange[:material/warning:]",
               "info": ":blue[:material/info:]"}


# ---------------------------------------------------------------------- charts people read

HASH_LABELS_UP_TO = 80  # commits on the axis: beyond this, integer ticks only (hashes in the tooltip)


MARKED_TICKS = 10  # with a marked commit: about this many ticks, the marked one always among them


def marked_ticks(positions: list[int], mark: int | None = None, n: int = MARKED_TICKS) -> list[int]:
    """Tick positions on a commit axis: commits' own ``positions``, at least 1/``n`` of the axis apart
    (so their labels never overlap), ``mark`` (a regression's first slow commit) always among them."""
    pos = sorted(set(positions))
    gap = (pos[-1] - pos[0]) / n if pos else 0
    kept = [] if mark is None else [mark]
    for t in pos:
        if all(abs(t - u) >= gap for u in kept):
            kept.append(t)
    return sorted(kept)


def commit_x(d: Any, field: str = "ord", title: str = "commit (history order)", domain: list | None = None,
             mark: int | None = None) -> Any:
    """The x encoding of a commit-ordered chart: ticks on commits only (never 0.5 of a commit), labelled
    with the commit's short hash where few enough commits are shown (``d`` has ``field`` and ``commit``).
    ``domain`` fixes the axis' range (charts shown side by side then place a commit alike); ``mark``
    is a position that always has its tick and label (the first slow commit of a regression)."""
    import json

    import altair as alt

    pos = [int(x) for x in d[field].dropna()] if field in d else []
    # explicit ticks on commits: Vega's own (multiples of 5) miss sparse commits, and its overlap
    # pruning could drop the marked commit's label
    ticks = {"values": marked_ticks(pos, mark), "labelOverlap": mark is None} if pos else \
        {"tickMinStep": 1, "labelOverlap": True}
    axis = alt.Axis(format="d", **ticks)
    pairs = d[[field, "commit"]].dropna().drop_duplicates(field) if "commit" in d else None
    if pairs is not None and 0 < len(pairs) <= HASH_LABELS_UP_TO:
        table = json.dumps({str(int(o)): str(c)[:7] for o, c in zip(pairs[field], pairs["commit"])})
        axis = alt.Axis(format="d", labelAngle=-40, labelExpr=f"{table}['' + datum.value] || ''", **ticks)
    scale = alt.Scale(zero=False, nice=False, padding=12, **({"domain": domain} if domain else {}))
    return alt.X(f"{field}:Q", title=title, axis=axis, scale=scale)


def named_key(param_key: str, names: list[str] | None) -> str:
    """A series' parameters as people read them: ``pinned=True``, not a bare ``True``; the key as it
    is where the names are unknown or do not match its values."""
    parts = param_key.split(", ") if param_key else []
    if not names or len(parts) != len(names):
        return param_key
    return ", ".join(f"{n}={dashdata.unquote(v)}" for n, v in zip(names, parts))


def series_label(machine: str, param_key: str, n_machines: int, n_keys: int, names: list[str] | None = None) -> str:
    """How a chart's legend names one series: its parameters (by name, where ``names`` gives them),
    its machine, or both, as the selection needs to tell its series apart."""
    key = named_key(param_key, names)
    if n_machines > 1:
        return machine if n_keys == 1 else f"{machine} [{key}]"
    return key or machine
