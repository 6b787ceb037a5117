"""``xrt regressions``: every step of every series, as records; and their lifecycle.

The ``regressions`` table is defined by xrt.db's schema (migration 4, ``xrt.db.schema``): every
connection :mod:`xrt.db.store` opens is at the latest version, so it is always there. A row is one
step: a regression, an improvement or a clock change. Status: ``new`` → ``acknowledged`` /
``ignored`` (by hand, ``xrt regressions ack ID``) and ``fixed`` (set by every detection run when
the series came back to its old level; ``fixed_by`` names the commit).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from xrt.db import alerts as dbalerts
from xrt.db.store import Connection
from xrt.track import env as envmod
from xrt.track import markdown
from xrt.track.detect import DetectConfig, Step, detect
from xrt.track.labels import STATUSES
from xrt.track.load import iter_series, order_expr
from xrt.track.suspects import settle
from xrt.track.units import fmt_ratio


@dataclass
class Record:
    id: str
    machine: str
    benchmark: str
    params: list[str]
    param_key: str
    commit: str
    previous_commit: str
    before: float
    after: float
    ratio: float
    p_value: float
    z: float
    kind: str
    status: str
    unit: str | None
    n_before: int
    n_after: int
    cycles_ratio: float | None
    fixed_by: str | None
    note: str | None = None
    # the newest commit, judged at ingest (xrt.track.newest); the detector confirms or withdraws it later
    suspected: bool = False

    def as_json(self) -> dict:
        return asdict(self)


# an alert's cause: what moved at its commit (xrt.track.env decides between the first two)
CAUSES = {"code": "code change",
          "environment": "environment change (not a code regression)",
          "unknown": "cause cannot be told (no machine environment recorded)"}


@dataclass
class Alert:
    """Every step one machine saw at one commit: one thing for a team to read (Perfherder's summary)."""

    machine: str
    commit: str
    previous_commit: str
    cause: str  # a key of CAUSES
    env_changes: list[str] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(r.kind for r in self.records))

    def headline(self, name: Callable[[str], str] = str) -> str:
        """One line; ``name`` shows the strings from the data (the machine, what changed), e.g.
        :func:`xrt.track.markdown.lit` for Markdown."""
        n = dbalerts.counts_text(r.kind for r in self.records)
        what = CAUSES[self.cause] + (f": {name('; '.join(self.env_changes))}" if self.env_changes else "")
        return f"{name(self.machine)} at {self.commit[:10]} (from {self.previous_commit[:10]}): {n}; {what}"

    def as_json(self) -> dict:
        return {"machine": self.machine, "commit": self.commit, "previous_commit": self.previous_commit,
                "cause": self.cause, "env_changes": self.env_changes, "counts": self.counts,
                "records": [r.as_json() for r in self.records]}


def group(records: list[Record], envs: dict[tuple[str, str], envmod.Env | None]) -> list[Alert]:
    """One alert per (machine, commit) (:func:`xrt.db.alerts.group`, the one grouping), its cause from
    the environments recorded on both sides."""
    out = []
    for g in dbalerts.group(records):
        diff = envmod.changes(envs.get((g.machine, g.previous_commit)), envs.get((g.machine, g.commit)))
        cause = "unknown" if diff is None else ("environment" if diff else "code")
        recs = sorted(g.items, key=lambda r: (r.kind, -abs(r.ratio - 1) if r.ratio == r.ratio else 0, r.benchmark))
        out.append(Alert(g.machine, g.commit, g.previous_commit, cause, diff or [], recs))
    return out


def gate_records(base: str, head: str, items: list[dict]) -> list[Record]:
    """Slower series of the gate (``Verdict.regressions`` items) as records of steps at ``head``
    from ``base``, for :func:`group`: the gate's summary groups them as ``xrt regressions`` does.
    ``note`` keeps the item's position in ``items``."""
    out = []
    for i, r in enumerate(items):
        p, z = r.get("p_value"), r.get("z")
        out.append(Record(record_id(r["machine"], r["benchmark"], r["param_key"], head, "regression"), r["machine"],
                          r["benchmark"], list(r["params"] or []), r["param_key"], head, base, r["before"],
                          r["after"], r["ratio"], float("nan") if p is None else p, float("nan") if z is None else z,
                          "regression", "new", None, 1, 1, r.get("cycles_ratio"), None, str(i)))
    return out


def alerts(con: Connection, records: list[Record]) -> list[Alert]:
    """:func:`group` with the environments read from the database."""
    if not records:
        return []
    commits = {r.commit for r in records} | {r.previous_commit for r in records}
    return group(records, envmod.environments(con, commits=commits))


def record_id(machine: str, benchmark: str, param_key: str, commit: str, kind: str) -> str:
    return hashlib.sha1(f"{machine}\0{benchmark}\0{param_key}\0{commit}\0{kind}".encode()).hexdigest()[:12]


def _record(s: Any, st: Step) -> Record:
    fixed = s.commits[st.fixed_by] if st.fixed_by is not None else None
    return Record(record_id(s.machine, s.benchmark, s.param_key, s.commits[st.index], st.kind), s.machine,
                  s.benchmark, s.params, s.param_key, s.commits[st.index], s.commits[st.index - 1], st.before,
                  st.after, st.ratio, st.p_value, st.z, st.kind, "fixed" if fixed else "new", s.unit,
                  st.n_before, st.n_after, st.cycles_ratio, fixed)


def detect_db(con: Connection, cfg: DetectConfig | None = None, machine: str | None = None,
              benchmark: str | None = None) -> list[Record]:
    """Run the detector over every series of the database (or one machine / benchmark regex), a
    batch of series at a time (:func:`~xrt.track.load.iter_series`: memory holds one batch)."""
    out: list[Record] = []
    for s in iter_series(con, machine=machine, benchmark=benchmark):
        out += [_record(s, st) for st in detect(s, cfg)]
    return out


def commit_order(con: Connection) -> dict[str, int]:
    order, where = order_expr(con)
    return {h: o for h, o in con.execute(f"SELECT c.hash, {order} FROM commits c WHERE {where}").fetchall()}


def resolve_in_db(con: Connection, rev: str) -> str:
    """A full hash from the database's commits (a unique prefix is enough), or of a commit whose every
    unit ``xrt bench run --changed-only`` carried forward (it has no results of its own)."""
    rows = con.execute("SELECT hash FROM commits WHERE starts_with(hash, ?) UNION "
                       "SELECT DISTINCT commit_hash FROM carried WHERE starts_with(commit_hash, ?)",
                       [rev.lower()] * 2).fetchall()
    if len(rows) != 1:
        raise ValueError(f"{rev!r} matches {len(rows)} commits in the database" +
                         ("" if rows else " (pass --repo to resolve a branch or tag)"))
    return rows[0][0]


def stored(con: Connection) -> dict[str, dict]:
    """The regressions table, by id."""
    cur = con.execute("SELECT * FROM regressions")
    names = [d[0] for d in cur.description]
    return {r[0]: dict(zip(names, r)) for r in cur.fetchall()}


def suspected(con: Connection, machine: str | None = None, benchmark: str | None = None) -> list[Record]:
    """The stored suspected regressions (``suspected = true``: a series' newest commit, flagged at
    ingest), as records: the rows the front page lists as "new (suspected)". ``benchmark`` is a regex."""
    import re

    fields = Record.__dataclass_fields__
    out = []
    for row in stored(con).values():
        if not row.get("suspected") or (machine and row["machine"] != machine) or (
                benchmark and not re.search(benchmark, row["benchmark"])):
            continue
        rec = Record(**{k: row.get(k) for k in fields})
        rec.params, rec.suspected = list(rec.params or []), True
        for k in ("before", "after", "ratio", "p_value", "z"):  # stored NULL where not measured (no samples)
            if getattr(rec, k) is None:
                setattr(rec, k, float("nan"))
        out.append(rec)
    return out


def with_suspected(records: list[Record], con: Connection, machine: str | None = None,
                   benchmark: str | None = None) -> list[Record]:
    """``records`` (the detector's) and the stored suspected rows it did not find itself (yet), so that
    ``xrt regressions`` lists what the front page lists."""
    seen = {r.id for r in records}
    return records + [r for r in suspected(con, machine, benchmark) if r.id not in seen]


def apply_lifecycle(records: list[Record], previous: dict[str, dict]) -> None:
    """Carry hand-set statuses and notes over; ``fixed`` (auto) wins over ``new``/``acknowledged``."""
    for r in records:
        old = previous.get(r.id)
        if not old:
            continue
        r.note = old.get("note")
        if old.get("status") == "ignored" or (old.get("status") == "acknowledged" and r.status != "fixed"):
            r.status = old["status"]


def save(con: Connection, records: list[Record], scope_machine: str | None = None,
         diag_for: Any = None) -> None:
    """Upsert the detected records (``con``: a write connection, :func:`xrt.db.store.write`). Rows of
    the scope no longer detected: dropped if still ``new``, kept (``still_detected = false``) if
    someone acknowledged or ignored them."""
    rows = []
    # the checklist is computed once, when a step is first seen as new (not for improvements)
    need = [r for r in records if r.status == "new" and r.kind != "improvement"] if diag_for else []
    diags = dict(zip((r.id for r in need), diag_for(need))) if need else {}
    for r in records:
        d = diags.get(r.id)
        rows.append([r.id, r.machine, r.benchmark, r.param_key, r.params, r.kind, r.commit, r.previous_commit,
                     r.before, r.after, r.ratio, r.p_value, r.z, r.cycles_ratio, r.unit, r.n_before, r.n_after,
                     r.fixed_by, r.status, r.note, json.dumps(d) if d is not None else None])

    con.execute("CREATE TEMP TABLE new_rows AS SELECT * EXCLUDE (detected_at, updated_at, still_detected, "
                "suspected, culprit, bisection) FROM regressions LIMIT 0")
    if rows:
        con.executemany("INSERT INTO new_rows VALUES (" + ", ".join("?" * 21) + ")", rows)
    scope = "TRUE" if scope_machine is None else "machine = ?"
    sargs = [] if scope_machine is None else [scope_machine]
    # suspected rows (the newest commit, judged at ingest: xrt.track.newest) are left to settle()
    keep = "AND NOT coalesce(suspected, false)"
    # a row `xrt culprit` stored a culprit on is kept like an acknowledged one: the evidence outlives a run
    con.execute(f"DELETE FROM regressions WHERE {scope} AND status = 'new' {keep} AND culprit IS NULL "
                "AND id NOT IN (SELECT id FROM new_rows)", sargs)
    con.execute(f"UPDATE regressions SET still_detected = false WHERE {scope} {keep} AND id NOT IN "
                "(SELECT id FROM new_rows)", sargs)
    con.execute("""INSERT INTO regressions
        SELECT n.* EXCLUDE (diag), now()::TIMESTAMP, now()::TIMESTAMP, true,
               coalesce(n.diag, (SELECT o.diag FROM regressions o WHERE o.id = n.id)), false, NULL, NULL
        FROM new_rows n
        ON CONFLICT (id) DO UPDATE SET before = EXCLUDED.before, after = EXCLUDED.after,
            ratio = EXCLUDED.ratio, p_value = EXCLUDED.p_value, z = EXCLUDED.z,
            cycles_ratio = EXCLUDED.cycles_ratio, n_before = EXCLUDED.n_before, n_after = EXCLUDED.n_after,
            fixed_by = EXCLUDED.fixed_by, status = EXCLUDED.status, still_detected = true,
            updated_at = EXCLUDED.updated_at, diag = EXCLUDED.diag, suspected = false""")
    con.execute("DROP TABLE new_rows")
    settle(con, scope_machine)  # withdraw suspected rows the detector could see and did not find
    con.execute("INSERT INTO detection_runs VALUES (now()::TIMESTAMP, ?, ?)", [scope_machine, len(rows)])


def save_culprit(con: Connection, records: list[Record], culprit: str | None, evidence: dict) -> None:
    """``xrt culprit``: store the commit to blame and the bisect's evidence on ``records`` (the gate's
    slower series at head: inserted as new regressions where not stored yet) and on the detector's
    steps of the same series inside the bisected range."""
    text = json.dumps(evidence, default=str)
    at = [c for c in (culprit, evidence.get("bad")) if c]  # the detector's step at the culprit, or at head
    for r in records:
        con.execute("""INSERT INTO regressions (id, machine, benchmark, param_key, params, kind, "commit",
            previous_commit, before, after, ratio, p_value, z, cycles_ratio, unit, n_before, n_after, fixed_by,
            status, note, detected_at, updated_at, still_detected, suspected, culprit, bisection)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, 'new', NULL, now()::TIMESTAMP,
                    now()::TIMESTAMP, true, false, ?, ?)
            ON CONFLICT (id) DO UPDATE SET culprit = EXCLUDED.culprit, bisection = EXCLUDED.bisection,
                updated_at = EXCLUDED.updated_at""",
                    [r.id, r.machine, r.benchmark, r.param_key, r.params, r.kind, r.commit, r.previous_commit,
                     r.before, r.after, r.ratio, r.p_value, r.z, r.cycles_ratio, r.unit, r.n_before, r.n_after,
                     culprit, text])
        con.execute("""UPDATE regressions SET culprit = ?, bisection = ?, updated_at = now()::TIMESTAMP
            WHERE machine = ? AND benchmark = ? AND param_key = ? AND kind = 'regression' AND id <> ?
            AND "commit" IN (SELECT unnest(?::VARCHAR[]))""",
                    [culprit, text, r.machine, r.benchmark, r.param_key, r.id, at])


def set_status(con: Connection, rid: str, status: str, note: str | None) -> dict:
    """``xrt regressions ack ID``: set a stored regression's status (and note). A unique id prefix works."""
    if status not in STATUSES:
        raise ValueError(f"status {status!r}: expected one of {', '.join(STATUSES)}")
    hits = con.execute("SELECT id FROM regressions WHERE starts_with(id, ?)", [rid]).fetchall()
    if len(hits) != 1:
        raise ValueError(f"regression {rid!r}: {len(hits)} stored regressions match")
    con.execute("UPDATE regressions SET status = ?, note = coalesce(?, note), updated_at = now()::TIMESTAMP "
                "WHERE id = ?", [status, note, hits[0][0]])
    cur = con.execute("SELECT id, status, note FROM regressions WHERE id = ?", [hits[0][0]])
    return dict(zip([d[0] for d in cur.description], cur.fetchone()))


def _status(r: Record) -> str:
    return f"{r.status} (suspected)" if r.suspected else r.status


def _fmt_params(r: Record) -> str:
    return r.param_key or "-"


def render_alerts(groups: list[Alert], fmt: str) -> str:
    """The grouped view: one heading per alert, its steps below it (``render`` for flat rows)."""
    if fmt == "json":
        return json.dumps([a.as_json() for a in groups], indent=1) + "\n"
    if fmt not in ("table", "markdown"):
        raise ValueError(f"--format {fmt!r}: expected json, table or markdown")
    n = sum(len(a.records) for a in groups)
    parts = []
    for a in groups:
        body = render(a.records, fmt).rstrip("\n").splitlines()
        if fmt == "markdown":
            parts.append(f"#### {a.headline(markdown.lit)}\n\n" + "\n".join(body) + "\n")
        else:
            parts.append(a.headline() + "\n" + "\n".join("    " + ln for ln in body[:-1]) + "\n")
    tail = f"({len(groups)} alert{'s' if len(groups) != 1 else ''}, {n} step{'s' if n != 1 else ''})\n"
    return "\n".join(parts) + ("\n" if parts else "") + tail


def render(records: list[Record], fmt: str) -> str:
    if fmt == "json":
        return json.dumps([r.as_json() for r in records], indent=1) + "\n"
    head = ["id", "status", "kind", "machine", "benchmark", "params", "commit", "before", "after", "ratio", "p"]
    rows = [[r.id, _status(r), r.kind, r.machine, r.benchmark, _fmt_params(r), r.commit[:10], f"{r.before:.4g}",
             f"{r.after:.4g}", fmt_ratio(r.ratio), f"{r.p_value:.1e}"] for r in records]
    if fmt == "markdown":  # the names (machine, benchmark, params) come from anyone's result files
        names = {head.index(k) for k in ("machine", "benchmark", "params")}
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(markdown.lit(c, None, cell=True) if i in names else c for i, c in enumerate(row))
                  + " |" for row in rows]
        return "\n".join(lines) + "\n"
    if fmt != "table":
        raise ValueError(f"--format {fmt!r}: expected json, table or markdown")
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    lines.append(f"({len(rows)} step{'s' if len(rows) != 1 else ''})")
    return "\n".join(lines) + "\n"
