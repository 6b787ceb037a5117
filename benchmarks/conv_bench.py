"""xrt's fused conv3x3 + BatchNorm + ReLU side by side with torch (cuDNN) on one CUDA GPU, in one run.

    python benchmarks/conv_bench.py --out conv.json [--md conv.md] [--quick]

Every time is :func:`xrt.bench.timer.measure`'s median device time (L2 flushed before each sample,
warm-up, adaptive sample count; docs/timing.md). The baseline is torch's unfused inference path,
``conv2d`` + ``batch_norm`` + ``relu`` on channels_last fp16 (cuDNN, ``cudnn.benchmark`` on: its best
algorithm). xrt's rows time the fused kernel launch with BatchNorm already folded (the op folds once
per weight version), one row per config of a small sweep, both layout paths. Each output is checked
against torch's first (``err``: max |y - ref| / max |ref|); a config that fails to compile or run is
a row with its error, never a crash. The ratio is xrt's time over torch's (lower is better).

Targets (issue #12, H100, fp16, inference, padding 1):

* N64 C64 56x56 K64 stride 1 and N64 C256 14x14 K256 stride 1: <= 1.0x torch;
* every other benchmarked shape, stride 1 and 2: never > 1.1x torch;
* the CNN macro-benchmark (xrt.pytorch.modules, batch 256, width 64, AMP fp16, channels_last):
  the fused inference pass faster than the unfused one (ratio < 1.0); the training step is reported.
"""

from __future__ import annotations

import platform
import sys
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xrt.bench.sidebyside import cells, config_label, fmt, parse_args, run_row, save  # noqa: E402

# (N, C, H, W, K, stride, target ratio: xrt time / torch time at most)
SHAPES = [(64, 64, 56, 56, 64, 1, 1.0), (64, 256, 14, 14, 256, 1, 1.0), (64, 128, 28, 28, 128, 1, 1.1),
          (64, 64, 56, 56, 128, 2, 1.1), (64, 128, 28, 28, 256, 2, 1.1), (64, 256, 14, 14, 512, 2, 1.1)]
SWEEP = [  # beside the default (xrt/kernels/spaces.py), per path
    {"TILE": "8x16", "KO_STEP": 64, "CI_STEP": 64, "num_warps": 4, "num_stages": 3},
    {"TILE": "8x8", "KO_STEP": 64, "CI_STEP": 64, "num_warps": 4, "num_stages": 4},
    {"TILE": "16x8", "KO_STEP": 128, "CI_STEP": 64, "num_warps": 8, "num_stages": 3},
    {"TILE": "8x16", "KO_STEP": 128, "CI_STEP": 32, "num_warps": 8, "num_stages": 4},
    {"TILE": "16x16", "KO_STEP": 64, "CI_STEP": 64, "num_warps": 8, "num_stages": 2},
    {"TILE": "8x8", "KO_STEP": 32, "CI_STEP": 64, "HALF_TILE": True, "num_warps": 4, "num_stages": 3},
]
CNN = (256, 64)  # batch, width


def summarise(group: str, shape: str, rows: list[dict], target: float | None, strict: bool = False) -> dict:
    """The best xrt row against the baseline (``rows[0]``): met when its ratio is at most ``target``
    (below it when ``strict``: "fused faster")."""
    base = rows[0]
    for r in rows[1:]:
        r["ratio"] = r["ms"] / base["ms"] if r.get("ms") and base.get("ms") else None
    ok = [r for r in rows[1:] if r.get("ratio")]
    best = min(ok, key=lambda r: r["ratio"]) if ok else None
    default = next((r for r in rows[1:] if "default" in r["impl"]), None)
    return {"group": group, "shape": shape, "impl": "best: " + (best["impl"] if best else "none"),
            "ms": best["ms"] if best else None, "ratio": best["ratio"] if best else None,
            "default_ratio": default.get("ratio") if default else None, "target": target,
            "met": (best is not None and (best["ratio"] < target if strict else best["ratio"] <= target))
            if target is not None else None, "summary": True}


def bench_conv(shape: tuple, sweep: list[dict], dtype: Any) -> list[dict]:
    import torch

    import xrt.pytorch as xp
    from xrt.kernels.triton.conv_bn_relu import conv_bias_relu
    from xrt.pytorch.ops.conv_bn_relu import fold_bn

    n, c, h, w, k, stride, target = shape
    key = f"N{n} C{c} {h}x{w} K{k} s{stride}"
    group = f"conv_bn_relu {str(dtype).removeprefix('torch.')}"
    x = torch.randn(n, c, h, w, device="cuda", dtype=dtype).contiguous(memory_format=torch.channels_last)
    weight = (torch.randn(k, c, 3, 3, device="cuda") / (3 * c ** 0.5)).to(dtype)
    gamma, beta = torch.rand(k, device="cuda") + 0.5, torch.randn(k, device="cuda")
    mean, var = torch.randn(k, device="cuda") * 0.1, torch.rand(k, device="cuda") + 0.5

    def baseline():
        with torch.no_grad():
            return xp.ops.conv_bn_relu(x, weight, gamma, beta, mean, var, stride=stride, provider="torch")

    ref = baseline()
    wf, bf = fold_bn(weight, gamma, beta, mean, var, 1e-5, dtype)
    rows = [run_row(group, key, "torch (cuDNN conv + BN + ReLU)", baseline, None, 0.5)]
    for path in ("direct", "im2row"):
        for cfg in [None, *sweep]:
            full = {"path": path, **(cfg or {})}
            label = f"triton {path} {config_label(cfg)}"
            rows.append(run_row(group, key, label, lambda full=full: conv_bias_relu(x, wf, bf, stride, 1, True, full),
                                ref, 0.3))
    rows.append(summarise(group, key, rows, target))
    return rows


def bench_cnn(batch: int, width: int) -> list[dict]:
    import torch

    from xrt.pytorch.modules import cnn_inputs, cnn_step

    rows: list[dict] = []
    for train, target in ((False, 1.0), (True, None)):
        group = "CNN " + ("training step" if train else "inference pass")
        key = f"batch {batch} width {width} AMP fp16"
        args = cnn_inputs(batch, width, torch.float16, "cuda")
        state = {k: v.clone() for k, v in args[2].state_dict().items()}
        ref = cnn_step(args, "torch", train)
        args[2].load_state_dict(state)
        part = [run_row(group, key, "torch (unfused)", lambda a=args, t=train: cnn_step(a, "torch", t), None, 1.0)]
        args[2].load_state_dict(state)
        part.append(run_row(group, key, "xrt fused default", lambda a=args, t=train: cnn_step(a, "triton", t),
                            None if train else ref, 1.0, tol=5e-2))
        part.append(summarise(group, key, part, target, strict=True))
        rows += part
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args("conv_bench", __doc__, argv)
    if args is None:
        return 2
    import torch
    import triton

    torch.backends.cudnn.benchmark = True  # the baseline at its best algorithm
    torch.manual_seed(0)
    rows: list[dict] = []
    for shape in SHAPES:
        rows += bench_conv(shape, [] if args.quick else SWEEP, torch.float16)
        torch.cuda.empty_cache()
    try:
        rows += bench_cnn(*CNN)
    except Exception as e:  # the macro rows are rows too
        traceback.print_exc(file=sys.stderr)
        rows.append({"group": "CNN", "shape": str(CNN), "impl": "xrt fused", "error": f"{type(e).__name__}: {e}"[:300]})
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(), "python": platform.python_version(),
           "cudnn_benchmark": True, "rows": rows}
    save(out, table(rows, out), args.out, args.md)
    return 0


def table(rows: list[dict], meta: dict) -> str:
    lines = [f"conv3x3 + BatchNorm + ReLU on {meta['device']} (torch {meta['torch']}, triton {meta['triton']}, "
             f"CUDA {meta['cuda']}, cuDNN {meta['cudnn']}, cudnn.benchmark on); device time from "
             "xrt.bench.timer.measure (median, L2 flushed); ratio = xrt time / torch time (lower is better).", "",
             "| group | shape | impl | ms | ratio to torch | target (at most) | met | err / error |",
             "| --- | --- | --- | ---: | ---: | ---: | --- | --- |"]
    for r in rows:
        met, ratio, note = cells(r)
        lines.append(f"| {r['group']} | {r['shape']} | {r['impl']} | {fmt(r.get('ms'), '.4f')} | {ratio} | "
                     f"{fmt(r.get('target'), '.2f')} | {met} | {note} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
