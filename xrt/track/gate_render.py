"""The gate's verdict in words: the terminal's lines (:func:`report`) and the Markdown summary
(:func:`summary_markdown`). Nothing here judges: :mod:`xrt.track.gate_rules` did.
"""

from __future__ import annotations

from typing import Any

from xrt.track import explain, regressions
from xrt.track.gate_verdict import CANNOT_JUDGE, HISTORY, PASS, REGRESSION, Verdict
from xrt.track.markdown import lit
from xrt.track.units import fmt_ratio, fmt_value


def report(v: Verdict) -> str:
    """stdout: one line per slow benchmark (``benchmark params ratio``), then the verdict."""
    lines = []
    for a, items in alerts_of(v, v.regressions):  # one heading per (machine, commit), as `xrt regressions`
        lines.append(f"alert: {a.headline()}")
        lines += [f"REGRESSION {r['benchmark']} [{r['param_key'] or '-'}] {fmt_ratio(r['ratio'])} "
                  f"({_on(r)}, {evidence(r)})" for r in items]
    lines += [f"clock change (not failing): {r['benchmark']} [{r['param_key'] or '-'}] time {fmt_ratio(r['ratio'])}, "
              f"cycles {fmt_ratio(r['cycles_ratio'])} ({_on(r)})" for r in v.clock]
    lines += [f"slower on a changed machine (not judged as a regression): {r['benchmark']} [{r['param_key'] or '-'}] "
              f"{fmt_ratio(r['ratio'])} ({_on(r)})" for r in v.changed_machine]
    lines += [f"within noise (not failing): {r['benchmark']} [{r['param_key'] or '-'}] {fmt_ratio(r['ratio'])} "
              f"({_on(r)}, {r['judged']})" for r in v.within_noise]
    lines += [f"moved with the machine (not failing): {r['benchmark']} [{r['param_key'] or '-'}] "
              f"{fmt_ratio(r.get('abs_ratio', r['ratio']))} in µs, {fmt_ratio(r['ratio'])} against the reference "
              f"call ({_on(r)})" for r in v.with_machine]
    lines += [f"cannot judge: {p}" for p in v.problems]
    lines += [f"not judged (does not block): {n}" for n in v.notes]
    word = {PASS: "pass", REGRESSION: "REGRESSION", CANNOT_JUDGE: "CANNOT JUDGE"}[v.code]
    lines.append(f"xrt gate: {word}: head {v.head[:10]} vs base {v.base[:10]}: {v.compared} series compared"
                 + (f" ({v.counts.get(HISTORY.name, 0)} against history)" if v.counts.get(HISTORY.name) else "") + ", "
                 f"{len(v.regressions)} regression(s), {len(v.problems)} problem(s) (exit {v.code})")
    return "\n".join(lines)


def _on(r: dict) -> str:
    """Where a listed series ran: its machine, and its environment where environments are judged apart."""
    return f"machine {r['machine']}" + (f", environment {r['env']}" if r.get("env") else "")


def alerts_of(v: Verdict, items: list[dict]) -> list[tuple[Any, list[dict]]]:
    """``items`` grouped into alerts by ``xrt.track.regressions.group`` (the one grouping, with its
    cause from ``v.envs``): (alert, its items in the alert's order)."""
    return [(a, [items[int(rec.note)] for rec in a.records])
            for a in regressions.group(regressions.gate_records(v.base, v.head, items), v.envs)]


def evidence(r: dict) -> str:
    """The test's figure, and how many processes a side measured a host series where that was judged."""
    said = f"p={r['p_value']:.1e}" if r.get("p_value") is not None else f"z={r['z']:.1f} {r['judged']}"
    return said + (f"; {r['processes']}" if r.get("processes") else "")


def _explain_hint(v: Verdict) -> str | None:
    """The ``xrt explain`` command for the slowest op-suite case, or None (no such case)."""
    for r in sorted(v.regressions, key=lambda r: -(r.get("ratio") or 0)):
        try:
            case = explain.make_case(r["benchmark"], list(r.get("params") or []) or r["param_key"])
        except ValueError:
            continue
        cmd = f"xrt explain --base {v.base[:12]} --head {v.head[:12]} --bench {case.benchmark} --params " \
              f"{','.join(case.params)}"
        return f"Why the slowest case got slower, on a GPU host: {lit(cmd, None, code=True)} (stored, it shows here)."
    return None


def _case(r: dict) -> str:
    """One slower series in a Markdown list: machine, benchmark and parameters, escaped."""
    return f"{lit(r['machine'])} {lit(r['benchmark'], code=True)} [{lit(r['param_key'] or '-')}]"


def summary_markdown(v: Verdict, explanations: list[str] | None = None) -> str:
    """The gate's Markdown; ``explanations``: stored ``xrt explain`` results (Markdown) of its slower
    series, shown after their tables. Every name and message goes through :func:`xrt.track.markdown.lit`."""
    icon = {PASS: "✅ pass", REGRESSION: "❌ regression", CANNOT_JUDGE: "⚠️ cannot judge"}[v.code]
    out = [f"## xrt gate: {icon}", "",
           f"head `{v.head[:12]}` vs base `{v.base[:12]}`: {v.compared} series compared (exit {v.code}).", ""]
    for a, items in alerts_of(v, v.regressions):  # one alert per (machine, commit), as `xrt regressions`
        out += [f"#### {a.headline(lit)}", "", "| machine | benchmark | params | before | after | ratio | p |",
                "|---|---|---|---|---|---|---|"]
        out += [f"| {lit(r['machine'], cell=True)} | {lit(r['benchmark'], code=True, cell=True)} | "
                f"{lit(r['param_key'] or '-', cell=True)} | "
                f"{fmt_value(r['before'], r.get('unit'))} | {fmt_value(r['after'], r.get('unit'))} | "
                f"**{fmt_ratio(r['ratio'])}** | {evidence(r)} |" for r in items]
        out.append("")
    for md in explanations or []:
        out += ["<details><summary>What changed (xrt explain)</summary>", "", md.replace("### ", "##### ", 1), "",
                "</details>", ""]
    hint = _explain_hint(v) if v.regressions and not explanations else None
    if hint:
        out += [hint, ""]
    if v.clock:
        out += ["Clock changes (time moved, cycles did not; not failing):", ""]
        out += [f"- {_case(r)}: time {fmt_ratio(r['ratio'])}, cycles {fmt_ratio(r['cycles_ratio'])}"
                for r in v.clock] + [""]
    if v.within_noise:
        out += ["Slower, but within the series' run-to-run noise (not failing):", ""]
        out += [f"- {_case(r)}: {fmt_ratio(r['ratio'])}, {r['judged']}" for r in v.within_noise] + [""]
    if v.drift or v.with_machine:
        out += ["Machine drift (the host moved, not the code; not failing):", ""]
        out += [f"- {lit(m, None)}: the reference call took {d:.2f}x its base time ({n} host series)"
                for m, (d, n) in sorted(v.drift.items())]
        out += [f"- {_case(r)}: {fmt_ratio(r.get('abs_ratio', r['ratio']))} in µs, {fmt_ratio(r['ratio'])} against "
                "the reference call" for r in v.with_machine[:50]] + [""]
    if v.changed_machine:
        out += ["Slower on a machine whose environment changed (not judged as regressions):", ""]
        for a, items in alerts_of(v, v.changed_machine):
            out += [f"- {a.headline(lit)}"] + [f"  - {lit(r['benchmark'], code=True)} [{lit(r['param_key'] or '-')}]: "
                                                f"{fmt_ratio(r['ratio'])}" for r in items]
        out.append("")
    if v.problems:
        out += ["Cannot judge:", ""] + [f"- {lit(p, None)}" for p in v.problems[:50]]
        if len(v.problems) > 50:
            out.append(f"- … and {len(v.problems) - 50} more")
        out.append("")
    if v.notes:
        out += ["Not judged (does not block):", ""] + [f"- {lit(n, None)}" for n in v.notes] + [""]
    if v.history:
        out += ["Steps the detector found between base and head (`xrt regressions show ID`):", ""]
        out += [f"- {lit(r.id, code=True)} {lit(r.machine)} {lit(r.benchmark, code=True)} [{lit(r.param_key or '-')}] "
                f"{fmt_ratio(r.ratio)} at `{r.commit[:10]}`" for r in v.history] + [""]
    return "\n".join(out) + "\n"
