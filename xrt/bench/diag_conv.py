"""``xrt diag conv_bn_relu``: the four axes of the checklist, for the fused conv's own settings.

1. memory format and layout path: is x channels_last (NHWC), and which path (direct implicit GEMM
   or im2row + GEMM) runs for this stride;
2. the knobs in force and where each came from: the ``XRT_FUSED_*`` environment knobs, a tuned or
   given config, or the space's default (``xrt/kernels/spaces.py``);
3. the tile against the shape: TH x TW against Ho x Wo (masked pixel lanes), KO_STEP against K
   (masked channel lanes), programs against SMs, and whether the channel loads vectorize;
4. first-step compilation (``--warmup N``) is :func:`xrt.bench.diag.check_first_step`'s; after it,
   the ``XRT_KERNEL_STATS`` counts of vectorized launches against fallbacks.
"""

from __future__ import annotations

import os
from typing import Any

from xrt.bench.diag_check import INFO, OK, WARN, Check

OP = "conv_bn_relu"


def _resolved(args: tuple, config: dict | None, device: Any):
    from xrt.kernels.triton.conv_bn_relu import SPACE, plan, resolve
    from xrt.pytorch import policy

    x, weight, *_, stride = args
    shape = (*x.shape, weight.shape[0])
    tuned = None if config else policy.lookup_tuned_kernel(OP, SPACE[stride], device=device, dtype=x.dtype,
                                                           shape=shape)
    cfg, source = resolve(stride, config or tuned)
    if tuned and not config:
        source = {k: ("tuned config" if v == "config" else v) for k, v in source.items()}
    vec = int(cfg["VEC"])
    p = plan(tuple(x.shape), weight.shape[0], stride, 1, x.element_size(), cfg,
             aligned=x.data_ptr() % (vec * x.element_size()) == 0)
    return cfg, source, p


def check_layout(args: tuple, provider: str, p: dict) -> Check:
    import torch

    x, *_, stride = args
    cl = x.is_contiguous(memory_format=torch.channels_last)
    fmt = "channels_last (NHWC)" if cl else f"not channels_last, strides {tuple(x.stride())}"
    detail = f"x {tuple(x.shape)} {fmt}; stride {stride} -> layout path {p['path']}"
    if provider == "torch":
        detail += " (if fused; the torch provider runs cuDNN's conv, BatchNorm and ReLU unfused)"
    if not cl:
        return Check("memory format / layout path", WARN, detail,
                     "x is converted to channels_last on every call (a full NCHW<->NHWC round trip): keep the "
                     "model and its inputs in torch.channels_last (model.to(memory_format=torch.channels_last))")
    if (stride == 1) != (p["path"] == "direct"):
        return Check("memory format / layout path", INFO, detail,
                     f"XRT_FUSED_LAYOUT or the config forces {p['path']} on stride {stride}; auto takes "
                     f"{'direct' if stride == 1 else 'im2row'}: compare both before keeping it")
    return Check("memory format / layout path", OK, detail)


def check_knobs(cfg: dict, source: dict) -> Check:
    from xrt.kernels import spaces, stats

    env = {var: os.environ.get(var) for var in spaces.ENV_KNOBS}
    env_txt = ", ".join(f"{k}={v}" if v else f"{k} unset" for k, v in env.items())
    knobs = "; ".join(f"{k}={cfg[k]} ({source[k]})" for k in cfg)
    detail = f"{knobs}. env: {env_txt}; {stats.ENV}={'1' if stats.enabled() else 'unset'}"
    if any(v.startswith("env") for v in source.values()):
        return Check("knobs in force", INFO, detail, "environment knobs override tuned configs: unset them to "
                     "measure what the tuner chose")
    return Check("knobs in force", OK, detail)


def check_tiles(p: dict, sm_count: int | None) -> Check:
    programs = p["grid"][0] * p["grid"][1]
    detail = (f"tile {p['TH']}x{p['TW']} on Ho x Wo {p['Ho']}x{p['Wo']}: {p['masked_pixels']:.0%} of pixel lanes "
              f"masked; BLOCK_N {p['BLOCK_N']}: {p['masked_channels']:.0%} of channel lanes masked; BLOCK_K "
              f"{p['BLOCK_K']}; {programs} programs (grid {p['grid'][0]} x {p['grid'][1]})"
              + (f" for {sm_count} SMs" if sm_count else "")
              + f"; channel loads {'vectorized (VEC ' + str(p['VEC']) + ')' if p['vectorized'] else 'scalar fallback'}")
    problems = []
    if p["masked_pixels"] > 0.25:
        problems.append("over a quarter of the pixel lanes are masked: a smaller TILE (or HALF_TILE), or TILE=auto")
    if p["masked_channels"] > 0.25 and p["BLOCK_N"] > 16:  # 16: tl.dot's least N, whatever K is
        problems.append("over a quarter of the channel lanes are masked: a KO_STEP nearer K")
    if sm_count and programs < sm_count:
        problems.append(f"only {programs} programs for {sm_count} SMs: a smaller tile or KO_STEP (HALF_TILE)")
    if not p["vectorized"]:
        problems.append("C is not a multiple of VEC (or x is misaligned): the scalar fallback loads run; pad C "
                        "or pick a VEC dividing it")
    if problems:
        return Check("tile sizes vs shape", WARN, detail, "; ".join(problems))
    return Check("tile sizes vs shape", OK, detail)


def check_stats() -> Check:
    from xrt.kernels import stats

    if not stats.enabled():
        return Check("vectorized vs fallback launches", INFO, "not counted",
                     "XRT_KERNEL_STATS=1 counts each launch's path (vectorized or fallback) and NCHW conversions")
    counts = stats.snapshot(OP + ".")
    detail = ", ".join(f"{k.removeprefix(OP + '.')}: {v}" for k, v in counts.items()) or "no fused launch yet"
    bad = sum(v for k, v in counts.items() if k.endswith(".fallback") or "converted" in k)
    if bad:
        return Check("vectorized vs fallback launches", WARN, detail,
                     "fallback launches or NCHW conversions ran: see the two checks above")
    return Check("vectorized vs fallback launches", OK, detail)


def conv_checks(args: tuple, provider: str, config: dict | None, device: Any, sm_count: int | None) -> list[Check]:
    """The first three axes (before the first-step check) for ``args`` of the conv's BenchSpec."""
    cfg, source, p = _resolved(args, config, device)
    return [check_layout(args, provider, p), check_knobs(cfg, source), check_tiles(p, sm_count)]
