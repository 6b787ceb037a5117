"""Compare: two commits (or two machines) side by side, like ``asv compare``, with ratios and significance."""

from __future__ import annotations

import dashdata
import dashui
import numpy as np
import pandas as pd
import streamlit as st

from xrt.track.stats import mannwhitney  # numpy only

st.title("Compare")
st.caption("Every benchmark measured on both sides, A → B. Marked slower (+) or faster (−) when the change is at "
           "least the threshold and the samples differ significantly (Mann-Whitney p ≤ α), as `asv compare` and "
           "`xrt gate` judge; ~ when the change is large but not significant. Never compare timings across GPU "
           "models: two machines are for like-for-like hosts.")
r = dashui.reader()
if r is None:
    st.stop()

machines = sorted(r.machines()["machine"])
ca, cb = st.columns(2)


def pick_side(col, tag: str, default_machine: str, nth: int) -> tuple[str, str | None]:
    m = dashui.select(f"Machine {tag}", machines, f"cmp:m{tag.lower()}", default=default_machine, where=col)
    commits = r.commits_of(m)
    if commits.empty:
        col.info(f"{dashui.lit(m)} has no runs.")
        return m, None
    labels = {h: f"{dashdata.short(h)}  {str(d)[:10]}  {dashdata.first_line(msg, 50)}" for h, d, msg in
              zip(commits["hash"], commits["author_date"], commits["message"])}
    key = f"c{tag.lower()}"
    q = st.query_params.get_all(key)
    if len(q) == 1 and q[0] and q[0] not in labels:  # a hash prefix in a shared link (else dashui.select warns)
        full = [h for h in labels if h.startswith(q[0])]
        if len(full) == 1:
            st.query_params[key] = full[0]
    hashes = list(labels)
    c = dashui.select(f"Commit {tag}", hashes, f"cmp:{key}", default=hashes[min(nth, len(hashes) - 1)], fmt=labels.get,
                      where=col)
    return m, c


ma, a = pick_side(ca, "A", machines[0], 1)
mb, b = pick_side(cb, "B", ma, 0)
o1, o2, o3 = st.columns(3)
thr = dashui.number("Threshold (%)", "cmp:thr", 5.0, where=o1, min_value=0.0, max_value=100.0, step=1.0)
alpha = dashui.number("α (p-value bar)", "cmp:alpha", 0.002, where=o2, min_value=0.0, max_value=1.0, step=0.001,
                      format="%.3f")
only = dashui.radio("Rows", ["changed", "all"], "cmp:rows", where=o3)
if a is None or b is None:
    st.stop()

d = r.compare(ma, a, mb, b)
if d.empty:
    st.info("Neither side has results.")
    st.stop()


def judge(row) -> tuple[float, float, str]:
    """The change mark, or what the statuses say: an asv skip (``status = skipped``: not applicable
    here) is not a failure; ok at B after a failure at A is ``fixed``; absent on one side is ``new`` /
    ``missing``."""
    av, bv, sa_, sb_ = row.a_value, row.b_value, row.a_status, row.b_status
    if sb_ is None or (isinstance(sb_, float) and pd.isna(sb_)):
        return np.nan, np.nan, "missing at B"
    if sb_ != "ok":
        return np.nan, np.nan, sb_  # failed / skipped at B
    if sa_ == "failed":
        return np.nan, np.nan, "fixed"
    if sa_ != "ok" or pd.isna(av):
        return np.nan, np.nan, "new at B"  # skipped or absent at A
    ratio = bv / av if av else np.nan
    sa = np.asarray(row.a_samples if row.a_samples is not None else [av], dtype=float)
    sb = np.asarray(row.b_samples if row.b_samples is not None else [bv], dtype=float)
    p = mannwhitney(sa, sb)[0] if len(sa) >= 2 and len(sb) >= 2 else np.nan
    worse = ratio < 1 if dashdata.higher_is_better(row.unit) else ratio > 1
    big = abs(np.log(ratio)) >= np.log1p(thr / 100) if ratio and ratio > 0 else False
    if not big:
        mark = ""
    elif not np.isnan(p) and p <= alpha:
        mark = "+" if worse else "-"
    else:
        mark = "~"
    return ratio, p, mark


res = pd.DataFrame([judge(x) for x in d.itertuples()], columns=["ratio", "p", "change"], index=d.index)
# skipped (or failed) at both commits: the same state at A and B, so not a change
same = (d["a_status"] == d["b_status"]) & d["b_status"].isin(["skipped", "failed"])
d = pd.concat([d.drop(columns=["a_samples", "b_samples", "a_status", "b_status"]), res], axis=1)
n = d["change"].value_counts()
k = st.columns(7)
k[0].metric("compared", int(d["ratio"].notna().sum()))
k[1].metric("slower (+)", int(n.get("+", 0)))
k[2].metric("faster (−)", int(n.get("-", 0)))
k[3].metric("not significant (~)", int(n.get("~", 0)))
k[4].metric("failed at B", int(n.get("failed", 0)))
k[5].metric("fixed at B", int(n.get("fixed", 0)), help="failed at A, ok at B")
k[6].metric("skipped at B", int(n.get("skipped", 0)), help="asv skips: not applicable on this machine, not failures")
if only == "changed":
    d = d[(d["change"] != "") & ~same]
if d.empty:
    st.success(f"No benchmark moved by {thr:g} % or more between A and B.")
    st.stop()
d = d.assign(params=d["param_key"].replace("", "—"), change=d["change"].replace({"-": "−"}),
             # in its unit: 41.2 µs, not 4.12e-05
             a=[dashdata.fmt_value(v, u) for v, u in zip(d["a_value"], d["unit"])],
             b=[dashdata.fmt_value(v, u) for v, u in zip(d["b_value"], d["unit"])])
# the slower rows first (slowest first), then new failures, then the rest; no ratio sorts last
d = (d.assign(_rank=d["change"].map({"+": 0, "failed": 1}).fillna(2))
     .sort_values(["_rank", "ratio"], ascending=[True, False], na_position="last").drop(columns="_rank"))
st.dataframe(d[["change", "benchmark", "params", "a", "b", "ratio", "p"]], hide_index=True,
             width="stretch", height=min(38 * (len(d) + 1), 700), column_config={
                 "a": st.column_config.TextColumn(f"A {dashdata.short(a, 8)}"),
                 "b": st.column_config.TextColumn(f"B {dashdata.short(b, 8)}"),
                 "ratio": st.column_config.NumberColumn("ratio B/A", format="%.3f×"),
                 "p": st.column_config.NumberColumn("p (Mann-Whitney)", format="%.1e")})
dashui.footer(r)
