"""Arrow arrays from Python lists and numpy arrays, built from buffers: without pyarrow's pandas probe.

``pa.array``, ``pa.scalar`` and ``pa.table`` of lists first ask whether the input is a pandas object,
and that question imports pandas wherever it is installed (0.3-0.7 s, the largest single cost of the
``xrt db ingest`` command, which never uses pandas). The ingest builds its Arrow columns here
instead: the values go into ``array.array`` / numpy buffers (C loops that refuse a value of the
wrong type, as ``pa.array`` with an explicit type does) and become Arrow arrays through
``pa.Array.from_buffers``. pyarrow itself is left as it is, so other code in the process (the
dashboard's ``to_pandas``) is not affected.

Types: float64, int32, int64, bool, string, timestamp[us] (a naive ``datetime`` is taken as UTC, an
aware one converted to it, as pyarrow does), list<any of these> and null. A null is ``None``; a NaN
stays a NaN value. A value of another type raises ``TypeError`` naming it and the type wanted; so does a
float in an integer column (pyarrow would truncate 1.5 to 1; the ingest's integers are ints already).
"""

from __future__ import annotations

import operator
from array import array as _pyarray
from datetime import datetime, timedelta, timezone
from itertools import chain, repeat
from typing import Any

import numpy as np
import pyarrow as pa

_EPOCH = datetime(1970, 1, 1)
_US = timedelta(microseconds=1)
# array.array type codes by byte width, as this platform defines them
_INT_CODE = {np.dtype(np.int32): next(c for c in "ilh" if _pyarray(c).itemsize == 4),
             np.dtype(np.int64): next(c for c in "qlL" if _pyarray(c).itemsize == 8 and c != "L")}
_INT_TYPES = {pa.int32(): np.dtype(np.int32), pa.int64(): np.dtype(np.int64)}
_NUMPY_TYPES = {np.dtype(np.int32): pa.int32(), np.dtype(np.int64): pa.int64(), np.dtype(np.float64): pa.float64()}
_ARROW_DTYPES = {t: d for d, t in _NUMPY_TYPES.items()}


_NONE = type(None)


def _bitmap(valid: np.ndarray) -> pa.Buffer:
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def _validity(values: list) -> tuple[pa.Buffer, int]:
    """(validity bitmap, null count) of ``values``, which hold a None."""
    valid = np.fromiter(map(operator.is_not, values, repeat(None)), dtype=np.bool_, count=len(values))
    return _bitmap(valid), len(values) - int(np.count_nonzero(valid))


def _wrong(values: list, ok: tuple[type, ...], wanted: str) -> TypeError:
    bad = next((v for v in values if v is not None and not isinstance(v, ok)), None)
    what = f"{bad!r} ({type(bad).__name__})" if bad is not None else "a value it could not convert"
    return TypeError(f"expected {wanted}, got {what}")


def _floats(values: list, typ: pa.DataType, few_nulls: bool = False) -> pa.Array:
    """Each pass over the values costs a cache miss per value (they lie all over the heap), so few passes:
    ``few_nulls`` (the samples) tries ``array.array`` alone, which takes numbers only and stops at a None or
    a string; otherwise the value types are read once (which also refuses a string) and numpy converts."""
    n = len(values)
    if few_nulls:
        try:
            return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(_pyarray("d", values))], null_count=0)
        except TypeError:
            pass
    kinds = set(map(type, values))
    if not kinds <= {float, int, bool, _NONE}:  # a bool is a number to Arrow too (JSON true: 1.0)
        raise _wrong(values, (float, int), "a number")
    data = np.array(values, dtype=np.float64) if n else np.empty(0, dtype=np.float64)  # a None reads NaN
    if _NONE not in kinds:
        return pa.Array.from_buffers(typ, n, [None, pa.py_buffer(data)], null_count=0)
    nan_at = np.flatnonzero(np.isnan(data))  # which NaN was a None: asked of those values only
    isnull = np.fromiter(map(operator.is_, map(values.__getitem__, nan_at.tolist()), repeat(None)),
                         dtype=np.bool_, count=len(nan_at))
    valid = np.ones(n, dtype=np.bool_)
    valid[nan_at[isnull]] = False
    nulls = int(np.count_nonzero(isnull))
    return pa.Array.from_buffers(typ, n, [_bitmap(valid), pa.py_buffer(data)], null_count=nulls)


def _ints(values: list, typ: pa.DataType) -> pa.Array:
    if not set(map(type, values)) <= {int, _NONE}:  # a bool is an int to array.array, not to Arrow
        raise _wrong([v for v in values if type(v) is not int], (), f"an integer ({typ})")
    validity, nulls = _validity(values) if None in values else (None, 0)
    filled = [0 if v is None else v for v in values] if nulls else values
    data = _pyarray(_INT_CODE[_INT_TYPES[typ]], filled)  # OverflowError out of range
    return pa.Array.from_buffers(typ, len(values), [validity, pa.py_buffer(data)], null_count=nulls)


def _strings(values: list, typ: pa.DataType) -> pa.Array:
    n = len(values)
    validity, nulls, filled = None, 0, values
    try:
        joined = "".join(values)  # strings only: a None or another value raises
    except TypeError:
        if not set(map(type, values)) <= {str, _NONE}:
            raise _wrong(values, (str,), "a string") from None
        validity, nulls = _validity(values)
        filled = ["" if v is None else v for v in values]
        joined = "".join(filled)
    if joined.isascii():
        data = joined.encode("ascii")
        lengths = np.fromiter(map(len, filled), dtype=np.int64, count=n)
    else:
        try:
            enc = [s.encode("utf-8") for s in filled]
        except UnicodeEncodeError as e:
            raise pa.ArrowInvalid(f"a string that is not valid UTF-8: {e}") from None
        data = b"".join(enc)
        lengths = np.fromiter(map(len, enc), dtype=np.int64, count=n)
    if len(data) > np.iinfo(np.int32).max:
        raise OverflowError(f"{len(data)} bytes of strings in one column: more than a string array holds (2 GiB)")
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(offsets), pa.py_buffer(data)], null_count=nulls)


def _lists(values: list, typ: pa.DataType) -> pa.Array:
    n = len(values)
    kinds = set(map(type, values))
    if not kinds <= {list, tuple, _NONE}:  # a string or a dict has a length too, but is no list of values
        raise _wrong(values, (list, tuple), "a list")
    lengths = np.zeros(n, dtype=np.int64)
    if _NONE in kinds:
        valid = np.fromiter(map(operator.is_not, values, repeat(None)), dtype=np.bool_, count=n)
        validity, nulls = _bitmap(valid), n - int(np.count_nonzero(valid))
        present = [v for v in values if v is not None]
        lengths[valid] = np.fromiter(map(len, present), dtype=np.int64, count=n - nulls)
        flat = list(chain.from_iterable(present))
    else:
        validity, nulls = None, 0
        lengths[:] = np.fromiter(map(len, values), dtype=np.int64, count=n)
        flat = list(chain.from_iterable(values))
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    vt = typ.value_type
    child = _floats(flat, vt, few_nulls=True) if vt == pa.float64() else array(flat, vt)
    return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(offsets)], null_count=nulls, children=[child])


def array(values: list, typ: pa.DataType) -> pa.Array:
    """``values`` (a list; ``None`` is null) as an Arrow array of type ``typ``."""
    n = len(values)
    if pa.types.is_floating(typ) and typ.bit_width == 64:
        return _floats(values, typ)
    if typ in _INT_TYPES:
        return _ints(values, typ)
    if pa.types.is_string(typ):
        return _strings(values, typ)
    if pa.types.is_list(typ):
        return _lists(values, typ)
    if pa.types.is_null(typ):
        if n - values.count(None):
            raise _wrong(values, (), "None (a null column)")
        return pa.nulls(n)
    validity, nulls = _validity(values) if None in values else (None, 0)
    if pa.types.is_boolean(typ):
        if any(v is not None and type(v) is not bool for v in values):
            raise _wrong(values, (bool,), "True or False")
        bits = _bitmap(np.fromiter(map(bool, values), dtype=np.bool_, count=n))
        return pa.Array.from_buffers(typ, n, [validity, bits], null_count=nulls)
    if pa.types.is_timestamp(typ) and typ.unit == "us" and typ.tz is None:
        if any(v is not None and not isinstance(v, datetime) for v in values):
            raise _wrong(values, (datetime,), "a datetime")
        us = [0 if v is None else ((v.astimezone(timezone.utc).replace(tzinfo=None) if v.tzinfo else v) - _EPOCH) // _US
              for v in values]
        return pa.Array.from_buffers(typ, n, [validity, pa.py_buffer(_pyarray(_INT_CODE[np.dtype(np.int64)], us))],
                                     null_count=nulls)
    raise TypeError(f"no Arrow array built here for the type {typ}")


def infer_type(values: list) -> pa.DataType:
    """The Arrow type pyarrow would infer for ``values`` (those of the types :func:`array` builds)."""
    kinds = set(map(type, values)) - {type(None)}
    if not kinds:
        return pa.null()
    if kinds == {str}:
        return pa.string()
    if kinds == {bool}:
        return pa.bool_()
    if kinds == {int}:
        return pa.int64()
    if kinds <= {int, float}:
        return pa.float64()
    if kinds == {datetime}:
        return pa.timestamp("us")
    if kinds <= {list, tuple}:
        return pa.list_(infer_type(list(chain.from_iterable(v for v in values if v is not None))))
    names = ", ".join(sorted(k.__name__ for k in kinds))
    raise TypeError(f"no Arrow type for a column of {names} values")


def table(columns: dict[str, list], types: dict[str, pa.DataType] | None = None) -> pa.Table:
    """A table of ``columns`` (name: list of values); a column's type is ``types[name]``, else inferred."""
    types = types or {}
    return pa.Table.from_arrays([array(v, types.get(k) or infer_type(v)) for k, v in columns.items()],
                                names=list(columns))


def from_numpy(values: np.ndarray) -> pa.Array:
    """A one-dimensional numpy array (bool, int32, int64 or float64) as an Arrow array, without nulls."""
    if values.ndim != 1:
        raise ValueError(f"a numpy array of {values.ndim} dimensions: one wanted")
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)], null_count=0)
    typ = _NUMPY_TYPES.get(values.dtype)
    if typ is None:
        raise TypeError(f"a numpy array of {values.dtype}: bool, int32, int64 or float64 wanted")
    return pa.Array.from_buffers(typ, len(values), [None, pa.py_buffer(np.ascontiguousarray(values))], null_count=0)


def to_numpy(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """An int32, int64 or float64 Arrow array (or chunked array) as a read-only numpy array, read from its
    buffers (``to_numpy`` goes through pyarrow's pandas conversion, which imports pandas). A null of a
    float64 array reads NaN; an integer array must have none."""
    dtype = _ARROW_DTYPES.get(values.type)
    if dtype is None:
        raise TypeError(f"an Arrow array of {values.type}: int32, int64 or float64 wanted")
    if isinstance(values, pa.ChunkedArray):
        parts = [to_numpy(c) for c in values.chunks]
        return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0, dtype=dtype)
    n, off = len(values), values.offset
    validity, data = values.buffers()
    out = np.frombuffer(data, dtype=dtype, count=off + n)[off:] if n else np.empty(0, dtype=dtype)
    if values.null_count:
        if dtype.kind != "f":
            raise ValueError(f"an Arrow array of {values.type} with {values.null_count} null(s): numpy has no null")
        valid = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little", count=off + n)[off:]
        out = np.where(valid.astype(np.bool_), out, np.nan)
    return out


def empty(typ: pa.DataType) -> pa.Array:
    """An array of no values of type ``typ``."""
    return array([], typ)


def repeated(value: Any, typ: pa.DataType, n: int) -> pa.Array:
    """``value`` ``n`` times (e.g. n empty strings), built once and repeated by Arrow."""
    return pa.repeat(array([value], typ)[0], n)
