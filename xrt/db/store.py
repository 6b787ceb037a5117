"""Connections to the database file: one writer at a time, readers never blocked.

DuckDB lets one process open a file read-write *or* many processes open it read-only, never
both. So the live file is never opened for writing:

- :func:`write` takes an exclusive ``fcntl`` lock on ``DB.lock`` (writers queue), copies the live
  file to ``.DB.tmp-PID`` in the same directory, runs the caller's function on it in one
  transaction, CHECKPOINTs, closes, fsyncs and ``os.replace``s it onto the live path (then fsyncs
  the directory). A reader sees the old file or the new one, whole.
- :func:`read` attaches the live path ``READ_ONLY`` to a fresh in-memory DuckDB for as long as the
  ``with`` block lasts. A reader that opened before a swap keeps reading the old inode; one that
  opens after it reads the new one. (Not ``duckdb.connect(path, read_only=True)``: DuckDB's
  per-process instance cache hands a second connection to the same path the instance that is
  already open, i.e. the OLD inode while any connection to it is still open in this process.)
- A reader of a file at an older schema version reads a private copy of it migrated to the latest
  version (:func:`_migrated_copy`; the file itself is left as it is), so every reader sees one
  schema. A file of a newer version is refused.
- A command opens the database once (:func:`using`) and passes the connection down.
- Both validate the path first and raise :class:`DatabaseError` with one line naming it and what
  is wrong (a directory, not a DuckDB file, no xrt tables, a newer schema, no space left, ...);
  ``xrt``'s main prints that line and exits 2.
- A writer killed at any point (even ``kill -9``) leaves the live file as it was; its temporary
  file is removed by the next writer, which holds the lock and so knows nobody else is writing.

Later layers (e.g. acknowledging a regression from the dashboard) write through :func:`write`::

    from xrt.db import store
    def ack(con):
        con.execute("INSERT INTO ...", [...])
    store.write("results/xrt.duckdb", ack)
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import os
import shutil
import stat
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from xrt.db import schema
from xrt.interrupt import INTERRUPT

if TYPE_CHECKING:
    from duckdb import DuckDBPyConnection as Connection
else:
    Connection = Any  # the handle a command opens once (:func:`read`, or :func:`write`'s) and passes down

T = TypeVar("T")

DEFAULT_DB = "results/xrt.duckdb"  # every command's database unless --db (the dashboard: unless XRT_DB) says
DB_ENV = "XRT_DB"  # the database the dashboard serves (set by `xrt dashboard`)

# Test hook: seconds to sleep after the writer's changes, before the commit and the swap.
SLEEP_ENV = "XRT_DB_TEST_SLEEP_MID_WRITE"

_SQLITE_MAGIC = b"SQLite format 3\x00"
_DUCKDB_MAGIC = b"DUCK"  # bytes 8-12 of every DuckDB file (after the header checksum)
_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
EMPTY_PATH = '""'  # how an empty --db is named in messages


class DatabaseError(RuntimeError):
    """A database path that cannot be used, said in one line that names it (no traceback): the
    ``xrt`` command prints ``xrt: <message>`` and exits 2. Raised by :func:`read` and :func:`write`."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = os.fspath(path)
        self.problem = " ".join(str(problem).split())  # one line, whatever the cause said
        super().__init__(f"{self.path or EMPTY_PATH}: {self.problem}")


def kind_of(mode: int) -> str:
    """What a path that is no regular file or folder is, in words, from its `st_mode`."""
    for test, name in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _describe(head: bytes) -> str:
    """What a file that is not a DuckDB database looks like, from its first bytes."""
    if head.startswith(_SQLITE_MAGIC):
        return "SQLite file"
    if head.startswith(b"PAR1"):
        return "Parquet file"
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return "unrecognised binary content"
    return "text file" if text.isprintable() or all(c.isprintable() or c in "\r\n\t" for c in text) else (
        "unrecognised binary content")


def _header(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read(16)


def check_path(db_path: str | os.PathLike, *, write: bool = False) -> Path:
    """The database path if it can be used, else :class:`DatabaseError` saying why.

    A missing file is an error for a reader and fine for a writer (it creates it). An existing one
    must be a regular, readable file that starts like a DuckDB database.
    """
    s = os.fspath(db_path)
    if not s:
        raise DatabaseError(s, "empty database path")
    db = Path(s)
    try:
        st = os.stat(s)
    except FileNotFoundError:
        if write:
            if not db.parent.exists() or db.parent.is_dir():
                return db
            raise DatabaseError(s, f"{db.parent} is not a directory") from None
        raise DatabaseError(s, f"no such database (create it with `xrt db ingest RESULTS_DIR --db {s}`)") from None
    except OSError as e:
        raise DatabaseError(s, f"cannot access: {e.strerror or e}") from None
    if stat.S_ISDIR(st.st_mode):
        raise DatabaseError(s, "is a directory, not a database file")
    if not stat.S_ISREG(st.st_mode):
        raise DatabaseError(s, f"{kind_of(st.st_mode)}, not a database file")
    if st.st_size == 0:
        raise DatabaseError(s, "empty file (0 bytes), not a DuckDB database")
    try:
        head = _header(s)
    except OSError as e:
        raise DatabaseError(s, f"cannot read: {e.strerror or e}") from None
    if len(head) < 12 or head[8:12] != _DUCKDB_MAGIC:
        raise DatabaseError(s, f"not a DuckDB database ({_describe(head)})")
    if st.st_size < _HEADERS:
        raise DatabaseError(s, f"truncated DuckDB database ({st.st_size} bytes, less than its {_HEADERS}-byte "
                            "headers); restore it from a copy, or re-create it with `xrt db ingest`")
    return db


# DuckDB's file: a 4 KiB main header, two 4 KiB database headers (the one with the higher iteration
# is current: checksum, iteration, meta block, free list, block count, block size, ...), then the
# blocks, block k at 12 KiB + k x block size. DuckDB trims free blocks off the end, so the header's
# block count is no bound on the size; the blocks the tables use are.
_HEADERS = 3 * 4096
_DB_HEADER = struct.Struct("<8Q")
_verified: dict[tuple, None] = {}  # files (inode, device, size, mtime) whose blocks were all there


def _block_size(path: str) -> int | None:
    try:
        with open(path, "rb") as f:
            raw = f.read(_HEADERS)
    except OSError:
        return None
    if len(raw) < _HEADERS:
        return None
    size = max((_DB_HEADER.unpack_from(raw, off) for off in (4096, 8192)), key=lambda h: h[1])[5]
    return size if 4096 <= size <= 1 << 30 and size & (size - 1) == 0 else None


def check_blocks(db_path: str | os.PathLike, con: Any, path: str | os.PathLike, ident: tuple | None = None) -> None:
    """:class:`DatabaseError` if a table of the database open on ``con`` (the file ``path``) uses a
    block beyond the file's end: a file cut short (an interrupted copy, a full disk). DuckDB opens
    such a file and fails only when a query reaches the missing block; this says so at once.

    ``ident``: the file's identity (:func:`_identity`) taken before ``con`` opened it. Where the
    path names another file by the end of the check (a writer swapped it in), nothing is concluded:
    the blocks and the size measured may belong to two files."""
    ident = ident or _identity(os.fspath(path))
    if ident is None or ident in _verified:
        return
    block = _block_size(os.fspath(path))
    if block is None:
        return  # a layout this check does not know: leave it to DuckDB
    tables = con.execute("SELECT schema_name, table_name FROM duckdb_tables() "
                         "WHERE database_name = current_database()").fetchall()
    if tables:
        parts = []
        for sch, t in tables:
            name = '"' + sch.replace('"', '""') + '"."' + t.replace('"', '""') + '"'
            parts.append("SELECT max(block_id) AS b FROM pragma_storage_info('" + name.replace("'", "''") +
                         "') WHERE persistent")
        top = con.execute(f"SELECT max(b) FROM ({' UNION ALL '.join(parts)})").fetchall()[0][0]
        size = ident[2]
        if _identity(os.fspath(path)) != ident:
            return  # replaced while we looked: the next open checks the new file
        if top is not None and size < _HEADERS + (top + 1) * block:
            raise DatabaseError(db_path, f"truncated DuckDB database ({size} bytes; its tables need "
                                f"{_HEADERS + (top + 1) * block}); restore it from a copy, or re-create it "
                                "with `xrt db ingest`")
    _verified[ident] = None


def _check_version(db_path: str | os.PathLike, con: Any, *, write: bool) -> int:
    """The file's schema version; :class:`DatabaseError` if it is newer than this xrt, or (for a
    reader) if the file has no xrt tables."""
    try:
        v = schema.current_version(con)
    except Exception as e:  # e.g. a schema_version table of another shape
        raise DatabaseError(db_path, f"not an xrt database (schema_version unreadable: {_first_line(e)})") from None
    if v > schema.LATEST:
        raise DatabaseError(db_path, f"schema version {v} is newer than this xrt ({schema.LATEST}); upgrade xrt")
    if v == 0:
        (n,), = con.execute("SELECT count(*) FROM duckdb_tables() WHERE database_name = current_database()").fetchall()
        if n:
            raise DatabaseError(db_path, f"not an xrt database ({n} table(s) but no schema_version table)")
        if not write:
            raise DatabaseError(db_path, f"no xrt tables (empty database; run `xrt db ingest RESULTS_DIR --db "
                                f"{os.fspath(db_path)}`)")
    return v


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def _no_space(e: BaseException) -> bool:
    if isinstance(e, OSError):
        return e.errno in _NO_SPACE
    return "No space left on device" in str(e) or "Disk quota exceeded" in str(e)


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


_held = threading.local()  # the databases whose writers' lock this thread holds through :func:`writing`


def _lock_key(db_path: str | os.PathLike) -> str:
    return os.path.realpath(os.fspath(db_path))


def _holding(db_path: str | os.PathLike) -> bool:
    return _lock_key(db_path) in getattr(_held, "dbs", set())


@contextlib.contextmanager
def writing(db_path: str | os.PathLike, timeout: float | None = None) -> Iterator[None]:
    """Hold the writers' lock for a whole read-decide-write sequence (an ingest and its judgement).

    Every :func:`write` of this thread to the same database inside the block runs under this lock
    instead of taking it again, so no other writer commits between what was read and what is written.
    Nested use in one thread is fine; another thread or process waits.
    """
    if _holding(db_path):
        yield
        return
    key = _lock_key(db_path)
    with lock(db_path, timeout):
        dbs = getattr(_held, "dbs", None)
        if dbs is None:
            dbs = _held.dbs = set()
        dbs.add(key)
        try:
            yield
        finally:
            dbs.discard(key)


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
          lock_timeout: float | None = None, create: bool = True) -> T:
    """Run ``fn(con)`` on a private copy of the database and swap it in atomically.

    ``fn`` runs inside one transaction on a read-write connection to the copy, after the schema
    has been migrated to the latest version. If it raises, nothing changes. ``fresh=True`` starts
    from an empty database instead of a copy. ``create=False``: a file with no xrt tables yet is
    refused as a reader refuses it (a command that updates a database never initialises one).
    Returns what ``fn`` returns.
    """
    duckdb = _duckdb()
    db = check_path(db_path, write=True)
    try:
        db.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DatabaseError(db, f"cannot create {db.parent}: {e.strerror or e}") from None
    try:
        with writing(db, lock_timeout):
            check_path(db, write=True)  # again: it may have changed while we waited for the lock
            return _write_locked(duckdb, db, fn, fresh, create)
    except DatabaseError:
        raise
    except (OSError, duckdb.Error) as e:
        if _no_space(e):
            raise DatabaseError(db, "no space left on device while writing the new copy; the database is "
                                "unchanged") from e
        raise


def _write_locked(duckdb: Any, db: Path, fn: Callable[[Any], T], fresh: bool, create: bool = True) -> T:
    _clean_stale(db)
    tmp = db.parent / f".{db.name}.tmp-{os.getpid()}"
    try:
        if db.exists() and not fresh:
            shutil.copyfile(db, tmp)
        con = duckdb.connect(str(tmp))
        try:
            con.execute("BEGIN")
            _check_version(db, con, write=create)
            if not fresh:
                check_blocks(db, con, tmp)  # the copy is the live file, byte for byte
            schema.migrate(con)
            out = fn(con)
            if os.environ.get(SLEEP_ENV):
                print(f"xrt db: test hook: sleeping {os.environ[SLEEP_ENV]} s mid-write", file=sys.stderr,
                      flush=True)
                time.sleep(float(os.environ[SLEEP_ENV]))
            # A Ctrl-C or kill while fn ran that a library caught (DuckDB's "Query interrupted", taken
            # by a step that reports its own failures): nothing commits.
            INTERRUPT.check()
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


def insert_rows(con: Any, table: str, rows: list[tuple], names: tuple[str, ...] | None = None,
                extra: tuple[str, ...] = ()) -> None:
    """Insert many rows in one statement through an Arrow table (DuckDB's ``executemany`` runs one
    statement per row: 14 s for 4,680 rows). ``names``: the table's columns the rows fill (default:
    all, in order); ``extra``: SQL expressions for the columns after them (e.g. ``now()::TIMESTAMP``)."""
    if not rows:
        return
    import pyarrow as pa

    cols = list(zip(*rows))
    con.register("xrt_bulk", pa.table({f"c{i}": list(c) for i, c in enumerate(cols)}))
    into = f"{table} ({', '.join(names)})" if names else table
    try:
        con.execute(f"INSERT INTO {into} SELECT *{''.join(', ' + e for e in extra)} FROM xrt_bulk")
    finally:
        con.unregister("xrt_bulk")


_TRANSIENT = ("Could not read enough bytes", "Could not set lock", "No such file")


def _attach(duckdb: Any, path: str) -> Any:
    """A fresh in-memory DuckDB with ``path`` attached read-only as the default database.

    Never ``duckdb.connect(path)``: that goes through DuckDB's per-process instance cache, which
    returns the instance already open for that path (the old inode after a swap). ``TYPE duckdb``:
    never let DuckDB guess another format (it would try to load the SQLite extension).
    """
    con = duckdb.connect(":memory:")
    try:
        con.execute("ATTACH ? AS xrt (TYPE duckdb, READ_ONLY)", [path])
        con.execute("USE xrt")
    except BaseException:
        con.close()
        raise
    return con


def _identity(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns


@contextlib.contextmanager
def read(db_path: str | os.PathLike, *, retries: int = 20, empty_ok: bool = False) -> Iterator[Any]:
    """A short-lived read-only connection to the live database file.

    Never blocks a writer and is never blocked by one (see the module docstring). Each call opens
    the file anew (no instance shared with an earlier connection), so it reads the file that is
    live now. Opening is retried briefly when the file was being replaced at that instant.
    Raises :class:`DatabaseError` (one line) for a path that is not a usable xrt database;
    ``empty_ok``: a DuckDB file with no tables at all is fine (a writer is about to initialise it).
    """
    duckdb = _duckdb()
    db = check_path(db_path)
    path = str(db)
    delay = 0.01
    for attempt in range(retries):
        before = _identity(path)
        try:
            con = _attach(duckdb, path)
            break
        except duckdb.Error as e:
            swapped = _identity(path) != before
            if attempt == retries - 1 or not (swapped or any(t in str(e) for t in _TRANSIENT)):
                check_path(db)  # e.g. it became a directory meanwhile: say that
                raise DatabaseError(db, f"cannot open: {_first_line(e)}") from None
            if not swapped:
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
    try:
        try:
            v = _check_version(db, con, write=empty_ok)
            check_blocks(db, con, path, before)
            if 0 < v < schema.LATEST:  # an older file: read its migrated copy, so readers see one schema
                con.close()
                con = _attach(duckdb, _migrated_copy(duckdb, db, before))
        except BaseException:
            con.close()
            raise
        yield con
    finally:
        con.close()


# An older file read many times (the dashboard) is migrated once per version of it: the path of its
# migrated copy, by the source's identity (inode, device, size, mtime). One per source path at most.
_copies: dict[str, tuple[tuple | None, Path]] = {}
_copies_lock = threading.Lock()


def _migrated_copy(duckdb: Any, db: Path, ident: tuple | None) -> str:
    """A private copy of the older file ``db``, migrated to :data:`schema.LATEST`, in a temporary
    folder (removed at exit). The live file is never written: it stays at its version until a writer
    (``xrt db ingest``, ``xrt db migrate``) migrates it."""
    key = _lock_key(db)
    with _copies_lock:
        have = _copies.get(key)
        if have is not None and ident is not None and have[0] == ident and have[1].exists():
            return str(have[1])
        folder = Path(tempfile.mkdtemp(prefix="xrt-migrated-"))
        atexit.register(shutil.rmtree, folder, True)
        tmp = folder / db.name
        try:
            shutil.copyfile(db, tmp)
            con = duckdb.connect(str(tmp))
            try:
                con.execute("BEGIN")
                schema.migrate(con)
                con.execute("COMMIT")
                con.execute("CHECKPOINT")
            finally:
                con.close()
        except OSError as e:
            shutil.rmtree(folder, True)
            raise DatabaseError(db, f"schema version older than this xrt's ({schema.LATEST}) and no room to "
                                f"migrate a copy to read ({e.strerror or e}); run `xrt db migrate --db {db}`") from None
        if have is not None:
            shutil.rmtree(have[1].parent, True)
        _copies[key] = (ident, tmp)
        return str(tmp)


def using(db_path: str | os.PathLike, fn: Callable[[Connection], T], *, write: bool = False) -> T:
    """A command's one connection: ``fn(con)`` on a read-only connection (:func:`read`), or with
    ``write`` inside one :func:`write` (a copy, swapped in when ``fn`` returns). The database must
    exist either way: a command that updates one never creates it (only ``xrt db ingest`` does)."""
    if not write:
        with read(db_path) as con:
            return fn(con)
    check_path(db_path)
    return _writer(db_path, fn, create=False)


_writer = write  # :func:`write`, by a name that :func:`using`'s ``write`` argument does not hide
