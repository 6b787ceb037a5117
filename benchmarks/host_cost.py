"""Side-by-side host cost of xrt's ops against torch and a bare Triton launch, in one run.

    python benchmarks/host_cost.py --device cuda --out host_cost.json [--md host_cost.md]
        [--calls 3000] [--repeats 25] [--no-compile] [--tuned results/tuned]

Host µs per call: the wall time of ``--calls`` (3,000) back-to-back calls divided by ``--calls``,
after a warm-up, with the device synchronised before the first call and after the last, both
outside the interval (:meth:`xrt.bench.timer.Clock.host_batch`, the suites' host timer with
longer samples); the median of ``--repeats`` (25) such runs. A row whose target names another row
is measured in turns with it (A B, then B A, ...: one repeat of each) and judged on the median of
the per-repeat differences ("+ N µs" targets) or ratios ("N x" targets), so that the host's drift
(it switches between states minutes apart) moves both sides alike. Inputs are small ([4096] fp32 for
square, [64, 1024] bf16 for softmax and layernorm), so on a GPU the kernels finish before the next
launch and the figure is the cost to the caller. The rows and their targets:

* ``x * x`` (torch) and ``xp.ops.square(x, provider="torch")``: torch provider <= torch + 5 µs;
* a bare launch of the Triton kernel (``_square_kernel[grid](...)``, outputs preallocated; the
  same for the softmax and layernorm forward kernels) and the ``triton`` provider of the public op:
  Triton providers <= bare launch + 10 µs;
* the ``cuda`` (CUDA C) provider: <= 40 µs a call;
* softmax and layernorm forward, torch against xrt's triton / cuda providers (same targets);
* layernorm forward + backward (``torch.autograd.grad``): xrt triton / cuda <= 1.2 x torch;
* the xrt rows again with ``XRT_TUNED`` pointing at ``--tuned`` (results/tuned): no worse than
  without it (<= 1.05 x);
* ``torch.compile`` of ``x * x`` and of the public op (launch cost under compile; no target);
* ``triton.testing.do_bench`` (median) through the public op, layernorm bf16 at 16384x4096,
  8192x8192, 4096x16384 and 2048x32768, beside :func:`xrt.bench.timer.measure`'s device time of
  the same call: within 3 %.

Rows that need what this machine lacks (Triton and CUDA C without a GPU, do_bench without CUDA, a
C++ compiler for torch.compile on the CPU) are listed as skipped with the reason, never dropped.
Writes the JSON to ``--out`` and prints (and with ``--md`` writes) the markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LN_SHAPES = [(16384, 4096), (8192, 8192), (4096, 16384), (2048, 32768)]
TUNED_TOLERANCE = 1.05


class Skip(Exception):
    """This row cannot run here; the message says why."""


def host_us(fn: Callable[[], Any], clock: Any, calls: int, repeats: int, warmup: int) -> list[float]:
    """Host µs per call, one figure per repeat (``calls`` back-to-back calls each)."""
    for _ in range(warmup):
        fn()
    clock.host_batch(fn, max(1, warmup))  # warm, and synchronised
    return [clock.host_batch(fn, calls) * 1e6 for _ in range(repeats)]


def _provider_ok(op: str, provider: str, x: Any) -> None:
    from xrt.pytorch.ops import providers

    p = providers(op).get(provider)
    why = "not registered" if p is None else p.missing(x)
    if why:
        raise Skip(f"{op}[{provider}]: {why}")


def _needs_gpu_triton(device: str) -> None:
    if not device.startswith("cuda"):
        raise Skip("Triton launches need a CUDA GPU (the CPU interpreter's cost is not a launch cost)")


def build_rows(device: str, tuned: Path | None, compile_: bool) -> list[dict]:
    """The rows: name, group, a builder returning the callable (or raising :class:`Skip`), target."""
    import torch
    import torch.nn.functional as F

    import xrt.pytorch as xp

    dev = torch.device(device)
    x = torch.randn(4096, device=dev)
    xs = torch.randn(64, 1024, device=dev, dtype=torch.bfloat16)
    w = torch.randn(1024, device=dev, dtype=torch.bfloat16)
    b = torch.randn(1024, device=dev, dtype=torch.bfloat16)
    xg = xs.clone().requires_grad_(True)
    wg, bg = w.clone().requires_grad_(True), b.clone().requires_grad_(True)
    dy = torch.randn_like(xs)

    def provider(op: str, name: str, arg: Any, fn: Callable[[], Any]) -> Callable[[], Callable[[], Any]]:
        def make() -> Callable[[], Any]:
            if name == "triton":
                _needs_gpu_triton(device)
            _provider_ok(op, name, arg)
            return fn
        return make

    def bare_square() -> Callable[[], Any]:
        _needs_gpu_triton(device)
        import triton

        from xrt.kernels import spaces
        from xrt.kernels.triton.square import _square_kernel

        cfg = spaces.check("square.triton", {})
        y = torch.empty_like(x)
        n, grid = x.numel(), (triton.cdiv(x.numel(), cfg["BLOCK_SIZE"]),)
        return lambda: _square_kernel[grid](x, y, n, BLOCK_SIZE=cfg["BLOCK_SIZE"], num_warps=cfg["num_warps"])

    def bare_softmax() -> Callable[[], Any]:
        _needs_gpu_triton(device)
        import triton

        from xrt.kernels.triton.softmax import _softmax_kernel, row_warps, rows_per_program

        m, n = xs.shape
        block = triton.next_power_of_2(n)
        rows = rows_per_program(block, m)
        warps = row_warps(block * rows)
        y = torch.empty_like(xs)
        grid = (triton.cdiv(m, rows),)
        return lambda: _softmax_kernel[grid](xs, y, m, n, ROWS=rows, BLOCK=block, num_warps=warps)

    def bare_layernorm() -> Callable[[], Any]:
        _needs_gpu_triton(device)
        import triton

        from xrt.kernels import spaces
        from xrt.kernels.triton.layernorm import _layernorm_fwd_kernel, fwd_plan

        m, n = xs.shape
        cfg = spaces.check("layernorm.triton", {})
        block = triton.next_power_of_2(n)
        rows, warps = fwd_plan(block, m, cfg["num_warps"], cfg["rows"])
        y = torch.empty_like(xs)
        mean = torch.empty(m, device=dev, dtype=torch.float32)
        rstd = torch.empty(m, device=dev, dtype=torch.float32)
        grid = (triton.cdiv(m, rows),)
        return lambda: _layernorm_fwd_kernel[grid](xs, w, b, y, mean, rstd, 0, m, n, 1e-5, STATS=True, ROWS=rows,
                                                   BLOCK=block, num_warps=warps)

    def fwd_bwd(call: Callable[[], Any]) -> Callable[[], Any]:
        return lambda: torch.autograd.grad(call(), (xg, wg, bg), dy)

    def compiled(fn: Callable[[Any], Any], arg: Any, op: str | None = None, name: str | None = None):
        def make() -> Callable[[], Any]:
            if not compile_:
                raise Skip("--no-compile")
            if dev.type == "cpu" and not any(map(__import__("shutil").which, ("g++", "c++", "clang++"))):
                raise Skip("torch.compile on the CPU needs a C++ compiler")
            if name == "triton":
                _needs_gpu_triton(device)
            if op is not None:
                _provider_ok(op, name, arg)
            torch._dynamo.reset()
            c = torch.compile(fn, dynamic=False)
            c(arg)
            return lambda: c(arg)
        return make

    rows: list[dict] = []

    def row(name: str, group: str, make: Callable[[], Callable[[], Any]], target: dict | None = None,
            tuned_twin: bool = False) -> None:
        rows.append({"name": name, "group": group, "make": make, "target": target, "tuned_twin": tuned_twin})

    ln = lambda p: (lambda: xp.ops.fused_layernorm(xs, 1024, w, b, 1e-5, provider=p))  # noqa: E731
    lng = lambda p: (lambda: xp.ops.fused_layernorm(xg, 1024, wg, bg, 1e-5, provider=p))  # noqa: E731
    row("x * x", "square [4096] fp32", lambda: (lambda: x * x))
    row('xp.ops.square(x, provider="torch")', "square [4096] fp32",
        provider("square", "torch", x, lambda: xp.ops.square(x, provider="torch")),
        {"kind": "plus", "ref": "x * x", "us": 5.0}, tuned_twin=True)
    row("_square_kernel[grid](...) (bare launch)", "square [4096] fp32", bare_square)
    row('xp.ops.square(x, provider="triton")', "square [4096] fp32",
        provider("square", "triton", x, lambda: xp.ops.square(x, provider="triton")),
        {"kind": "plus", "ref": "_square_kernel[grid](...) (bare launch)", "us": 10.0}, tuned_twin=True)
    row('xp.ops.square(x, provider="cuda")', "square [4096] fp32",
        provider("square", "cuda", x, lambda: xp.ops.square(x, provider="cuda")),
        {"kind": "abs", "us": 40.0}, tuned_twin=True)
    row("torch.softmax(x, -1)", "softmax [64, 1024] bf16", lambda: (lambda: torch.softmax(xs, -1)))
    row("_softmax_kernel[grid](...) (bare launch)", "softmax [64, 1024] bf16", bare_softmax)
    row('xp.ops.softmax(x, provider="triton")', "softmax [64, 1024] bf16",
        provider("softmax", "triton", xs, lambda: xp.ops.softmax(xs, provider="triton")),
        {"kind": "plus", "ref": "_softmax_kernel[grid](...) (bare launch)", "us": 10.0}, tuned_twin=True)
    row('xp.ops.softmax(x, provider="cuda")', "softmax [64, 1024] bf16",
        provider("softmax", "cuda", xs, lambda: xp.ops.softmax(xs, provider="cuda")),
        {"kind": "abs", "us": 40.0}, tuned_twin=True)
    row("F.layer_norm", "layernorm [64, 1024] bf16", lambda: (lambda: F.layer_norm(xs, (1024,), w, b, 1e-5)))
    row("_layernorm_fwd_kernel[grid](...) (bare launch)", "layernorm [64, 1024] bf16", bare_layernorm)
    row('xp.ops.fused_layernorm(..., provider="triton")', "layernorm [64, 1024] bf16",
        provider("layernorm", "triton", xs, ln("triton")),
        {"kind": "plus", "ref": "_layernorm_fwd_kernel[grid](...) (bare launch)", "us": 10.0}, tuned_twin=True)
    row('xp.ops.fused_layernorm(..., provider="cuda")', "layernorm [64, 1024] bf16",
        provider("layernorm", "cuda", xs, ln("cuda")), {"kind": "abs", "us": 40.0}, tuned_twin=True)
    torch_fb = "F.layer_norm fwd+bwd"
    row(torch_fb, "layernorm fwd+bwd [64, 1024] bf16",
        lambda: fwd_bwd(lambda: F.layer_norm(xg, (1024,), wg, bg, 1e-5)))
    for p in ("triton", "cuda"):
        row(f'xp.ops.fused_layernorm(..., provider="{p}") fwd+bwd', "layernorm fwd+bwd [64, 1024] bf16",
            provider("layernorm", p, xs, fwd_bwd(lng(p))), {"kind": "times", "ref": torch_fb, "x": 1.2},
            tuned_twin=True)
    row("torch.compile(x * x)", "torch.compile, square [4096] fp32", compiled(lambda a: a * a, x))
    for p in ("torch", "triton"):
        row(f'torch.compile(xp.ops.square(x, provider="{p}"))', "torch.compile, square [4096] fp32",
            compiled(lambda a, p=p: xp.ops.square(a, provider=p), x, "square", p))
    if tuned is not None:  # each twin right after its row: measured in turns with it (measure_rows)
        out = []
        for r in rows:
            out.append(r)
            if r["tuned_twin"]:
                out.append({"name": r["name"] + " [XRT_TUNED]", "group": r["group"] + ", XRT_TUNED",
                            "make": r["make"], "target": {"kind": "times", "ref": r["name"], "x": TUNED_TOLERANCE},
                            "tuned_twin": False, "env": {"XRT_TUNED": str(tuned)}, "twin_of": r["name"]})
        rows = out
    return rows


def judge(row: dict, by_name: dict[str, dict]) -> None:
    """Fill ``target`` (text), ``reference_us`` and ``met`` of a measured row."""
    t = row.pop("target_spec", None)
    if t is None:
        row.update(target="", met=None)
        return
    if t["kind"] == "abs":
        limit, row["target"] = t["us"], f"<= {t['us']:g} µs"
    else:
        ref = by_name.get(t["ref"], {})
        row["reference"] = t["ref"]
        row["reference_us"] = ref.get("host_us")
        word = f"<= {t['ref']} + {t['us']:g} µs" if t["kind"] == "plus" else f"<= {t['x']:g} x {t['ref']}"
        row["target"] = word
        if ref.get("host_us") is None:
            row["met"] = None
            row["note"] = (row.get("note", "") + f" reference not measured ({ref.get('skipped', 'missing')})").strip()
            return
        limit = ref["host_us"] + t["us"] if t["kind"] == "plus" else ref["host_us"] * t["x"]
    row["limit_us"] = limit
    row["met"] = row["host_us"] is not None and row["host_us"] <= limit
    # measured in turns with its reference: judged on the median of the per-repeat differences / ratios
    if t["kind"] == "times" and row.get("paired_ratio") is not None:
        row["met"] = row["paired_ratio"] <= t["x"]
    if t["kind"] == "plus" and row.get("paired_diff_us") is not None:
        row["met"] = row["paired_diff_us"] <= t["us"]


class _env:
    """Set environment variables for a block and put back what was there."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env

    def __enter__(self) -> None:
        self.saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)

    def __exit__(self, *exc: object) -> None:
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def measure_rows(rows: list[dict], device: str, calls: int, repeats: int, warmup: int, log=print) -> list[dict]:
    from xrt.bench import timer

    clock = timer.Clock(device, flush=False)
    out: list[dict] = []
    twins = {r["twin_of"]: r for r in rows if r.get("twin_of")}
    # A row judged against another ("+ N µs" or "N x" it) is measured in turns with it, as a twin is
    # with its row: the host's drift then moves both sides of the difference or ratio alike.
    followers: dict[str, list[dict]] = {}
    for r in rows:
        t = r.get("target") or {}
        if t.get("kind") in ("times", "plus") and not r.get("twin_of") and any(q["name"] == t["ref"] for q in rows):
            followers.setdefault(t["ref"], []).append(r)
    taken = {q["name"] for qs in followers.values() for q in qs}
    for r in rows:
        if r.get("twin_of") or r["name"] in taken:
            continue  # measured in turns with its row, below
        pair = [r] + ([twins[r["name"]]] if r["name"] in twins else [])
        for q in followers.get(r["name"], []):
            pair += [q] + ([twins[q["name"]]] if q["name"] in twins else [])
        results = [{"name": q["name"], "group": q["group"], "host_us": None, "samples_us": [],
                    "target_spec": q["target"]} for q in pair]
        live = []  # (row, callable, result) of the members that could be built
        for q, res in zip(pair, results):
            try:
                with _env(q.get("env", {})):
                    live.append((q, q["make"](), res))
            except Skip as e:
                res["skipped"] = str(e)
            except Exception as e:  # noqa: BLE001  (a failing row is a row, not the end of the run)
                res["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        try:
            # One repeat of each in turn (A B A B ...): a twin compared with its row sees the same
            # process state (allocator, caches, garbage) rather than the state of a later minute.
            for rep in range(repeats):
                # in turns, the order reversed every other repeat (A B, B A, ...): what one call
                # leaves behind (garbage, allocator state) does not always fall on the same side
                for q, fn, res in (live if rep % 2 == 0 else live[::-1]):
                    with _env(q.get("env", {})):
                        res["samples_us"].append(round(host_us(fn, clock, calls, 1, warmup)[0], 3))
            for _, _, res in live:
                res["host_us"] = round(statistics.median(res["samples_us"]), 3)
        except Exception as e:  # noqa: BLE001
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            for _, _, res in live:
                res["host_us"], res["error"] = None, why
        by = {res["name"]: res for _, _, res in live if res["host_us"] is not None}
        for q, _, res in live:  # paired: per repeat, against the reference's same repeat
            kind = (q.get("target") or {}).get("kind")
            ref = by.get((q.get("target") or {}).get("ref"))
            if ref is None or res["host_us"] is None:
                continue
            pairs = list(zip(res["samples_us"], ref["samples_us"]))
            if kind == "times":
                res["paired_ratio"] = round(statistics.median(a / b for a, b in pairs), 4)
            elif kind == "plus":
                res["paired_diff_us"] = round(statistics.median(a - b for a, b in pairs), 3)
        for res in results:
            out.append(res)
            log(f"  {res['name']}: " + (f"{res['host_us']:.2f} µs" if res["host_us"] is not None
                                         else res.get("skipped") or res.get("error", "")), flush=True)
    by_name = {r["name"]: r for r in out}
    for r in out:
        judge(r, by_name)
    return out


def do_bench_rows(device: str, providers: tuple[str, ...] = ("triton", "cuda"), shapes=LN_SHAPES,
                  log=print) -> list[dict]:
    """``triton.testing.do_bench`` (median) of the public layernorm beside xrt's device time."""
    rows: list[dict] = []
    if not device.startswith("cuda"):
        return [{"name": f"do_bench fused_layernorm[{p}] {m}x{n} bf16", "skipped": "do_bench needs a CUDA GPU"}
                for p in providers for m, n in shapes]
    import torch
    import triton.testing

    import xrt.pytorch as xp
    from xrt.bench import timer

    for m, n in shapes:
        bf16 = {"device": device, "dtype": torch.bfloat16}
        args = (torch.randn(m, n, **bf16), n, torch.randn(n, **bf16), torch.randn(n, **bf16), 1e-5)
        for p in providers:
            name = f"do_bench fused_layernorm[{p}] {m}x{n} bf16"
            r: dict[str, Any] = {"name": name, "target": "|do_bench / device - 1| <= 3 %"}
            try:
                _provider_ok("layernorm", p, args[0])
                fn = lambda p=p, a=args: xp.ops.fused_layernorm(*a, provider=p)  # noqa: E731
                fn()
                db_ms = triton.testing.do_bench(fn, return_mode="median")
                dev = timer.measure(fn, device)
                r.update(do_bench_us=round(db_ms * 1e3, 3), device_us=round(dev.median_s * 1e6, 3),
                         device_noise=dev.rel_noise)
                r["ratio"] = round(r["do_bench_us"] / r["device_us"], 4)
                r["met"] = abs(r["ratio"] - 1) <= 0.03
            except Skip as e:
                r["skipped"] = str(e)
            except Exception as e:  # noqa: BLE001
                r["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            rows.append(r)
            log(f"  {name}: " + (f"do_bench {r['do_bench_us']} µs, device {r['device_us']} µs" if "ratio" in r
                                 else r.get("skipped") or r.get("error", "")), flush=True)
        args = None
        torch.cuda.empty_cache()
    return rows


def _met(v: Any) -> str:
    return {True: "met", False: "**not met**", None: "-"}[v]


def backward_nodes(device: str, tuned: Path | None) -> dict[str, str]:
    """Which autograd node a warm training call of ``fused_layernorm`` records, per provider, and
    per provider with ``XRT_TUNED`` set (the native op's ``CppFunction`` or the Python path's
    ``_LeanLayerNormBackward``)."""
    out = _backward_nodes(device)
    if tuned is not None:
        with _env({"XRT_TUNED": str(tuned)}):
            out.update({f"{k} [XRT_TUNED]": v for k, v in _backward_nodes(device).items()})
    return out


def _backward_nodes(device: str) -> dict[str, str]:
    import torch

    import xrt.pytorch as xp

    out = {}
    x = torch.randn(64, 1024, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(1024, device=device, dtype=torch.bfloat16, requires_grad=True)
    b = torch.randn(1024, device=device, dtype=torch.bfloat16, requires_grad=True)
    for p in ("triton", "cuda"):
        try:
            for _ in range(10):
                y = xp.ops.fused_layernorm(x, 1024, w, b, provider=p)
                y.sum().backward()
            out[p] = type(y.grad_fn).__name__
        except Exception as e:  # noqa: BLE001  (a provider this host lacks)
            out[p] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    return out


def host_facts() -> dict[str, Any]:
    """What the host's timing depends on besides the code: its clock source (a VM without ``tsc`` reads
    the clock through a system call, a microsecond) and the cost of the clock read the tuned lookup makes
    per call (``time.monotonic``, :func:`xrt.pytorch.policy.tuned_state`)."""
    import timeit

    try:
        src = Path("/sys/devices/system/clocksource/clocksource0/current_clocksource").read_text().strip()
    except OSError:
        src = None
    n = 200_000
    per = min(timeit.repeat("m()", setup="import time; m = time.monotonic", number=n, repeat=5)) / n
    return {"clocksource": src, "monotonic_ns": round(per * 1e9, 1), "cpus": os.cpu_count(),
            "loadavg": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None}


def markdown(result: dict) -> str:
    lines = [f"# Host cost per call on {result['device_name']}", "",
             f"{result['calls']} back-to-back calls / {result['calls']} after warm-up, median of "
             f"{result['repeats']} repeats (benchmarks/host_cost.py); torch {result['torch']}, "
             f"triton {result['triton'] or '-'}; {result['when']}; commit {result.get('commit') or '-'}.", "",
             "Host: " + ", ".join(f"{k} {v}" for k, v in (result.get("host") or {}).items()) + ".", "",
             f"Native layernorm op: {result.get('native_layernorm') or '-'}; the training call's backward node: "
             + ", ".join(f"{k} `{v}`" for k, v in (result.get("layernorm_backward_node") or {}).items()) + ".", "",
             "A row judged against another is measured in turns with it (A B, then B A, ...) and judged on the "
             "median of the per-repeat differences (paired diff, for '+ N µs') or ratios (paired ratio, for "
             "'N x').", "",
             "| group | call | host µs / call | repeats (µs) | target | limit µs | met |",
             "|---|---|---:|---|---|---:|---|"]
    for r in result["rows"]:
        if r["host_us"] is None:
            why = r.get("skipped") or r.get("error", "")
            lines.append(f"| {r['group']} | `{r['name']}` | - | skipped: {why} | {r.get('target', '')} | - | - |")
            continue
        reps = ", ".join(f"{v:.1f}" for v in r["samples_us"])
        limit = f"{r['limit_us']:.1f}" if r.get("limit_us") is not None else "-"
        paired = (f" (paired ratio {r['paired_ratio']:.3f})" if r.get("paired_ratio") is not None else
                  f" (paired diff {r['paired_diff_us']:+.1f} µs)" if r.get("paired_diff_us") is not None else "")
        lines.append(f"| {r['group']} | `{r['name']}` | {r['host_us']:.2f} | {reps} | {r.get('target', '')}{paired} | "
                     f"{limit} | {_met(r.get('met'))} |")
    lines += ["", "`triton.testing.do_bench` (median) through the public op against xrt.bench.timer's device time:",
              "", "| call | do_bench µs | device µs (xrt timer) | ratio | target | met |",
              "|---|---:|---:|---:|---|---|"]
    for r in result["do_bench"]:
        if "ratio" not in r:
            lines.append(f"| `{r['name']}` | - | - | - | skipped: {r.get('skipped') or r.get('error', '')} | - |")
            continue
        lines.append(f"| `{r['name']}` | {r['do_bench_us']:.2f} | {r['device_us']:.2f} | {r['ratio']:.3f} | "
                     f"{r['target']} | {_met(r['met'])} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/host_cost.py", description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu [cuda]")
    p.add_argument("--out", type=Path, required=True, help="JSON results")
    p.add_argument("--md", type=Path, help="also write the markdown table here")
    p.add_argument("--calls", type=int, default=3000, help="back-to-back calls per repeat [3000]")
    p.add_argument("--repeats", type=int, default=25, help="repeats; the median is reported [25]")
    p.add_argument("--warmup", type=int, default=100, help="calls before timing [100]")
    p.add_argument("--tuned", type=Path, default=ROOT / "results" / "tuned",
                   help="XRT_TUNED for the tuned twin rows [results/tuned]; 'none' skips them")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile rows")
    p.add_argument("--no-do-bench", action="store_true", help="skip the do_bench vs device-time rows")
    args = p.parse_args(argv)

    sys.path.insert(0, str(ROOT))  # run from a checkout: this checkout's xrt
    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA GPU here (use --device cpu)")
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    tuned = None if str(args.tuned) == "none" else args.tuned
    if tuned is not None and not tuned.exists():
        raise SystemExit(f"--tuned {tuned}: not found")
    name = torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") \
        else f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    print(f"host cost on {name}: {args.calls} calls x {args.repeats} repeats", flush=True)
    native_status = None
    if args.device.startswith("cuda"):  # built now (once per torch version), not in the background while timing
        from xrt.pytorch.ops import native

        native_status = "loaded" if native.load() else f"unavailable: {native.why()}"
        print(f"native layernorm op: {native_status}", flush=True)
    rows = measure_rows(build_rows(args.device, tuned, not args.no_compile), args.device, args.calls, args.repeats,
                        args.warmup)
    db = [] if args.no_do_bench else do_bench_rows(args.device)
    import xrt
    from xrt.bench import worktrees

    source = Path(xrt.__file__).resolve().parents[1]
    try:  # the commit measured, so a table names its code (None outside a git checkout)
        commit = worktrees.resolve(source, "HEAD")
    except (worktrees.GitError, OSError):
        commit = None
    result = {"device": args.device, "device_name": name, "torch": torch.__version__, "triton": triton_version,
              "xrt_source": str(source), "commit": commit,
              "calls": args.calls, "repeats": args.repeats, "warmup": args.warmup,
              "xrt_tuned": None if tuned is None else str(tuned),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows, "do_bench": db,
              "native_layernorm": native_status, "layernorm_backward_node": backward_nodes(args.device, tuned),
              "host": host_facts()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    text = markdown(result)
    if args.md:
        args.md.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
