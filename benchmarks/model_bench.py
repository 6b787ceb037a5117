"""An unmodified GPT-style model on torch and on xrt's kernels through the policy, side by side in one run.

    python benchmarks/model_bench.py --out model.json [--md model.md] [--quick]

The model is plain PyTorch (``xrt.pytorch.modules.gpt``: ``nn.Linear``, ``nn.LayerNorm``,
``F.scaled_dot_product_attention`` causal, GELU MLP, pre-norm residual blocks); nothing in it names xrt.
The asv suites track the same model per commit (``bench_ops.GptTrain`` and its twins).
Each variant runs the same model object:

- ``torch``: no policy (torch's own kernels);
- ``xrt``: ``xrt.pytorch.kernel_policy(matmul="triton", layernorm="triton", softmax="triton", attention="triton")``:
  every routed call on xrt's kernels (xrt.pytorch.routing);
- ``auto``: the same ops at ``auto``: the provider that measured fastest on this GPU (results/auto), torch
  where nothing was measured;
- ``torch compiled``, ``auto compiled``: the model through ``torch.compile`` (static shapes), traced with
  no policy and at ``auto``; their ratios are to ``torch compiled``.

Times: ``triton.testing.do_bench`` (its median) of a train step (forward, backward, gradients set to
None) and of an inference step (``no_grad`` forward), as a user would time them, the variants taking
turns five times; each time is the median of its five. A ratio to torch is the median of the five
rounds' own ratios (each variant against torch in the same round), so a slow stretch of the host
that covers one round moves one ratio of five, not the result; the JSON keeps every round's.
Each variant's output is checked against torch's (largest difference relative to the largest magnitude),
and the profiler names the xrt ops one routed step ran.
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xrt.bench.sidebyside import parse_args, rel_err, save  # noqa: E402

ROUNDS = 5  # turns of every variant (quick: 1)
SHAPES = [  # (batch, sequence, model width, heads, blocks)
    (8, 1024, 1024, 16, 4),
    (4, 2048, 2048, 16, 4),
    (16, 512, 768, 12, 4),  # GPT-2 small's width and heads
]
POLICIES: dict[str, dict[str, str] | None] = {
    "torch": None,
    "xrt": {"matmul": "triton", "layernorm": "triton", "softmax": "triton", "attention": "triton"},
    "auto": {"matmul": "auto", "layernorm": "auto", "softmax": "auto", "attention": "auto"},
}
# The compiled variants: the same model through one torch.compile (static shapes), traced with no
# policy and at auto (the policy in force at trace time picks the providers); their ratios are to
# "torch compiled".
COMPILED = {"torch compiled": "torch", "auto compiled": "auto"}


def scope(policy: dict[str, str] | None) -> Any:
    import contextlib

    import xrt.pytorch as xp

    return xp.kernel_policy(**policy) if policy else contextlib.nullcontext()


def xrt_ops(model: Any, x: Any, policy: dict[str, str] | None) -> list[str]:
    """The xrt ops one routed train step ran, as the profiler names them."""
    import torch

    with scope(policy), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        model(x).float().pow(2).mean().backward()
    model.zero_grad(set_to_none=True)
    return sorted({e.key for e in prof.key_averages() if e.key.startswith("xrt::")})


def one_shape(b: int, s: int, d: int, h: int, n: int, quick: bool) -> list[dict]:
    import torch
    from triton.testing import do_bench

    from xrt.pytorch.modules import gpt

    torch.manual_seed(0)
    model = gpt(d, h, n).cuda().to(torch.bfloat16)
    x = torch.randn(b, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    with torch.no_grad():
        ref = model(x)
    compiled = torch.compile(model, dynamic=False)
    variants = {**{name: (policy, model) for name, policy in POLICIES.items()},
                **{name: (POLICIES[p], compiled) for name, p in COMPILED.items()}}
    rows = {name: {"shape": f"B{b} S{s} d{d} H{h} x{n}", "variant": name, "train": [], "infer": []}
            for name in variants}
    rep = 50 if quick else 200
    # The variants take turns, ROUNDS times: the host's speed drifts within a process, and a variant
    # timed only after another's would carry that drift in its ratio. Each time is the rounds' median.
    for _ in range(1 if quick else ROUNDS):
        for name, (policy, m) in variants.items():
            row = rows[name]
            if "error" in row:
                continue
            try:
                with scope(policy):
                    def train(m=m) -> None:
                        m(x).float().pow(2).mean().backward()
                        model.zero_grad(set_to_none=True)
                        x.grad = None

                    def infer(m=m) -> None:
                        with torch.no_grad():
                            m(x)

                    if "err" not in row:
                        with torch.no_grad():
                            row["err"] = rel_err(m(x), ref)
                    row["train"].append(do_bench(train, warmup=25, rep=rep, return_mode="median"))
                    row["infer"].append(do_bench(infer, warmup=25, rep=rep, return_mode="median"))
                if "xrt_ops" not in row:
                    row["xrt_ops"] = xrt_ops(m, x, policy)
            except Exception as e:  # a variant that fails is a row, not the end of the run
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    for row in rows.values():
        for k in ("train", "infer"):
            if row[k]:
                row[f"{k}_ms"] = statistics.median(row[k])
        print(json.dumps(row), flush=True)
    for name, r in rows.items():
        base = rows["torch compiled" if name in COMPILED else "torch"]
        for k in ("train", "infer"):
            pairs = list(zip(r[k], base[k]))
            if pairs and len(r[k]) == len(base[k]):  # the rounds' own ratios, and their median
                r[f"{k}_ratios"] = [v / t for v, t in pairs]
                r[f"{k}_vs_torch"] = statistics.median(r[f"{k}_ratios"])
    return list(rows.values())


def ops_cell(r: dict) -> str:
    """The xrt ops a step ran, as the profiler names them; a compiled step's are inlined by Inductor
    (Triton kernels it launches itself) and not named."""
    if r["variant"] in COMPILED:
        return "n/a (compiled)"
    return ", ".join(o.removeprefix("xrt::") for o in r["xrt_ops"]) or "-"


def ratio_cell(r: dict, k: str) -> str:
    """The median ratio to torch, and the rounds' range where there are several."""
    ratios = r.get(f"{k}_ratios") or [1.0]
    cell = f"{r.get(f'{k}_vs_torch', 1):.2f}"
    return cell + (f" ({min(ratios):.2f}-{max(ratios):.2f})" if len(ratios) > 1 and r["variant"] not in
                   ("torch", "torch compiled") else "")


def markdown(rows: list[dict], meta: dict) -> str:
    out = [f"GPT-style model, bf16, {meta['gpu']}, torch {meta['torch']}, commit {meta['commit']}, {meta['date']}",
           "", "(/ torch: the median of the rounds' ratios to torch's eager step, a compiled variant's to torch "
           "compiled; in brackets the rounds' range)", "",
           "| shape | variant | train step ms | / torch | inference ms | / torch | max rel err "
           "| xrt ops in a step |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['shape']} | {r['variant']} | error: {r['error']} | | | | | |")
            continue
        out.append(f"| {r['shape']} | {r['variant']} | {r['train_ms']:.2f} | {ratio_cell(r, 'train')} | "
                   f"{r['infer_ms']:.2f} | {ratio_cell(r, 'infer')} | {r['err']:.1e} | "
                   f"{ops_cell(r)} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args("model_bench", __doc__, argv)
    if args is None:
        return 2
    import subprocess

    import torch

    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "host": platform.node(),
            "commit": commit, "date": time.strftime("%Y-%m-%d")}
    rows = [r for shape in (SHAPES[:1] if args.quick else SHAPES) for r in one_shape(*shape, args.quick)]
    save({"meta": meta, "rows": rows}, markdown(rows, meta), args.out, args.md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
