"""Connections to the database file: one writer at a time, readers never blocked.

DuckDB lets one process open a file read-write *or* many processes open it read-only, never
both. So the live file is never opened for writing:

- :func:`write` takes an exclusive ``fcntl`` lock on ``DB.lock`` (writers queue), copies the live
  file to ``.DB.tmp-PID`` in the same directory, runs the caller's function on it in one
  transaction, CHECKPOINTs, closes, fsyncs and ``os.replace``s it onto the live path (then fsyncs
  the directory). A reader sees the old file or the new one, whole.
- :func:`read` opens the live path ``read_only=True`` for as long as the ``with`` block lasts. A
  reader that opened before a swap keeps reading the old inode.
- A writer killed at any point (even ``kill -9``) leaves the live file as it was; its temporary
  file is removed by the next writer, which holds the lock and so knows nobody else is writing.

Later layers (e.g. acknowledging a regression from the dashboard) write through :func:`write`::

    from xrt.db import store
    def ack(con):
        con.execute("INSERT INTO ...", [...])
    store.write("results/xrt.duckdb", ack)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from xrt.db import schema

T = TypeVar("T")

# Test hook: seconds to sleep after the writer's changes, before the commit and the swap.
SLEEP_ENV = "XRT_DB_TEST_SLEEP_MID_WRITE"


def _duckdb():
    try:
        import duckdb
    except ImportError as e:  # pragma: no cover
        raise ImportError("the results database needs duckdb: pip install 'xpuruntime[bench]'") from e
    return duckdb


@contextlib.contextmanager
def lock(db_path: str | os.PathLike, timeout: float | None = None) -> Iterator[None]:
    """Hold the writers' lock for ``db_path`` (a ``.lock`` file beside it)."""
    lock_path = Path(str(db_path) + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if timeout is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"{db_path}: another writer holds {lock_path}") from None
                    time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the lock


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _clean_stale(db: Path) -> None:
    for p in db.parent.glob(f".{db.name}.tmp-*"):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def write(db_path: str | os.PathLike, fn: Callable[[Any], T], *, fresh: bool = False,
          lock_timeout: float | None = None) -> T:
    """Run ``fn(con)`` on a private copy of the database and swap it in atomically.

    ``fn`` runs inside one transaction on a read-write connection to the copy, after the schema
    has been migrated to the latest version. If it raises, nothing changes. ``fresh=True`` starts
    from an empty database instead of a copy. Returns what ``fn`` returns.
    """
    duckdb = _duckdb()
    db = Path(db_path)
    db.parent.mkdir(parents=True, exist_ok=True)
    with lock(db, lock_timeout):
        _clean_stale(db)
        tmp = db.parent / f".{db.name}.tmp-{os.getpid()}"
        try:
            if db.exists() and not fresh:
                shutil.copyfile(db, tmp)
            con = duckdb.connect(str(tmp))
            try:
                con.execute("BEGIN")
                schema.migrate(con)
                out = fn(con)
                if os.environ.get(SLEEP_ENV):
                    print(f"xrt db: test hook: sleeping {os.environ[SLEEP_ENV]} s mid-write", file=sys.stderr,
                          flush=True)
                    time.sleep(float(os.environ[SLEEP_ENV]))
                con.execute("COMMIT")
                con.execute("CHECKPOINT")
            except BaseException:
                with contextlib.suppress(Exception):
                    con.execute("ROLLBACK")
                raise
            finally:
                con.close()
            _fsync(tmp)
            os.replace(tmp, db)
            _fsync(db.parent)
            return out
        finally:
            for p in (tmp, Path(str(tmp) + ".wal")):
                with contextlib.suppress(FileNotFoundError):
                    p.unlink()


@contextlib.contextmanager
def read(db_path: str | os.PathLike, *, retries: int = 20) -> Iterator[Any]:
    """A short-lived read-only connection to the live database file.

    Never blocks a writer and is never blocked by one (see the module docstring). Opening is
    retried briefly in case the file is being replaced at that instant.
    """
    duckdb = _duckdb()
    db = Path(db_path)
    if not db.exists():
        raise FileNotFoundError(f"{db}: no such database (create it with `xrt db ingest RESULTS_DIR --db {db}`)")
    delay = 0.01
    for attempt in range(retries):
        try:
            con = duckdb.connect(str(db), read_only=True)
            break
        except duckdb.IOException:
            if attempt == retries - 1:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
    try:
        yield con
    finally:
        con.close()
