"""The pieces of a side-by-side GPU benchmark (``benchmarks/gemm_bench.py``, ``conv_bench.py``,
``attention_bench.py``): device time of a call, its error against the baseline's output, and one
row per implementation where a failure (out of resources, a compile error, a wrong result) is a
row too, not the end of the run."""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def parse_args(name: str, doc: str, argv: list[str] | None,
               flags: Sequence[tuple[str, str]] = ()) -> argparse.Namespace | None:
    """``--out JSON [--md MD] [--quick]`` and the script's own ``flags`` (``(--name, help)``, each on or
    off); ``None``, after saying so on stderr, where there is no CUDA GPU."""
    ap = argparse.ArgumentParser(prog=name, description=doc.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON file for the rows")
    ap.add_argument("--md", type=Path, help="also write the markdown table here")
    ap.add_argument("--quick", action="store_true", help="default configs only (no sweep)")
    for flag, text in flags:
        ap.add_argument(flag, action="store_true", help=text)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(f"{name} needs a CUDA GPU", file=sys.stderr)
        return None
    return args


def commit_of(repo: Path) -> str:
    """The short hash of ``repo``'s HEAD ("" outside a git checkout): the commit a run's results name."""
    import subprocess

    return subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def run_meta(repo: Path) -> dict[str, str]:
    """What a GPU run's results say of it: the GPU, torch's version, the host, the commit and the date."""
    import platform
    import time

    import torch

    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "host": platform.node(),
            "commit": commit_of(repo), "date": time.strftime("%Y-%m-%d")}


def run_main(name: str, doc: str, argv: list[str] | None, repo: Path,
             measure: Callable[[argparse.Namespace], list[dict]],
             markdown: Callable[[list[dict], dict], str], flags: Sequence[tuple[str, str]] = ()) -> int:
    """A GPU benchmark script's ``main``: its arguments (:func:`parse_args`, with ``flags``; 2 without a
    GPU), the run's :func:`run_meta`, the rows ``measure(args)`` makes, saved as JSON and ``markdown``
    (:func:`save`)."""
    args = parse_args(name, doc, argv, flags)
    if args is None:
        return 2
    meta = run_meta(repo)
    rows = measure(args)
    save({"meta": meta, "rows": rows}, markdown(rows, meta), args.out, args.md)
    return 0


def save(result: dict, md: str, out: Path, md_path: Path | None) -> None:
    """The run's JSON to ``out`` (its folder made), the markdown table printed and, if asked, to ``md_path``."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(md)
    if md_path:
        md_path.write_text(md)


def device_ms(fn: Callable[[], Any], device: str = "cuda", **rule: float) -> float:
    """Median device milliseconds of ``fn()`` on ``device`` (:func:`xrt.bench.timer.measure`: L2
    flushed on a GPU, its stopping rule; ``rule`` overrides it, e.g. ``max_time``)."""
    from xrt.bench import timer

    return timer.measure(fn, device, flush_l2=True, **rule).median_s * 1e3


def rel_err(y: Any, ref: Any) -> float:
    """Largest absolute difference relative to the reference's largest magnitude."""
    return float((y.float() - ref.float()).abs().max() / ref.float().abs().max().clamp_min(1e-30))


def config_label(cfg: dict | None) -> str:
    return "default" if not cfg else ",".join(f"{k}={v}" for k, v in cfg.items())


def tflops(flops: float, ms: float | None) -> float | None:
    return None if not ms else flops / (ms * 1e-3) / 1e12


def run_row(group: str, shape: str, label: str, fn: Callable[[], Any], ref: Any, max_time: float,
            tol: float = 2e-2, flops: float | None = None, device: str = "cuda", **rule: float) -> dict:
    """Check ``fn``'s output against ``ref`` (None: nothing to check), then time it on ``device``
    (``rule``: more of the timer's stopping rule)."""
    row: dict[str, Any] = {"group": group, "shape": shape, "impl": label}
    if flops is not None:
        row["flops"] = flops
    try:
        y = fn()
        row["err"] = rel_err(y, ref) if ref is not None else 0.0
        if row["err"] > tol:
            row["error"] = f"wrong result: err {row['err']:.3g} > {tol}"
            return row
        row["ms"] = device_ms(fn, device, max_time=max_time, **rule)
        if flops is not None:
            row["tflops"] = tflops(flops, row["ms"])
    except Exception as e:  # a config over the resources, a compile failure: recorded, not fatal
        row["error"] = error_line(e)
        traceback.print_exc(file=sys.stderr)
    return row


def error_line(e: BaseException, limit: int = 300) -> str:
    """A failure as one line of a row: its type and the first line of its message."""
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:limit]


def model_steps(call: Callable[[Any], Any], x: Any, model: Any) -> dict[str, Callable[[], None]]:
    """A model's ``train`` step on ``x`` (forward, backward of the mean square, gradients set to None)
    and its ``infer`` step (a ``no_grad`` forward). ``call`` runs the model (itself, or compiled);
    ``model`` holds the parameters."""
    import torch

    def train() -> None:
        call(x).float().pow(2).mean().backward()
        model.zero_grad(set_to_none=True)
        x.grad = None

    def infer() -> None:
        with torch.no_grad():
            call(x)

    return {"train": train, "infer": infer}


def device_work(events: Any) -> list[Any]:
    """The kernels, copies and fills among a profiler's ``events`` (events of a device type). Not the
    host's ops that launched them, nor the ranges a ``record_function`` marks on the device's
    timeline (user annotations, such as an xrt op's range: they span their kernels, so counting
    them too counts the op's device time twice)."""
    import torch

    cpu = torch.autograd.DeviceType.CPU
    return [e for e in events if e.device_type != cpu and not getattr(e, "is_user_annotation", False)]


def busy_us(events: Any) -> float:
    """The device's busy time in µs over a profiler's ``events``: the union of the intervals of
    :func:`device_work`; overlapping work counts once."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in device_work(events))
    busy, end = 0.0, float("-inf")
    for a, b in spans:
        if b > end:
            busy += b - max(a, end)
            end = b
    return float(busy)


def device_busy_ms(step: Callable[[], Any], steps: int = 5) -> float | None:
    """ms a ``step`` keeps the GPU busy (the profiler's device events of ``steps`` steps, after one
    unprofiled step), ``None`` without CUDA. Beside the step's wall time it says whether the step
    waits on its host: then the host's cost per call shows in the wall time in full."""
    import torch

    if not torch.cuda.is_available():
        return None
    step()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    return busy_us(prof.events()) / steps / 1e3


def fmt(v: Any, spec: str) -> str:
    """A table cell: empty where there is no value."""
    return "" if v is None else format(v, spec)


def cells(row: dict) -> tuple[str, str, str]:
    """A row's ``met``, ``ratio`` (a group's summary: with its default config's) and ``err / error`` cells."""
    met = {True: "**met**", False: "not met", None: ""}[row.get("met")]
    ratio = fmt(row.get("ratio"), ".3f")
    if row.get("summary") and row.get("default_ratio") is not None:
        ratio += f" (default {row['default_ratio']:.3f})"
    return met, ratio, row.get("error") or fmt(row.get("err"), ".2g")


def paired(base: Callable[[], Any], other: Callable[[], Any], quads: int = 15, block_s: float = 0.03,
           sync: Callable[[], Any] = lambda: None,
           scopes: tuple[Callable[[], Any], Callable[[], Any]] | None = None) -> dict[str, Any]:
    """``other`` against ``base`` in ABBA quads of short blocks: base, other, other, base, ``quads``
    times. A block is a run of calls timed by the wall clock between two ``sync()`` calls (a CUDA
    synchronize on a GPU): what a training loop feels, the host's part included. A quad's ratio is its
    two ``other`` blocks over its two ``base`` blocks, so a host or clock drift slower than a quad
    (a fraction of a second) cancels. Returns ms per call of each (the blocks' medians), the quads'
    ratios and their median. ``scopes``: a context (a kernel policy, say) for each side, entered
    around its blocks, not each call, as a user sets a policy once around a loop."""
    import contextlib
    import statistics
    import time

    base_scope, other_scope = scopes or (contextlib.nullcontext, contextlib.nullcontext)

    def block(fn: Callable[[], Any], scope: Callable[[], Any], calls: int) -> float:
        with scope():
            sync()
            t = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            return (time.perf_counter() - t) / calls * 1e3

    for _ in range(2):  # warm: compiles, autotuning, the allocator
        block(base, base_scope, 1)
        block(other, other_scope, 1)
    calls = max(1, round(block_s / max(block(base, base_scope, 1), 1e-6) * 1e3))
    bs: list[float] = []
    os_: list[float] = []
    ratios: list[float] = []
    for _ in range(quads):
        b1, o1 = block(base, base_scope, calls), block(other, other_scope, calls)
        o2, b2 = block(other, other_scope, calls), block(base, base_scope, calls)
        bs += [b1, b2]
        os_ += [o1, o2]
        ratios.append((o1 + o2) / (b1 + b2))
    return {"base_ms": statistics.median(bs), "ms": statistics.median(os_), "ratios": ratios,
            "ratio": statistics.median(ratios), "calls_per_block": calls}
