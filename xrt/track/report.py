"""``xrt report --base A --head B --out report.html``: one static, shareable page comparing two commits.

The page holds the gate's verdict on head against base (the same judgement as ``xrt gate``, with
its alerts, clock changes, slowdowns within noise and what could not be judged), then every series
measured at both commits, slowest change first: before and after in their unit, the ratio and the
statuses. It is one HTML file with its style inline and no script: it opens from a CI artifact, an
e-mail or a PR comment link without a server, and shows nothing it did not escape.
"""

from __future__ import annotations

import html
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xrt.db.store import Connection
from xrt.track import gate
from xrt.track.detect import higher_is_better
from xrt.track.units import fmt_ratio, fmt_value

_STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}code{font-size:.95em}
table{border-collapse:collapse;width:100%;margin:.6em 0}
th,td{padding:.25em .6em;border-bottom:1px solid #ddd;text-align:left}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f4f4f4}
.pass{color:#17692b}.fail{color:#b00020}.warn{color:#8a5a00}.slow{color:#b00020;font-weight:600}.fast{color:#17692b}
.muted{color:#777}
"""
_WORD = {gate.PASS: ("pass", "pass"), gate.REGRESSION: ("regression", "fail"),
         gate.CANNOT_JUDGE: ("cannot judge", "warn")}


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _pairs(con: Connection, base: str, head: str, machine: str | None) -> list[dict[str, Any]]:
    """Every series with a row at base or head: median value and status on each side."""
    sql = """
        SELECT r.machine, r.benchmark, r.param_key, r.commit_hash = ? AS at_head,
               median(r.value) FILTER (r.status = 'ok') AS v,
               string_agg(DISTINCT r.status, ',' ORDER BY r.status) AS status,
               coalesce(any_value(r.unit), any_value(b.unit)) AS unit
        FROM results r LEFT JOIN benchmarks b ON b.name = r.benchmark
        WHERE r.commit_hash IN (?, ?)""" + (" AND r.machine = ?" if machine else "") + """
        GROUP BY ALL ORDER BY ALL"""
    args: list[Any] = [head, base, head] + ([machine] if machine else [])
    rows = con.execute(sql, args).fetchall()
    out: dict[tuple, dict[str, Any]] = {}
    for m, bn, pk, at_head, v, status, unit in rows:
        d = out.setdefault((m, bn, pk), {"machine": m, "benchmark": bn, "param_key": pk, "unit": unit})
        side = "head" if at_head else "base"
        d[side], d[side + "_status"] = v, status
    for d in out.values():
        b, h = d.get("base"), d.get("head")
        d["ratio"] = h / b if b and h else None
    return sorted(out.values(), key=lambda d: (-(_worse(d) or 0.0), d["machine"], d["benchmark"], d["param_key"]))


def _worse(d: dict[str, Any]) -> float | None:
    """How much slower head is (a ratio above 1 is worse; rates turned round), for the order."""
    r = d.get("ratio")
    if r is None:
        return None
    return 1 / r if higher_is_better(d.get("unit")) else r


def _items_table(items: list[dict[str, Any]], evidence: bool = True) -> list[str]:
    out = ["<table><tr><th>machine</th><th>benchmark</th><th>params</th><th>before</th><th>after</th>"
           "<th>ratio</th>" + ("<th>evidence</th>" if evidence else "") + "</tr>"]
    for r in items:
        out.append(f"<tr><td>{_e(r['machine'])}</td><td><code>{_e(r['benchmark'])}</code></td>"
                   f"<td>{_e(r['param_key'] or '-')}</td>"
                   f"<td class=n>{_e(fmt_value(r.get('before'), r.get('unit')))}</td>"
                   f"<td class=n>{_e(fmt_value(r.get('after'), r.get('unit')))}</td>"
                   f"<td class='n slow'>{fmt_ratio(r['ratio'])}×</td>"
                   + (f"<td>{_e(gate.evidence(r))}</td>" if evidence else "") + "</tr>")
    out.append("</table>")
    return out


def render(v: gate.Verdict, pairs: list[dict[str, Any]], settings: gate.Settings) -> str:
    """The page, from the gate's verdict and the series of both commits."""
    word, cls = _WORD[v.code]
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = ["<!doctype html><html lang=en><head><meta charset=utf-8>",
           f"<title>xrt report: {_e(v.head[:10])} vs {_e(v.base[:10])}</title><style>{_STYLE}</style></head><body>",
           f"<h1>xrt report: head <code>{_e(v.head[:12])}</code> vs base <code>{_e(v.base[:12])}</code></h1>",
           f"<p class={cls}><strong>gate: {_e(word)}</strong> (exit {v.code}): {v.compared} series compared, "
           f"{len(v.regressions)} regression(s), {len(v.problems)} problem(s). Threshold "
           f"{settings.threshold:.1%}, α {settings.alpha:g}, at least {settings.min_samples} samples a side.</p>",
           f"<p class=muted>Written {now} by <code>xrt report</code>.</p>"]
    for a, items in gate.alerts_of(v, v.regressions):
        out.append(f"<h2>{_e(a.headline())}</h2>")
        out += _items_table(items)
    for title, items in (("Clock changes (time moved, cycles did not; not failing)", v.clock),
                         ("Slower, within the series' run-to-run noise (not failing)", v.within_noise),
                         ("Slower on a machine whose environment changed (not judged as regressions)",
                          v.changed_machine)):
        if items:
            out.append(f"<h2>{_e(title)}</h2>")
            out += _items_table(items, evidence=False)
    for title, lines in (("Cannot judge", v.problems), ("Not judged (does not block)", v.notes)):
        if lines:
            out.append(f"<h2>{_e(title)}</h2><ul>" + "".join(f"<li>{_e(x)}</li>" for x in lines) + "</ul>")
    out.append(f"<h2>Every series at both commits ({len(pairs)})</h2>")
    out.append("<table><tr><th>machine</th><th>benchmark</th><th>params</th><th>base</th><th>head</th>"
               "<th>head / base</th><th>status base → head</th></tr>")
    for d in pairs:
        worse = _worse(d)
        rc = "" if worse is None else " slow" if worse > 1 + settings.threshold else " fast" if worse < 1 / (
            1 + settings.threshold) else ""
        ratio = "—" if d["ratio"] is None else f"{fmt_ratio(d['ratio'])}×"
        out.append(f"<tr><td>{_e(d['machine'])}</td><td><code>{_e(d['benchmark'])}</code></td>"
                   f"<td>{_e(d['param_key'] or '-')}</td><td class=n>{_e(fmt_value(d.get('base'), d['unit']))}</td>"
                   f"<td class=n>{_e(fmt_value(d.get('head'), d['unit']))}</td><td class='n{rc}'>{ratio}</td>"
                   f"<td>{_e(d.get('base_status') or 'absent')} → {_e(d.get('head_status') or 'absent')}</td></tr>")
    out.append("</table></body></html>")
    return "\n".join(out) + "\n"


def write(con: Connection, base: str, head: str, out: str | os.PathLike, settings: gate.Settings,
          machine: str | None = None, history: bool = True, noise: Connection | None = None) -> gate.Verdict:
    """Judge head against base as ``xrt gate`` does and write the page to ``out`` (atomically: a
    temporary file beside it, renamed over it; removed again when anything fails)."""
    check_out(out)
    v = gate.judge(con, base, head, threshold=settings.threshold, alpha=settings.alpha,
                   min_samples=settings.min_samples, machine=machine, history=history, noise=noise)
    page = render(v, _pairs(con, base, head, machine), settings)
    target = Path(out)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")  # open(): the umask's mode, as any file
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(page)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return v


def check_out(out: str | os.PathLike) -> None:
    """``--out`` must name a file to write in a folder that exists: one ValueError naming it, before
    any work."""
    p = Path(out)
    if p.is_dir():
        raise ValueError(f"--out {str(out)!r}: is a directory; give the HTML file to write, e.g. {p / 'report.html'}")
    if not p.parent.is_dir():
        raise ValueError(f"--out {str(out)!r}: the folder {str(p.parent)!r} does not exist")
