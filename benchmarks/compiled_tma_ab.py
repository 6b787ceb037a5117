"""The compiled GPT step with xrt's GEMM traced as the TMA kernel or as the tiled one, beside torch.

    B=8 S=1024 D=1024 H=16 python benchmarks/compiled_tma_ab.py

One process, one model (``xrt.pytorch.modules.gpt``, 4 blocks, bf16). Four compiled variants:
torch's (no policy), and three under the ``xrt`` policy, each switch set while it is traced:

- ``tiled, coarse``: ``xrt.kernels.triton.matmul.DEVICE_DESCRIPTORS`` off (every GEMM the tiled
  kernel), and the layout table without its fine-bucket entries (``spaces.gemm_bucket_fine``: a
  model of width 768 takes width 1024's configs);
- ``tma, coarse``: the TMA kernel (descriptors made on the device) from ``TRACED_TMA_MIN_WORK``,
  the same coarse table;
- ``tma, fine``: the code as it is.

torch's compile caches are off, so each variant is traced, not served another's graph (the
switches are not part of the caches' keys). Five rounds; each round runs every variant's 20
inference steps, then 20 train steps, after 3 warm-up steps. Prints the median ms a step, its ratio
to torch's compiled step and each round's figure, then each variant's GPU busy ms a step (the
profiler's). Wall time
between two synchronizes: the host's part counts, as a training loop feels it.
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

import xrt.kernels.triton.matmul as mm  # noqa: E402
import xrt.pytorch as xp  # noqa: E402
from benchmarks.model_bench import own_frame  # noqa: E402
from xrt.bench.sidebyside import device_busy_ms, model_steps  # noqa: E402
from xrt.kernels import spaces  # noqa: E402
from xrt.pytorch.modules import gpt  # noqa: E402

XRT = {"matmul": "triton", "layernorm": "triton", "softmax": "triton", "attention": "triton"}
ROUNDS, STEPS, WARM = 5, 20, 3


@contextlib.contextmanager
def table(fine: bool):
    """The GEMM layout table with (``fine``) or without its fine-bucket entries, while a variant is
    traced (the configs a trace picks are fixed in its graph)."""
    kept = {} if fine else {k: spaces.GEMM_LAYOUT_DEFAULTS.pop(k) for k in list(spaces.GEMM_LAYOUT_DEFAULTS)
                            if k[1:] != tuple(spaces.gemm_bucket(x) for x in k[1:])}
    mm._LAYOUT_DEFAULTS.clear()
    try:
        yield
    finally:
        spaces.GEMM_LAYOUT_DEFAULTS.update(kept)
        mm._LAYOUT_DEFAULTS.clear()


def main() -> None:
    d, heads, seq, batch = (int(os.environ.get(k, v)) for k, v in (("D", "1024"), ("H", "16"), ("S", "1024"),
                                                                     ("B", "8")))
    torch.manual_seed(0)
    model = gpt(d, heads, 4).cuda().to(torch.bfloat16)
    x = torch.randn(batch, seq, d, device="cuda", dtype=torch.bfloat16)

    def frame():  # a function of its own for each torch.compile: each variant compiles on its own
        return own_frame(model)

    def run(kind: str, m, n: int) -> None:
        step = model_steps(m, x, model)[kind]
        for _ in range(n):
            step()

    torch._dynamo.reset()
    torch._functorch.config.enable_autograd_cache = False
    torch._inductor.config.fx_graph_cache = False
    variants = {"torch compiled": (None, torch.compile(frame(), dynamic=False), None)}
    had = mm.DEVICE_DESCRIPTORS[0]
    for name, tma, fine in (("tiled, coarse", False, False), ("tma, coarse", True, False), ("tma, fine", True, True)):
        mm.DEVICE_DESCRIPTORS[0] = tma
        with table(fine):
            f = torch.compile(frame(), dynamic=False)
            with xp.kernel_policy(**XRT):
                run("infer", f, 1)
                run("train", f, 1)
        variants["xrt compiled " + name] = (XRT, f, tma)
    res: dict[tuple[str, str], list[float]] = {}
    for _ in range(ROUNDS):
        for name, (pol, m, tma) in variants.items():
            if tma is not None:
                mm.DEVICE_DESCRIPTORS[0] = tma
            for kind in ("infer", "train"):
                with xp.kernel_policy(**pol) if pol else contextlib.nullcontext():
                    run(kind, m, WARM)
                    torch.cuda.synchronize()
                    t = time.perf_counter()
                    run(kind, m, STEPS)
                    torch.cuda.synchronize()
                    res.setdefault((name, kind), []).append((time.perf_counter() - t) / STEPS * 1e3)
    for kind in ("infer", "train"):
        base = statistics.median(res[("torch compiled", kind)])
        for name in variants:
            v = statistics.median(res[(name, kind)])
            rounds = " ".join(f"{t:.2f}" for t in res[(name, kind)])
            print(f"d{d} {kind:5s} {name:30s} {v:7.3f} ms  / torch compiled {v / base:.3f}   rounds {rounds}",
                  flush=True)
    for name, (pol, m, tma) in variants.items():
        if tma is not None:
            mm.DEVICE_DESCRIPTORS[0] = tma
        with xp.kernel_policy(**pol) if pol else contextlib.nullcontext():
            busy = [device_busy_ms(model_steps(m, x, model)[kind]) for kind in ("infer", "train")]
        mm.DEVICE_DESCRIPTORS[0] = had
        print(f"d{d} {name:30s} GPU busy {busy[0]:.3f} / {busy[1]:.3f} ms a step (inference / train)", flush=True)


if __name__ == "__main__":
    main()
