"""A routed ``F.linear`` (policy ``matmul="triton"``) as one autograd Function with the bias in the
Triton GEMM's epilogue (``xrt.pytorch.ops.matmul.linear``), against the composition it replaced
(``xp.ops.matmul`` of the folded rows and ``W.T``, then ``+ bias``, then a fresh view), in one process.

    python scripts/routed_linear_ab.py      # CUDA GPU

First the GPT-style model's train and inference steps under two policies: ABBA quads of ~30 ms
blocks (``xrt.bench.sidebyside.paired``), the composition swapped in for the quads' "old" blocks.
Then the device time of one forward linear with bias (CUDA-graph replay): old, new and torch.
results/gpu/routed-linear-h100.md holds a run.
"""

import contextlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import xrt.pytorch as xp  # noqa: E402
from xrt.bench.sidebyside import model_steps, paired  # noqa: E402
from xrt.pytorch import ops, routing  # noqa: E402
from xrt.pytorch.modules import gpt  # noqa: E402
from xrt.pytorch.ops import dispatch  # noqa: E402

NEW = routing._linear_op
POLICIES = ({"matmul": "triton"}, {"matmul": "triton", "layernorm": "triton", "attention": "triton"})
SHAPES = ((8, 1024, 1024, 16), (16, 512, 768, 12))  # batch, sequence, width, heads; 4 blocks
LINEARS = ((8192, 1024, 3072), (8192, 1024, 4096), (8192, 4096, 1024), (8192, 768, 2304))  # M, K, N


def old(input, weight, bias, p):
    """The routed linear before: the public GEMM op, a separate bias add, a fresh view."""
    k, n = weight.shape[1], weight.shape[0]
    y = ops.matmul(input.reshape(-1, k), weight.t(), provider=p)
    if bias is not None:
        y = y + bias
    return dispatch.fresh(y, (*input.shape[:-1], n))


@contextlib.contextmanager
def use(fn, pol):
    routing._linear_op = fn
    try:
        with xp.kernel_policy(**pol):
            yield
    finally:
        routing._linear_op = NEW


def steps() -> None:
    torch.manual_seed(0)
    for pol in POLICIES:
        for b, s, d, h in SHAPES:
            model = gpt(d, h, 4).cuda().to(torch.bfloat16)
            x = torch.randn(b, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
            st = model_steps(model, x, model)
            for kind in ("train", "infer"):
                r = paired(st[kind], st[kind], quads=10, sync=torch.cuda.synchronize,
                           scopes=(lambda pol=pol: use(old, pol), lambda pol=pol: use(NEW, pol)))
                rs = sorted(r["ratios"])
                q = len(rs) // 4
                print(f"d{d} {'+'.join(pol):26s} {kind:5s} new/old {r['ratio']:.3f} ({rs[q]:.3f}-{rs[-1 - q]:.3f})"
                      f"  new {r['ms']:.2f} ms  old {r['base_ms']:.2f} ms", flush=True)


def device_ms(m: int, k: int, n: int) -> dict[str, float]:
    """Device ms of one forward linear with bias [M, K] x [N, K]^T + [N]: old, new and torch's."""
    import triton

    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    calls = {"old": lambda: old(x, w, bias, "triton"), "new": lambda: NEW(x, w, bias, "triton"),
             "torch": lambda: torch.nn.functional.linear(x, w, bias)}
    with torch.no_grad():
        return {name: triton.testing.do_bench_cudagraph(f, rep=200) for name, f in calls.items()}


def device_times() -> None:
    for m, k, n in LINEARS:
        ms = device_ms(m, k, n)
        print(f"fwd+bias {m}x{k}->{n} device ms: old {ms['old']:.4f} new {ms['new']:.4f} torch {ms['torch']:.4f} "
              f"new/old {ms['new'] / ms['old']:.3f} torch/new {ms['torch'] / ms['new']:.3f}", flush=True)


def main() -> int:
    if not torch.cuda.is_available():
        print("routed_linear_ab: needs a CUDA GPU", file=sys.stderr)
        return 2
    steps()
    device_times()
    return 0


if __name__ == "__main__":
    sys.exit(main())
