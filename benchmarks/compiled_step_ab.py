"""The compiled GPT step on xrt's kernels as of c29a498 and with that change's behaviours undone in
the same process, beside torch's compiled step; and each variant's GPU kernels by name.

    D=1024 H=16 S=1024 B=8 ROUNDS=5 python benchmarks/compiled_step_ab.py   (EAGER=1: no compile)

One process, one model (``xrt.pytorch.modules.gpt``, 4 blocks, bf16). ``xrt before`` is traced with
what the change replaced, switched back at trace time: no ``xrt::linear_triton`` (the GEMM and an
add), attention's output contiguous, the GEMM kernels given their [1, M, K] views with A for the
unused epilogue pointers, and layernorm's partial sums in 128 x 32 blocks. ``xrt now`` is the code
as it is. Rounds alternate the variants; each round runs 10 inference steps, then 10 train steps,
after 2 warm-up steps; ms a step is wall time between two synchronizes (the host's part counts).
The patches name this version's internals: after later changes ``before`` means nothing. One is
not exact: the old device-descriptor kernel took A for its unused bias pointer, ``before`` gives B.
Writes ``$OUT/prof2-d<D>-<compiled|eager>.txt`` (the profiler's kernels over 5 steps).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import xrt.kernels.triton.attention as ka  # noqa: E402
import xrt.kernels.triton.layernorm as kl  # noqa: E402
import xrt.kernels.triton.matmul as mm  # noqa: E402
import xrt.pytorch as xp  # noqa: E402
import xrt.pytorch.ops.attention as oa  # noqa: E402
from benchmarks.model_bench import own_frame  # noqa: E402
from xrt.bench.sidebyside import model_steps  # noqa: E402
from xrt.pytorch.modules import gpt  # noqa: E402
from xrt.pytorch.ops import dispatch  # noqa: E402

XRT = {"matmul": "triton", "layernorm": "triton", "softmax": "triton", "attention": "triton"}
NOW = (ka.empty_out, mm._spare, mm.run, kl.SUM_BLOCK_N, kl.SUM_BLOCK_G)


def _contiguous_out(q: torch.Tensor, d: int) -> torch.Tensor:
    return q.new_empty((*q.shape[:-1], d))


def _run_without_operands(*args, operands=None, **kwargs):
    return NOW[2](*args, **kwargs)


@contextlib.contextmanager
def before():
    """The behaviours c29a498 and f5d7e89 replaced, for a trace made (and run) inside."""
    twin = dispatch.COMPILED.pop(("linear", "triton"))
    ka.empty_out = oa.empty_out = _contiguous_out
    mm._spare, mm.run = (lambda a, b: (b, a)), _run_without_operands
    kl.SUM_BLOCK_N, kl.SUM_BLOCK_G = 128, 32
    try:
        yield
    finally:
        dispatch.COMPILED[("linear", "triton")] = twin
        ka.empty_out = oa.empty_out = NOW[0]
        mm._spare, mm.run, kl.SUM_BLOCK_N, kl.SUM_BLOCK_G = NOW[1:]


def main() -> None:
    out = os.environ.get("OUT", ".")
    eager = bool(os.environ.get("EAGER"))
    d, heads, seq, batch, rounds = (int(os.environ.get(k, v)) for k, v in (
        ("D", "1024"), ("H", "16"), ("S", "1024"), ("B", "8"), ("ROUNDS", "5")))
    torch.manual_seed(0)
    model = gpt(d, heads, 4).cuda().to(torch.bfloat16)
    x = torch.randn(batch, seq, d, device="cuda", dtype=torch.bfloat16)

    def frame():
        return model if eager else torch.compile(own_frame(model), dynamic=False)

    def run(kind: str, m, n: int) -> None:
        step = model_steps(m, x, model)[kind]
        for _ in range(n):
            step()

    def scope(policy, old: bool) -> contextlib.ExitStack:
        s = contextlib.ExitStack()
        if policy:
            s.enter_context(xp.kernel_policy(**policy))
        if old:
            s.enter_context(before())
        return s

    torch._dynamo.reset()
    variants = {"torch": (None, frame(), False), "xrt before": (XRT, frame(), True), "xrt now": (XRT, frame(), False)}
    for policy, f, old in variants.values():
        with scope(policy, old):
            run("infer", f, 2)
            run("train", f, 2)
    tag = "eager" if eager else "compiled"
    res: dict[str, list[float]] = {}
    for _ in range(rounds):
        for name, (policy, f, old) in variants.items():
            for kind in ("infer", "train"):
                with scope(policy, old):
                    run(kind, f, 2)
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    run(kind, f, 10)
                    torch.cuda.synchronize()
                    res.setdefault(f"{name} {kind}", []).append((time.perf_counter() - t) / 10 * 1e3)
    for kind in ("infer", "train"):
        base = statistics.median(res[f"torch {kind}"])
        for name in variants:
            v = res[f"{name} {kind}"]
            print(f"d{d} {tag} {kind:5s} {name:10s} {statistics.median(v):7.3f} ms  / torch "
                  f"{statistics.median(v) / base:.3f}  rounds {' '.join(f'{t:.2f}' for t in v)}", flush=True)
    with open(f"{out}/prof2-d{d}-{tag}.txt", "w") as fh:
        for kind in ("infer", "train"):
            for name in ("torch", "xrt now"):
                policy, f, old = variants[name]
                with scope(policy, old):
                    run(kind, f, 2)
                    torch.cuda.synchronize()
                    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
                        run(kind, f, 5)
                        torch.cuda.synchronize()
                evs = [e for e in p.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
                evs.sort(key=lambda e: -e.self_device_time_total)
                total = sum(e.self_device_time_total for e in evs)
                wall = statistics.median(res[f"{name} {kind}"])
                fh.write(f"\n== d{d} {tag} {kind} {name}: GPU {total / 5 / 1e3:.3f} ms a step "
                         f"(median wall {wall:.3f})\n")
                for e in evs[:30]:
                    fh.write(f"{e.self_device_time_total / 5:10.1f} us/step {e.count // 5:4d}x  {e.key[:100]}\n")


if __name__ == "__main__":
    main()
