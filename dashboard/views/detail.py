"""One regression: its series with the change point, the samples before and after, the commits,
the ``--diag`` checklist, and acknowledge / ignore with a note."""

from __future__ import annotations

import json

import altair as alt
import dashdata
import dashui
import numpy as np
import pandas as pd
import streamlit as st

from xrt.track.detect import DetectConfig
from xrt.track.gate import Settings as GateSettings
from xrt.track.labels import CLOCK, REGRESSION, SETTABLE

st.title("Regression detail")
r = dashui.reader()
if r is None:
    st.stop()
if not r.has_regressions():
    dashui.no_regressions_yet(r)
    st.stop()

flash = st.session_state.pop("ack_flash", None)
if flash:
    st.success(flash)  # built below from the stored id and status, through dashui.lit

rid = dashui.one("id")
rec = r.regression(rid) if rid and len(rid) <= 64 else None
if rec is None:
    regs = r.regressions(list(dashdata.OPEN), [REGRESSION, CLOCK])
    if rid is not None:
        dashui.bad_param("id", rid, "no stored regression has this id, or more than one starts with it (a later "
                         "`xrt regressions` run may have dropped it); pick one of the open ones below")
    if "id" in st.query_params:  # a bad id (or several) leaves the address bar
        del st.query_params["id"]
    if regs.empty:
        st.info("No open regressions. The overview lists every step (status: all).")
        st.stop()
    if rid is None:  # opened from the menu: say what this page is for and where its links come from
        st.info(f"This page shows one regression. Pick one of the {len(regs)} open ones below, or open one from "
                "the Regressions page (its **details** link, or a click on its row).")
    labels = {i: f"{i}  {b} [{p or '-'}] on {m}  {x:.3f}×" for i, b, p, m, x in  # plain text: not Markdown
              zip(regs["id"], regs["benchmark"], regs["param_key"], regs["machine"], regs["ratio"])}
    pick = st.selectbox("Regression", list(labels), format_func=labels.get, index=None, placeholder="choose one")
    if pick is None:
        st.stop()
    st.query_params["id"] = pick
    rec = r.regression(pick)
st.query_params["id"] = rec["id"]

# Names, parameters, machines, the unit, the status and the note come from the database: they reach
# Markdown (headings, metrics, captions) only through dashui.lit, and the note is plain text.
unit = rec.get("unit") or ""
suspected = rec.get("suspected") in (True, 1)  # the newest commit, judged at ingest (xrt.track.newest)
st.subheader(f"{dashui.lit(rec['benchmark'], code=True)} [{dashui.lit(rec['param_key'] or '-')}] "
             f"on {dashui.lit(rec['machine'])}")
c = st.columns(5)
c[0].metric("ratio (after / before)", f"{rec['ratio']:.3f}×")
c[1].metric("before", dashui.lit(dashdata.fmt_value(rec["before"], unit), 40))
c[2].metric("after", dashui.lit(dashdata.fmt_value(rec["after"], unit), 40))
c[3].metric("p (Mann-Whitney)", f"{rec['p_value']:.1e}")
c[4].metric("status", dashui.lit(rec["status"], 40) + (" (fixed)" if rec.get("fixed_by") else ""))
st.caption(f"{dashui.lit(rec['kind'], 40)} first seen at commit {dashui.lit(dashdata.short(rec['commit']), code=True)} "
           f"(previous {dashui.lit(dashdata.short(rec['previous_commit']), code=True)}); "
           + (f"judged on {rec['n_before']} samples before and {rec['n_after']} after; " if suspected else
              f"judged on {rec['n_before']} commits before and {rec['n_after']} after; ") +
           f"id {dashui.lit(rec['id'], code=True)}"
           + (f"; fixed by {dashui.lit(dashdata.short(rec['fixed_by']), code=True)}" if rec.get("fixed_by") else ""))
if suspected:
    st.info("Suspected: the newest commit of this series, judged when its results were ingested against the "
            "commit before it, by the gate's rules (`xrt gate`). The change-point detector confirms it or "
            "withdraws it once enough commits follow.")
if rec.get("note"):
    st.text(f"Note: {rec['note']}")
st.page_link("views/explorer.py", label="Open this series in the explorer", icon=":material/show_chart:",
             query_params={"bench": rec["benchmark"], "op": dashdata.op_of(rec["benchmark"]), "m": rec["machine"],
                           "pk": rec["param_key"]})

s = r.series(rec["machine"], rec["benchmark"], rec["param_key"])
if s.empty:
    st.info("The series has no ok results left in the database.")
else:
    f, lab = dashdata.time_scale(s["unit"].iloc[0] or unit, s["value"])
    idx = s.index[s["commit_hash"] == rec["commit"]]
    k = int(idx[0]) if len(idx) else None
    s = s.assign(y=s["value"] * f, commit=s["commit_hash"].map(dashdata.short),
                 msg=s["message"].map(dashdata.first_line), side="other")
    # the commits judged each side (a suspected step: the newest commit against the one before it)
    nb, na = (1, 1) if suspected else (int(rec["n_before"] or 20), int(rec["n_after"] or 20))
    if k is not None:
        s.loc[max(0, k - nb):k - 1, "side"] = "before"
        s.loc[k:k + na - 1, "side"] = "after"
    q = [np.percentile(np.asarray(smp, float) * f, [25, 75]) if smp is not None and len(smp) >= 2 else (np.nan, np.nan)
         for smp in s["samples"]]
    s = s.assign(lo=[a for a, _ in q], hi=[b for _, b in q])
    # the threshold that judged this step: the gate's for a suspected one (the newest commit, judged at
    # ingest by the gate's rules), the change-point detector's otherwise
    thr, judge = (GateSettings().threshold, "the gate's") if suspected else (DetectConfig().min_effect,
                                                                             "the detector's")
    st.markdown("**The series**, one point per commit (median of its samples; the grey band is their "
                "interquartile range); the red line is the first slow commit; the green band is the level before "
                f"it ± {judge} threshold ({thr:.0%}): a change inside it is not reported.")
    fit = st.toggle("Fit the y axis to the data", key="det:fit", help="off: the axis starts at zero, so a change "
                    "reads at its true size")
    ys = alt.Scale(zero=not fit, nice=True)
    base = alt.Chart(s).encode(x=dashui.commit_x(s, mark=int(s["ord"].iloc[k]) if k is not None else None))
    pts = base.mark_line(point=True, strokeWidth=1, color="#888").encode(
        y=alt.Y("y:Q", title=f"time ({lab})" if lab != unit or unit == "seconds" else lab, scale=ys,
                axis=alt.Axis(format=",.4~r")),
        tooltip=["commit", "commit_date:T", "msg", alt.Tooltip("y:Q", format=".4g", title=lab)])
    band = base.mark_area(opacity=0.15, color="#888").encode(y=alt.Y("lo:Q", scale=ys), y2="hi:Q")
    colored = base.mark_point(filled=True, size=45).encode(
        y="y:Q", color=alt.Color("side:N", scale=alt.Scale(domain=["before", "after", "other"],
                                                          range=["#1f77b4", "#d62728", "#bbbbbb"]), title="window"))
    layers = [band, pts, colored]
    if k is not None and rec.get("before"):  # the threshold: changes inside the band are not reported
        lvl = float(rec["before"]) * f
        tb = pd.DataFrame({"lo": [lvl / (1 + thr)], "hi": [lvl * (1 + thr)], "x0": [s["ord"].min()],
                           "x1": [s["ord"].max()]})
        layers.insert(0, alt.Chart(tb).mark_rect(opacity=0.10, color="#2ca02c").encode(
            x="x0:Q", x2="x1:Q", y=alt.Y("lo:Q", scale=ys), y2="hi:Q"))
    if k is not None:
        rule = alt.Chart(pd.DataFrame({"ord": [s["ord"].iloc[k]]})).mark_rule(color="red", strokeDash=[4, 3]).encode(
            x="ord:Q")
        layers.append(rule)
    st.altair_chart(alt.layer(*layers).properties(height=320).interactive(), width="stretch")

    win = s[s["side"] != "other"]
    dist = pd.DataFrame([{"window": side, "sample": v * f} for side, smp, val in
                         zip(win["side"], win["samples"], win["value"])
                         for v in (list(smp) if smp is not None and len(smp) else [val])])
    if not dist.empty:
        # a few slow outliers (690 µs beside 4 µs) would squash both boxes flat at 0 on a linear axis
        log = bool((dist["sample"] > 0).all() and dist["sample"].max() > 10 * dist["sample"].min())
        st.markdown("**Samples before and after** (every stored sample of the commits the detector judged"
                    + ("; log axis: the samples span more than 10×" if log else "") + ").")
        box = alt.Chart(dist).mark_boxplot(extent="min-max").encode(
            x=alt.X("sample:Q", title=f"time ({lab})" if unit == "seconds" else lab,
                    scale=alt.Scale(type="log") if log else alt.Scale(zero=False)),
            y=alt.Y("window:N", title=None, sort=["before", "after"]),
            color=alt.Color("window:N", scale=alt.Scale(domain=["before", "after"], range=["#1f77b4", "#d62728"]),
                            legend=None))
        st.altair_chart(box.properties(height=160), width="stretch")

st.markdown("**Commits in the step**")
cm = r.commits_between(rec["previous_commit"], rec["commit"])
if cm.empty:
    st.caption("The database has no commit details for this step.")
else:
    st.dataframe(cm.assign(hash=cm["hash"].map(dashdata.short),
                           message=cm["message"].map(lambda x: dashdata.first_line(x, 120))),
                 hide_index=True, width="stretch",
                 column_config={"author_date": st.column_config.DatetimeColumn("date", format="YYYY-MM-DD HH:mm")})

# `xrt culprit` (a failing gate's range, bisected on the series' machine) stores the commit to blame
# and the evidence on the regression; this page only shows what is stored.
bis = rec.get("bisection")
try:
    bis = json.loads(bis) if isinstance(bis, str) and bis else (bis if isinstance(bis, dict) else None)
except ValueError:
    bis = None
if rec.get("culprit") or bis:
    st.markdown("**Culprit** (`xrt culprit`: the gate's range bisected, each commit measured beside the good one "
                "in one job, judged by the gate's rules)")
    if rec.get("culprit"):
        st.markdown(f"culprit {dashui.lit(dashdata.short(rec['culprit'], 12), code=True)} "
                    f"{dashui.lit((bis or {}).get('subject') or '', 160)}")
    else:
        st.caption(f"No culprit: bisect {dashui.lit((bis or {}).get('status') or '?', 40)}, between "
                   f"{dashui.lit(dashdata.short((bis or {}).get('last_good')), code=True)} and "
                   f"{dashui.lit(dashdata.short((bis or {}).get('first_bad')), code=True)}.")
    steps = pd.DataFrame([{"commit": dashdata.short(x.get("commit")),
                           "good": dashdata.fmt_value(x.get("good_value"), unit),
                           "commit's": dashdata.fmt_value(x.get("value"), unit), "ratio": x.get("ratio"),
                           "p": x.get("p_value"), "verdict": "bad" if x.get("bad") else "good",
                           "seconds": x.get("seconds")} for x in (bis or {}).get("steps") or []])
    if not steps.empty:
        st.caption(f"Measured commits ({len(steps)}), each beside good "
                   f"{dashui.lit(dashdata.short((bis or {}).get('good')), code=True)}:")
        st.dataframe(steps, hide_index=True, width="stretch")
    ex = (bis or {}).get("explanation") or {}
    if ex.get("rows"):
        st.caption("What changed at the culprit (`xrt explain`, its first rows):")
        st.dataframe(pd.DataFrame(ex["rows"], columns=["group", "what", "kernel", "base", "head", "change"]),
                     hide_index=True, width="stretch")
    elif ex.get("error"):
        st.text(str(ex["error"]))

st.markdown("**Likely causes** (`xrt regressions show ID`'s checklist, computed when the step was first seen)")
if not rec["diag"]:
    show = f"xrt regressions show {rec['id']} --db {r.path}"
    st.caption(f"No checklist stored for this step. {dashui.lit(show, None, code=True)} computes it.")
for chk in rec["diag"]:
    icon = dashui.STATUS_ICON.get(chk.get("status"), ":material/radio_button_unchecked:")
    st.markdown(f"{icon} **{dashui.lit(chk.get('name'), 80)}**")
    st.text(str(chk.get("detail") or "") + (f"\n→ {chk['advice']}" if chk.get("advice") else ""))

# `xrt explain` runs on a GPU host and stores its result; this page only shows what is stored.
ex = r.explanation(rec)
with st.expander("What changed between base and head (`xrt explain`)", expanded=ex is not None):
    if ex is None:
        cmd = f"xrt explain {rec['id']} --db {r.path}"
        st.caption("No explanation stored for this step. On a GPU host (Nsight Compute for the NCU part), "
                   f"{dashui.lit(cmd, None, code=True)} collects one; this page never runs it.")
    else:
        pl = ex["payload"]
        st.caption(f"base {dashui.lit(dashdata.short(ex['base_commit']), code=True)} → head "
                   f"{dashui.lit(dashdata.short(ex['head_commit']), code=True)}; "
                   f"collected on {dashui.lit(pl.get('collected_on') or ex.get('host') or '?', 80)}"
                   + (f" ({dashui.lit(pl['gpu'], 80)})" if pl.get("gpu") else "")
                   + f" at {dashui.lit(str(ex['created_at'])[:19])}; ncu clock control "
                   + dashui.lit((pl.get("ncu") or {}).get("clock_control", "?"), 20, code=True)
                   + "; ranked: kernel list, launch configuration, registers/spills, throughput, NCU findings, "
                     "settings, compiled code.")
        changes = pd.DataFrame(pl.get("changes") or [], columns=["group", "what", "kernel", "base", "head", "change"])
        if changes.empty:
            st.info("Nothing that was collected differs between base and head.")
        else:
            st.dataframe(changes, hide_index=True, width="stretch")
        missing = [f"{side}: {part}: {state}" for side in ("base", "head")
                   for part, state in ((pl.get("sides") or {}).get(side, {}).get("parts") or {}).items()
                   if state != "ok"]
        if missing:
            st.text("Not collected:\n" + "\n".join(missing))

st.markdown("**Acknowledge or ignore**")
can_write, why = dashui.writes()
if not can_write:
    ack = f"xrt regressions ack {rec['id']} --note TEXT"
    st.caption(f"{why} Use {dashui.lit(ack, None, code=True)} on the database's host.")
else:
    with st.form("ack"):
        choice = st.radio("Mark as", list(SETTABLE), horizontal=True,
                          help="acknowledged: known, being worked on; ignored: not a real regression; new: reopen")
        note = st.text_input("Note", value=rec.get("note") or "", placeholder="why (kept with the regression)")
        if st.form_submit_button("Save"):
            from xrt.db import store
            from xrt.track.regressions import set_status

            try:
                out = store.using(r.path, lambda con: set_status(con, rec["id"], choice, note.strip() or None),
                                  write=True)
            except (ValueError, RuntimeError, OSError) as e:
                st.error(f"Not saved: {dashui.lit(e, 300, code=True)}")
            else:
                st.session_state["ack_flash"] = f"Saved: {dashui.lit(out['id'])} is now {dashui.lit(out['status'])}."
                st.rerun()
dashui.footer(r)
