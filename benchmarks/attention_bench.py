"""xrt's Triton attention against PyTorch SDPA, forward and backward, side by side in one run.

    python benchmarks/attention_bench.py --out attention.json [--md attention.md] [--quick | --defaults]
    python benchmarks/attention_bench.py --bwd-sweep --out attention-bwd.json [--md attention-bwd.md]
    python benchmarks/attention_bench.py --model --out attention-model.json [--md attention-model.md]
    python benchmarks/attention_bench.py --model-sweep --out attention-model-sweep.json

bf16, B=4, H=16. Cases: hd128, hd128 causal, hd64 (non-causal). First a bounded config sweep at
S=4096 (a few BLOCK_M / BLOCK_N / warps / stages combinations for the forward, warp specialization
included, and a few for the backward), each config timed briefly; then the table with each case's
best config at S=4096 (targets) and at S=1024 and 16384 (reported, no target).

``--model``: the op's own configs at the shapes a GPT-style model takes (B=8, H=16, S 512-4096, hd 64
and 128, causal and not); targets at S=1024 hd64 causal: forward >= 0.95x SDPA, backward >= 0.90x.

Times: :func:`xrt.bench.timer.measure` (the project's one device timer: median device time, L2
flushed before each sample). The backward is timed alone: ``torch.autograd.grad`` of a forward
output kept alive (``retain_graph``), for xrt (its own backward kernels) and SDPA alike.
FLOPs as FlashAttention's benchmarks count them: forward ``4 B H S^2 D``, halved when causal;
backward 2.5x the forward. Targets at S=4096: forward >= 0.8x SDPA's TFLOP/s, backward >= 0.7x.
The SDPA backend is read from the kernel names a profiler sees in one call.

``--model-sweep``: the forward configs of ``MODEL_FWD_SWEEP`` at each of ``--model``'s shapes, each
timed right after SDPA's forward of the same inputs; prints each shape's best in the form of the
forward's table of defaults (``xrt.kernels.spaces.ATTENTION_FWD_TABLE``).

``--bwd-sweep``: the backward candidates alone at S=4096 (``BWD_CANDIDATES``: block / warp / stage
configs with the pointer and the TMA kernels, the dQ kernel's own warps and stages, causal pairs,
the fused delta; at most 24 a case), each beside SDPA's backward of the same inputs in the same
run: its ms, TFLOP/s, ratio to SDPA and largest difference from the default config's dq, dk, dv
(relative to their largest magnitude; over 2e-2 the row is an error, not a time). The JSON is
rewritten after every case, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xrt.bench.sidebyside import device_ms, save  # noqa: E402

B, H = 4, 16
CASES = [(128, False), (128, True), (64, False)]  # (head dim, causal)
TARGET_S = 4096
OTHER_S = (1024, 16384)
TARGETS = {"fwd": 0.8, "bwd": 0.7}
# --model: the shapes a GPT-style model's attention takes (B 8, H 16, as its suites), each of the
# head dims and masks at S 512-4096; the target is at S 1024, hd 64, causal.
MODEL_B = 8
MODEL_S = (512, 1024, 2048, 4096)
MODEL_CASES = [(64, True), (64, False), (128, True), (128, False)]
MODEL_TARGETS = {(1024, 64, True): {"fwd": 0.95, "bwd": 0.90}}
_model = False  # set by --model


def _targets(s: int, d: int, causal: bool) -> dict | None:
    """The targets of a row, if it has any."""
    if _model:
        return MODEL_TARGETS.get((s, d, causal))
    return TARGETS if s == TARGET_S else None

FWD_SWEEP = [
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 128, "BLOCK_N": 32, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "warp_specialize": True},
    {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2, "warp_specialize": True},
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 4},  # 128/128 at 4 stages: out of smem (H100)
    # the configs above move tiles by TMA (the default, "tma": True); the pointer-load kernel beside them
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "tma": False},
    {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3, "tma": False},
    {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2},
]
BWD_SWEEP = [
    {"BLOCK_M1": 32, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 32, "num_warps": 8, "num_stages": 2},
    {"BLOCK_M1": 32, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 32, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M1": 64, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 64, "num_warps": 4, "num_stages": 2},
    {"BLOCK_M1": 32, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 32, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M1": 64, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 64, "num_warps": 8, "num_stages": 2},
    {"BLOCK_M1": 16, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 16, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M1": 64, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 64, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M1": 64, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 64, "num_warps": 8, "num_stages": 2},
    {"BLOCK_M1": 32, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 32, "num_warps": 4, "num_stages": 2},
]
QUICK_SWEEP = {"max_time": 0.15}
# --model-sweep: the forward configs tried at each model shape. The smaller tiles are for short
# sequences, where 128-query blocks leave too few programs (S 1024: 8 query blocks a head).
MODEL_FWD_SWEEP = [
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3},  # hd 64's default
    {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3},  # hd 128's default
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 2},
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 2},
    {"BLOCK_M": 64, "BLOCK_N": 128, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 4, "num_stages": 3},
    {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "tma": False},
    {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3, "tma": False},
    # causal only: the other program orders (xrt/kernels/triton/attention.py, _fwd_program)
    *({**c, "order": o} for c in ({"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
                                  {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3},
                                  {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
                                  {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "tma": False})
      for o in (1, 2)),
]

# --bwd-sweep: block / warp / stage bases, each with the pointer kernels and the TMA kernels. What
# chose them (ptxas for sm_90 from this tree, bf16 hd128 causal; no GPU timing yet): the pointer
# dK/dV kernel spills at 64/64 with 4 warps (1.8 KB; 0.5-0.7 KB at 8 warps), the TMA one keeps K
# and V in shared memory and spills nothing at 64/64 with 8 warps, 32/64 with 4, 32/128 with 8
# (188 B at 64/64 with 4 warps, 224 B at 64/128 with 8); the dQ kernel does not spill at 4 warps
# with TMA, nor at 128/32 with 8 warps either way.
_BWD_BASES = [
    {"BLOCK_M1": 64, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 64, "num_warps": 4, "num_stages": 2},  # default
    {"BLOCK_M1": 64, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 64, "num_warps": 8, "num_stages": 2,
     "num_warps2": 4},
    {"BLOCK_M1": 64, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 64, "num_warps": 8, "num_stages": 3,
     "num_warps2": 4, "num_stages2": 2},
    {"BLOCK_M1": 32, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 64, "num_warps": 4, "num_stages": 3,
     "num_stages2": 2},
    {"BLOCK_M1": 32, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 32, "num_warps": 8, "num_stages": 2},
    {"BLOCK_M1": 32, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 32, "num_warps": 8, "num_stages": 3,
     "num_stages2": 2},
    {"BLOCK_M1": 64, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 64, "num_warps": 8, "num_stages": 2},
    {"BLOCK_M1": 32, "BLOCK_N1": 128, "BLOCK_M2": 64, "BLOCK_N2": 64, "num_warps": 8, "num_stages": 2,
     "num_warps2": 4},
]


_OFF = {"tma": False, "causal_pairs": False, "fuse_delta": False}


def _bwd_candidates(causal: bool) -> list[dict]:
    """The --bwd-sweep configs of one case: every base without and with TMA, then the extras (causal
    pairs only where causal: elsewhere the launcher ignores them). Every option is explicit (the
    space's default turns them on). The first, the pointer kernels of the first base with every
    option off, is the reference of the differences; the space's default is among them."""
    b = [{**_OFF, **c} for c in _BWD_BASES]
    out = [dict(c) for c in b] + [{**c, "tma": True} for c in b]
    if causal:
        out += [{**b[1], "tma": True, "causal_pairs": True}, {**b[1], "tma": True, "fuse_delta": True},
                {**b[1], "tma": True, "causal_pairs": True, "fuse_delta": True},
                {**b[0], "tma": True, "causal_pairs": True, "fuse_delta": True},
                {**b[2], "tma": True, "causal_pairs": True}, {**b[3], "tma": True, "causal_pairs": True},
                {**b[4], "tma": True, "causal_pairs": True}, {**b[0], "causal_pairs": True, "fuse_delta": True}]
    else:
        out += [{**b[1], "tma": True, "fuse_delta": True}, {**b[0], "fuse_delta": True},
                {**b[0], "tma": True, "fuse_delta": True}]
    return out


BWD_CANDIDATES = {(d, causal): _bwd_candidates(causal) for d, causal in CASES}
BWD_SWEEP_TOL = 2e-2


def _error(e: Exception) -> str:
    """A failed config's row: the exception's type and first line."""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"


def _inputs(s: int, d: int, grad: bool = False):
    import torch

    g = torch.Generator(device="cuda").manual_seed(s + d)
    ts = [torch.randn(B, H, s, d, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(4)]
    q, k, v, do = ts
    if grad:
        q, k, v = (t.requires_grad_() for t in (q, k, v))
    return q, k, v, do


def _bwd_fn(fwd, q, k, v, do):
    """The backward alone: grads of a kept forward output."""
    import torch

    o = fwd()
    return lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)


def _xrt_fwd_with(cfg_fwd: dict | None, cfg_bwd: dict | None, causal: bool):
    """``fused_attention`` through its op, the configs given as tuned configs of a scoped policy."""
    import xrt.pytorch as xp

    pol = xp.KernelPolicy(attention="triton")
    if cfg_fwd:
        pol.add_tuned("attention.triton", cfg_fwd)
    if cfg_bwd:
        pol.add_tuned("attention_bwd.triton", cfg_bwd)

    def run(q, k, v):
        return xp.ops.fused_attention(q, k, v, is_causal=causal)

    return run, pol


def sdpa_backend(q, k, v, causal: bool) -> str:
    """Which SDPA backend ran, from the CUDA kernel names of one call."""
    import torch
    import torch.nn.functional as F

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.cuda.synchronize()
    names = " ".join(e.name for e in prof.events()).lower()
    known = (("cudnn", "cudnn"), ("flash", "flash"), ("fmha", "mem_efficient"), ("efficient", "mem_efficient"))
    for key, name in known:
        if key in names:
            return name
    return "math" if names else "unknown"


def sweep(d: int, causal: bool, fwd_cfgs: list[dict], bwd_cfgs: list[dict]) -> tuple[list[dict], dict, dict]:
    """Time every config at S=4096; returns (rows, best forward config, best backward config)."""
    from xrt.kernels.triton.attention import attention, attention_bwd

    q, k, v, do = _inputs(TARGET_S, d)
    scale = d ** -0.5
    rows, best_f, best_b = [], (float("inf"), None), (float("inf"), None)
    for cfg in fwd_cfgs:
        row: dict[str, Any] = {"pass": "fwd", "d": d, "causal": causal, "config": cfg}
        try:
            row["ms"] = device_ms(lambda c=cfg: attention(q, k, v, causal, scale, c), **QUICK_SWEEP)
            if row["ms"] < best_f[0]:
                best_f = (row["ms"], cfg)
        except Exception as e:  # out of shared memory, a config Triton cannot compile here
            row["error"] = _error(e)
        rows.append(row)
    o, lse = attention(q, k, v, causal, scale, best_f[1])
    for cfg in bwd_cfgs:
        row = {"pass": "bwd", "d": d, "causal": causal, "config": cfg}
        try:
            row["ms"] = device_ms(lambda c=cfg: attention_bwd(do, q, k, v, o, lse, causal, scale, c), **QUICK_SWEEP)
            if row["ms"] < best_b[0]:
                best_b = (row["ms"], cfg)
        except Exception as e:
            row["error"] = _error(e)
        rows.append(row)
    return rows, best_f[1], best_b[1]


def compare(s: int, d: int, causal: bool, cfg_f: dict | None, cfg_b: dict | None) -> list[dict]:
    """Forward and backward rows, xrt against SDPA, for one shape.

    The policy holds only around xrt's calls: under a policy naming attention's provider, a model's
    own ``F.scaled_dot_product_attention`` is routed to xrt too, and SDPA would be timed against itself.
    It is set globally, not as a scope: the backward looks its config up when it runs, on autograd's
    own thread on a GPU, which a scope entered here does not reach."""
    import contextlib

    import xrt.pytorch as xp

    @contextlib.contextmanager
    def xrt_policy():
        xp.set_kernel_policy(pol)
        try:
            yield
        finally:
            xp.clear_kernel_policy()

    q, k, v, do = _inputs(s, d, grad=True)
    mine, pol = _xrt_fwd_with(cfg_f, cfg_b, causal)
    xp.clear_kernel_policy()
    return _compare(s, d, causal, cfg_f, cfg_b, mine, xrt_policy, q, k, v, do)


def _compare(s, d, causal, cfg_f, cfg_b, mine, scope, q, k, v, do) -> list[dict]:
    import torch
    import torch.nn.functional as F

    from xrt.kernels.triton.attention import flops

    def sdpa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    with torch.no_grad():
        with scope():
            o_x = mine(q, k, v)
        o_s = sdpa()
        err = (o_x.float() - o_s.float()).abs().max().item()
    backend = sdpa_backend(q, k, v, causal)
    out = []
    for pas in ("fwd", "bwd"):
        if pas == "fwd":
            with torch.no_grad():
                with scope():
                    t_x = device_ms(lambda: mine(q, k, v))
                t_s = device_ms(sdpa)
        else:
            with scope():
                t_x = device_ms(_bwd_fn(lambda: mine(q, k, v), q, k, v, do))
            t_s = device_ms(_bwd_fn(sdpa, q, k, v, do))
        f = flops(B, H, s, s, d, causal, backward=pas == "bwd")
        tf_x, tf_s = f / t_x / 1e9, f / t_s / 1e9
        ratio = tf_x / tf_s
        row = {"pass": pas, "S": s, "d": d, "causal": causal, "flops": f, "xrt_ms": t_x, "sdpa_ms": t_s,
               "xrt_tflops": tf_x, "sdpa_tflops": tf_s, "ratio": ratio, "sdpa_backend": backend,
               "config": cfg_f if pas == "fwd" else cfg_b, "max_abs_diff_vs_sdpa": err if pas == "fwd" else None}
        tgt = _targets(s, d, causal)
        if tgt:
            row["target"] = tgt[pas]
            row["met"] = ratio >= tgt[pas]
        out.append(row)
        print(f"{pas} S={s} d={d} causal={causal}: xrt {tf_x:.0f} TFLOP/s, SDPA[{backend}] {tf_s:.0f}, "
              f"ratio {ratio:.2f}", flush=True)
    return out


def bwd_sweep_case(d: int, causal: bool, cfgs: list[dict], t_start: float) -> list[dict]:
    """SDPA's backward, then every config of ``cfgs`` (the first the reference for the differences),
    at B, H, S=4096, bf16: one row each, a failure a row too."""
    import torch
    import torch.nn.functional as F

    from xrt.bench.sidebyside import rel_err
    from xrt.kernels.triton.attention import attention, attention_bwd, flops

    q, k, v, do = _inputs(TARGET_S, d, grad=True)
    scale = d ** -0.5
    f = flops(B, H, TARGET_S, TARGET_S, d, causal, backward=True)
    base = {"S": TARGET_S, "d": d, "causal": causal, "flops": f}
    t_s = device_ms(_bwd_fn(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), q, k, v, do))
    backend = sdpa_backend(q, k, v, causal)
    rows = [{**base, "impl": f"SDPA[{backend}]", "config": None, "ms": t_s, "tflops": f / t_s / 1e9,
             "ratio": 1.0}]
    print(f"bwd d={d} causal={causal}: SDPA[{backend}] {t_s:.3f} ms ({time.time() - t_start:.0f} s)", flush=True)
    qd, kd, vd = (t.detach() for t in (q, k, v))
    with torch.no_grad():
        o, lse = attention(qd, kd, vd, causal, scale, None)
    ref = None
    for cfg in cfgs:
        row: dict[str, Any] = {**base, "impl": "xrt", "config": cfg}
        t0 = time.time()
        try:
            def run(c=cfg):
                return attention_bwd(do, qd, kd, vd, o, lse, causal, scale, c)

            got = run()
            if ref is None:
                ref = [g.clone() for g in got]
            row["diff_vs_default"] = max(rel_err(g, r) for g, r in zip(got, ref))
            if row["diff_vs_default"] > BWD_SWEEP_TOL:
                row["error"] = f"wrong result: differs from the default config by {row['diff_vs_default']:.3g}"
            else:
                row["ms"] = device_ms(run, **QUICK_SWEEP)
                row["tflops"] = f / row["ms"] / 1e9
                row["ratio"] = t_s / row["ms"]
        except Exception as e:  # out of shared memory, a config Triton cannot compile here
            row["error"] = _error(e)
        row["wall_s"] = time.time() - t0
        rows.append(row)
        cell = f"{row['ms']:.3f} ms, {row['ratio']:.2f}x SDPA" if "ms" in row else row["error"]
        print(f"  {_cfg_label(cfg)}: {cell} ({row['wall_s']:.1f} s)", flush=True)
    return rows


def _cfg_label(cfg: dict | None) -> str:
    return "default" if not cfg else ", ".join(f"{k}={v}" for k, v in cfg.items())


def bwd_markdown(result: dict) -> str:
    lines = [f"# Attention backward candidates vs SDPA ({result['gpu']}, bf16, B={B}, H={H}, S={TARGET_S})", "",
             f"torch {result['torch']}, triton {result['triton']}. TFLOP/s with FlashAttention's count "
             "(2.5x the forward's 4·B·H·S²·D, causal halved); device time from xrt.bench.timer.measure "
             f"(max_time {QUICK_SWEEP['max_time']} s a config); ratio = SDPA ms / xrt ms (target >= 0.7); "
             "diff = largest |dq, dk, dv - the default config's| / their largest magnitude.", ""]
    for (d, causal) in CASES:
        rows = [r for r in result["rows"] if r["d"] == d and r["causal"] == causal]
        if not rows:
            continue
        lines += [f"## hd{d}{' causal' if causal else ''}", "", "| impl | config | ms | TFLOP/s | ratio | diff |",
                  "|---|---|---|---|---|---|"]
        ok = sorted((r for r in rows if "ms" in r and r["impl"] == "xrt"), key=lambda r: r["ms"])
        best = ok[0] if ok else None
        for r in rows:
            if "ms" in r:
                name = f"**{_cfg_label(r['config'])}** (best)" if r is best else _cfg_label(r["config"])
                diff = f"{r['diff_vs_default']:.1e}" if "diff_vs_default" in r else ""
                cells = f"{r['ms']:.3f} | {r['tflops']:.0f} | {r['ratio']:.2f} | {diff}"
            else:
                name, cells = _cfg_label(r["config"]), f"error: {r['error']} | | |"
            lines.append(f"| {r['impl']} | {name if r['impl'] == 'xrt' else ''} | {cells} |")
        lines.append("")
    return "\n".join(lines) + "\n"


_WARM_INPUTS: dict = {}


def _warm_one(job: tuple[int, bool, dict]) -> bool:
    """A worker process: run one backward config once, which compiles its kernels into Triton's
    on-disk cache (same shapes, so the same specializations as the timed run's)."""
    from xrt.kernels.triton.attention import attention, attention_bwd

    d, causal, cfg = job
    if (d, causal) not in _WARM_INPUTS:
        _WARM_INPUTS.clear()
        q, k, v, do = _inputs(TARGET_S, d)
        _WARM_INPUTS[(d, causal)] = (do, q, k, v, *attention(q, k, v, causal, d ** -0.5, None))
    do, q, k, v, o, lse = _WARM_INPUTS[(d, causal)]
    try:
        attention_bwd(do, q, k, v, o, lse, causal, d ** -0.5, cfg)
        return True
    except Exception:  # the timed run records the failure
        return False


def precompile(jobs: int) -> None:
    """Compile every --bwd-sweep config in ``jobs`` worker processes first (Triton compiles one
    kernel at a time in a process, and ~60 configs x 2 kernels serially took most of the budget);
    any failure here only means the timed run compiles that config itself."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    work = [(d, causal, cfg) for d, causal in CASES for cfg in BWD_CANDIDATES[(d, causal)]]
    t0 = time.time()
    try:
        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn")) as ex:
            ok = sum(ex.map(_warm_one, work))
        print(f"precompiled {ok} of {len(work)} configs in {jobs} processes ({time.time() - t0:.0f} s)", flush=True)
    except Exception as e:
        print(f"precompile failed ({type(e).__name__}: {e}); compiling in the timed run", flush=True)


def bwd_sweep_main(args: argparse.Namespace) -> int:
    import torch
    import triton

    t0 = time.time()
    if args.jobs > 0:
        precompile(args.jobs)
    result: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "triton": triton.__version__, "python": platform.python_version(),
                              "B": B, "H": H, "S": TARGET_S, "dtype": "bfloat16", "rows": []}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for d, causal in CASES:
        result["rows"] += bwd_sweep_case(d, causal, BWD_CANDIDATES[(d, causal)], t0)
        torch.cuda.empty_cache()
        result["wall_s"] = time.time() - t0
        args.out.write_text(json.dumps(result, indent=1) + "\n")  # a run cut short keeps what it measured
    save(result, bwd_markdown(result), args.out, args.md)
    print(f"wall {result['wall_s']:.0f} s")
    return 0


def model_sweep_case(s: int, d: int, causal: bool) -> list[dict]:
    """Every MODEL_FWD_SWEEP config's forward at one model shape, each timed right after SDPA's
    forward of the same inputs (so each ratio is a pair measured together): one row each."""
    import torch
    import torch.nn.functional as F

    from xrt.kernels.triton.attention import attention, flops

    q, k, v, _ = _inputs(s, d)
    scale, f = d ** -0.5, flops(B, H, s, s, d, causal)
    rows = []
    with torch.no_grad():
        for cfg in MODEL_FWD_SWEEP:
            if cfg.get("order") and not causal:  # the order of a forward without causality is 0
                continue
            row: dict[str, Any] = {"S": s, "d": d, "causal": causal, "config": cfg}
            try:
                row["xrt_ms"] = device_ms(lambda c=cfg: attention(q, k, v, causal, scale, c), **QUICK_SWEEP)
                row["sdpa_ms"] = device_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                           **QUICK_SWEEP)
                row["ratio"] = row["sdpa_ms"] / row["xrt_ms"]
                row["xrt_tflops"] = f / row["xrt_ms"] / 1e9
            except Exception as e:  # out of shared memory, a config Triton cannot compile here
                row["error"] = _error(e)
            rows.append(row)
    return rows


def model_sweep_main(args: argparse.Namespace) -> int:
    """--model-sweep: the forward configs at the model's shapes; the JSON has every row, and the
    best config of each shape is printed in the form of ``xrt.kernels.spaces.ATTENTION_FWD_TABLE``."""
    import torch
    import triton

    global B
    B = MODEL_B
    t0 = time.time()
    result: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "triton": triton.__version__, "python": platform.python_version(),
                              "B": B, "H": H, "dtype": "bfloat16", "mode": "model-sweep", "rows": []}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    best = {}
    for d, causal in MODEL_CASES:
        for s in MODEL_S:
            rows = model_sweep_case(s, d, causal)
            result["rows"] += rows
            top = max((r for r in rows if "ratio" in r), key=lambda r: r["ratio"], default=None)
            if top:
                best[(d, causal, s)] = top["config"]
                print(f"S={s} d={d} causal={causal}: best {_cfg_label(top['config'])} ratio {top['ratio']:.2f} "
                      f"(first, the default at hd 64: {rows[0].get('ratio', 0):.2f})", flush=True)
            torch.cuda.empty_cache()
            result["wall_s"] = time.time() - t0
            args.out.write_text(json.dumps(result, indent=1) + "\n")  # a run cut short keeps what it measured
    print("winners (head dim, causal, S): config")
    for key, cfg in best.items():
        print(f"    {key}: {cfg},")
    print(f"wall {time.time() - t0:.0f} s")
    return 0


def markdown(result: dict) -> str:
    lines = [f"# Attention, xrt Triton vs SDPA ({result['gpu']}, bf16, B={B}, H={H})", "",
             f"torch {result['torch']}, triton {result['triton']}. TFLOP/s with FlashAttention's count "
             "(fwd 4·B·H·S²·D, causal halved; bwd 2.5× fwd); device time from xrt.bench.timer.measure.", "",
             "| pass | S | hd | causal | xrt ms | SDPA ms | xrt TFLOP/s | SDPA TFLOP/s | ratio | target | met | "
             "SDPA backend |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        met = "" if "met" not in r else ("met" if r["met"] else "**not met**")
        tgt = f"≥{r['target']}" if "target" in r else ""
        lines.append(f"| {r['pass']} | {r['S']} | {r['d']} | {'yes' if r['causal'] else 'no'} | {r['xrt_ms']:.3f} | "
                     f"{r['sdpa_ms']:.3f} | {r['xrt_tflops']:.0f} | {r['sdpa_tflops']:.0f} | {r['ratio']:.2f} | "
                     f"{tgt} | {met} | {r['sdpa_backend']} |")
    if not result["sweep"]:
        return "\n".join(lines) + "\n"
    lines += ["", "Config sweep at S=4096 (ms; best per case and pass used above):", "",
              "| pass | hd | causal | config | ms |", "|---|---|---|---|---|"]
    for r in result["sweep"]:
        cfg = ", ".join(f"{k}={v}" for k, v in r["config"].items())
        ms = f"{r['ms']:.3f}" if "ms" in r else f"error: {r.get('error', '')}"
        lines.append(f"| {r['pass']} | {r['d']} | {'yes' if r['causal'] else 'no'} | {cfg} | {ms} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="JSON results")
    ap.add_argument("--md", type=Path, help="also write the markdown table here")
    ap.add_argument("--quick", action="store_true", help="defaults only, no sweep, S=4096 only")
    ap.add_argument("--defaults", action="store_true",
                    help="defaults only (the op's own configs), no sweep, at every S (4096, then 1024 and 16384)")
    ap.add_argument("--bwd-sweep", action="store_true",
                    help="only the backward candidates (BWD_CANDIDATES) beside SDPA's backward, S=4096")
    ap.add_argument("--model", action="store_true",
                    help=f"defaults only, at a model's shapes: B {MODEL_B}, S {MODEL_S}, hd 64 and 128, causal and not")
    ap.add_argument("--model-sweep", action="store_true",
                    help="the forward configs of MODEL_FWD_SWEEP at each model shape, each beside SDPA")
    ap.add_argument("--jobs", type=int, default=8,
                    help="--bwd-sweep: processes that compile the configs before the timed run (0: none)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch
    import triton

    if not torch.cuda.is_available():
        print("attention_bench needs a CUDA GPU", file=sys.stderr)
        return 2
    from xrt.pytorch.policy import POLICY_ENV

    if os.environ.get(POLICY_ENV):  # it would route the baseline's SDPA calls to xrt too
        print(f"attention_bench: {POLICY_ENV}={os.environ[POLICY_ENV]!r} is set; unset it "
              "(the bench sets xrt's policy around xrt's calls itself)", file=sys.stderr)
        return 2
    if args.bwd_sweep:
        return bwd_sweep_main(args)
    if args.model_sweep:
        return model_sweep_main(args)
    if args.model:
        global B, _model
        B, _model = MODEL_B, True
    t0 = time.time()
    result: dict[str, Any] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "triton": triton.__version__, "python": platform.python_version(),
                              "B": B, "H": H, "dtype": "bfloat16", "rows": [], "sweep": [], "best": [],
                              "mode": "model" if args.model else "defaults" if args.defaults else "quick" if args.quick
                              else "sweep"}
    for d, causal in MODEL_CASES if args.model else CASES:
        if args.quick or args.defaults or args.model:
            cfg_f, cfg_b = None, None
        else:
            rows, cfg_f, cfg_b = sweep(d, causal, FWD_SWEEP, BWD_SWEEP)
            result["sweep"] += rows
            torch.cuda.empty_cache()
        result["best"].append({"d": d, "causal": causal, "fwd": cfg_f, "bwd": cfg_b})
        for s in MODEL_S if args.model else (TARGET_S,) if args.quick else (TARGET_S, *OTHER_S):
            result["rows"] += compare(s, d, causal, cfg_f, cfg_b)
            torch.cuda.empty_cache()
    result["wall_s"] = time.time() - t0
    save(result, markdown(result), args.out, args.md)
    print(f"wall {result['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
