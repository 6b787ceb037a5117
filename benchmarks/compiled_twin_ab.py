"""The compiled GPT step with attention's ``triton_op`` twins against the same step with the opaque
custom op, beside torch's compiled step, in one process.

    B=8 S=1024 D=1024 H=16 python benchmarks/compiled_twin_ab.py --out ab.json [--md ab.md]

One model (``xrt.pytorch.modules.gpt``, 4 blocks, bf16), three compiled variants, each a
``torch.compile`` of its own frame (``model_bench.own_frame``):

- ``torch compiled``: no policy;
- ``twin``: xrt's policy; Inductor launches attention's kernels itself (``xrt::attention_triton``);
- ``opaque``: xrt's policy with attention's twins taken out of ``dispatch.COMPILED`` around each of
  its blocks of steps (and its trace), so its graphs call ``xrt::attention`` through the dispatcher,
  as before the twins. Each variant compiles its own frame; Dynamo also guards on that dict, so a
  variant run in the other's scope would recompile rather than run the other's graphs.

Each pair (twin / torch compiled, opaque / torch compiled, twin / opaque) is timed in ABBA quads of
~30 ms blocks of train steps, then of inference steps (``sidebyside.paired``: wall time between two
synchronizes, the host's part counts). Beside them, each variant's GPU busy ms a step, the xrt ops or
kernels its train step shows in the profiler, and its inference output's largest difference from the
eager torch model's, relative to that output's largest magnitude.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.model_bench import POLICIES, own_frame, scope  # noqa: E402
from xrt.bench.sidebyside import device_busy_ms, model_steps, paired, rel_err, run_main  # noqa: E402

TWINS = [("attention", "triton"), ("attention_bwd", "triton")]
QUADS = 6


@contextlib.contextmanager
def opaque() -> Any:
    """xrt's policy with attention's twins removed (traced and run inside: the custom op)."""
    from xrt.pytorch.ops import dispatch

    kept = {k: dispatch.COMPILED.pop(k) for k in TWINS}
    try:
        with scope(POLICIES["xrt"]):
            yield
    finally:
        dispatch.COMPILED.update(kept)


def variant_scope(name: str) -> Any:
    return opaque() if name == "opaque" else scope(None if name == "torch compiled" else POLICIES["xrt"])


def measure(b: int, s: int, d: int, h: int) -> list[dict]:
    import torch

    from xrt.pytorch.modules import gpt

    torch.manual_seed(0)
    model = gpt(d, h, 4).cuda().to(torch.bfloat16)
    x = torch.randn(b, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    shape = f"B{b} S{s} d{d} H{h} x4"
    compiled = {name: torch.compile(own_frame(model), dynamic=False) for name in ("torch compiled", "twin", "opaque")}
    steps = {name: model_steps(c, x, model) for name, c in compiled.items()}
    t0 = time.perf_counter()
    for name, st in steps.items():  # trace each variant in its own scope
        with variant_scope(name):
            st["train"]()
            st["infer"]()
    torch.cuda.synchronize()
    print(f"{shape}: compiled in {time.perf_counter() - t0:.0f} s", flush=True)
    with torch.no_grad():
        ref = model(x)
    rows = []
    for name in ("twin", "opaque"):
        with variant_scope(name), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            steps[name]["train"]()
        seen = sorted({e.key for e in prof.key_averages() if e.key.startswith(("xrt::", "_attn"))})
        rows.append({"shape": shape, "variant": name, "train_step_shows": seen})
    for other, base in (("twin", "torch compiled"), ("opaque", "torch compiled"), ("twin", "opaque")):
        for kind in ("train", "infer"):
            r = paired(steps[base][kind], steps[other][kind], quads=QUADS, sync=torch.cuda.synchronize,
                       scopes=(lambda n=base: variant_scope(n), lambda n=other: variant_scope(n)))
            q = sorted(r["ratios"])
            rows.append({"shape": shape, "variant": other, "base": base, "step": kind, "ms": r["ms"],
                         "base_ms": r["base_ms"], "ratio": r["ratio"],
                         "quartiles": [q[len(q) // 4], q[3 * len(q) // 4]]})
            print(json.dumps(rows[-1]), flush=True)
    for name, st in steps.items():
        with variant_scope(name):
            with torch.no_grad():
                err = rel_err(compiled[name](x), ref)
            rows.append({"shape": shape, "variant": name, "train_gpu_ms": device_busy_ms(st["train"]),
                         "infer_gpu_ms": device_busy_ms(st["infer"]), "max_rel_err": err})
    return rows


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"Compiled GPT step: attention's triton_op twins against the opaque custom op, {meta['gpu']}, "
             f"torch {meta['torch']}, commit {meta['commit']}, {meta['date']} (benchmarks/compiled_twin_ab.py)", "",
             "(ratio: the median of the ABBA quads' ratios, in brackets their quartiles; wall time, the host's "
             "part included)", "", "| shape | step | variant | / base | ratio | ms | base ms |",
             "|---|---|---|---|---:|---:|---:|"]
    for r in rows:
        if "ratio" in r:
            lo, hi = r["quartiles"]
            lines.append(f"| {r['shape']} | {r['step']} | {r['variant']} | {r['base']} | {r['ratio']:.3f} "
                         f"({lo:.3f}-{hi:.3f}) | {r['ms']:.2f} | {r['base_ms']:.2f} |")
    lines += ["", "| shape | variant | GPU busy ms, train / inference | max rel err | train step shows |",
              "|---|---|---|---:|---|"]
    shows = {(r["shape"], r["variant"]): r["train_step_shows"] for r in rows if "train_step_shows" in r}
    for r in rows:
        if "train_gpu_ms" in r:
            seen = ", ".join(shows.get((r["shape"], r["variant"]), [])) or "-"
            err = f"{r['max_rel_err']:.1e}" if "max_rel_err" in r else "-"
            lines.append(f"| {r['shape']} | {r['variant']} | {r['train_gpu_ms']:.2f} / {r['infer_gpu_ms']:.2f} | "
                         f"{err} | {seen} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    b, s, d, h = (int(os.environ.get(k, v)) for k, v in (("B", "8"), ("S", "1024"), ("D", "1024"), ("H", "16")))
    return run_main("compiled_twin_ab", __doc__, argv, Path(__file__).resolve().parents[1],
                    lambda args: measure(b, s, d, h), markdown)


if __name__ == "__main__":
    sys.exit(main())
