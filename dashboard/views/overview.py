"""Overview: per machine the last run, then the open regressions, newest first."""

from __future__ import annotations

from urllib.parse import quote

import altair as alt
import dashdata
import dashui
import grid
import pandas as pd
import streamlit as st

from xrt.db import alerts
from xrt.track.labels import CLOCK, IMPROVEMENT, REGRESSION, STATUSES

st.title("Regressions")
st.caption("What got slower, where, since when, and why: the open regressions of every machine, newest "
           "first slow commit first. Click a row for its series, its commits and the checklist of likely causes.")

r = dashui.reader()
if r is None:
    st.stop()

st.subheader("Machines: last run")
m = r.machines()
if m.empty:
    st.info("No runs recorded.")
else:
    view = pd.DataFrame({
        # what a reader scans first on the left; the commit message, cut short, last (it used to push
        # the status and the run's date past the right edge)
        "machine": m["machine"], "GPU": m["gpu"].fillna("—"), "ran at": m["ran_at"],
        "commit": m["commit_hash"].map(dashdata.short),
        "status": [f"{ok} ok" + (f", {f} failed" if f else "") + (f", {s} skipped" if s else "")
                   for ok, f, s in zip(m["n_ok"].fillna(0).astype(int), m["n_failed"].fillna(0).astype(int),
                                       m["n_skipped"].fillna(0).astype(int))],
        "throttled": [f"{x:.0%}" if x == x and x is not None else "—" for x in m["throttle_share"]],
        "runs": m["runs"],
        "message": m["message"].map(lambda s: dashdata.first_line(s, 40)).replace("", "—")})
    st.dataframe(view, hide_index=True, width="stretch", column_config={
        "ran at": st.column_config.DatetimeColumn("ran at", format="YYYY-MM-DD HH:mm"),
        "message": st.column_config.TextColumn("message", width=90),  # the table fits 1400 px: no scrolling
        "throttled": st.column_config.TextColumn("throttled",
                                                 help="share of samples with an NVML slowdown reason")})

if not r.has_regressions():
    dashui.no_regressions_yet(r)
    grid.show(r)
    dashui.footer(r)
    st.stop()

machines = sorted(m["machine"]) if not m.empty else []
c1, c2, c3 = st.columns([2, 2, 1])
sel_m = dashui.multi("Machines", machines, "ov:m", where=c1, placeholder="all machines")
kinds = dashui.multi("Kinds", [REGRESSION, CLOCK, IMPROVEMENT], "ov:kind", default=[REGRESSION, CLOCK],
                     where=c2, help="clock: time moved but GPU cycles did not (a clock change, not code)")
show = dashui.radio("Status", ["open", "all"], "ov:status", where=c3, help="open = new or acknowledged")
statuses = list(dashdata.OPEN) if show == "open" else list(STATUSES)
regs = r.regressions(statuses, kinds or ["regression"], sel_m or None)

st.subheader(f"Open regressions ({len(regs)})" if show == "open" else f"Steps ({len(regs)})")
if regs.empty:
    st.success("No open regressions for this selection." if show == "open" else "No steps for this selection.")
    grid.show(r)
    dashui.footer(r)
    st.stop()

regs = regs.assign(
    params=regs["param_key"].replace("", "—"),
    first_slow=regs["commit"].map(dashdata.short) + "  " + regs["message"].map(lambda s: dashdata.first_line(s, 60)),
    slower_pct=(regs["ratio"] - 1.0),
    # suspected: the newest commit, judged at ingest; the detector confirms or withdraws it later
    status=[f"{s} (suspected)" if sus else s for s, sus in zip(regs["status"], regs["suspected"])],
    link="regression?id=" + regs["id"].map(lambda i: quote(str(i), safe="")))

# One alert per machine and first slow commit (xrt.db.alerts.group: the grouping `xrt regressions` and the
# gate's summary use), newest first; open one for its series and their ratios.
groups = alerts.group(regs.to_dict("records"), by_size=False)
st.markdown(f"**{len(groups)} alert{'s' if len(groups) != 1 else ''}**: the steps one machine saw at one commit, "
            "together (usually one cause). Open one for its series.")
for g in groups:
    items = pd.DataFrame(g.items)
    big = items.loc[(items["ratio"].map(lambda x: abs(x - 1.0) if x == x else 0.0)).idxmax()]
    label = (f"{dashui.lit(g.machine, 60)} at {dashui.lit(dashdata.short(g.commit))}: "
             f"{alerts.counts_text(items['kind'])}, largest "
             f"{big['ratio']:.3f}× ({len(items)} series) — {dashui.lit(dashdata.first_line(big['message'], 60))}")
    with st.expander(label, expanded=len(groups) == 1):
        st.dataframe(items[["link", "benchmark", "params", "ratio", "slower_pct", "kind", "status"]], hide_index=True,
                     width="stretch", column_config={
                         "link": st.column_config.LinkColumn("open", display_text="details"),
                         "ratio": st.column_config.NumberColumn("ratio (after/before)", format="%.3f×"),
                         "slower_pct": st.column_config.NumberColumn("change", format="percent")})

st.markdown("**Every step**, one row each (click a row for its page):")
table = regs[["link", "ratio", "slower_pct", "machine", "benchmark", "params", "first_slow", "commit_date", "status",
              "kind", "p_value"]]
event = st.dataframe(
    table, hide_index=True, width="stretch", on_select="rerun", selection_mode="single-row", key="regs_table",
    column_config={
        "link": st.column_config.LinkColumn("open", display_text="details", help="the regression's page"),
        "ratio": st.column_config.NumberColumn("ratio (after/before)", format="%.3f×"),
        "slower_pct": st.column_config.NumberColumn("change", format="percent"),
        "first_slow": st.column_config.TextColumn("first slow commit"),
        "commit_date": st.column_config.DatetimeColumn("commit date", format="YYYY-MM-DD"),
        "p_value": st.column_config.NumberColumn("p (Mann-Whitney)", format="%.1e")})
rows = event.selection.rows if event is not None and hasattr(event, "selection") else []
if rows:
    st.switch_page("views/detail.py", query_params={"id": regs.iloc[rows[0]]["id"]})

st.subheader("When they started")
chart_df = regs.dropna(subset=["commit_date"]).copy()
if chart_df.empty:
    st.caption("The commits of these steps carry no dates.")
else:
    chart_df["benchmark"] = chart_df["benchmark"] + " [" + chart_df["params"] + "]"
    # dates on the axis, with the hour only when the steps fall within two days (never hours alone)
    dates = pd.to_datetime(chart_df["commit_date"])
    fmt = "%Y-%m-%d %H:%M" if dates.max() - dates.min() < pd.Timedelta(days=2) else "%Y-%m-%d"
    chart = (alt.Chart(chart_df).mark_circle(size=70, opacity=0.8)
             .encode(x=alt.X("commit_date:T", title="date of the first slow commit",
                             axis=alt.Axis(format=fmt, labelAngle=-30, labelOverlap=True)),
                     y=alt.Y("ratio:Q", title="after / before (× slower)", scale=alt.Scale(zero=False)),
                     color=alt.Color("machine:N", title="machine"),
                     tooltip=["benchmark", "machine", alt.Tooltip("ratio:Q", format=".3f"), "first_slow", "status"])
             .properties(height=320))
    st.altair_chart(chart, width="stretch")
grid.show(r)
dashui.footer(r)
