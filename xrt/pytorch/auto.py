"""``auto``'s choice on a GPU: the provider the committed measurements found fastest.

The table of this GPU model (``results/auto/<model>.json``, :mod:`xrt.kernels.autotable`) is read
once per process and GPU; each answer is memoized per (op, GPU, dtype, suite shape). Where the table
holds nothing for a call (another GPU, an unmeasured GEMM shape...), the answer is torch's: see the
rule in :mod:`xrt.kernels.autotable`. A call that autograd records (an input that requires grad,
grad mode on) is a training call: where the table measured the op's backward, the providers' forward
plus backward times decide. The caller checks that the provider can run the input.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Sequence

import torch

from xrt.kernels import autotable
from xrt.pytorch import policy

TORCH = autotable.TORCH

_lock = threading.Lock()
_tables: dict[int, autotable.Table | None] = {}  # CUDA device index -> its model's table
_memo: dict[tuple, str] = {}
_routes: dict[tuple[str, ...], bool] = {}
_widths: dict[str, int] = {}  # torch_width()
_generation = 0  # bumped by clear(): the tables a compiled call decided from are gone


def devices() -> range:
    """This process's CUDA device indices (a seam for the tests)."""
    return range(torch.cuda.device_count()) if torch.cuda.is_available() else range(0)


def gpu_name(index: int) -> str:
    """The model name torch gives CUDA device ``index`` (a seam for the tests)."""
    return torch.cuda.get_device_name(index)


def device_index(x: torch.Tensor) -> int | None:
    """The CUDA device index of ``x``; None off CUDA (a seam for the tests)."""
    if not x.is_cuda:
        return None
    return x.device.index if x.device.index is not None else torch.cuda.current_device()


def table(index: int) -> autotable.Table | None:
    """The table of CUDA device ``index``'s model, read on the first call; ``None`` when there is
    none, or when it cannot be read (one warning names the file and why: ``auto`` is then torch)."""
    if index not in _tables:
        with _lock:
            if index not in _tables:
                try:
                    _tables[index] = autotable.find(gpu_name(index))
                except ValueError as e:
                    warnings.warn(f"xrt auto: {e}; auto runs torch on this GPU", RuntimeWarning, stacklevel=3)
                    _tables[index] = None
    return _tables[index]


def clear() -> None:
    """Forget the tables read and the answers given (after ``XRT_AUTO_TABLES`` changes, in tests),
    and the decisions routed calls memoized from them."""
    global _generation
    with _lock:
        _tables.clear()
        _memo.clear()
        _routes.clear()
        _widths.clear()
        _generation += 1
    policy.invalidate()


def routes(ops: Sequence[str]) -> bool:
    """Can ``auto`` name a provider other than torch for any of the measured ``ops`` on one of this
    process's GPUs? Read when a policy changes (the GPUs' tables are read then, which initialises
    CUDA); no GPU, no table, or a table that names torch for every entry: ``False``."""
    key = tuple(ops)
    hit = _routes.get(key)
    if hit is None:
        hit = _routes[key] = any(t is not None and t.routes(ops) for t in map(table, devices()))
    return hit


def torch_width(op: str) -> int:
    """The widest row of row op ``op`` that ``auto`` leaves to torch on every GPU of this process,
    whatever the call's rows, dtype and mode (:meth:`xrt.kernels.autotable.Table.torch_width`): a
    routed call no wider needs no lookup. Read when a routed call first asks under a policy."""
    hit = _widths.get(op)
    if hit is None:
        widths = [t.torch_width(op) for t in map(table, devices()) if t is not None]
        hit = _widths[op] = min(widths) if widths else autotable.ANY_WIDTH
    return hit


def pick(op: str, x: torch.Tensor, shape: Sequence[int], train: bool | None = None) -> str:
    """The provider ``auto`` names for ``op`` on ``x`` with suite shape ``shape`` (xrt/kernels/defs):
    the table's for this GPU where it has one, else torch. Off CUDA: torch. ``train``: the call
    runs a backward too (by default: ``x`` requires grad and grad mode is on)."""
    index = device_index(x)
    if index is None:
        return TORCH
    if train is None:
        train = x.requires_grad and torch.is_grad_enabled()
    return _pick(op, index, x.dtype, tuple(shape), bool(train), _generation)


@policy.trace_constant
def _pick(op: str, index: int, dtype: torch.dtype, shape: tuple[int, ...], train: bool, generation: int) -> str:
    """:func:`pick` from the call's constants, memoized. Under ``torch.compile`` Dynamo runs it as it
    traces and keeps the answer as a constant: it does not trace the table's lookup, which would leave
    a guard on every bucket and memo entry it read (some 600 more per compiled function, each checked
    on every call). ``generation`` is :data:`_generation`, read by the traced caller: Dynamo guards on
    that one int, so a compiled call traces again after :func:`clear` (a new table)."""
    key = (op, index, dtype, shape, train)
    hit = _memo.get(key)
    if hit is None:
        t = table(index)
        hit = TORCH if t is None else t.pick(op, str(dtype).removeprefix("torch."), shape, train)[0]
        if len(_memo) > 4096:
            _memo.clear()
        _memo[key] = hit
    return hit
