"""Series explorer: pick an op (or any benchmark), filter its parameters and machines, plot against commits.

Filters come from the database, not from xrt's suites: the op is the class (or module) part of
asv's benchmark name, and one filter per parameter name in ``benchmarks.param_names`` (for xrt's
suites: shape, dtype, provider, config), so a foreign corpus (django-asv) works as well. An op suite's
series gets its device- and host-time twins beside it (``twinview``).
"""

from __future__ import annotations

import itertools

import altair as alt
import dashdata
import dashui
import streamlit as st
import twinview

MAX_SERIES = 24
# "throughput": a model's step only (tokens/s, images/s: the items it records over its time)
METRICS = {"time": "value", "throughput": "per_s", "GB/s": "gbps", "TFLOP/s": "tflops", "% of peak": "pct_sol"}

st.title("Series explorer")
r = dashui.reader()
if r is None:
    st.stop()

cat = r.catalog()
cat = cat.assign(op=cat["benchmark"].map(dashdata.op_of))
names = r.param_names()

side = st.sidebar
side.header("Filters")
# Defaults open on something with values: the first op / benchmark / machine that has ok results,
# and (below) the parameters of its series with the most of them (not the first value by name: a
# CPU machine has no `cuda` series).
has = cat[cat["n"] > 0]
ops = sorted(cat["op"].unique())
# the op with the longest timed history (a one-point memory series in MiB is a poor first view); by name on a tie
rank = has.assign(timed=has["unit"].fillna("seconds").eq("seconds")).groupby("op")[["timed", "n"]].max()
first = min(rank.index, key=lambda o: (not rank.at[o, "timed"], -int(rank.at[o, "n"]), o)) if len(rank) else ops[0]
op = dashui.select("Op", ops, "ex:op", default=first, where=side,
                   help="the class (or module) part of the benchmark's name")
in_op = cat[cat["op"] == op]
benches = sorted(in_op["benchmark"].unique())
bench = dashui.select("Benchmark", benches, "ex:bench",
                      default=twinview.default_bench(list(in_op.loc[in_op["n"] > 0, "benchmark"])) or benches[0],
                      where=side, disabled=len(benches) == 1)
rows = in_op[in_op["benchmark"] == bench]
machines = sorted(rows["machine"].unique())
sel_m = dashui.multi("Machines (GPUs)", machines, "ex:m",
                     default=[min(rows.loc[rows["n"] > 0, "machine"], default=machines[0])], where=side)

# one filter per parameter; values as asv wrote them (repr strings), shown unquoted
plist = [list(p) if p is not None else [] for p in rows["params"]]
width = max((len(p) for p in plist), default=0)
pnames = names.get(bench, [])
if len(pnames) != width:
    pnames = [f"parameter {i + 1}" for i in range(width)]
for q in [q for q in st.query_params if q.startswith("p.") and q[2:] not in pnames]:
    dashui.bad_param(q, st.query_params.get_all(q), f"{dashui.lit(bench, 120, code=True)} has no parameter "
                f"{dashui.lit(q[2:], 60, code=True)}" + (f"; its parameters are {', '.join(map(dashui.lit, pnames))}"
                                                              if pnames else "; it takes none"))
    del st.query_params[q]
pk = dashui.one("pk")  # a deep link to one series (from the regression page)
if "pk" in st.query_params:
    del st.query_params["pk"]
if pk is not None:
    hit = [p for p, k in zip(plist, rows["param_key"]) if k == pk]
    if not hit:
        dashui.bad_param("pk", pk, f"no series of {dashui.lit(bench, 120, code=True)} has these parameters")
    for i, name in enumerate(pnames if hit else []):
        st.session_state[f"ex:p.{name}"] = [dashdata.unquote(hit[0][i])]
mine = rows[rows["machine"].isin(sel_m) & (rows["n"] > 0)]
# the most ok values; on a tie, the first values in the filters' own order (shortest, then by name)
cands = [(int(n), list(p) if p is not None else []) for n, p in zip(mine["n"], mine["params"])]
best = min(cands, key=lambda t: (-t[0], [(len(v), v) for v in t[1]]))[1] if cands else []
chosen: list[list[str]] = []
for i, name in enumerate(pnames):
    values = sorted({p[i] for p in plist if len(p) > i}, key=lambda v: (len(v), v))
    pretty = {v: dashdata.unquote(v) for v in values}
    opts = [pretty[v] for v in values]
    default = [pretty[best[i]]] if len(best) > i and best[i] in pretty else opts[:1]
    picked = dashui.multi(dashui.lit(name.capitalize(), 80), opts, f"ex:p.{name}", default=default, where=side)
    back = {b: a for a, b in pretty.items()}
    chosen.append([back[v] for v in picked])
keys = [", ".join(c) for c in itertools.product(*chosen)] if width else [""]
keys = [k for k in keys if k in set(rows["param_key"])]

units = rows["unit"].dropna()
kind = "time" if units.empty or units.iloc[0] == "seconds" else f"value ({dashui.lit(units.iloc[0], 20)})"  # MiB
items = rows["item_unit"].dropna()
rate = f"{dashui.lit(items.iloc[0], 20)}/s" if len(items) else None  # a model's step: "tokens/s", "images/s"
shown = [m for m in METRICS if m != "throughput" or rate]
metric = dashui.radio("Show", shown, "ex:metric",
                      format_func=lambda m: kind if m == "time" else rate if m == "throughput" else m,
                      help="GB/s, TFLOP/s and % of peak need the bytes/FLOPs the timing layer records "
                      "(xrt's own suites); foreign corpora have time only. A model's step also shows its "
                      "throughput: the tokens (images) a step processes over its time")
xaxis = dashui.radio("Against", ["commit", "date"], "ex:x")
yaxis = dashui.radio("Y axis", ["from zero", "fit the data"], "ex:y",
                     help="from zero: a change reads at its true size; fit the data: small changes show")

if not sel_m or not keys:
    st.info("Pick at least one machine and one value of every parameter in the sidebar.")
    st.stop()
n_series = len(sel_m) * len(keys)
if n_series > MAX_SERIES:
    st.warning(f"{n_series} series selected: showing the first {MAX_SERIES}. Narrow the filters to see the rest.")
    keys = keys[: max(1, MAX_SERIES // len(sel_m))]

d = r.many_series(sel_m, bench, keys)
col = METRICS[metric]
if d.empty or d["value"].isna().all():
    st.info("No ok results for this selection (failed or skipped everywhere, or never measured on these "
            "machines): pick other parameters or machines in the sidebar.")
    st.stop()
if d[col].isna().all():
    what = {"value": "ok results", "gbps": "GB/s (bytes moved are not recorded for this benchmark)",
            "tflops": "TFLOP/s (FLOPs are not recorded for this benchmark)",
            "pct_sol": "% of peak (no peak or speed-of-light is recorded)",
            "per_s": f"{rate} (no step of this selection recorded what it processes)"}[col]
    st.info(f"No {what} for this selection.")
    st.stop()

unit = d["unit"].dropna().iloc[0] if d["unit"].notna().any() else None
if col == "value":
    f, lab = dashdata.time_scale(unit, d["value"])
    ytitle = f"time ({lab})" if unit == "seconds" else (unit or "value")
else:
    f, ytitle = 1.0, rate if col == "per_s" else metric
d = d.assign(y=d[col] * f, commit=d["commit_hash"].map(dashdata.short), msg=d["message"].map(dashdata.first_line),
             series=[dashui.series_label(m, pk, len(sel_m), len(keys), names.get(bench))
                     for m, pk in zip(d["machine"], d["param_key"])])
x = dashui.commit_x(d) if xaxis == "commit" else alt.X("commit_date:T", title="commit date")
yscale = alt.Scale(zero=yaxis == "from zero", nice=True)
color = alt.Color("series:N", title="series", legend=alt.Legend(orient="bottom", labelLimit=400))
line = (alt.Chart(d.dropna(subset=["y"])).mark_line(point=alt.OverlayMarkDef(size=18), strokeWidth=1.2)
        .encode(x=x, y=alt.Y("y:Q", title=ytitle, scale=yscale, axis=alt.Axis(format=",.4~r")), color=color,
                tooltip=["series", "machine", "param_key", "commit", "commit_date:T", "msg",
                         alt.Tooltip("y:Q", format=".4g", title=ytitle)]))
layers = [line]
if col == "value" and d["q25"].notna().any():  # the samples' spread: asv's interquartile range per commit
    band = d.assign(lo=d["q25"] * f, hi=d["q75"] * f).dropna(subset=["lo", "hi"])
    layers.insert(0, alt.Chart(band).mark_area(opacity=0.18).encode(x=x, y=alt.Y("lo:Q", scale=yscale),
                                                                     y2="hi:Q", color=color))
has_ci = col == "value" and d["ci_a"].notna().any()
if has_ci:  # asv's 99 % confidence interval of each commit's value, as a bar
    ci = d.assign(lo=d["ci_a"] * f, hi=d["ci_b"] * f).dropna(subset=["lo", "hi"])
    layers.append(alt.Chart(ci).mark_rule(opacity=0.55).encode(x=x, y=alt.Y("lo:Q", scale=yscale), y2="hi:Q",
                                                                color=color))
chart = alt.layer(*layers).properties(height=420).interactive()
st.subheader(dashui.lit(bench, code=True))
if col == "value" and (d["q25"].notna().any() or has_ci):
    st.caption("Line: the median per commit"
               + ("; band: the samples' interquartile range (asv's q25–q75)" if d["q25"].notna().any() else "")
               + ("; bars: asv's 99 % confidence interval of the commit's value" if has_ci else "") + ".")
st.altair_chart(chart, width="stretch")

best = "min" if not dashdata.higher_is_better(ytitle) and col == "value" else "max"
summ = (d.groupby("series").agg(points=("y", "count"), first=("y", "first"), last=("y", "last"), best=("y", best))
        .reset_index())
summ["last / first"] = summ["last"] / summ["first"]
extra = {}
if rate and col == "value":  # a model's step: its throughput beside its time
    last = d.dropna(subset=["y"]).groupby("series")["per_s"].last()
    summ["throughput"] = summ["series"].map(last).round()
    extra = {"throughput": st.column_config.NumberColumn(f"last ({rate})", format="localized")}
st.dataframe(summ, hide_index=True, width="stretch",
             column_config={c: st.column_config.NumberColumn(f"{c} ({ytitle})", format="%.4g")
                            for c in ("first", "last", "best")} |
             {"last / first": st.column_config.NumberColumn(format="%.3f×")} | extra)
if metric == "time" and dashdata.higher_is_better(unit):
    st.caption(f"Unit {dashui.lit(unit, 40)}: higher is better.")
twinview.show(r, bench, set(cat["benchmark"]), sel_m, keys, xaxis, yaxis, list(d.dropna(subset=["y"])["series"]),
              names.get(bench))
dashui.footer(r)
