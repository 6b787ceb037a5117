"""Tuning: per op, shape, dtype and GPU, the configs the tuner evaluated: the best against the
default, how the search converged, a heat map over two chosen parameters, the top-K and the failures.

Source, in order: the tuner's ``tuning_results`` table (its journals, loaded by ``xrt db ingest``)
when it has rows; else the suites' results whose ``config`` parameter is not ``default`` (the tuned
configs the benchmarks measured, latest commit per series); else an empty state saying what to run.
"""

from __future__ import annotations

import json

import altair as alt
import dashdata
import dashui
import pandas as pd
import streamlit as st

st.title("Tuning")
r = dashui.reader(allow_empty=True)  # a database of tuner journals only is fine here
if r is None:
    st.stop()


def knob_order(values: pd.Series) -> list[str]:
    """A parameter's values as the heat map's axis shows them: numbers by value, then the rest by
    name (block 128, 256, 512, 1024, auto)."""
    def key(v):
        try:
            return (0, float(v), "")
        except (TypeError, ValueError):
            return (1, 0.0, str(v))
    return ([str(v) for v in sorted(values.dropna().unique(), key=key)]
            + [str(v) for v in values[values.isna()].astype(str).unique()])


def from_results() -> pd.DataFrame:
    with_config = {b: n for b, n in r.param_names().items() if "config" in n}
    if not with_config:
        return pd.DataFrame()
    d = r.tuned_from_results(sorted(with_config))
    rows = []
    for m, b, params, v, g, unit in d.itertuples(index=False):
        p = dict(zip(with_config[b], (dashdata.unquote(x) for x in params)))
        if p.get("config", "default") == "default" or unit not in (None, "seconds"):
            continue
        rows.append({"op": dashdata.op_of(b), "device": m, "shape": p.get("shape", "-"), "dtype": p.get("dtype", "-"),
                     "provider": p.get("provider", "-"), "config": p["config"], "median_s": v, "gbps": g,
                     "status": "timed", "error": None, "eval": None, "is_default": None, "space_hash": None,
                     "strategy": None})
    return pd.DataFrame(rows)


src = "tuning_results table"
t = r.tuning_table()
if t.empty:
    t, src = from_results(), "benchmark results with a tuned config"
if t.empty:
    st.info("No tuning results yet. Run the tuner on the GPU machine, e.g. `xrt tune OP --shape SHAPE "
            "--dtype DTYPE`, then `xrt db ingest results/asv --tuned results/tuned "
            f"--db {r.path}` (every evaluation of its journals goes into tuning_results).")
    dashui.footer(r)
    st.stop()

c = st.columns(5)
op = dashui.select("Op", sorted(t["op"].unique()), "tun:op", where=c[0])
t = t[t["op"] == op]
dev = dashui.select("GPU (machine)", sorted(t["device"].unique()), "tun:dev", where=c[1])
t = t[t["device"] == dev]
shape = dashui.select("Shape", sorted(t["shape"].unique()), "tun:shape", where=c[2])
t = t[t["shape"] == shape]
dtype = dashui.select("Dtype", sorted(t["dtype"].unique()), "tun:dtype", where=c[3])
t = t[t["dtype"] == dtype]
prov = dashui.select("Provider", sorted(t["provider"].unique()), "tun:prov", where=c[4])
t = t[t["provider"] == prov].copy()
hashes = [h for h in t["space_hash"].dropna().unique()]
if len(hashes) > 1:  # evaluations of two versions of the space are never mixed
    newest = t.sort_values("eval", na_position="first")["space_hash"].dropna().iloc[-1]
    h = dashui.select("Space hash", sorted(hashes), "tun:hash", default=newest)
    t = t[t["space_hash"] == h].copy()
ok = t["status"].eq("timed") & t["median_s"].notna()
failed = t[~ok]
st.caption(f"From the {src}: {len(t)} evaluated configs, {int(ok.sum())} timed, {len(failed)} failed"
           + (f" ({', '.join(f'{n} {k}' for k, n in failed['status'].fillna('?').value_counts().items())})"
              if len(failed) else "") + ".")

# the best against the default, and how the search converged (best so far, in evaluation order)
timed_all = t[ok]
if len(timed_all):
    best_row = timed_all.loc[timed_all["median_s"].idxmin()]
    dflt = timed_all[timed_all["is_default"].fillna(False).astype(bool)]
    m = st.columns(3)
    m[0].metric("best (µs)", f"{best_row['median_s'] * 1e6:.4g}")
    if len(dflt):
        d_s = float(dflt["median_s"].iloc[0])
        m[1].metric("default (µs)", f"{d_s * 1e6:.4g}")
        m[2].metric("best vs default", f"{d_s / best_row['median_s']:.3f}×")
    st.markdown(f"Best config: {dashui.lit(str(best_row['config']), 300, code=True)}")
if t["eval"].notna().any() and len(timed_all):
    conv = t.sort_values("eval").reset_index(drop=True)
    conv["evaluation"] = range(1, len(conv) + 1)
    conv["best_us"] = conv["median_s"].where(conv["status"].eq("timed")).cummin() * 1e6
    conv["time_us"] = conv["median_s"].where(conv["status"].eq("timed")) * 1e6
    conv = conv[["evaluation", "best_us", "time_us"]]
    st.markdown("**Convergence**: the best time so far after each evaluation (dots: each config's time).")
    evals = alt.X("evaluation:Q", title="evaluations", axis=alt.Axis(format="d", tickMinStep=1))  # no 0.5 of one
    line = alt.Chart(conv).mark_line(interpolate="step-after").encode(
        x=evals, y=alt.Y("best_us:Q", title="best so far (µs)"))
    dots = alt.Chart(conv.dropna(subset=["time_us"])).mark_circle(size=18, opacity=0.35).encode(
        x=evals, y=alt.Y("time_us:Q", title="time (µs)"))
    st.altair_chart((dots + line).properties(height=260), width="stretch")
t = t[ok].copy()

# a config's values as the cells of one column each: a list or an object (JSON) becomes its JSON text
cfg = pd.DataFrame([{k: v if v is None or isinstance(v, (str, int, float, bool)) else json.dumps(v, sort_keys=True)
                     for k, v in dashdata.parse_config(x).items()} for x in t["config"]], index=t.index)
knobs = [k for k in cfg.columns if cfg[k].notna().any()]
t = pd.concat([t, cfg.add_prefix("cfg.")], axis=1)
t["time_us"] = t["median_s"] * 1e6

k1, k2, k3 = st.columns(3)
topk = int(dashui.number("Top K", "tun:k", 5, where=k3, min_value=1, max_value=100, step=1))
if len(knobs) >= 2:
    px = dashui.select("Heat map: x", knobs, "tun:hx", default=knobs[0], where=k1)
    py = dashui.select("Heat map: y", [k for k in knobs if k != px], "tun:hy", where=k2)
    # best (lowest) time per cell over the other parameters; the knobs' names come from the data, so
    # the chart's fields are fixed names (a "." or ":" in a name means something to Vega-Lite)
    cell = (t.groupby([f"cfg.{px}", f"cfg.{py}"], dropna=False, sort=False)["time_us"].min().reset_index()
            .set_axis(["hx", "hy", "time_us"], axis=1))
    # the axes in the values' order (block 128 before 1024, numbers before "auto"), not as text sorts them
    xs, ys = knob_order(cell["hx"]), knob_order(cell["hy"])
    cell["hx"], cell["hy"] = cell["hx"].astype(str), cell["hy"].astype(str)
    # viridis runs dark (low: fast) to yellow (high: slow); the label is dark where the cell is light
    lo, hi = cell["time_us"].min(), cell["time_us"].max()
    cell["ink"] = ["black" if hi > lo and (v - lo) / (hi - lo) > 0.55 else "white" for v in cell["time_us"]]
    heat = (alt.Chart(cell).mark_rect().encode(
        x=alt.X("hx:O", title=px, sort=xs), y=alt.Y("hy:O", title=py, sort=ys),
        color=alt.Color("time_us:Q", title="best time (µs)", scale=alt.Scale(scheme="viridis")),
        tooltip=[alt.Tooltip("hx:O", title=px), alt.Tooltip("hy:O", title=py),
                 alt.Tooltip("time_us:Q", format=".4g", title="best time (µs)")])
        + alt.Chart(cell).mark_text(fontSize=11).encode(
        x=alt.X("hx:O", sort=xs), y=alt.Y("hy:O", sort=ys), text=alt.Text("time_us:Q", format=".3g"),
        color=alt.Color("ink:N", scale=None))).resolve_scale(color="independent")  # the ink is no second scale
    st.markdown(f"**Configs tried**: best time (µs) for each ({dashui.lit(px, 80)}, {dashui.lit(py, 80)}), "
                "over the other parameters. Darker is faster (dark purple: the fastest; yellow: the slowest).")
    st.altair_chart(heat.properties(height=320), width="stretch")
elif knobs:
    st.markdown(f"**Configs tried** over {dashui.lit(knobs[0], 80, code=True)} (only one tunable parameter).")
    bar = alt.Chart(t.assign(v=t[f"cfg.{knobs[0]}"].astype(str))).mark_bar().encode(
        x=alt.X("v:O", title=knobs[0]), y=alt.Y("time_us:Q", title="time (µs)"))
    st.altair_chart(bar.properties(height=280), width="stretch")

st.markdown(f"**Top {topk}** (fastest first)")
top = t.sort_values("median_s").head(topk)
top = top.assign(gbps=pd.to_numeric(top["gbps"], errors="coerce"))  # a missing GB/s is blank, never "None"
cols = ["config", "time_us"] + (["gbps"] if top["gbps"].notna().any() else [])  # the tuner records no bytes
st.dataframe(top[cols], hide_index=True, width="stretch", column_config={
    "time_us": st.column_config.NumberColumn("median time (µs)", format="%.4g"),
    "gbps": st.column_config.NumberColumn("GB/s", format="%.1f")})
if len(failed):
    st.markdown(f"**Failed configs** ({len(failed)}): crashed, hung (timeout), wrong result or error")
    st.dataframe(failed[["config", "status", "error"]], hide_index=True, width="stretch")
dashui.footer(r)
