"""Where ``auto``'s extra host time goes in a host-bound step: a GPT-style model at d 768 (CUDA only).

    python scripts/auto_wrapper_diag.py [--out auto-d768.json]

Each variant against torch's own step (no policy), ABBA quads of ~30 ms blocks
(``xrt.bench.sidebyside.paired``), inference then train: torch against itself (the protocol's own
bias), ``auto``, ``auto``'s scope with the wrappers not installed, and the wrappers installed by another
thread (this one routes nothing). Then ``nn.LayerNorm`` alone, µs a call, torch and ``auto``.
results/gpu/auto-d768-diag-h100.md holds a run.
"""

import argparse
import contextlib
import json
import sys
import threading
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import xrt.pytorch as xp  # noqa: E402
from xrt.bench.sidebyside import model_steps, paired  # noqa: E402
from xrt.pytorch import routing  # noqa: E402
from xrt.pytorch.modules import gpt  # noqa: E402

AUTO = {"matmul": "auto", "layernorm": "auto", "softmax": "auto", "attention": "auto"}
B, S, D, H, N = 16, 512, 768, 12, 4


@contextlib.contextmanager
def auto_without_wrappers():
    """``auto``'s scope with routing's install step a no-op: the policy, not the wrappers."""
    real = routing._apply
    routing._apply = lambda ops: None
    try:
        with xp.kernel_policy(**AUTO):
            yield
    finally:
        routing._apply = real


@contextlib.contextmanager
def wrappers_of_another_thread():
    """The wrappers installed (another thread holds ``auto``), this thread routing nothing."""
    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with xp.kernel_policy(**AUTO):
            inside.set()
            leave.wait()

    t = threading.Thread(target=hold)
    t.start()
    inside.wait()
    try:
        yield
    finally:
        leave.set()
        t.join()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="write the pairs' results here (JSON)")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = gpt(D, H, N).cuda().to(torch.bfloat16)
    x = torch.randn(B, S, D, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    steps = model_steps(model, x, model)
    none = contextlib.nullcontext
    variants = {"torch (A/A)": none, "auto": lambda: xp.kernel_policy(**AUTO),
                "auto, no wrappers": auto_without_wrappers, "wrappers of another thread": wrappers_of_another_thread}
    res = {}
    for k in ("infer", "train"):
        for name, scope in variants.items():
            r = paired(steps[k], steps[k], quads=12, sync=torch.cuda.synchronize, scopes=(none, scope))
            res[f"{k} {name}"] = r
            q = sorted(r["ratios"])
            print(f"{k:5s} {name:28s} ratio {r['ratio']:.3f} ({q[3]:.3f}-{q[-4]:.3f})  torch {r['base_ms']:.3f} ms  "
                  f"variant {r['ms']:.3f} ms", flush=True)
    ln = next(m for m in model.modules() if isinstance(m, torch.nn.LayerNorm))
    xx = torch.randn(B, S, D, device="cuda", dtype=torch.bfloat16)

    def per_call(scope) -> float:
        with scope(), torch.no_grad():
            ln(xx)
            torch.cuda.synchronize()
            best = min(timeit.repeat(lambda: ln(xx), number=2000, repeat=7)) / 2000 * 1e6
            torch.cuda.synchronize()
            return best

    for _ in range(2):
        print(f"nn.LayerNorm us/call: torch {per_call(none):.2f} auto {per_call(variants['auto']):.2f}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
