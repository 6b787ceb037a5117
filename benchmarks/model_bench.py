"""An unmodified GPT-style model on torch and on xrt's kernels through the policy, side by side in one run.

    python benchmarks/model_bench.py --out model.json [--md model.md] [--quick] [--eager]

The model is plain PyTorch (``xrt.pytorch.modules.gpt``: ``nn.Linear``, ``nn.LayerNorm``,
``F.scaled_dot_product_attention`` causal, GELU MLP, pre-norm residual blocks); nothing in it names xrt.
The asv suites track the same model per commit (``bench_ops.GptTrain`` and its twins).
Each variant runs the same model object:

- ``torch``: no policy (torch's own kernels);
- ``xrt``: ``xrt.pytorch.kernel_policy(matmul="triton", layernorm="triton", softmax="triton", attention="triton")``:
  every routed call on xrt's kernels (xrt.pytorch.routing);
- ``auto``: the same ops at ``auto``: the provider that measured fastest on this GPU (results/auto), torch
  where nothing was measured;
- ``torch compiled``, ``auto compiled``, ``xrt compiled``: the model through ``torch.compile`` (static
  shapes), traced with no policy, at ``auto`` and at ``xrt``'s policy (Inductor launches xrt's Triton
  kernels itself), each compiled on its own (:func:`own_frame`); their ratios are to ``torch compiled``;
- ``xrt fused``, ``xrt fused compiled``: a copy of the model after ``xp.fuse`` (residual add + layernorm
  and linear + GELU as one op each, docs/kernels.md) at ``xrt``'s policy with the fused ops on Triton,
  eager against ``torch`` and compiled against ``torch compiled``.

Times: each variant against its base (``xrt`` and ``auto`` against ``torch``, the compiled ones
against ``torch compiled``) in ABBA quads of ~30 ms blocks of train steps (forward, backward,
gradients set to None), then of inference steps (``no_grad`` forward), as a training loop feels them:
wall time between two synchronizes, the host's part included (``xrt.bench.sidebyside.paired``).
A ratio is the median of the quads' own ratios; the quartiles show their spread. The host's speed
drifts by tens of percent within seconds on a shared GPU host; a quad lasts a tenth of a second, so
a drift moves both sides of it alike. A step's ms is the median of its blocks. Beside it, the GPU's
busy ms a step (the profiler's device events, ``sidebyside.device_busy_ms``): where the wall time is
well above it, the step waits on its host, and a variant's extra host time per call shows in full.
Each variant's output is checked against torch's (largest difference relative to the largest magnitude),
and the profiler names the xrt ops one routed step ran.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xrt.bench.sidebyside import device_busy_ms, error_line, model_steps, rel_err, run_main  # noqa: E402
from xrt.kernels.opdef import MODEL_SHAPES  # noqa: E402

QUADS = 15  # ABBA quads of each variant against its base (quick: 3)
SHAPES = MODEL_SHAPES  # (batch, sequence, model width, heads, blocks); the last GPT-2 small's width and heads
POLICIES: dict[str, dict[str, str] | None] = {
    "torch": None,
    "xrt": {"matmul": "triton", "layernorm": "triton", "softmax": "triton", "attention": "triton"},
    "auto": {"matmul": "auto", "layernorm": "auto", "softmax": "auto", "attention": "auto"},
}
# The compiled variants: the same model through one torch.compile (static shapes), traced with no
# policy, at auto and at xrt (the policy in force at trace time picks the providers); their ratios
# are to "torch compiled".
COMPILED = {"torch compiled": "torch", "auto compiled": "auto", "xrt compiled": "xrt"}
# The variants on a copy of the model after xp.fuse(provider="triton"), at xrt's policy.
FUSED = {"xrt fused": False, "xrt fused compiled": True}  # name: compiled
PAIRS = [("xrt", "torch"), ("auto", "torch"), ("xrt fused", "torch"), ("auto compiled", "torch compiled"),
         ("xrt compiled", "torch compiled"), ("xrt fused compiled", "torch compiled")]  # (variant, its base)


def compiled(name: str) -> bool:
    """Is the variant ``name`` a compiled one?"""
    return name in COMPILED or FUSED.get(name, False)


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


def own_frame(model: Any) -> Any:
    """``model`` called from a function of its own code: Dynamo keeps its compiled graphs per code
    object, so each compiled variant holds only its own (train and inference), as a user's model
    compiled under one policy does. Sharing one compiled model, the variants' calls walk each
    other's entries: on the H100 host, two more entries (the training step's) took a compiled d 768
    inference call from 1,025 to 1,285 µs of host time."""
    ns: dict[str, Any] = {}
    exec("def step(x):\n    return model(x)\n", {"model": model}, ns)  # a new code object each call
    return ns["step"]


def one_shape(b: int, s: int, d: int, h: int, n: int, quick: bool, eager: bool = False) -> list[dict]:
    """The rows of one model shape: every variant, or with ``eager`` the eager ones alone (torch, xrt, auto)."""
    import torch

    from xrt.bench.sidebyside import paired
    from xrt.pytorch.modules import fused_copy, gpt

    torch.manual_seed(0)
    model = gpt(d, h, n).cuda().to(torch.bfloat16)
    try:
        fused, fuse_error = fused_copy(model, "triton"), None  # the same weights
    except RuntimeError as e:  # nothing fused: the fused rows would time the model unfused
        fused, fuse_error = model, error_line(e, 200)
    x = torch.randn(b, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    with torch.no_grad():
        ref = model(x)
    # name: (policy, what a step calls, the module holding its parameters)
    variants = {**{name: (policy, model, model) for name, policy in POLICIES.items()},
                **{name: (POLICIES[p], torch.compile(own_frame(model), dynamic=False), model)
                   for name, p in ({} if eager else COMPILED).items()},
                **{name: (POLICIES["xrt"], torch.compile(own_frame(fused), dynamic=False) if c else fused, fused)
                   for name, c in ({} if eager else FUSED).items()}}
    rows = {name: {"shape": f"B{b} S{s} d{d} H{h} x{n}", "variant": name} for name in variants}
    if fuse_error:
        for name in FUSED.keys() & rows.keys():
            rows[name]["error"] = fuse_error

    for name, (policy, m, _) in variants.items():
        row = rows[name]
        if "error" in row:
            continue
        try:
            with scope(policy), torch.no_grad():
                row["err"] = rel_err(m(x), ref)
            row["xrt_ops"] = [] if compiled(name) else xrt_ops(m, x, policy)
        except Exception as e:  # a variant that fails is a row, not the end of the run
            row["error"] = error_line(e, 200)
    quads = 3 if quick else QUADS
    for name, base in PAIRS:
        if name not in rows or "error" in rows[name] or "error" in rows[base]:
            continue
        try:
            (_, m, params), (_, mb, params_b) = variants[name], variants[base]
            mine, theirs = model_steps(m, x, params), model_steps(mb, x, params_b)
            scopes = (lambda p=variants[base][0]: scope(p), lambda p=variants[name][0]: scope(p))
            for k in ("train", "infer"):
                r = paired(theirs[k], mine[k], quads=quads, sync=torch.cuda.synchronize, scopes=scopes)
                rows[name][f"{k}_ms"], rows[name][f"{k}_ratios"] = r["ms"], r["ratios"]
                rows[name][f"{k}_vs_torch"] = r["ratio"]
                rows[base][f"{k}_ms"] = r["base_ms"]  # the base's last pair's
        except Exception as e:
            rows[name]["error"] = error_line(e, 200)
    for name, (policy, m, params) in variants.items():  # the GPU's busy time a step, beside its wall time
        if "error" in rows[name]:
            continue
        steps = model_steps(m, x, params)
        with scope(policy):
            for k in ("train", "infer"):
                rows[name][f"{k}_gpu_ms"] = device_busy_ms(steps[k])
    for row in rows.values():
        print(json.dumps(row), flush=True)
    return list(rows.values())


def ops_cell(r: dict) -> str:
    """The xrt ops a step ran, as the profiler names them; a compiled step's are inlined by Inductor
    (Triton kernels it launches itself) and not named."""
    if compiled(r["variant"]):
        return "n/a (compiled)"
    return ", ".join(o.removeprefix("xrt::") for o in r["xrt_ops"]) or "-"


def ratio_cell(r: dict, k: str) -> str:
    """The median ratio to the base, and the quads' quartiles where there are several."""
    ratios = sorted(r.get(f"{k}_ratios") or [1.0])
    cell = f"{r.get(f'{k}_vs_torch', 1):.2f}"
    if len(ratios) < 3:
        return cell
    q = len(ratios) // 4
    return cell + f" ({ratios[q]:.2f}-{ratios[-1 - q]:.2f})"


def gpu_cell(r: dict) -> str:
    """The GPU's busy ms a train and an inference step (the profiler's device events)."""
    got = [r.get(f"{k}_gpu_ms") for k in ("train", "infer")]
    return " / ".join("-" if v is None else f"{v:.2f}" for v in got)


def markdown(rows: list[dict], meta: dict) -> str:
    out = [f"GPT-style model, bf16, {meta['gpu']}, torch {meta['torch']}, commit {meta['commit']}, {meta['date']}",
           "", "(/ torch: the median of the ABBA quads' ratios to torch's eager step, a compiled variant's to "
           "torch compiled; in brackets the quads' quartiles. GPU busy: the device's busy ms in a train / "
           "inference step; a step whose wall time is well above it waits on its host)", "",
           "| shape | variant | train step ms | / torch | inference ms | / torch | GPU busy ms | max rel err "
           "| xrt ops in a step |",
           "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['shape']} | {r['variant']} | error: {r['error']} | | | | | | |")
            continue
        out.append(f"| {r['shape']} | {r['variant']} | {r['train_ms']:.2f} | {ratio_cell(r, 'train')} | "
                   f"{r['infer_ms']:.2f} | {ratio_cell(r, 'infer')} | {gpu_cell(r)} | {r['err']:.1e} | "
                   f"{ops_cell(r)} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    return run_main("model_bench", __doc__, argv, ROOT, lambda args: [
        r for shape in (SHAPES[:1] if args.quick else SHAPES) for r in one_shape(*shape, args.quick, args.eager)],
        markdown, flags=[("--eager", "the eager variants alone: torch, xrt and auto (no compile)")])


if __name__ == "__main__":
    sys.exit(main())
