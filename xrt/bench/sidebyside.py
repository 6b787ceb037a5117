"""The pieces of a side-by-side GPU benchmark (``benchmarks/gemm_bench.py``, ``conv_bench.py``,
``attention_bench.py``): device time of a call, its error against the baseline's output, and one
row per implementation where a failure (out of resources, a compile error, a wrong result) is a
row too, not the end of the run."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import Any


def device_ms(fn: Callable[[], Any], **rule: float) -> float:
    """Median device milliseconds of ``fn()`` on the GPU (:func:`xrt.bench.timer.measure`: L2
    flushed, its stopping rule; ``rule`` overrides it, e.g. ``max_time``)."""
    from xrt.bench import timer

    return timer.measure(fn, "cuda", flush_l2=True, **rule).median_s * 1e3


def rel_err(y: Any, ref: Any) -> float:
    """Largest absolute difference relative to the reference's largest magnitude."""
    return float((y.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-30))


def config_label(cfg: dict | None) -> str:
    return "default" if not cfg else ",".join(f"{k}={v}" for k, v in cfg.items())


def tflops(flops: float, ms: float | None) -> float | None:
    return None if not ms else flops / (ms * 1e-3) / 1e12


def run_row(group: str, shape: str, label: str, fn: Callable[[], Any], ref: Any, max_time: float,
            tol: float = 2e-2, flops: float | None = None) -> dict:
    """Check ``fn``'s output against ``ref`` (None: nothing to check), then time it."""
    row: dict[str, Any] = {"group": group, "shape": shape, "impl": label}
    if flops is not None:
        row["flops"] = flops
    try:
        y = fn()
        row["err"] = rel_err(y, ref) if ref is not None else 0.0
        if row["err"] > tol:
            row["error"] = f"wrong result: err {row['err']:.3g} > {tol}"
            return row
        row["ms"] = device_ms(fn, max_time=max_time)
        if flops is not None:
            row["tflops"] = tflops(flops, row["ms"])
    except Exception as e:  # a config over the resources, a compile failure: recorded, not fatal
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        traceback.print_exc(file=sys.stderr)
    return row


def fmt(v: Any, spec: str) -> str:
    """A table cell: empty where there is no value."""
    return "" if v is None else format(v, spec)
