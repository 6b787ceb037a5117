"""Turn result files into Arrow tables, in worker processes when there are many.

Each chunk of files becomes one Arrow table (one row per benchmark x parameter combination,
with a ``file_idx`` column) plus, per file, either its run facts or the reason it was refused.
The table is inserted into DuckDB in one statement: no row-by-row inserts.
"""

from __future__ import annotations

import collections
import gc
import hashlib
import itertools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xrt.db import asv_files as A

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
            "cycles_median": f64, "throttled_share": f64,
        })
    return ARROW_TYPES


def empty_table():
    import pyarrow as pa

    t = _types()
    return pa.table({**{c: pa.array([], t[c]) for c in A.VALUE_COLUMNS}, "file_idx": pa.array([], pa.int32())})


def _list_array(lists: list, value_type):
    """``pa.array(lists, pa.list_(value_type))``, but from one flat array and offsets: several times
    faster for millions of samples (pyarrow's converter handles each inner list as a sequence)."""
    import pyarrow as pa

    has_none = None in lists
    present = [x for x in lists if x is not None] if has_none else lists
    lens = [0 if x is None else len(x) for x in lists] if has_none else list(map(len, lists))
    total = sum(lens)
    offsets = pa.array([0, *itertools.accumulate(lens)], pa.int32() if total < 2**31 else pa.int64())
    flat = itertools.chain.from_iterable(present)
    values = None
    if value_type == pa.float64():
        try:
            import numpy as np  # already imported by duckdb; the fast way from Python floats

            a = np.fromiter(flat, np.float64, total)
            if not np.isnan(a).any():  # None (null) and NaN are kept apart by the generic way
                values = pa.array(a)
        except (ImportError, TypeError, ValueError):  # a non-number inside: the generic way decides
            pass
        if values is None:
            flat = itertools.chain.from_iterable(present)
    if values is None:
        values = pa.array(list(flat), value_type)
    mask = pa.array([x is None for x in lists], pa.bool_()) if has_none else None
    cls = pa.ListArray if offsets.type == pa.int32() else pa.LargeListArray
    arr = cls.from_arrays(offsets, values, mask=mask)
    return arr if cls is pa.ListArray else arr.cast(pa.list_(value_type))


def _to_table(cols: dict[str, list], file_idx: list[int]):
    import pyarrow as pa

    t = _types()
    arrays = {}
    for c in A.VALUE_COLUMNS:
        if t[c] == pa.list_(pa.float64()):
            arrays[c] = _list_array(cols[c], pa.float64())
        else:
            arrays[c] = pa.array(cols[c], type=t[c])
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


def read_with_sidecar(path: Path, listed: set[str] | None = None) -> tuple[bytes, bytes | None]:
    """A result file's bytes and its sidecar's (``X.xrt``, else ``X.xrt.json``; None when there is none).

    ``listed``: the sidecars a directory listing found (``machine/name``), to try no other opens.
    """
    with open(path, "rb") as f:
        data = f.read()
    for sc in A.sidecar_paths(path):
        if listed is not None and f"{sc.parent.name}/{sc.name}" not in listed:
            continue
        try:
            with open(sc, "rb") as f:
                return data, f.read()
        except FileNotFoundError:
            continue
    return data, None


def parse_chunk(root: str, files: list[str], known: dict[str, A.Benchmark] | None,
                machine_facts: dict[str, list[Any]],
                data: dict[str, tuple[bytes, bytes | None]] | None = None) -> tuple[list[FileOutcome], Any]:
    """Parse ``files`` (paths relative to ``root``; ``data`` may hold their bytes already).

    Returns one outcome per file and one Arrow table of all their rows.
    """
    enabled = gc.isenabled()
    gc.disable()  # millions of small objects: the collector only costs time here
    try:
        outcomes: list[FileOutcome] = []
        cols: dict[str, list] = {c: [] for c in A.VALUE_COLUMNS}
        file_idx: list[int] = []
        per_file: list[tuple[int, int, int]] = []
        for rel in files:
            path = Path(root) / rel
            try:
                got = data.pop(rel, None) if data is not None else None
                data_b, sc_bytes = got if got is not None else read_with_sidecar(path)
            except OSError as e:
                outcomes.append(FileOutcome(rel, "", kind="unreadable", reason=f"cannot read: {e.strerror}"))
                continue
            h = content_hash(data_b, sc_bytes)
            try:
                sidecar, sc_problem = None, None
                if sc_bytes is not None:
                    try:
                        sidecar = A.loads(sc_bytes)
                    except (A.BadFile, RecursionError) as e:
                        # the run's own results are fine: ingest them without the sidecar, and say so
                        sc_problem = ("bad-sidecar", str(e) if isinstance(e, A.BadFile) else "JSON nested too deeply")
                machine_dir = Path(rel).parts[0] if len(Path(rel).parts) > 1 else ""
                pr = A.parse_result(data_b, machine_dir, known, sidecar, machine_facts.get(machine_dir), cols)
                if sc_problem:
                    pr.warnings.insert(0, sc_problem)
            except A.BadFile as e:
                outcomes.append(FileOutcome(rel, h, kind=e.kind, reason=str(e)))
                continue
            except RecursionError:
                outcomes.append(FileOutcome(rel, h, kind="corrupt", reason="JSON nested too deeply"))
                continue
            counts = collections.Counter(cols["status"][pr.start:pr.end])
            starts = [s for s in cols["started_at_ms"][pr.start:pr.end] if s is not None]
            run = {
                "machine": pr.machine, "commit_hash": pr.commit_hash, "env_name": pr.env_name,
                "date_ms": pr.date_ms, "python": pr.python, "asv_schema": pr.schema,
                "params": pr.params, "requirements": pr.requirements, "facts": pr.facts,
                "n_values": pr.n, "n_ok": counts["ok"], "n_failed": counts["failed"],
                "n_skipped": counts["skipped"], "started_ms": min(starts) if starts else None,
            }
            i = len(outcomes)
            warnings = [(k, f"sidecar {A.sidecar_path(path).name}: {r}") for k, r in pr.warnings] or None
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
                    tables.append(_to_table({c: cols[c][a:b] for c in A.VALUE_COLUMNS}, [i] * (b - a)))
                except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as e:
                    o = outcomes[i]
                    o.run, o.kind, o.reason = None, "unknown-format", f"a value of the wrong type: {e}"
            table = pa.concat_tables(tables) if tables else empty_table()
        return outcomes, table
    finally:
        if enabled:
            gc.enable()


def parse_all(root: Path, files: list[str], known, machine_facts, jobs: int | None = None, progress=None,
              data: dict[str, tuple[bytes, bytes | None]] | None = None):
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
