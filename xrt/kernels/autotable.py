"""The ``auto`` table: which provider measured fastest, per (op, GPU, dtype, shape bucket).

One file per GPU model, ``results/auto/<model key>.json`` (``nvidia-h100-80gb-hbm3.json``), written
by ``xrt kernels auto-table`` from the suites' results (``bench_ops.<Op>.time_op``, each provider at
its default config) and read by the runtime's ``auto`` (``xrt.pytorch.auto``). This module holds
what both sides share: the shape bucket, the file's layout and the rule for a shape nobody measured.
Stdlib only, so that the writer needs no torch and the runtime no database.

The rule, in the order it is tried:

1. the bucket was measured for this op and dtype: its fastest provider, torch included; another
   provider must beat torch by :data:`MARGIN` after adding :data:`HOST_PENALTY_S`, the host time a
   call to xrt costs beyond torch's (:func:`fastest`, which the writer applies);
2. a memory-bound op (its definition's ``gpucheck``) takes the fastest provider of the nearest
   measured bucket when every dim of that bucket is within :data:`NEAR` powers of two of this one
   (their times scale alike with the bytes moved);
3. anything else is torch's: an unmeasured GEMM or attention shape, an op or dtype the table does
   not hold, a GPU that has no table. cuBLAS and SDPA are tuned for every shape; xrt's GEMM and
   attention kernels only for the shapes the suites time.

Training: a call that autograd records runs the op's backward too (``layernorm_bwd`` after
``layernorm``, with the forward's provider). Where the table measured the op's backward
(:data:`BACKWARD`) for the dtype, the rule above is applied to the sum of each provider's forward
and backward medians, over the buckets measured both ways and the providers timed both ways. Where
it did not (``matmul``, ``softmax``), the forward's times decide.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xrt.kernels import defs

SCHEMA = "xrt-auto/1"
TORCH = "torch"
# A provider other than torch wins a bucket only when its median is at least this share below
# torch's: a tie within the suites' noise stays torch's (never slower than torch).
MARGIN = 0.02
# What a call costs the host beyond torch's own when it goes to one of xrt's providers: the routing
# wrapper, the custom op and, in training, its autograd Function. On the H100 host a routed layernorm
# forward took 73-79 µs of host time against torch's 24-26 (results/gpu/host-gemm-h100.md). A step
# that waits on its host pays it in full, so another provider wins a bucket only when its median plus
# this, once a call (twice with the backward), still beats torch's: never slower, GPU-bound or not.
HOST_PENALTY_S = 50e-6
ANY_WIDTH = 1 << 62  # Table.torch_width of an op that never leaves torch
NEAR = 1  # rule 2: powers of two each dim of the nearest measured bucket may be away
ENV = "XRT_AUTO_TABLES"  # a directory of tables that replaces the checkout's results/auto
# The checkout's tables (xrt/kernels/ is two levels below the repository root; a wheel has no results/
# and so no table).
DEFAULT_DIR = Path(__file__).resolve().parents[2] / "results" / "auto"
BUCKET_RULE = "each dim of the op's suite shape rounded up to a power of two; 0 and 1 kept (attention's causal flag)"

# op -> its backward's measured op: the definitions whose policy entry is the op's (xrt/kernels/defs).
BACKWARD: dict[str, str] = {d.policy: d.name for d in defs.OPS.values() if d.name == f"{d.policy}_bwd"}

# What the runtime and the writer call a decision: rule 1, 2 or 3 above.
MEASURED, NEAREST, FALLBACK = "measured", "nearest", "fallback"


def _up(d: int) -> int:
    return d if d <= 1 else 1 << (d - 1).bit_length()


def bucket(shape: Sequence[int]) -> str:
    """The bucket of an op's suite shape (``kernels/defs``: (numel,) for flat ops, (M, N) for row
    ops, (M, N, K) for matmul, (B, H, S, D, causal) for attention): ``(4097, 4096, 4096)`` ->
    ``"8192x4096x4096"``."""
    dims = [int(d) for d in shape]
    if not dims or any(d < 0 for d in dims):
        raise ValueError(f"shape {tuple(dims)} must have dims, none negative")
    return "x".join(str(_up(d)) for d in dims)


def row_shape(shape: Sequence[int], flat: bool) -> tuple[int, ...]:
    """The suite shape of a tensor of ``shape`` for an op that sees it flat ((numel,)) or as rows of
    its last dim ((numel / N, N)): what the direct ops and the routed row ops bucket by."""
    n = math.prod(shape)
    if flat or len(shape) == 0:
        return (n,)
    last = int(shape[-1])
    return (n // last if last else 0, last)


def model_key(gpu: str) -> str:
    """The file stem of a GPU model's table: ``NVIDIA H100 80GB HBM3`` -> ``nvidia-h100-80gb-hbm3``
    (xrt.device's model key, which tuned configs are keyed by too)."""
    from xrt.device import DeviceInfo

    return DeviceInfo(kind="cuda", index=0, name=gpu).model_key


def table_dir() -> Path:
    """Where the tables are read from: ``$XRT_AUTO_TABLES``, else the checkout's ``results/auto``."""
    env = os.environ.get(ENV)
    return Path(env) if env else DEFAULT_DIR


@dataclass(frozen=True)
class Entry:
    """One measured bucket: the fastest provider and each provider's median seconds per call."""

    provider: str
    median_s: Mapping[str, float]
    shapes: tuple[str, ...]
    commit: str
    date: str


def fastest(median_s: Mapping[str, float], calls: int = 1) -> str:
    """The provider a bucket's medians make ``auto``'s: the fastest of those at least :data:`MARGIN`
    faster than torch after :data:`HOST_PENALTY_S` per call (``calls``: 1 forward, 2 with the
    backward), else torch (torch when it was not measured: nothing to compare with)."""
    base = median_s.get(TORCH)
    if base is None:
        return TORCH
    penalty = calls * HOST_PENALTY_S
    better = {p: s for p, s in median_s.items() if p != TORCH and s + penalty <= base * (1 - MARGIN)}
    return min(better, key=lambda p: (better[p], p)) if better else TORCH


def _log2(d: int) -> float:
    return math.log2(d) if d > 1 else -d  # 0 and 1 (flags) only match themselves


def _distance(a: str, b: str) -> float:
    """How many powers of two the farthest dim of bucket ``a`` is from ``b``'s; inf if they differ in
    rank or in a dim of 0 or 1."""
    da, db = [int(v) for v in a.split("x")], [int(v) for v in b.split("x")]
    if len(da) != len(db) or any((x <= 1 or y <= 1) and x != y for x, y in zip(da, db)):
        return math.inf
    # A list and no ``default=``: a routed call decides at trace time under torch.compile, and Dynamo
    # breaks the graph on min or max given ``default=`` (and on math.prod of a generator).
    gaps = [abs(_log2(x) - _log2(y)) for x, y in zip(da, db)]
    return max(gaps) if gaps else 0.0


class Table:
    """One GPU model's table: ``pick(op, dtype, shape)`` applies the rule of this module's docstring."""

    def __init__(self, doc: Mapping[str, Any]) -> None:
        if doc.get("schema") != SCHEMA:
            raise ValueError(f"schema {doc.get('schema')!r} is not {SCHEMA!r}")
        self.gpu: str = str(doc.get("gpu", ""))
        self.entries: dict[tuple[str, str], dict[str, Entry]] = {}
        self._summed: dict[tuple[str, str], dict[str, Entry]] = {}  # training's entries (_train)
        for op, by_dtype in dict(doc.get("ops", {})).items():
            for dtype, by_bucket in dict(by_dtype).items():
                self.entries[(op, dtype)] = {
                    b: Entry(e["provider"], dict(e["median_s"]), tuple(e.get("shapes", ())),
                             str(e.get("commit", "")), str(e.get("date", "")))
                    for b, e in dict(by_bucket).items()}

    def pick(self, op: str, dtype: str, shape: Sequence[int], train: bool = False) -> tuple[str, str]:
        """(provider, why): why is :data:`MEASURED`, :data:`NEAREST` or :data:`FALLBACK`. ``train``: the
        call runs the backward too (the module docstring's training rule)."""
        measured = self.entries.get((op, dtype))
        if train and op in BACKWARD:
            both = self._train(op, dtype)
            if both:
                measured = both
        if not measured:
            return TORCH, FALLBACK
        b = bucket(shape)
        hit = measured.get(b)
        if hit is not None:
            return hit.provider, MEASURED
        d = defs.OPS.get(op)
        if d is not None and d.gpucheck:
            near_by = [(_distance(b, k), k) for k in measured]  # a list: see _distance
            dist, near = min(near_by) if near_by else (math.inf, "")
            if dist <= NEAR:
                return measured[near].provider, NEAREST
        return TORCH, FALLBACK

    def _train(self, op: str, dtype: str) -> dict[str, Entry]:
        """``op``'s buckets measured forward and backward, each an entry of the summed medians of the
        providers timed both ways (computed once per (op, dtype))."""
        key = (op, dtype)
        if key not in self._summed:
            fwd, bwd = self.entries.get(key, {}), self.entries.get((BACKWARD[op], dtype), {})
            summed = {}
            for b in fwd.keys() & bwd.keys():
                med = {p: s + bwd[b].median_s[p] for p, s in fwd[b].median_s.items() if p in bwd[b].median_s}
                summed[b] = Entry(fastest(med, calls=2), med, fwd[b].shapes, fwd[b].commit, fwd[b].date)
            self._summed[key] = summed
        return self._summed[key]

    def torch_width(self, op: str) -> int:
        """The widest row that :meth:`pick` leaves to torch whatever the rows, dtype and mode, for a
        row op (suite shape (M, N)): a call whose N is at most this needs no lookup. Every bucket of
        a provider other than torch, forward or training, bounds it: the rule's step 1 hits it only
        at its own width, step 2 (memory-bound ops) from within :data:`NEAR` powers of two of it."""
        near = NEAR if defs.OPS[op].gpucheck else 0
        widths = [int(b.rsplit("x", 1)[-1]) for (o, dtype), measured in self.entries.items() if o == op
                  for b, e in [*measured.items(), *(self._train(op, dtype).items() if op in BACKWARD else ())]
                  if e.provider != TORCH]
        if not widths:
            return ANY_WIDTH
        # a width W is bucketed to the power of two _up(W); one below min(widths) / 2**near cannot reach it
        return min(widths) >> (near + 1)

    def routes(self, ops: Sequence[str]) -> bool:
        """Can :meth:`pick` name a provider other than torch for any of ``ops`` (forward or training)?"""
        for op in ops:
            for dtype in {d for o, d in self.entries if o == op}:
                entries = [*self.entries[(op, dtype)].values()]
                if op in BACKWARD:
                    entries += self._train(op, dtype).values()
                if any(e.provider != TORCH for e in entries):
                    return True
        return False


def load(path: str | os.PathLike) -> Table:
    """The table in ``path``; a ValueError naming the file and what is wrong with it."""
    try:
        return Table(json.loads(Path(path).read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"auto table {path}: {e}") from e


def find(gpu: str, where: Path | None = None) -> Table | None:
    """The table of GPU model ``gpu`` (``torch.cuda.get_device_name``), or ``None`` when there is none."""
    path = (where or table_dir()) / f"{model_key(gpu)}.json"
    return load(path) if path.is_file() else None
