"""Device and host time side by side in the series explorer.

Each op suite case is measured as three asv series with one class name and the same params (so the
same ``param_key``): device time, host time per call, and host time per call under torch.compile.
The explorer shows one benchmark at a time; when it is one of those series, this section shows all
three for the same machines and parameter filters, so host cost is read beside device time (and a
launch-bound op shows as one whose host time is the larger). Which benchmarks are twins is
:mod:`xrt.bench.suite`'s rule (``SERIES``, ``series_of``, ``twins``): it is not re-encoded here.
"""

from __future__ import annotations

import altair as alt
import dashdata
import dashui
import pandas as pd
import streamlit as st

from xrt.bench.suite import SERIES, series_of, twins

LABELS = {"device": "device time", "host": "host time", "compiled": "host time, torch.compile"}
SHORT = {"device": "device", "host": "host", "compiled": "compile"}  # the table's headers (LABELS in their help)
RATIOS = {"host": "host ÷ device", "compiled": "compile ÷ device"}  # each over the device time
HEIGHT = 300


def label(series: str) -> str:
    """What a series is called on the page (its key in ``SERIES`` when this module has no label)."""
    return LABELS.get(series, series)


def default_bench(with_values: list[str]) -> str | None:
    """The benchmark the explorer opens an op on: its device-time series where one has values (the
    op's host and compiled series sort before it by name), else the first by name, as before."""
    devices = [b for b in with_values if (series_of(b) or ("",))[0] == "device"]
    return min(devices or with_values, default=None)


def present(bench: str, stored: set[str]) -> dict[str, str]:
    """``bench``'s twins, by series in ``SERIES`` order, when at least one twin besides itself is in
    the database; else ``{}`` (not an op suite series, or one measured alone: the page is as before)."""
    found = twins(bench)
    if not any(name in stored for ser, name in found.items() if name != bench):
        return {}
    return {ser: found[ser] for ser in SERIES if ser in found}


def frames(r: dashdata.Reader, names: dict[str, str], machines: list[str], keys: list[str]) -> dict[str, pd.DataFrame]:
    """Each series' ok per-commit values on these machines and parameter keys (possibly empty)."""
    return {ser: r.many_series(machines, name, keys).dropna(subset=["value"]) for ser, name in names.items()}


def per_call(d: pd.DataFrame) -> tuple[float, str]:
    """The factor and axis title of a series' values: µs per call for times (asv's unit is seconds)."""
    unit = d["unit"].dropna().iloc[0] if d["unit"].notna().any() else None
    return (1e6, "µs per call") if unit in ("seconds", None) else (1.0, f"{unit} per call")


def latest(data: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per (machine, param_key): its newest commit with a value in any of the series, each
    series' value there (µs per call), and each host series over the device time where both exist.

    Values are taken at one commit per row, so a ratio never divides two different commits' values;
    a series not measured at that commit has an empty cell there (its chart shows its history)."""
    long = pd.concat([d.assign(series=ser, v=d["value"] * per_call(d)[0]) for ser, d in data.items() if len(d)],
                     ignore_index=True)
    newest = long.groupby(["machine", "param_key"])["ord"].transform("max")
    at = long[long["ord"] == newest]
    wide = at.pivot_table(index=["machine", "param_key", "commit_hash"], columns="series", values="v",
                          aggfunc="first").reset_index()
    out = pd.DataFrame({"machine": wide["machine"], "params": wide["param_key"].replace("", "—"),
                        "commit": wide["commit_hash"].map(dashdata.short)})
    for ser in data:
        if ser in wide:
            out[label(ser)] = wide[ser]
    for ser, name in RATIOS.items():
        if ser in wide and "device" in wide:
            out[name] = wide[ser] / wide["device"]
    return out.sort_values(["machine", "params"], kind="stable").reset_index(drop=True)


def x_of(all_rows: pd.DataFrame, xaxis: str):
    """The x encoding every chart of the section shares, over every series' commits, so a commit
    sits at the same place in each chart."""
    if xaxis == "commit":
        return dashui.commit_x(all_rows, domain=[float(all_rows["ord"].min()), float(all_rows["ord"].max())])
    dates = pd.to_datetime(all_rows["commit_date"]).dropna()  # as ISO text: Streamlit's charts misread epoch numbers
    scale = alt.Scale(domain=[dates.min().isoformat(), dates.max().isoformat()]) if len(dates) else alt.Undefined
    return alt.X("commit_date:T", title="commit date", scale=scale)


def colour_domain(above: list[str], machines: list[str], keys: list[str], names: list[str] | None = None) -> list[str]:
    """Every series' name in the order that gives it the colour it has in the explorer's chart above
    (whose names, ``above``, take the scheme's colours in sorted order), then the rest: the charts of
    the section carry no legend of their own (three would squeeze them), they read by that one."""
    first = sorted(set(above))
    rest = sorted({dashui.series_label(m, k, len(machines), len(keys), names) for m in machines for k in keys}
                  - set(first))
    return first + rest


def chart(d: pd.DataFrame, title: str, x, yaxis: str, domain: list[str]) -> alt.Chart:
    """One series' values per commit, one line per (machine, param_key), coloured as in the other
    charts (the same ``domain`` of names)."""
    f, ytitle = per_call(d)
    d = d.assign(y=d["value"] * f)
    color = alt.Color("series:N", title="series", scale=alt.Scale(domain=domain), legend=None)
    return (alt.Chart(d).mark_line(point=alt.OverlayMarkDef(size=18), strokeWidth=1.2)
            .encode(x=x, y=alt.Y("y:Q", title=ytitle, scale=alt.Scale(zero=yaxis == "from zero", nice=True),
                                 axis=alt.Axis(format=",.4~r")), color=color,
                    tooltip=["series", "machine", "param_key", "commit", "commit_date:T", "msg",
                             alt.Tooltip("y:Q", format=".4g", title=ytitle)])
            .properties(title=title, height=HEIGHT).interactive())


def missing_line(ser: str, name: str, stored: set[str]) -> str:
    """The one caption of a twin without values here: never measured, or not for these filters."""
    why = "no ok results for these machines and parameters" if name in stored else "not in this database"
    return f"{label(ser)} ({dashui.lit(name, 120, code=True)}): {why}."


def show(r: dashdata.Reader, bench: str, stored: set[str], machines: list[str], keys: list[str],
         xaxis: str, yaxis: str, above: list[str], pnames: list[str] | None = None) -> None:
    """The section under the explorer's chart: the twins' charts side by side (µs per call, each its
    own y scale), a caption for each twin with no values here, and the latest values with the host
    ÷ device ratios. Nothing for a benchmark that is not an op suite series with a twin stored.
    ``above``: the names of the series in the explorer's chart (the colours follow its legend);
    ``pnames``: the benchmark's parameter names, which the legend's labels use."""
    names = present(bench, stored)
    if not names:
        return
    data = frames(r, names, machines, keys)
    shown = {ser: d for ser, d in data.items() if len(d)}
    st.subheader("Device and host time")
    st.caption(f"The same op, machines and parameters; this benchmark is the {label(series_of(bench)[0])}. "
               "µs per call, each chart with its own y axis; colours as in the chart above (hover a point for "
               "its series).")
    if shown:
        rows = pd.concat(list(shown.values()), ignore_index=True)
        x = x_of(rows.assign(commit=rows["commit_hash"].map(dashdata.short)), xaxis)
        domain = colour_domain(above, machines, keys, pnames)
        for col, (ser, d) in zip(st.columns(len(shown)), shown.items()):
            d = d.assign(commit=d["commit_hash"].map(dashdata.short), msg=d["message"].map(dashdata.first_line),
                         series=[dashui.series_label(m, k, len(machines), len(keys), pnames)
                                 for m, k in zip(d["machine"], d["param_key"])])
            col.altair_chart(chart(d, label(ser), x, yaxis, domain), width="stretch")
    for ser in (s for s in names if s not in shown):
        st.caption(missing_line(ser, names[ser], stored))
    if shown:
        table = latest(shown)
        st.dataframe(table, hide_index=True, width="stretch", key="twin_table", column_config={
            "machine": st.column_config.TextColumn(width="small"), "commit": st.column_config.TextColumn(width="small"),
            **{label(s): st.column_config.NumberColumn(f"{SHORT.get(s, s)} (µs)", format="%.4g", width="small",
                                                       help=f"{label(s)}, µs per call") for s in shown},
            **{RATIOS[s]: st.column_config.NumberColumn(format="%.2f×", width="small",
                                                        help=f"{label(s)} over device time") for s in RATIOS}})
        st.caption("Each row's newest commit with a value; the ratios are the host times over the device time "
                   "at that commit.")
