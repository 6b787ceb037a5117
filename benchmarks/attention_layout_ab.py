"""xrt's attention kernels on a model's q, k, v layout: the TMA kernels against the pointer ones,
beside SDPA, device time, one run.

    python benchmarks/attention_layout_ab.py --out attention-layout.json [--md attention-layout.md]

A GPT's attention takes q, k and v as views of one projection, ``qkv.view(B, S, 3, H, D)
.permute(2, 0, 3, 1, 4)`` (``xrt.pytorch.modules.gpt``), and its output gradient as a per-head
view of [B, S, H, D]. The TMA kernels describe such views with rank-4 descriptors; before that
they took contiguous inputs only, and a model ran the pointer kernels. For each model shape
(``opdef.MODEL_SHAPES``, causal, bf16): the forward (``xrt.kernels.triton.attention.attention``)
and the backward (``attention_bwd``) at the op's default configs for this shape, once as they are
(``tma`` on) and once with ``tma`` off, the same tiles otherwise; SDPA's forward and its backward
(``torch.autograd.grad`` of a kept output) on the same views. Device time
(:func:`xrt.bench.sidebyside.device_ms`: median, L2 flushed). Each xrt output is checked against
the other variant's (largest difference relative to the largest magnitude).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xrt.bench.sidebyside import device_ms, rel_err, run_main  # noqa: E402


def one_shape(b: int, s: int, d_model: int, h: int) -> list[dict]:
    import torch
    import torch.nn.functional as F

    from xrt.kernels import checks
    from xrt.kernels.triton import attention as ka

    d = d_model // h
    torch.manual_seed(0)
    qkv = torch.randn(b, s, 3 * d_model, device="cuda", dtype=torch.bfloat16)
    q, k, v = qkv.view(b, s, 3, h, d).permute(2, 0, 3, 1, 4)
    do = torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    scale = d ** -0.5
    fwd = dict(ka.forward_config(q, True, None))
    bwd = dict(checks.tuning("attention_bwd.triton", None))
    shape = f"B{b} S{s} H{h} hd{d}"
    o, lse = ka.attention(q, k, v, True, scale, fwd)
    rows = []
    got: dict[str, Any] = {}
    for name, tma in (("tma", True), ("pointer", False)):
        cf, cb = {**fwd, "tma": tma}, {**bwd, "tma": tma}
        got[name] = (ka.attention(q, k, v, True, scale, cf)[0], *ka.attention_bwd(do, q, k, v, o, lse, True, scale, cb))
        rows.append({"shape": shape, "variant": f"xrt {name}",
                     "fwd_ms": device_ms(lambda c=cf: ka.attention(q, k, v, True, scale, c)),
                     "bwd_ms": device_ms(lambda c=cb: ka.attention_bwd(do, q, k, v, o, lse, True, scale, c))})
    err = max(rel_err(x, y) for x, y in zip(got["tma"], got["pointer"]))
    for r in rows:
        r["max_rel_diff_tma_vs_pointer"] = err
    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    with torch.no_grad():
        sdpa_fwd = device_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True)
    sdpa_bwd = device_ms(lambda: torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True))
    rows.append({"shape": shape, "variant": "sdpa", "fwd_ms": sdpa_fwd, "bwd_ms": sdpa_bwd})
    for r in rows:
        r["fwd_vs_sdpa"], r["bwd_vs_sdpa"] = sdpa_fwd / r["fwd_ms"], sdpa_bwd / r["bwd_ms"]
        print(r, flush=True)
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"Attention on a model's q, k, v views: TMA kernels against pointer kernels, beside SDPA, {meta['gpu']}, "
             f"torch {meta['torch']}, commit {meta['commit']}, {meta['date']} (benchmarks/attention_layout_ab.py)", "",
             "(device ms, median, L2 flushed; / SDPA: SDPA's time over the row's, above 1 is faster; causal, bf16)", "",
             "| shape | variant | fwd ms | / SDPA | bwd ms | / SDPA |", "|---|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['variant']} | {r['fwd_ms']:.4f} | {r['fwd_vs_sdpa']:.3f} | "
                     f"{r['bwd_ms']:.4f} | {r['bwd_vs_sdpa']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from xrt.kernels.opdef import MODEL_SHAPES

    return run_main("attention_layout_ab", __doc__, argv, ROOT,
                    lambda args: [r for b, s, d, h, _ in MODEL_SHAPES for r in one_shape(b, s, d, h)], markdown)


if __name__ == "__main__":
    sys.exit(main())
