"""Where a GPT step's GPU and host time go: its kernels by name, torch beside xrt, compiled and eager.

    B=16 S=512 D=768 H=12 OUT=. python benchmarks/step_kernels.py

One process, one model (``xrt.pytorch.modules.gpt``, 4 blocks, bf16). Four variants: ``torch
compiled`` and ``xrt compiled`` (the model through ``torch.compile``, static shapes, traced with no
policy and at ``xrt``'s policy), ``torch eager`` and ``xrt eager``. For each inference and train
step: the GPU's busy ms a step and the wall ms of 10 steps, then the kernels over 5 steps (the
profiler's device events, µs a step and launches a step, largest first); for the eager train
steps also the host's top ops by self time. Writes ``$OUT/step-kernels-d<D>.txt``.
"""

from __future__ import annotations

import collections
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.model_bench import POLICIES, own_frame, scope  # noqa: E402
from xrt.bench.sidebyside import busy_us, device_work, model_steps  # noqa: E402
from xrt.pytorch.modules import gpt  # noqa: E402

VARIANTS = {"torch compiled": None, "xrt compiled": "xrt", "torch eager": None, "xrt eager": "xrt"}


def table(prof, title: str, host: bool) -> list[str]:
    events = prof.events()
    per = collections.defaultdict(lambda: [0.0, 0])
    for e in device_work(events):
        per[e.name][0] += e.time_range.end - e.time_range.start
        per[e.name][1] += 1
    lines = [title]
    for name, (us, n) in sorted(per.items(), key=lambda kv: -kv[1][0])[:22]:
        lines.append(f"  {us / 5:9.1f} us/step {n // 5:4d}x  {name[:120]}")
    if host:
        cpu = torch.autograd.DeviceType.CPU
        ops = sorted((e for e in prof.key_averages() if e.device_type == cpu), key=lambda e: -e.self_cpu_time_total)
        lines.append("  -- host self time, top ops (us/step)")
        for e in ops[:25]:
            lines.append(f"  {e.self_cpu_time_total / 5:9.1f} self {e.cpu_time_total / 5:9.1f} total "
                         f"{e.count // 5:4d}x  {e.key[:100]}")
    return lines


def main() -> int:
    if not torch.cuda.is_available():
        print("step_kernels needs a CUDA GPU", file=sys.stderr)
        return 2
    b, s, d, h = (int(os.environ.get(k, v)) for k, v in (("B", "16"), ("S", "512"), ("D", "768"), ("H", "12")))
    torch.manual_seed(0)
    model = gpt(d, h, 4).cuda().to(torch.bfloat16)
    x = torch.randn(b, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    steps = {}
    for name, pol in VARIANTS.items():
        call = torch.compile(own_frame(model), dynamic=False) if "compiled" in name else model
        steps[name] = model_steps(call, x, model)
        with scope(POLICIES[pol] if pol else None):
            for kind in ("train", "infer"):
                steps[name][kind]()
                steps[name][kind]()
    lines = []
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    for kind in ("infer", "train"):
        for name, pol in VARIANTS.items():
            step = steps[name][kind]
            with scope(POLICIES[pol] if pol else None):
                step()
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for _ in range(10):
                    step()
                torch.cuda.synchronize()
                wall = (time.perf_counter() - t0) / 10 * 1e3
                with torch.profiler.profile(activities=acts) as prof:
                    for _ in range(5):
                        step()
                    torch.cuda.synchronize()
            title = (f"== d{d} B{b} S{s} H{h} {kind} {name}: GPU busy {busy_us(prof.events()) / 5 / 1e3:.3f} ms "
                     f"a step, wall {wall:.3f} ms")
            lines += table(prof, title, host="eager" in name and kind == "train")
            print(title, flush=True)
    out = Path(os.environ.get("OUT", "."))
    (out / f"step-kernels-d{d}.txt").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
