"""xrt.db.arrays: the ingest's Arrow columns, built from buffers, are pyarrow's own conversion of the same
lists (nulls, NaN, non-ASCII strings, nested lists, timestamps), refuse what it refuses, and import no pandas."""

from __future__ import annotations

import math
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

pa = pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

from xrt.db import arrays  # noqa: E402

CASES = [
    ([1.0, None, float("nan"), 2, True, -0.0, 1e308], pa.float64()),
    ([], pa.float64()),
    ([None, None], pa.float64()),
    ([1, None, 3, -2**31, 2**31 - 1], pa.int32()),
    ([1, 2**40, None], pa.int64()),
    (["a", None, "héllo", "", "€x", "日本"], pa.string()),
    (["abc", "d", ""], pa.string()),
    ([None], pa.string()),
    ([True, None, False] * 5, pa.bool_()),
    ([[1.0, 2.0], None, [], [3.0, None, float("nan")], (4.0,)], pa.list_(pa.float64())),
    ([["a"], [], None, ["b", "ç"]], pa.list_(pa.string())),
    ([datetime(2020, 1, 2, 3, 4, 5, 6), None, datetime.min, datetime(2020, 1, 1, tzinfo=timezone(timedelta(hours=2)))],
     pa.timestamp("us")),
    ([None, None], pa.null()),
]


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        x == y or (isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y))
        or (isinstance(x, list) and isinstance(y, list) and _same(x, y)) for x, y in zip(a, b))


@pytest.mark.parametrize(("values", "typ"), CASES, ids=[str(t) + f"-{i}" for i, (_, t) in enumerate(CASES)])
def test_array_is_pyarrows_conversion(values, typ):
    got = arrays.array(values, typ)
    got.validate(full=True)
    want = pa.array(values, typ)
    assert got.type == want.type and got.null_count == want.null_count
    assert _same(got.to_pylist(), want.to_pylist()), (got, want)


@pytest.mark.parametrize(("values", "typ", "error"), [
    (["1.5"], pa.float64(), TypeError),
    ([True], pa.int32(), TypeError),
    ([2**31], pa.int32(), OverflowError),
    ([1], pa.string(), TypeError),
    (["ab"], pa.list_(pa.float64()), TypeError),
    ([["a"]], pa.list_(pa.float64()), TypeError),
    ([{"a": 1}], pa.list_(pa.string()), TypeError),
    ([1], pa.null(), TypeError),
])
def test_array_refuses_what_pyarrow_refuses(values, typ, error):
    with pytest.raises((pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError)):
        pa.array(values, typ)
    with pytest.raises(error, match=r"expected|maximum|greater|too large|int"):
        arrays.array(values, typ)


def test_a_float_is_no_integer():
    """Stricter than pyarrow, which truncates: 1.5 in an integer column is refused, named."""
    assert pa.array([1.5], pa.int64()).to_pylist() == [1]
    with pytest.raises(TypeError, match=r"expected an integer \(int64\), got 1.5 \(float\)"):
        arrays.array([1, None, 1.5], pa.int64())


@pytest.mark.parametrize("values", [[1, None], [1, 2.5], ["a", None], [None], [[1, 2], None, []],
                                    [datetime(2020, 1, 1)], [True, False], [[["x"]], []]])
def test_infer_type_is_pyarrows(values):
    assert arrays.infer_type(values) == pa.array(values).type


def test_table_and_numpy_round_trips():
    t = arrays.table({"a": [1, None, 3], "b": ["x", "y", None]}, {"a": pa.int32()})
    assert t.schema == pa.schema([("a", pa.int32()), ("b", pa.string())])
    assert t.to_pylist() == [{"a": 1, "b": "x"}, {"a": None, "b": "y"}, {"a": 3, "b": None}]
    for a in [pa.array([1.0, None, 3.0]), pa.array([1.0, None, 3.0, 4.0, None, 6.0, 7.0, 8.0, None])[1:8],
              pa.array([1, 2, 3], pa.int32())[1:], pa.array([], pa.float64())]:
        assert np.array_equal(arrays.to_numpy(a), a.to_numpy(zero_copy_only=False), equal_nan=True)
    chunked = pa.chunked_array([pa.array([1, 2], pa.int64()), pa.array([3], pa.int64())])
    assert arrays.to_numpy(chunked).tolist() == [1, 2, 3]
    assert arrays.to_numpy(pa.chunked_array([], pa.int32())).dtype == np.int32
    with pytest.raises(ValueError, match="null"):
        arrays.to_numpy(pa.array([1, None], pa.int32()))
    mask = np.array([True, False, True] * 7)
    assert arrays.from_numpy(mask).to_pylist() == mask.tolist()
    ints = np.arange(10, dtype=np.int32)[::2]
    assert arrays.from_numpy(ints).to_pylist() == ints.tolist()
    with pytest.raises(TypeError, match="float32"):
        arrays.from_numpy(np.zeros(3, dtype=np.float32))


def test_building_arrays_imports_no_pandas():
    """The point of the module: pa.array of a list would import pandas wherever it is installed."""
    code = ("import sys; from xrt.db import arrays; import pyarrow as pa; "
            "t = arrays.table({'a': [1.0, None], 's': ['x', None], 'l': [[1.0], None]}); "
            "arrays.to_numpy(t['a']); arrays.from_numpy(arrays.to_numpy(t['a']) > 0); "
            "assert 'pandas' not in sys.modules, 'pandas was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
