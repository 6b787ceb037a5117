"""Turn result files into Arrow tables, in worker processes when there are many.

Each chunk of files becomes one Arrow table (one row per benchmark x parameter combination,
with a ``file_idx`` column) plus, per file, either its run facts or the reason it was refused.
The table is inserted into DuckDB in one statement: no row-by-row inserts.
"""

from __future__ import annotations

import gc
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xrt.db import asv_files

ARROW_TYPES: dict[str, Any] = {}


def _types():
    import pyarrow as pa

    if not ARROW_TYPES:
        f64, s = pa.float64(), pa.string()
        ARROW_TYPES.update({
            "benchmark": s, "param_index": pa.int32(), "params": pa.list_(s), "param_key": s, "value": f64,
            "status": s, "samples": pa.list_(f64), "ci_99_a": f64, "ci_99_b": f64, "q25": f64, "q75": f64,
            "number": f64, "repeat": f64, "version": s, "started_at_ms": pa.int64(), "duration": f64,
            "bytes": f64, "flops": f64, "sol_s": f64, "sm_mhz": f64, "cycles": pa.list_(f64),
            "cycles_median": f64, "throttled_share": f64, "ref_samples": pa.list_(f64),
            "items": f64, "item_unit": s,
        })
    return ARROW_TYPES


def empty_table():
    import pyarrow as pa

    t = _types()
    return pa.table({**{c: pa.array([], t[c]) for c in asv_files.VALUE_COLUMNS}, "file_idx": pa.array([], pa.int32())})


def _to_table(cols: dict[str, list], file_idx: list[int]):
    import pyarrow as pa

    t = _types()
    arrays = {}
    n = len(file_idx)
    for c in asv_files.VALUE_COLUMNS:
        col, typ = cols[c], t[c]
        if not n:
            arrays[c] = pa.array(col, type=typ)
        elif col[0] is None and col.count(None) == n:  # e.g. bytes/flops/cycles of the django corpus
            arrays[c] = pa.nulls(n, typ)
        elif c == "param_key" and col[0] == "" and col.count("") == n:  # plain benchmarks only
            arrays[c] = pa.repeat(pa.scalar("", typ), n)
        elif c == "params" and col[0] == [] and col.count([]) == n:  # plain benchmarks only: n empty lists
            arrays[c] = pa.ListArray.from_arrays(pa.repeat(pa.scalar(0, pa.int32()), n + 1), pa.array([], pa.string()))
        else:
            # pyarrow's converter from Python lists, with the type given: for DOUBLE[] (samples) this
            # was faster than flattening through numpy (keeps None and NaN apart, refuses non-numbers)
            arrays[c] = pa.array(col, type=typ)
    arrays["file_idx"] = pa.array(file_idx, type=pa.int32())
    return pa.table(arrays)


@dataclass
class FileOutcome:
    """What became of one result file: a run (``run`` set) or a refusal (``kind``/``reason`` set)."""

    file: str
    content_hash: str
    run: dict[str, Any] | None = None
    unknown_benchmarks: list[str] | None = None
    warnings: list[tuple[str, str]] | None = None  # (kind, reason) of problems that did not refuse the file
    kind: str | None = None
    reason: str | None = None
    run_commit: str | None = None


def content_hash(data: bytes, sidecar: bytes | None = None) -> str:
    h = hashlib.sha256(data)
    if sidecar is not None:
        h.update(b"\0xrt-sidecar\0")
        h.update(sidecar)
    return h.hexdigest()[:32]


def read_with_sidecar(path: str | os.PathLike, listed: set[str] | None = None,
                      rel: str | None = None) -> tuple[bytes, bytes | None]:
    """A result file's bytes and its sidecar's (``X.xrt``, else ``X.xrt.json``; None when there is none).

    ``listed``: the sidecars a directory listing found (``machine/name``), to try no other opens;
    ``rel``: the file's ``machine/name`` (else taken from ``path``). Plain strings, no pathlib: this
    runs once per file.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    if listed is not None and not listed:
        return data, None
    stem = path[: -len(".json")]
    if listed is not None:
        if rel is None:
            head, name = os.path.split(path)
            rel = f"{os.path.basename(head)}/{name}"
        rel_stem = rel[: -len(".json")]
    for suf in asv_files.SIDECAR_SUFFIXES:
        if listed is not None and rel_stem + suf not in listed:
            continue
        try:
            with open(stem + suf, "rb") as f:
                return data, f.read()
        except FileNotFoundError:
            continue
    return data, None


def _bad_sample_files(table) -> set[int]:
    """``file_idx`` of the rows whose samples hold NaN, inf, a negative number or a null, checked on
    the whole Arrow column at once (numpy). Also exactly 0.0 or 1.0: Arrow turns a JSON ``false`` /
    ``true`` into those, so such a file is parsed again row by row, which tells them apart (and
    finds nothing wrong with a real 1.0)."""
    import numpy as np

    col = table.column("samples").combine_chunks()
    if col.null_count == len(col):
        return set()
    vals = col.values.to_numpy(zero_copy_only=False)  # a null element reads NaN
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(vals) & (vals > 0) & (vals != 1.0)
    if ok.all():
        return set()
    offsets = col.offsets.to_numpy()
    rows = np.searchsorted(offsets, np.flatnonzero(~ok), side="right") - 1
    fidx = table.column("file_idx").combine_chunks().to_numpy()
    return set(fidx[rows].tolist())


def parse_chunk(root: str, files: list[str], known: dict[str, asv_files.Benchmark] | None,
                machine_facts: dict[str, list[Any]],
                data: dict[str, tuple[bytes, bytes | None, str]] | None = None) -> tuple[list[FileOutcome], Any]:
    """Parse ``files`` (paths relative to ``root``; ``data`` may hold their bytes and content hash already).

    Returns one outcome per file and one Arrow table of all their rows. A file whose samples are
    not all finite non-negative numbers (found on the Arrow column) is parsed again row by row,
    which keeps the good rows, marks the bad ones ``bad`` and names them; so is one whose values
    Arrow refuses to convert.
    """
    enabled = gc.isenabled()
    gc.disable()  # millions of small objects: the collector only costs time here
    try:
        got_all: dict[str, tuple[bytes, bytes | None, str] | OSError] = {}
        for rel in files:
            try:
                got = data.pop(rel, None) if data is not None else None
                if got is None:
                    data_b, sc_bytes = read_with_sidecar(f"{root}/{rel}")
                    got = (data_b, sc_bytes, content_hash(data_b, sc_bytes))
            except OSError as e:
                got = e
            got_all[rel] = got
        outcomes, table, redo = _parse_files(root, files, got_all, known, machine_facts, frozenset())
        if redo:
            outcomes, table, _ = _parse_files(root, files, got_all, known, machine_facts, frozenset(redo))
        return outcomes, table
    finally:
        if enabled:
            gc.enable()


def _parse_files(root: str, files: list[str], got_all: dict, known, machine_facts, rows_only: frozenset):
    """(outcomes, table, files to parse again row by row: not in ``rows_only`` and with a bad sample or a
    value Arrow refused)."""
    outcomes: list[FileOutcome] = []
    cols: dict[str, list] = {c: [] for c in asv_files.VALUE_COLUMNS}
    file_idx: list[int] = []
    per_file: list[tuple[int, int, int]] = []
    redo: set[str] = set()
    for rel in files:
        got = got_all[rel]
        if isinstance(got, OSError):
            outcomes.append(FileOutcome(rel, "", kind="unreadable", reason=f"cannot read: {got.strerror or got}"))
            continue
        data_b, sc_bytes, h = got
        try:
            sidecar, sc_problem = None, None
            if sc_bytes is not None:
                try:
                    sidecar = asv_files.loads(sc_bytes)
                except (asv_files.BadFile, RecursionError) as e:
                    # the run's own results are fine: ingest them without the sidecar, and say so
                    why = str(e) if isinstance(e, asv_files.BadFile) else "JSON nested too deeply"
                    sc_problem = ("bad-sidecar", why)
            machine_dir = rel.split("/", 1)[0] if "/" in rel else ""
            pr = asv_files.parse_result(data_b, machine_dir, known, sidecar, machine_facts.get(machine_dir), cols,
                                rows_only=rel in rows_only)
            if sc_problem:
                pr.warnings.insert(0, sc_problem)
        except asv_files.BadFile as e:
            outcomes.append(FileOutcome(rel, h, kind=e.kind, reason=str(e)))
            continue
        except RecursionError:
            outcomes.append(FileOutcome(rel, h, kind="corrupt", reason="JSON nested too deeply"))
            continue
        status = cols["status"][pr.start:pr.end]
        n_ok, n_failed, n_skipped = status.count("ok"), status.count("failed"), status.count("skipped")
        starts = [s for s in cols["started_at_ms"][pr.start:pr.end] if s is not None]
        run = {
            "machine": pr.machine, "commit_hash": pr.commit_hash, "env_name": pr.env_name,
            "date_ms": pr.date_ms, "python": pr.python, "asv_schema": pr.schema,
            "params": pr.params, "requirements": pr.requirements, "facts": pr.facts,
            "n_values": pr.n, "n_ok": n_ok, "n_failed": n_failed,
            "n_skipped": n_skipped, "started_ms": min(starts) if starts else None,
        }
        i = len(outcomes)
        warnings = [(k, f"sidecar {asv_files.sidecar_path(Path(root) / rel).name}: {r}") for k, r in pr.warnings]
        warnings = warnings + [("bad-value", r) for r in pr.bad_values] or None
        outcomes.append(FileOutcome(rel, h, run=run, unknown_benchmarks=pr.unknown_benchmarks,
                                    warnings=warnings))
        per_file.append((i, pr.start, pr.end))
        file_idx.extend([i] * pr.n)
    try:
        table = _to_table(cols, file_idx) if file_idx else empty_table()
    except Exception:  # a value of the wrong type somewhere: find the file, refuse it alone
        import pyarrow as pa

        tables = []
        for i, a, b in per_file:
            try:
                tables.append(_to_table({c: cols[c][a:b] for c in asv_files.VALUE_COLUMNS}, [i] * (b - a)))
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as e:
                o = outcomes[i]
                if o.file not in rows_only:
                    redo.add(o.file)  # e.g. a string among the samples: the row loop names it
                o.run, o.kind, o.reason = None, "unknown-format", f"a value of the wrong type: {e}"
        table = pa.concat_tables(tables) if tables else empty_table()
    if table.num_rows:
        fast = {outcomes[i].file for i, _, _ in per_file} - rows_only
        redo |= {outcomes[i].file for i in _bad_sample_files(table)} & fast
    return outcomes, table, redo


def parse_all(root: Path, files: list[str], known, machine_facts, jobs: int | None = None, progress=None,
              data: dict[str, tuple[bytes, bytes | None, str]] | None = None):
    """Yield ``(outcomes, table)`` per chunk; in ``jobs`` worker processes when there are many files.

    The default is half the CPUs, at most 4: on the 2-CPU machine of the measurements in
    docs/database.md two workers were slower than one process (its two CPUs do not scale).

    Workers are ``python -m xrt.db.batch`` subprocesses fed and read through pickles on their
    stdin/stdout, so callers need no ``if __name__ == "__main__"`` guard (multiprocessing's spawn
    would) and the parent's DuckDB/Arrow threads are never forked.
    """
    jobs = max(1, min(jobs or (os.cpu_count() or 1) // 2 or 1, 4 if jobs is None else 16))
    size = 500 if jobs == 1 else max(50, min(400, len(files) // (jobs * 4) or 1))
    chunks = [files[i:i + size] for i in range(0, len(files), size)]
    if jobs == 1 or len(files) < 200:
        for n, ch in enumerate(chunks):
            yield parse_chunk(str(root), ch, known, machine_facts, data)
            if progress:
                progress(min((n + 1) * size, len(files)), len(files))
        return
    import pickle
    import queue
    import subprocess
    import sys
    import threading

    q: queue.Queue = queue.Queue()
    procs = []

    def feed_and_read(proc, my_chunks):
        try:
            pickle.dump((str(root), my_chunks, known, machine_facts), proc.stdin, protocol=5)
            proc.stdin.close()
            for ch in my_chunks:
                q.put((ch, pickle.load(proc.stdout)))
        except BaseException as e:  # a dead worker: report it, the main thread raises
            q.put((None, e))

    env = dict(os.environ)
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    threads = []
    for w in range(jobs):
        mine = chunks[w::jobs]
        if not mine:
            continue
        p = subprocess.Popen([sys.executable, "-m", "xrt.db.batch"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, env=env)
        procs.append(p)
        t = threading.Thread(target=feed_and_read, args=(p, mine), daemon=True)
        t.start()
        threads.append(t)
    try:
        done = 0
        for _ in range(len(chunks)):
            ch, out = q.get()
            if ch is None:
                raise RuntimeError(f"a parsing worker failed: {out!r}")
            done += len(ch)
            yield out
            if progress:
                progress(done, len(files))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            for f in (p.stdin, p.stdout):
                if f and not f.closed:
                    f.close()


def _serve() -> None:
    """Worker side of :func:`parse_all`: one request on stdin, one pickle per chunk on stdout."""
    import pickle
    import sys

    root, chunks, known, machine_facts = pickle.load(sys.stdin.buffer)
    out = sys.stdout.buffer
    for ch in chunks:
        pickle.dump(parse_chunk(root, ch, known, machine_facts), out, protocol=5)
        out.flush()


if __name__ == "__main__":
    # Through the package's module, so pickled classes are xrt.db.batch's and not __main__'s.
    from xrt.db.batch import _serve as serve

    serve()
