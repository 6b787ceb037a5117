"""``xrt db ingest``: asv results (and git history) into the database, incrementally and atomically.

Three steps on one state object (:class:`_Ingest`): :func:`_scan` hashes every file and keeps
those whose hash the database does not hold yet; :func:`_parse` turns them (in worker processes
where there are many) into Arrow tables; :func:`_commit`, in one writer transaction on a private
copy of the database (:func:`xrt.db.store.write`), replaces the rows of every changed file, records
the refused files in ``ingest_errors`` (with the commit each is about) and swaps the copy in. The
carried-forward units, the tuner's journals and the caller's last step (:class:`Then`) go into the
same transaction: one ingest is one write. Nothing changed: nothing is written.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from xrt.db import asv_files, batch, git, result_names, schema, store


@dataclass
class Report:
    files_total: int = 0
    ingested: int = 0
    unchanged: int = 0
    errors: list[tuple[str, str, str]] = field(default_factory=list)  # (file, kind, reason)
    values_ok: int = 0
    failures: int = 0
    skips: int = 0
    seconds: float = 0.0
    wrote: bool = False
    notices: list[str] = field(default_factory=list)
    journals: tuple[int, int, int] | None = None  # tuner journals (loaded, unchanged, evaluations loaded)

    def summary(self) -> str:
        tj = "" if self.journals is None else (f"; tuner journals: {self.journals[0]} loaded "
                                               f"({self.journals[2]} evaluations), {self.journals[1]} unchanged")
        return (f"{self.ingested} files ingested, {self.unchanged} unchanged, {len(self.errors)} errors; "
                f"{self.values_ok} values, {self.failures} failures, {self.skips} skips{tj}; {self.seconds:.2f} s")


def find_root(results_dir: str | Path) -> Path:
    """The asv results directory: RESULTS_DIR itself, or RESULTS_DIR/results (a checkout's top)."""
    if not os.fspath(results_dir):  # Path("") is ".": an empty argument must not ingest the current folder
        raise ValueError('RESULTS_DIR "": empty path; give the asv results folder')
    p = Path(results_dir)
    if not p.is_dir():
        raise FileNotFoundError(f"{p}: no such results directory")
    if not (p / "benchmarks.json").exists() and (p / "results").is_dir():
        return p / "results"
    return p


def _what(e: os.DirEntry) -> tuple[str | None, str | None]:
    """("dir" | "file" | None, why it cannot be read): a symlink loop, a dangling link, a FIFO..."""
    try:
        if e.is_dir():
            return "dir", None
        if e.is_file():
            return "file", None
        if e.is_symlink():
            return None, "a symbolic link to nothing (dangling)"
        mode = e.stat().st_mode
    except OSError as err:
        return None, f"cannot follow: {err.strerror or err}"
    return None, f"not a regular file ({store.kind_of(mode)})"


def shown(name: str) -> str:
    """A file name as it can be printed on one line and stored: bytes that are not UTF-8 as ``\\xNN``,
    control characters (a newline, a tab) escaped."""
    text = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def bad_name(name: str) -> str | None:
    """Why a file or folder name cannot be ingested (None if it can): the database stores names as
    UTF-8 text, and a name with a newline would split every line that names it."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "name is not valid UTF-8; rename it"
    if not name.isprintable():
        return "name has a control character (a newline, a tab...); rename it"
    return None


def scan(root: Path) -> dict[str, list]:
    """Relative paths by kind: benchmarks, machine, results, and sidecars (``X.xrt`` / ``X.xrt.json``).

    ``problems``: ``(path, kind, reason)`` of what looks like one of those (or a machine folder)
    but cannot be read: a symlink loop, a dangling link, a FIFO, a folder that cannot be listed.
    They are reported and skipped; everything else is scanned.
    """
    out: dict[str, list] = {"benchmarks": [], "machine": [], "results": [], "sidecars": [], "problems": []}
    dirs = []
    with os.scandir(root) as it:
        for e in it:
            if e.name.startswith("."):
                continue
            what, why = _what(e)
            if e.name == "benchmarks.json":
                if what == "file":
                    out["benchmarks"].append(e.name)
                else:
                    out["problems"].append((e.name, "unreadable", why or "a directory, not a file"))
            elif what == "dir":
                if bad_name(e.name):
                    out["problems"].append((shown(e.name) + "/", "unreadable", bad_name(e.name)))
                else:
                    dirs.append(e.name)
            elif what is None and why is not None:  # perhaps a machine folder: say why it is skipped
                out["problems"].append((e.name + "/", "unreadable", why))
    for d in sorted(dirs):
        try:
            with os.scandir(root / d) as it:
                entries = sorted(((e.name, *_what(e)) for e in it), key=lambda x: x[0])
        except OSError as err:
            out["problems"].append((f"{d}/", "unreadable", f"cannot list the folder: {err.strerror or err}"))
            continue
        for name, what, why in entries:
            rel = f"{d}/{name}"
            is_sidecar = name.endswith(asv_files.SIDECAR_SUFFIXES)
            if bad_name(name) and (name.endswith(".json") or is_sidecar or result_names.is_result_file(name)):
                out["problems"].append((f"{d}/{shown(name)}", "unreadable", bad_name(name)))
                continue
            if what != "file":
                if why is not None and (name == "machine.json" or is_sidecar or result_names.is_result_file(name)):
                    out["problems"].append((rel, "unreadable", why))
                elif what == "dir" and name.endswith(".json"):
                    out["problems"].append((rel, "unreadable", "a directory, not a file"))
                continue
            if name == "machine.json":
                out["machine"].append(rel)
            elif is_sidecar:
                out["sidecars"].append(rel)
            elif result_names.is_result_file(name):
                out["results"].append(rel)
    out["problems"].sort()
    return out


def _previous(con: Any | None) -> tuple[dict[str, tuple[str, str, int | None]], dict[str, set], list[tuple]]:
    """ingest_files (file: (content hash, status, run_id)), the ingest_errors of each file, and the
    runs (file, machine, commit, environment), from the database open on ``con`` (None: none yet)."""
    if con is None:
        return {}, {}, []
    files = {f: (h, s, r) for f, h, s, r in con.execute(
        "SELECT file, content_hash, status, run_id FROM ingest_files").fetchall()}
    errs: dict[str, set] = {}
    for f, k, r in con.execute("SELECT file, kind, reason FROM ingest_errors").fetchall():
        errs.setdefault(f, set()).add((k, r))
    runs = con.execute("SELECT file, machine, commit_hash, env_name FROM runs").fetchall()
    return files, errs, runs


@dataclass
class Then:
    """A step of the caller's in ingest's one write transaction, after the rows are in (``xrt db
    ingest`` judges each series' newest commit there; the database layer does not know how).
    ``due(con)``: on the database as it was, whether the step must run although nothing else changed;
    ``run(con, rep)``: the step, on the write connection."""

    due: Callable[[Any], bool]
    run: Callable[[Any, Report], None]


@contextlib.contextmanager
def _before(db: Path) -> Iterator[Any | None]:
    """One read-only connection to the database as it is before the ingest (None: no file, or an
    empty DuckDB file not initialised yet)."""
    if not db.exists():
        yield None
        return
    with store.read(db, empty_ok=True) as con:
        yield con if schema.current_version(con) else None


def ingest(results_dir: str | Path, db_path: str | Path, repo: str | None = None, *, jobs: int | None = None,
           echo: Callable[[str], None] | None = None, rev: str = "HEAD", tuned: str | Path | None = "auto",
           then: Then | None = None) -> Report:
    """Ingest an asv results directory into ``db_path``. Prints errors and notices through ``echo``.

    ``tuned``: the tuner's folder whose ``journal/`` to load into ``tuning_results`` ("auto": a
    ``tuned/`` next to or inside ``results_dir``, when there is one; None: none). ``then``: the
    caller's last step, in the same write (:class:`Then`).

    The database is read once (what is there already) and written at most once: the results, the
    carried-forward units, the journals and ``then`` in one transaction on one copy
    (:func:`xrt.db.store.write`), so a crash at any point leaves the old file whole.
    """
    from xrt.db import tuning

    db = store.check_path(db_path, write=True)  # a --db that cannot be written: say so before any parsing
    root = find_root(results_dir)
    say = echo or (lambda s: print(s, file=sys.stderr))
    where = tuning.find_tuned(results_dir) if tuned == "auto" else (Path(tuned) if tuned else None)
    # The writers' lock is held from before the database is read until the write: what is new is
    # decided against what is committed, and no other writer commits in between (two ingests at
    # once give what one ingest of both gives).
    with store.writing(db):
        with _before(db) as con:
            st = _ingest(root, db, con, repo, jobs=jobs, echo=say, rev=rev)
            t0 = time.perf_counter()
            writes = [_commit(st, repo)] if _changed(st) or not db.exists() else []
            carried = carried_changes(root, con, say, st.rep)
            if carried is not None:
                writes.append(carried)
            if where is not None:
                j = tuning.changes(where, con, say)
                st.rep.journals = (j.loaded, j.unchanged, j.rows)
                if j.write is not None:
                    writes.append(j.write)
            due = then is not None and con is not None and then.due(con)
        if writes or due:
            def fn(con: Any) -> None:
                for w in writes:
                    w(con)
                if then is not None:
                    then.run(con, st.rep)

            store.write(db, fn, fresh=not db.exists())
            st.rep.wrote = bool(writes)
    st.rep.seconds += time.perf_counter() - t0
    return st.rep


_HASH = re.compile(r"[0-9a-f]{40}")


def read_carried_files(root: Path) -> tuple[list[tuple], list[tuple[str, str, str]]]:
    """Rows of the ``carried`` table from every ``<machine>/<commit>.carried``, and (file, kind, reason)
    of each file that is not a valid record (named, never half-read)."""
    rows, errors = [], []
    for path in sorted(root.glob(f"*/*{result_names.CARRIED_SUFFIX}")):
        rel = f"{path.parent.name}/{path.name}"
        try:
            rec = json.loads(path.read_text())
        except (OSError, ValueError) as e:
            errors.append((rel, "bad-carried", f"not a carried-forward record: {e}"))
            continue
        commit = path.name[: -len(result_names.CARRIED_SUFFIX)]
        carried = rec.get("carried") if isinstance(rec, dict) else None
        why = None
        if not _HASH.fullmatch(commit):
            why = f"file name {path.name!r} is not <40-hex commit>{result_names.CARRIED_SUFFIX}"
        elif not isinstance(carried, dict) or rec.get("commit") != commit or rec.get("machine") != path.parent.name:
            why = "needs 'commit' and 'machine' matching its path and a 'carried' object"
        else:
            bad = [u for u, v in carried.items()
                   if not isinstance(v, dict) or not _HASH.fullmatch(str(v.get("from", "")))]
            if bad:
                why = f"unit(s) {', '.join(map(str, bad))} carry no 40-hex 'from' commit"
        if why:
            errors.append((rel, "bad-carried", why))
            continue
        for unit, v in sorted(carried.items()):
            rows.append((path.parent.name, commit, unit, v["from"], v.get("since"), v.get("reason"), rel))
    return rows, errors


def _carried_commit(rel: str) -> str | None:
    """The commit a ``<machine>/<commit>.carried`` file is about (None where its name is no 40-hex hash)."""
    commit = rel.rsplit("/", 1)[-1][: -len(result_names.CARRIED_SUFFIX)]
    return commit if _HASH.fullmatch(commit) else None


def carried_changes(root: Path, con: Any | None, echo: Callable[[str], None],
                    rep: Report | None = None) -> Callable[[Any], None] | None:
    """What makes the ``carried`` table (and the ingest errors of ``.carried`` files) what the files
    say, against the database open on ``con`` (None: none yet): a function for the caller's write,
    or None when nothing differs."""
    rows, errors = read_carried_files(root)
    for f, k, r in errors:
        echo(f"xrt db ingest: {f}: {r}")
        if rep is not None:
            rep.errors.append((f, k, r))
    if con is None:
        if not rows and not errors:
            return None
    else:
        have_rows = sorted(tuple(r) for r in con.execute("SELECT machine, commit_hash, unit, from_commit, "
                                                         "since_commit, reason, file FROM carried").fetchall())
        have_errs = sorted(tuple(r) for r in con.execute(
            "SELECT file, kind, reason FROM ingest_errors WHERE kind = 'bad-carried'").fetchall())
        if have_rows == sorted(rows) and have_errs == sorted(errors):
            return None

    def write(con) -> None:
        con.execute("DELETE FROM carried")
        con.execute("DELETE FROM ingest_errors WHERE kind = 'bad-carried'")
        if rows:
            con.executemany("INSERT INTO carried VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        if errors:
            con.executemany("INSERT INTO ingest_errors (file, kind, reason, recorded_at, commit_hash) "
                            "VALUES (?, ?, ?, now()::TIMESTAMP, ?)", [(*e, _carried_commit(e[0])) for e in errors])

    return write


@dataclass
class _Ingest:
    """One ingest as it goes: :func:`_scan` finds the files and which changed, :func:`_parse` turns
    the changed ones into outcomes and Arrow tables, :func:`_commit` writes them in one transaction."""

    root: Path
    db: Path
    echo: Callable[[str], None]
    rep: Report = field(default_factory=Report)
    t0: float = field(default_factory=time.perf_counter)
    # the database before: ingest_files (file: (content hash, status, run_id)) and ingest_errors by file
    prev: dict[str, tuple[str, str, int | None]] = field(default_factory=dict)
    prev_errs: dict[str, set] = field(default_factory=dict)
    prev_runs: list[tuple] = field(default_factory=list)  # (file, machine, commit, environment)
    # the scan: relative paths by kind (scan()), content hashes, the bytes of the metadata files and of
    # the changed result files (with their sidecar's and hash), the files named and left out
    found: dict[str, list] = field(default_factory=dict)
    hashes: dict[str, str] = field(default_factory=dict)
    meta_bytes: dict[str, bytes] = field(default_factory=dict)
    kept: dict[str, tuple[bytes, bytes | None, str]] = field(default_factory=dict)
    todo: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    meta_changed: list[str] = field(default_factory=list)  # benchmarks.json / machine.json, hash changed...
    meta_new: list[str] = field(default_factory=list)  # ...and of those, the ones not refused before as they are
    # the parse
    known: asv_files.Benchmarks | None = None
    machines: dict[str, dict] = field(default_factory=dict)
    machine_facts: dict[str, list[Any]] = field(default_factory=dict)
    outcomes: list[batch.FileOutcome] = field(default_factory=list)
    tables: list = field(default_factory=list)
    git_commits: list[git.Commit] | None = None
    commits: dict[str, str] = field(default_factory=dict)  # file: the commit its errors are about

    def err(self, file: str, kind: str, reason: str, quiet: bool = False) -> None:
        self.rep.errors.append((file, kind, reason))
        if not quiet:
            self.echo(f"xrt db ingest: {file}: {reason}")

    def good(self) -> list[int]:
        return [i for i, o in enumerate(self.outcomes) if o.run is not None]

    def touched(self) -> list[str]:
        """The files this ingest looked at: their errors are replaced."""
        return [o.file for o in self.outcomes] + self.meta_changed + self.skipped

    def error_rows(self, ingest_id: int, now: datetime) -> list[tuple]:
        """ingest_errors rows (``_ERROR_COLUMNS``) of the files this ingest looked at, each once."""
        touched = set(self.touched())
        return [(f, k, r, ingest_id, now, self.commits.get(f) or result_names.commit_of_name(f))
                for f, k, r in self.rep.errors if f in touched]


def _ingest(root: Path, db: Path, con: Any | None, repo: str | None, *, jobs: int | None,
            echo: Callable[[str], None], rev: str) -> _Ingest:
    """Scan, parse and check: everything but the write. ``con``: the database as it is (or None)."""
    st = _Ingest(root=root, db=db, echo=echo)
    _scan(st, con)
    _parse(st, jobs)
    if repo is not None:
        _check_commits(st, repo, rev, con)
    elif st.todo:
        st.rep.notices.append("no --repo: commits ordered by the dates in the results files")
    for n in st.rep.notices:
        st.echo(f"xrt db ingest: {n}")
    _say_outcomes(st)
    st.rep.seconds = time.perf_counter() - st.t0
    return st


def _scan(st: _Ingest, con: Any | None) -> None:
    """List the files, read and hash them; keep the bytes of the changed ones (a refused file is always retried)."""
    rep, root = st.rep, st.root
    st.found = found = scan(root)
    st.prev, st.prev_errs, st.prev_runs = _previous(con)
    rep.files_total = sum(len(v) for k, v in found.items() if k not in ("sidecars", "problems"))
    sidecars = set(found["sidecars"])
    # files that could not be scanned or read, and copies of ingested files: named, skipped
    for rel, kind, reason in found["problems"]:
        st.err(rel, kind, reason)
        st.skipped.append(rel)
    for rel in found["benchmarks"] + found["machine"]:
        try:
            st.meta_bytes[rel] = (root / rel).read_bytes()
        except OSError as e:
            st.err(rel, "unreadable", f"cannot read: {e.strerror or e}")
            st.skipped.append(rel)
            continue
        st.hashes[rel] = batch.content_hash(st.meta_bytes[rel])
    found["benchmarks"] = [r for r in found["benchmarks"] if r in st.hashes]
    found["machine"] = [r for r in found["machine"] if r in st.hashes]
    root_s = str(root)
    n_unreadable = 0
    for rel in found["results"]:
        try:
            data, sc = batch.read_with_sidecar(f"{root_s}/{rel}", sidecars, rel)
        except OSError as e:
            st.err(rel, "unreadable", f"cannot read: {e.strerror or e}")
            st.skipped.append(rel)
            n_unreadable += 1
            continue
        h = st.hashes[rel] = batch.content_hash(data, sc)
        old = st.prev.get(rel)
        if old is None or old[0] != h or old[1] != "ok":
            st.todo.append(rel)
            st.kept[rel] = (data, sc, h)  # not to read or hash them twice
    st.todo, dups = _copies(st.todo, st.kept, st.prev)
    for rel, other in dups.items():
        st.err(rel, "duplicate", f"same content as {other}, already ingested (machine folder renamed or copied?); "
               "not ingested again", quiet=True)
        st.skipped.append(rel)
    _say_copies(dups, st.echo)
    prev, hashes = st.prev, st.hashes
    st.meta_changed = [rel for rel in found["benchmarks"] + found["machine"]
                       if prev.get(rel, (None,))[0] != hashes[rel] or prev[rel][1] != "ok"]
    # a file refused before whose content has not changed is refused again: not a change by itself
    st.meta_new = [rel for rel in st.meta_changed if prev.get(rel, (None,))[0] != hashes[rel]]
    rep.unchanged = len(found["results"]) - len(st.todo) - len(dups) - n_unreadable


def _parse(st: _Ingest, jobs: int | None) -> None:
    """benchmarks.json and machine.json (small; parsed every time, written when changed), then the
    changed result files into outcomes and Arrow tables."""
    if st.found["benchmarks"]:
        try:
            st.known = asv_files.parse_benchmarks(st.meta_bytes["benchmarks.json"])
        except asv_files.BadFile as e:
            st.err("benchmarks.json", e.kind, f"{e}; benchmarks not checked")
    elif st.todo and "benchmarks.json" not in st.skipped:  # (an unreadable one is named as such already)
        st.rep.notices.append(f"no benchmarks.json in {st.root}: types and units unknown, benchmarks not checked")
    claimed: dict[str, str] = {}  # machine name: the machine.json that says it
    # the file in the folder of that name first: it wins over a copy elsewhere
    for rel in sorted(st.found["machine"], key=lambda r: _machine_json_order(r, st.meta_bytes[r])):
        try:
            m = asv_files.parse_machine(st.meta_bytes[rel])
        except asv_files.BadFile as e:
            st.err(rel, e.kind, str(e))
            continue
        st.machine_facts[rel.split("/")[0]] = asv_files.facts_from(m)  # the folder's facts, used or not
        name = str(m.get("machine") or rel.split("/")[0])
        if name in claimed:
            st.err(rel, "duplicate-machine", f"says machine {name!r}, as {claimed[name]} does; not used (one "
                   "machine.json per machine: rename the machine in one of them)")
            continue
        claimed[name] = rel
        st.machines[rel] = m
    last = [time.perf_counter()]

    def progress(done: int, total: int) -> None:
        now = time.perf_counter()
        if now - last[0] > 1.0 or (done == total and now - st.t0 > 2.0):
            last[0] = now
            st.echo(f"xrt db ingest: parsed {done}/{total} files")

    for outs, table in batch.parse_all(st.root, st.todo, st.known, st.machine_facts, jobs=jobs, progress=progress,
                                       data=st.kept):
        base = len(st.outcomes)
        st.outcomes.extend(outs)
        if table.num_rows:
            import pyarrow as pa  # numpy, not pyarrow.compute (30 ms to import): pyarrow imported numpy already

            st.tables.append(table.set_column(table.schema.get_field_index("file_idx"), "file_idx",
                                              pa.array(table["file_idx"].to_numpy() + base, pa.int32())))


def _machine_json_order(rel: str, data: bytes) -> tuple[int, str]:
    try:
        says = json.loads(data).get("machine")
    except (ValueError, AttributeError):
        says = None
    return (0 if says == rel.split("/")[0] else 1, rel)


def _check_commits(st: _Ingest, repo: str, rev: str, con: Any | None) -> None:
    """Commits from the repository; a run whose commit it does not have is refused."""
    wanted = {o.run["commit_hash"] for o in st.outcomes if o.run}
    if con is not None:
        wanted |= {h for (h,) in con.execute("SELECT DISTINCT commit_hash FROM runs").fetchall()}
    st.git_commits, missing = git.from_repo(repo, wanted, rev)
    for o in st.outcomes:
        if o.run and o.run["commit_hash"] in missing:
            o.run_commit = o.run["commit_hash"]
            o.run, o.kind = None, "unknown-commit"
            o.reason = f"commit {o.run_commit} is not in the repository {repo}"


def _say_outcomes(st: _Ingest) -> None:
    """Name the refused files and the problems of the ingested ones; count the values."""
    rep = st.rep
    removed: set[str] = set()  # benchmarks not in benchmarks.json
    files = 0  # the files that hold them
    for o in st.outcomes:
        commit = o.run["commit_hash"] if o.run else o.run_commit
        if commit:
            st.commits[o.file] = commit
        if o.run is None:
            st.err(o.file, o.kind or "error", o.reason or "refused")
            continue
        # benchmarks.json describes the current suite only: a benchmark removed since is history, not an error
        if o.unknown_benchmarks:
            removed.update(o.unknown_benchmarks)
            files += 1
        for kind, reason in o.warnings or ():
            st.err(o.file, kind, reason if kind == "bad-value" else f"{reason} (rows kept)")
        rep.values_ok += o.run["n_ok"]
        rep.failures += o.run["n_failed"]
        rep.skips += o.run["n_skipped"]
        rep.ingested += 1
    if removed:
        n = f"{len(removed)} benchmark{'s' if len(removed) != 1 else ''}"
        rep.notices.append(f"{n} of {files} result file{'s' if files != 1 else ''} not in benchmarks.json (removed "
                           f"from the suite): their rows kept as history, unit unknown: {_short(sorted(removed))}")
        st.echo(f"xrt db ingest: {rep.notices[-1]}")
    _say_several_runs(st)


def _say_several_runs(st: _Ingest) -> None:
    """Two result files for one machine, commit and environment (a copy ``X (1).json``): named at
    ingest against each new one. Both are kept; the gate and the newest-commit judgement do not pool
    them (:data:`xrt.track.gate.SEVERAL_RUNS`). Files of different environments are asv's usual
    matrix: they are judged per environment, nothing to say. Nor are the rounds of a paired
    measurement (``-round<k>`` files) or the processes of ``xrt bench run --processes N`` (``-proc<k>``
    files, :data:`xrt.db.result_names.ROUND_RE`): several runs by design."""
    import re

    def key(f: str, m: str, c: str, env: str) -> tuple:
        rnd = re.search(result_names.ROUND_RE, f)
        return (m, c, env, rnd[1] if rnd else None)

    new = {o.file: key(o.file, o.run["machine"], o.run["commit_hash"], o.run["env_name"])
           for o in st.outcomes if o.run}
    by_key: dict[tuple, list[str]] = {}
    for f, m, c, env in st.prev_runs:
        if f not in new:
            by_key.setdefault(key(f, m, c, env), []).append(f)
    for f, k in new.items():
        by_key.setdefault(k, []).append(f)
    for (m, c, env, _), files in by_key.items():
        if len(files) < 2:
            continue
        listed = ", ".join(sorted(files))
        for f in sorted(set(files) & set(new)):
            st.err(f, "several-runs", f"{len(files)} result files for machine {m}, commit {c[:10]}, environment "
                   f"{env}: {listed} (rows kept; not pooled: the gate does not judge their series)")


def _changed(st: _Ingest) -> bool:
    """Whether there is anything to write: new runs, new or gone errors, a changed metadata file.
    Nothing new (or only the same refusals again): the database is left alone."""
    new_errs: dict[str, set] = {}
    for f, k, r in st.rep.errors:
        new_errs.setdefault(f, set()).add((k, r))
    # problems found before (an unreadable file, a copy) and gone now: their rows go
    gone = [f for f, ks in st.prev_errs.items() if f not in new_errs and f not in st.prev and any(
        k in ("unreadable", "duplicate") for k, _ in ks)]
    same_errors = all(new_errs.get(f) == st.prev_errs.get(f) for f in st.touched()) and not gone
    st.skipped += gone
    return bool(st.rep.ingested) or not same_errors or bool(st.meta_new)


def _commit(st: _Ingest, repo: str | None) -> Callable[[Any], None]:
    """The rows of this ingest, as a function for the ingest's one write."""
    import pyarrow as pa

    values = pa.concat_tables(st.tables) if st.tables else batch.empty_table()
    good = st.good()
    if len(good) != len(st.outcomes) and values.num_rows:
        import numpy as np

        keep = np.zeros(len(st.outcomes), dtype=bool)
        keep[good] = True
        values = values.filter(pa.array(keep[values["file_idx"].to_numpy()]))
    return lambda con: _write(con, st, values, repo)


def _copies(todo: list[str], kept: dict, prev: dict) -> tuple[list[str], dict[str, str]]:
    """Split off the result files whose content is that of another file: one already ingested (by
    ``ingest_files``) or one earlier in this ingest. Returns (files to parse, {copy: original})."""
    by_hash = {h: f for f, (h, st, run) in prev.items() if st == "ok" and run is not None}
    keep, dups = [], {}
    for rel in todo:
        h = kept[rel][2]
        other = by_hash.get(h)
        if other is not None and other != rel:
            dups[rel] = other
            kept.pop(rel, None)
            continue
        by_hash.setdefault(h, rel)
        keep.append(rel)
    return keep, dups


def _say_copies(dups: dict[str, str], echo: Callable[[str], None]) -> None:
    """One line per (new folder, old folder): a renamed machine folder is hundreds of files."""
    pairs: dict[tuple[str, str], int] = {}
    for rel, other in dups.items():
        key = (rel.rsplit("/", 1)[0] + "/", other.rsplit("/", 1)[0] + "/")
        pairs[key] = pairs.get(key, 0) + 1
    for (new, old), n in sorted(pairs.items()):
        echo(f"xrt db ingest: {new}: {n} result file(s) with the same content as files of {old} already "
             "ingested (machine folder renamed or copied?); not ingested again, named in ingest_errors "
             "(kind duplicate)")


def _short(names: list[str] | None, n: int | None = 3) -> str:
    names = names or []
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if n and len(names) > n else "")


def _write(con, st: _Ingest, values, repo: str | None) -> None:
    ingest_id = con.execute("SELECT coalesce(max(ingest_id), 0) + 1 FROM ingests").fetchone()[0]
    base_run = con.execute("SELECT coalesce(max(run_id), 0) FROM runs").fetchone()[0] + 1
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    _write_metadata(con, st)
    # A changed file replaces its rows; a refused file keeps the rows of its last good version.
    good = st.good()
    old_runs = [st.prev[f][2] for f in (st.outcomes[i].file for i in good)
                if f in st.prev and st.prev[f][2] is not None]
    if old_runs:
        con.execute("DELETE FROM results WHERE run_id IN (SELECT unnest(?))", [old_runs])
        con.execute("DELETE FROM runs WHERE run_id IN (SELECT unnest(?))", [old_runs])
    touched = st.touched()
    if touched:
        con.execute("DELETE FROM ingest_errors WHERE file IN (SELECT unnest(?))", [touched])
    run_ids = {i: base_run + k for k, i in enumerate(good)}
    if good:
        _write_runs(con, [(run_ids[i], st.outcomes[i]) for i in good], now)
    if values.num_rows:
        _write_values(con, values, run_ids, len(st.outcomes))
    files = [(o.file, "results", o.content_hash, "ok" if o.run else "error",
              run_ids.get(i, st.prev.get(o.file, (None, None, None))[2]), ingest_id, now)
             for i, o in enumerate(st.outcomes)]
    errfiles = {f for f, _, _ in st.rep.errors}
    files += [(rel, "benchmarks" if rel == "benchmarks.json" else "machine", st.hashes[rel],
               "error" if rel in errfiles else "ok", None, ingest_id, now) for rel in st.meta_changed]
    if files:
        con.execute("DELETE FROM ingest_files WHERE file IN (SELECT unnest(?))", [[f[0] for f in files]])
        store.insert_rows(con, "ingest_files", files)
    store.insert_rows(con, "ingest_errors", st.error_rows(ingest_id, now), _ERROR_COLUMNS)
    _commits(con, st.git_commits)
    rep = st.rep
    con.execute("INSERT INTO ingests VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", [
        ingest_id, now, time.perf_counter() - st.t0, shown(str(st.root)), repo and shown(repo), rep.ingested,
        rep.unchanged, len(rep.errors), rep.values_ok, rep.failures, rep.skips])


_ERROR_COLUMNS = ("file", "kind", "reason", "ingest_id", "recorded_at", "commit_hash")


def _write_metadata(con, st: _Ingest) -> None:
    """benchmarks.json: the table is what the file says now; units of existing rows follow it. machine.json."""
    known = st.known
    if "benchmarks.json" in st.meta_changed and known is not None:
        con.execute("DELETE FROM benchmarks")
        rows = [(b.name, b.type, b.unit, json.dumps(b.params), b.param_names, b.version, b.bytes, b.flops,
                 b.sol_s, json.dumps(b.attrs, default=str)) for b in known.values()]
        store.insert_rows(con, "benchmarks", rows)
        con.execute("UPDATE results SET unit = b.unit FROM benchmarks b "
                    "WHERE results.benchmark = b.name AND results.unit IS DISTINCT FROM b.unit")
    for rel, m in st.machines.items():
        if rel not in st.meta_changed:
            continue
        facts = asv_files.gpu_facts(*asv_files.facts_from(m))
        con.execute("INSERT OR REPLACE INTO machines VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", [
            str(m.get("machine") or rel.split("/")[0]), m.get("os"), m.get("arch"), m.get("cpu"),
            None if m.get("num_cpu") is None else str(m.get("num_cpu")), m.get("ram"), facts.get("gpu_model"),
            json.dumps(m, default=str), rel])


_RUN_COLUMNS = (
    "run_id", "file", "content_hash", "machine", "commit_hash", "env_name", "date_ms", "python",
    "asv_schema", "params", "requirements", "gpu_model", "driver", "cuda", "torch", "triton",
    "sm_clock_mhz", "mem_clock_mhz", "throttle_share", "peak_gbps", "peak_tflops", "facts",
    "n_values", "n_ok", "n_failed", "n_skipped", "started_ms")


def _run_row(run_id: int, o: batch.FileOutcome) -> dict[str, Any]:
    r, f = o.run, o.run["facts"]
    row = {"run_id": run_id, "file": o.file, "content_hash": o.content_hash,
           "params": json.dumps(r["params"], default=str),
           "requirements": json.dumps(r["requirements"], default=str),
           "facts": json.dumps(f.get("all", {}), default=str)}
    for k in asv_files.TEXT_FACTS:
        row[k] = None if f.get(k) is None else str(f[k])
    for k in asv_files.NUMBER_FACTS:
        row[k] = _float(f.get(k))
    for k in ("machine", "commit_hash", "date_ms", "asv_schema", "n_values", "n_ok", "n_failed", "n_skipped",
              "started_ms"):
        row[k] = r[k]
    for k in ("env_name", "python"):
        row[k] = None if r[k] is None else str(r[k])
    return row


def _write_runs(con, runs: list[tuple[int, batch.FileOutcome]], now: datetime) -> None:
    import pyarrow as pa

    rows = [_run_row(run_id, o) for run_id, o in runs]
    con.register("xrt_new_runs", pa.table({k: [row[k] for row in rows] for k in _RUN_COLUMNS}))
    con.execute("""INSERT INTO runs SELECT run_id, file, content_hash, machine, commit_hash, env_name,
        epoch_ms(date_ms), python, asv_schema, params::JSON, requirements::JSON, gpu_model, driver, cuda,
        torch, triton, sm_clock_mhz, mem_clock_mhz, throttle_share, peak_gbps, peak_tflops, facts::JSON,
        n_values, n_ok, n_failed, n_skipped, epoch_ms(started_ms), ? FROM xrt_new_runs""", [now])
    con.unregister("xrt_new_runs")


def _write_values(con, values, run_ids: dict[int, int], n_outcomes: int) -> None:
    import numpy as np
    import pyarrow as pa

    idx = np.array([run_ids.get(i, -1) for i in range(n_outcomes)], dtype=np.int32)
    con.register("xrt_new_values", values.append_column(
        "run_id", pa.array(idx[values["file_idx"].to_numpy()], pa.int32())))
    con.execute("""INSERT INTO results
        SELECT v.run_id, r.machine, r.commit_hash, r.env_name, v.benchmark, v.param_index, v.params,
            v.param_key, v.value, v.status, v.samples, v.ci_99_a, v.ci_99_b, v.q25, v.q75, v.number,
            v.repeat, b.unit, v.version, epoch_ms(v.started_at_ms), v.duration, v.bytes, v.flops, v.sol_s,
            d.gbps, d.tflops,
            CASE WHEN d.ok THEN coalesce(100 * v.sol_s / v.value,
                100 * greatest(d.gbps / r.peak_gbps, d.tflops / r.peak_tflops)) END,
            v.sm_mhz, v.cycles, v.cycles_median, v.throttled_share, v.ref_samples, v.items, v.item_unit
        FROM xrt_new_values v JOIN runs r ON r.run_id = v.run_id LEFT JOIN benchmarks b ON b.name = v.benchmark,
        LATERAL (SELECT v.value > 0 AND b.unit IN ('seconds', 's') AS ok,
                        CASE WHEN ok THEN v.bytes / v.value / 1e9 END AS gbps,
                        CASE WHEN ok THEN v.flops / v.value / 1e12 END AS tflops) d""")
    con.unregister("xrt_new_values")


def _float(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def _commits(con, git_commits: list[git.Commit] | None) -> None:
    """Rebuild ``commits`` for every commit that has results (small: one row per commit)."""
    have = {h: d for h, d in con.execute(
        "SELECT commit_hash, min(commit_date) FROM runs GROUP BY commit_hash").fetchall()}
    old = {}
    for h, fp, ad, au, msg, par, src in con.execute(
            "SELECT hash, first_parent_index, author_date, author, message, parents, source FROM commits").fetchall():
        old[h] = git.Commit(h, None, fp, ad, au, msg, par or [], src)
    by_hash = {c.hash: c for c in (git_commits or [])}
    commits = []
    for h, d in have.items():
        commits.append(by_hash.get(h) or old.get(h) or git.from_dates({h: d})[0])
    commits = git.assign_positions(commits)
    con.execute("DELETE FROM commits")
    if commits:
        import pyarrow as pa

        names = ("hash", "position", "first_parent_index", "author_date", "author", "message", "parents", "source")
        types = (pa.string(), pa.int32(), pa.int32(), pa.timestamp("us"), pa.string(), pa.string(),
                 pa.list_(pa.string()), pa.string())
        con.register("xrt_new_commits", pa.table({n: pa.array([getattr(c, n) for c in commits], t)
                                                  for n, t in zip(names, types)}))
        con.execute("INSERT INTO commits SELECT * FROM xrt_new_commits")
        con.unregister("xrt_new_commits")
