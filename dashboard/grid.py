"""Every benchmark at a glance (the front page's lower half), like ``asv publish``'s grid: one row
per series (op x parameters x machine) with a sparkline of its last N commits, its latest value in
its unit (a model's step also its throughput: tokens/s or images/s), the change over those N commits
and its status (open regressions first, then the ingest's judgement of its newest commit, with the
reason where it could not be judged)."""

from __future__ import annotations

from urllib.parse import urlencode

import dashdata
import dashui
import pandas as pd
import streamlit as st


def _status(row) -> str:
    if row.open_regressions and row.open_regressions == row.open_regressions:
        n = int(row.open_regressions)
        # the step's own ratio, at its commit: the change over the last N commits can differ (even in sign)
        at = f" at {dashdata.short(row.worst_commit)}" if isinstance(row.worst_commit, str) else ""
        what = f"regression {row.worst:.2f}×{at}" + (f" (+{n - 1} more)" if n > 1 else "")
        return what + (" · suspected" if row.all_suspected in (True, 1) else "")
    v = row.verdict
    if not row.commits:
        return "no ok value in this machine's last N commits"
    if not isinstance(v, str):
        return "—"
    return v if v != "not judged" or not isinstance(row.reason, str) else f"not judged: {row.reason}"


def _rank(status: str) -> int:
    return 0 if status.startswith("regression") else 1 if status.startswith(("failed", "within", "clock", "machine"))\
        else 2


def show(r: dashdata.Reader) -> None:
    st.subheader("Every benchmark")
    c0, c1, c2, c3, c4 = st.columns([1, 2, 2, 2, 2])
    n = int(dashui.number("Last N commits", "ov:n", 20, where=c0, min_value=2, max_value=200, step=1,
                          help="the sparkline's commits, and the change is the latest against the first of them"))
    g = r.grid(n)
    if g.empty:
        st.info("No ok results to show.")
        return
    names = r.param_names()
    pairs = list(zip(g["params"], g["benchmark"]))
    g = g.assign(op=g["benchmark"].map(dashdata.op_of),
                 provider=[dashdata.param_of(p, names.get(b, []), "provider") for p, b in pairs],
                 dtype=[dashdata.param_of(p, names.get(b, []), "dtype") for p, b in pairs])
    sel_m = dashui.multi("Machine", sorted(g["machine"].unique()), "ov:gm", where=c1, placeholder="all machines")
    sel_op = dashui.multi("Op", sorted(g["op"].unique()), "ov:gop", where=c2, placeholder="all ops")
    provs = sorted(x for x in g["provider"].dropna().unique())
    dts = sorted(x for x in g["dtype"].dropna().unique())
    sel_p = dashui.multi("Provider", provs, "ov:gprov", where=c3, placeholder="all providers", disabled=not provs)
    sel_d = dashui.multi("Dtype", dts, "ov:gdtype", where=c4, placeholder="all dtypes", disabled=not dts)
    keep = pd.Series(True, index=g.index)
    for col, sel in (("machine", sel_m), ("op", sel_op), ("provider", sel_p), ("dtype", sel_d)):
        if sel:
            keep &= g[col].isin(sel)
    g = g[keep]
    if g.empty:
        st.info("No benchmark matches these filters.")
        return
    status = [_status(row) for row in g.itertuples()]
    view = pd.DataFrame({
        "status": status,
        "op": g["op"], "params": g["param_key"].replace("", "—"), "machine": g["machine"],
        "trend": [list(s) if s is not None else [] for s in g["spark"]],
        "latest": [dashdata.fmt_value(v, u) for v, u in zip(g["latest"], g["unit"])],
        "throughput": [dashdata.fmt_rate(v, u) for v, u in zip(g["latest_per_s"], g["item_unit"])],
        "change": [(a / b - 1.0) if b and a == a and b == b else None for a, b in zip(g["latest"], g["earlier"])],
        "commits": g["commits"].astype(int),
        "benchmark": g["benchmark"],
        "link": ["explorer?" + urlencode({"op": o, "bench": b, "m": m} | ({"pk": p} if p else {})) for o, b, m, p in
                 zip(g["op"], g["benchmark"], g["machine"], g["param_key"])]})
    view = view.assign(_r=[_rank(s) for s in status]).sort_values(["_r", "op", "params", "machine"],
                                                                  kind="stable").drop(columns="_r")
    st.caption(f"{len(view)} series · change = latest against the first of the last {n} commits "
               "(for times, + is slower) · status: open regressions (the step's after/before ratio at its "
               "commit), else how the newest commit was judged at ingest")
    st.dataframe(view, hide_index=True, width="stretch", key="grid_table", column_config={
        "trend": st.column_config.LineChartColumn(f"last {n} commits", width="small"),
        "change": st.column_config.NumberColumn(f"change ({n} commits)", format="percent"),
        "latest": st.column_config.TextColumn("latest", help="the newest commit's value, in its unit"),
        "throughput": st.column_config.TextColumn(
            "throughput", help="a model's step: the tokens (images) it processes over its time, at the newest "
            "commit; — for a kernel"),
        "commits": st.column_config.NumberColumn("commits", help="of the last N commits, those with an ok value"),
        "link": st.column_config.LinkColumn("open", display_text="series", help="the series explorer")})
