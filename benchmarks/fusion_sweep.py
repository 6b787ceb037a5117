"""``fusion_bench.py --sweep``: where the fused ops' time goes, and add_layernorm's configs.

Each row gives three times for one call, so that a slow row says whether the GPU or the host is slow:

- ``e2e``: ``triton.testing.do_bench`` median, L2 flushed (fusion_bench's own timer): what a caller sees;
- ``device``: the device time of the call's kernels (and copies, memsets), summed from the profiler
  over several calls: what the GPU spends, without the gaps where it waits for the host;
- ``host``: wall-clock per call of back-to-back calls that are not waited for: the Python and launch cost.

``e2e`` well above ``device`` means the host bounds the call (its Python or its launches), and no
kernel config changes that. Rows:

1. ``op``: torch against xrt through the public ops, forward and forward + backward (``train``),
   ``add_layernorm`` and ``linear_gelu``, with the device time per kernel name (JSON ``kernels``);
   add_layernorm also through the op's general path (``xrt general path``: what its eager plan saves);
2. ``fwd`` / ``bwd``: add_layernorm's Triton kernels called directly with each config of a small grid
   around the defaults (forward ``rows`` x ``num_warps``, backward ``programs_per_sm`` x
   ``num_warps``), the error against torch's output and the bandwidth of the bytes the kernels move;
3. ``epilogue``: linear_gelu's forward kernel called directly at a few GEMM tiles (``LG_GRID``), for each
   GELU (``none``: erf; ``tanh``) without and with the pre-activation stored (``+z``: training); beside
   them xrt's GEMM with the bias alone (no GELU) on each of those tiles, and torch's
   ``F.gelu(F.linear(...))``: a tile's GELU row less its ``gemm+bias`` row is what the epilogue costs there.
"""

from __future__ import annotations

import importlib
import itertools
import statistics
import time
from typing import Any

from xrt.bench.sidebyside import device_work

# add_layernorm's grid: the defaults ("auto") and a few values around them (the defaults at the
# bench widths: forward 4 rows x 8 warps at N 1024, 2 x 8 at 2048; backward 2 programs an SM, 4 /
# 8 warps).
FWD_GRID = {"rows": (1, 2, 4, 8), "num_warps": (4, 8, 16)}
BWD_GRID = {"programs_per_sm": (1, 2, 4, 8), "num_warps": (2, 4, 8)}
QUICK_GRID = ({"rows": (1, 2), "num_warps": (4,)}, {"programs_per_sm": (1, 2), "num_warps": (4,)})
# linear_gelu's forward tiles (persistent TMA kernel, BLOCK_K 64, GROUP_M 8, 8 warps): the space's
# default first, then the 128 x 256 tile of matmul's default, then 128 x 128 and 256 x 128 tiles.
LG_TILE = {"kernel": "persistent_tma", "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8}
LG_GRID = [None] + [{**LG_TILE, "BLOCK_M": bm, "BLOCK_N": bn, "num_stages": st}
                    for bm, bn, st in ((128, 256, 3), (128, 128, 3), (128, 128, 4), (128, 128, 5), (256, 128, 3))]
LG_QUICK_GRID = LG_GRID[:2]
PROFILED_CALLS = 20  # calls the device time is averaged over
HOST_CALLS = 50  # back-to-back calls the host time is averaged over (2 on the CPU: the interpreter is slow)


def configs(grid: dict[str, tuple]) -> list[dict[str, Any]]:
    """The defaults (every knob ``auto``), then each combination of ``grid``."""
    keys = list(grid)
    return [dict.fromkeys(keys, "auto")] + [dict(zip(keys, v)) for v in itertools.product(*grid.values())]


def label(cfg: dict[str, Any]) -> str:
    return "default" if all(v == "auto" for v in cfg.values()) else ",".join(f"{k}={v}" for k, v in cfg.items())


class Timers:
    """The three times of one call (ms): ``e2e``, ``device`` (``None`` on the CPU) and ``host``."""

    def __init__(self, device: str) -> None:
        self.cuda = device == "cuda"
        self.calls = HOST_CALLS if self.cuda else 2

    def e2e(self, fn: Any) -> float:
        if self.cuda:
            from triton.testing import do_bench

            return do_bench(fn, warmup=25, rep=100, return_mode="median")
        fn()
        samples = []
        for _ in range(3):
            t = time.perf_counter()
            fn()
            samples.append((time.perf_counter() - t) * 1e3)
        return statistics.median(samples)

    def device(self, fn: Any) -> tuple[float | None, dict[str, float]]:
        """Device ms per call and ms per call of each kernel name (``None``, ``{}`` on the CPU)."""
        if not self.cuda:
            return None, {}
        import torch
        from torch.profiler import ProfilerActivity, profile

        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(PROFILED_CALLS):
                fn()
            torch.cuda.synchronize()
        per: dict[str, float] = {}
        for e in device_work(prof.events()):  # not the op's own range on the device's timeline
            per[e.name] = per.get(e.name, 0.0) + e.time_range.elapsed_us() / 1e3 / PROFILED_CALLS
        if not per:  # the profiler saw no device activity (CUPTI unavailable): say so, not 0
            return None, {}
        return sum(per.values()), dict(sorted(per.items(), key=lambda kv: -kv[1]))

    def host(self, fn: Any) -> float:
        sync = _sync(self.cuda)
        fn()
        sync()
        t = time.perf_counter()
        for _ in range(self.calls):
            fn()
        ms = (time.perf_counter() - t) * 1e3 / self.calls
        sync()
        return ms


def _sync(cuda: bool) -> Any:
    if cuda:
        import torch

        return torch.cuda.synchronize
    return lambda: None


def _timed(t: Timers, fn: Any, nbytes: int | None = None) -> dict[str, Any]:
    dev, kernels = t.device(fn)
    row: dict[str, Any] = {"e2e_ms": t.e2e(fn), "device_ms": dev, "host_ms": t.host(fn)}
    if kernels:
        row["kernels"] = {k: round(v, 4) for k, v in kernels.items()}
    if nbytes and dev:
        row["device_gbs"] = nbytes / dev / 1e6
    return row


def _err(y: Any, ref: Any) -> float:
    return ((y.float() - ref.float()).abs().max() / ref.float().abs().max().clamp(min=1e-30)).item()


def op_rows(rows: list[dict], m: int, d: int, dt: Any, dev: str, t: Timers, emit: Any) -> None:
    """Torch against xrt's public ops, forward and train, for add_layernorm and linear_gelu."""
    import torch
    import torch.nn.functional as F

    import xrt.pytorch as xp
    ops_al = importlib.import_module("xrt.pytorch.ops.add_layernorm")  # the module (the package exports the op)

    x, r = (torch.randn(m, d, device=dev, dtype=dt, requires_grad=True) for _ in range(2))
    w = (torch.rand(d, device=dev) + 0.5).to(dt).requires_grad_()
    b = torch.randn(d, device=dev, dtype=dt, requires_grad=True)
    dy, dh = torch.randn(m, d, device=dev, dtype=dt), torch.randn(m, d, device=dev, dtype=dt)
    def torch_ln() -> Any:
        h = x + r
        return F.layer_norm(h, (d,), w, b), h

    def general_ln() -> Any:  # the op's general path, which the eager plan replaces (its host cost)
        if torch.is_grad_enabled():
            return ops_al._EagerAddLayerNorm.apply(x, r, w, b, 1e-5, "triton")[:2]
        return ops_al._fwd(x, r, w, b, 1e-5, "triton")[:2]

    ln = {"torch": torch_ln, "xrt": lambda: xp.ops.add_layernorm(x, r, d, w, b, provider="triton"),
          "xrt general path": general_ln}
    n = 4 * d
    xl = torch.randn(m, d, device=dev, dtype=dt, requires_grad=True)
    wl = (torch.randn(n, d, device=dev) * d ** -0.5).to(dt).requires_grad_()
    bl = torch.randn(n, device=dev, dtype=dt, requires_grad=True)
    gl = torch.randn(m, n, device=dev, dtype=dt)
    lg = {"torch": lambda: F.gelu(F.linear(xl, wl, bl), approximate="tanh"),
          "xrt": lambda: xp.ops.linear_gelu(xl, wl, bl, "tanh", provider="triton")}

    def ln_train(fn: Any) -> Any:
        def step() -> None:
            y, h = fn()
            torch.autograd.backward([y, h], [dy, dh])
            for p in (x, r, w, b):
                p.grad = None
        return step

    def lg_train(fn: Any) -> Any:
        def step() -> None:
            fn().backward(gl)
            for p in (xl, wl, bl):
                p.grad = None
        return step

    for group, shape, fns, train in (("add_layernorm", f"{m}x{d}", ln, ln_train),
                                     ("linear_gelu", f"{m}x{n}x{d}", lg, lg_train)):
        for variant, fn in fns.items():
            for phase, call in (("fwd", fn), ("train", train(fn))):
                def run(call=call, phase=phase) -> dict[str, Any]:
                    if phase == "fwd":
                        with torch.no_grad():
                            return _timed(t, call)
                    return _timed(t, call)

                emit(rows, {"part": "op", "group": group, "shape": shape, "variant": variant, "phase": phase,
                            "config": "default"}, run)


def add_layernorm_sweep(rows: list[dict], m: int, d: int, dt: Any, dev: str, t: Timers, emit: Any,
                        grids: tuple[dict, dict] = (FWD_GRID, BWD_GRID)) -> None:
    """add_layernorm's Triton kernels, called directly, at each config of ``grids``."""
    import torch
    import torch.nn.functional as F

    from xrt.kernels.triton import add_layernorm as k

    x, r, dy, dh = (torch.randn(m, d, device=dev, dtype=dt) for _ in range(4))
    w = (torch.rand(d, device=dev) + 0.5).to(dt)
    b = torch.randn(d, device=dev, dtype=dt)
    eps = 1e-5
    h64 = (x.double() + r.double()).to(dt).double()  # h rounded to its dtype, as the kernel normalises it
    ref = F.layer_norm(h64, (d,), w.double(), b.double())
    hg = h64.clone().requires_grad_()
    wg, bg = w.double().requires_grad_(), b.double().requires_grad_()
    F.layer_norm(hg, (d,), wg, bg).backward(dy.double())
    ref_dx = hg.grad + dh.double()
    esize = x.element_size()
    shape = f"{m}x{d}"
    _, h, mean, rstd = k.add_layernorm(x, r, w, b, eps)
    for cfg in configs(grids[0]):
        def fwd(cfg=cfg) -> dict[str, Any]:
            call = lambda: k.add_layernorm(x, r, w, b, eps, config=cfg)  # noqa: E731
            out = {"err": _err(call()[0], ref)}
            return {**out, **_timed(t, call, 4 * m * d * esize)}  # read x, r; write h, y

        emit(rows, {"part": "fwd", "group": "add_layernorm", "shape": shape, "variant": "xrt kernel", "phase": "fwd",
                    "config": label(cfg)}, fwd)
    for cfg in configs(grids[1]):
        def bwd(cfg=cfg) -> dict[str, Any]:
            call = lambda: k.add_layernorm_bwd(dy, dh, h, w, mean, rstd, config=cfg)  # noqa: E731
            out = {"err": _err(call()[0], ref_dx)}
            return {**out, **_timed(t, call, 4 * m * d * esize)}  # read dy, dh, h; write dx

        emit(rows, {"part": "bwd", "group": "add_layernorm", "shape": shape, "variant": "xrt kernel", "phase": "bwd",
                    "config": label(cfg)}, bwd)


def linear_gelu_sweep(rows: list[dict], m: int, d: int, dt: Any, dev: str, t: Timers, emit: Any,
                      grid: list[dict[str, Any] | None] = LG_GRID) -> None:
    """linear_gelu's forward kernel, called directly, at each tile of ``grid`` (``None``: the default),
    for each GELU, without and with z stored; xrt's GEMM with the bias alone on each tile, and
    torch's pair."""
    import torch
    import torch.nn.functional as F

    from xrt.kernels import checks
    from xrt.kernels.triton import linear_gelu as k
    from xrt.kernels.triton import matmul as mm

    n = 4 * d
    x = torch.randn(m, d, device=dev, dtype=dt)
    w = (torch.randn(n, d, device=dev) * d ** -0.5).to(dt)
    b = torch.randn(n, device=dev, dtype=dt)
    z64 = F.linear(x.double(), w.double(), b.double())
    shape = f"{m}x{n}x{d}"
    head = {"part": "epilogue", "group": "linear_gelu", "shape": shape, "phase": "fwd"}
    ref = {"none": F.gelu(z64), "tanh": F.gelu(z64, approximate="tanh")}

    def tile(cfg: dict[str, Any]) -> str:
        return "{BLOCK_M}x{BLOCK_N},stages={num_stages}".format(**cfg)

    for cfg in (c for c in grid if c is not None):
        def bias_only(cfg=cfg) -> dict[str, Any]:  # the same tile with no GELU (matmul's space: no subtiling)
            call = lambda: mm.run(x[None], w.mT[None], checks.tuning("matmul.triton", cfg), mm.Epilogue(b))[0]  # noqa: E731
            return {"err": _err(call(), z64), **_timed(t, call)}

        emit(rows, {**head, "variant": "gemm+bias", "config": tile(cfg)}, bias_only)
    for approximate in ("none", "tanh"):
        def torch_pair(approximate=approximate) -> dict[str, Any]:
            call = lambda: F.gelu(F.linear(x, w, b), approximate=approximate)  # noqa: E731
            return {"err": _err(call(), ref[approximate]), **_timed(t, call)}

        emit(rows, {**head, "variant": f"torch {approximate}", "config": "reference"}, torch_pair)
        for save in (False, True):
            for cfg in grid:
                def one(cfg=cfg, approximate=approximate, save=save) -> dict[str, Any]:
                    call = lambda: k.linear_gelu(x, w, b, approximate, save, config=cfg)  # noqa: E731
                    y, z = call()
                    err = max(_err(y, ref[approximate]), _err(z, z64) if save else 0.0)
                    return {"err": err, **_timed(t, call)}

                emit(rows, {**head, "variant": f"{approximate}{'+z' if save else ''}",
                            "config": "default" if cfg is None else tile(cfg)}, one)


def best(rows: list[dict]) -> list[dict]:
    """Per (part, shape, variant) of the config sweeps, the config with the least device time (e2e on
    the CPU); the references are not candidates."""
    out = []
    for part in ("fwd", "bwd", "epilogue"):
        mine = [r for r in rows if r["part"] == part and r.get("config") != "reference"]
        for shape, variant in dict.fromkeys((r["shape"], r["variant"]) for r in mine):
            cand = [r for r in mine if r["shape"] == shape and r["variant"] == variant and "error" not in r]
            key = "device_ms" if any(r.get("device_ms") is not None for r in cand) else "e2e_ms"
            cand = [r for r in cand if r.get(key) is not None]
            if not cand:
                continue
            top = min(cand, key=lambda r: r[key])
            default = next((r for r in cand if r["config"] == "default"), None)
            out.append({"part": part, "shape": shape, "variant": variant, "best": top["config"], "ms": top[key],
                        "default_ms": default.get(key) if default else None, "by": key})
    return out


def markdown(rows: list[dict], winners: list[dict], meta: dict) -> str:
    def f(v: Any, spec: str = ".4f") -> str:
        return "" if v is None else format(v, spec)

    out = [f"Fused ops, where the time goes; add_layernorm's configs. {meta['dtype']}, {meta['device']}, "
           f"torch {meta['torch']}, commit {meta['commit']}, {meta['date']}", "",
           "e2e: do_bench median (L2 flushed); device: the profiler's kernel time per call; host: wall per call "
           "of back-to-back calls.", "",
           "| part | op | shape | variant | phase | config | e2e ms | device ms | host ms | GB/s | err |",
           "|---|---|---|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        head = f"| {r['part']} | {r['group']} | {r['shape']} | {r['variant']} | {r['phase']} | {r['config']} |"
        if "error" in r:
            out.append(f"{head} error: {r['error']} | | | | |")
            continue
        out.append(f"{head} {f(r['e2e_ms'])} | {f(r.get('device_ms'))} | {f(r['host_ms'])} | "
                   f"{f(r.get('device_gbs'), '.0f')} | {f(r.get('err'), '.1e')} |")
    out += ["", "| part | shape | variant | best config | ms | default ms | by |", "|---|---|---|---|---:|---:|---|"]
    for w in winners:
        out.append(f"| {w['part']} | {w['shape']} | {w['variant']} | {w['best']} | {w['ms']:.4f} | "
                   f"{f(w['default_ms'])} | {w['by']} |")
    return "\n".join(out) + "\n"
