"""Host cost per call inside a ``torch.compile``'d function: xrt's ops against torch's, side by side.

    python benchmarks/compiled_host.py --device cuda --out compiled_host.json [--md compiled_host.md]
        [--calls 3000] [--repeats 25] [--backend inductor] [--quick]

Each row is a function compiled with ``fullgraph=True, dynamic=False`` that makes one call, timed as
``benchmarks/host_cost.py`` times its rows (back-to-back calls, device synchronised outside the interval,
the median of the repeats; a row with a target measured in turns with its reference). Per op
(``square`` [4096] fp32, ``softmax`` and ``fused_layernorm`` [64, 1024] bf16, layernorm's forward +
backward, and causal ``fused_attention`` [1, 8, 128, 64] bf16, forward and forward + backward):

* torch's own op, compiled;
* ``xp.ops.<op>(..., provider="triton")``: under compile the ``xrt::<op>_triton`` triton_op, whose
  kernels Inductor launches from its own code. Target: <= torch + 10 µs;
* ``torch.ops.xrt.<op>_triton(..., "triton")``: the triton_op called directly, without the public
  function's Python (its checks, the policy lookup), which Dynamo guards on (no target; it shows
  what the guards cost); for layernorm's forward, on inputs without grad, the twin without
  statistics (``xrt::layernorm_infer_triton``), which the public call takes there;
* ``torch.ops.xrt.<op>(..., "triton")``: the opaque custom op, which compiled code calls through the
  dispatcher (what every provider took before the triton_op twins; no target, for comparison);
* ``xp.ops.<op>(..., provider="torch")``: the torch provider through the custom op (no target;
  for attention, SDPA called by ``fused_attention`` itself, no custom op).

Rows that need what this machine lacks (Triton without a GPU) are listed as skipped with the reason.
``--quick`` (20 calls, 2 repeats) checks that the script runs, e.g. on a CPU.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TARGET_US = 10.0  # xrt's op may cost this much more host time per call than torch's, under compile


def build_rows(device: str, backend: str) -> list[dict]:
    """The rows: name, group, a builder of the compiled call (raises ``Skip``), target."""
    import torch
    import torch.nn.functional as F

    import xrt.pytorch as xp
    from benchmarks.host_cost import Skip, _needs_gpu_triton, _provider_ok

    dev = torch.device(device)
    x = torch.randn(4096, device=dev)
    xs = torch.randn(64, 1024, device=dev, dtype=torch.bfloat16)
    w = torch.randn(1024, device=dev, dtype=torch.bfloat16)
    b = torch.randn(1024, device=dev, dtype=torch.bfloat16)
    xg = xs.clone().requires_grad_(True)
    wg, bg = w.clone().requires_grad_(True), b.clone().requires_grad_(True)
    dy = torch.randn_like(xs)

    def compiled(fn: Callable[..., Any], args: tuple, op: str | None = None, provider: str | None = None,
                 dout: Any = None) -> Callable[[], Callable[[], Any]]:
        """The compiled call of ``fn`` on ``args``; with ``dout``, forward and backward (the gradients
        of ``args`` for the upstream gradient ``dout``)."""
        def make() -> Callable[[], Any]:
            if dev.type == "cpu" and backend == "inductor" and not any(
                    map(__import__("shutil").which, ("g++", "c++", "clang++"))):
                raise Skip("torch.compile on the CPU needs a C++ compiler")
            if provider == "triton":
                _needs_gpu_triton(device)
            if op is not None and provider is not None:
                _provider_ok(op, provider, args[0])
            torch._dynamo.reset()
            c = torch.compile(fn, backend=backend, fullgraph=True, dynamic=False)
            call = (lambda: torch.autograd.grad(c(*args), args, dout)) if dout is not None else (lambda: c(*args))
            call()
            return call
        return make

    rows: list[dict] = []

    def group(name: str, op: str, torch_fn: Callable[..., Any], xrt_fn: Callable[..., Any],
              opaque_fn: Callable[..., Any], twin_fn: Callable[..., Any], args: tuple, dout: Any = None) -> None:
        ref = f"torch: {name}"
        rows.append({"name": ref, "group": name, "make": compiled(torch_fn, args, dout=dout), "target": None})
        rows.append({"name": f'xrt triton_op: {name}', "group": name,
                     "make": compiled(lambda *a: xrt_fn("triton", *a), args, op, "triton", dout),
                     "target": {"kind": "plus", "ref": ref, "us": TARGET_US}})
        rows.append({"name": f'xrt triton_op called directly: {name}', "group": name,
                     "make": compiled(twin_fn, args, op, "triton", dout), "target": None})
        rows.append({"name": f'xrt custom op (opaque): {name}', "group": name,
                     "make": compiled(opaque_fn, args, op, "triton", dout), "target": None})
        rows.append({"name": f'xrt provider="torch": {name}', "group": name,
                     "make": compiled(lambda *a: xrt_fn("torch", *a), args, op, "torch", dout), "target": None})

    group("square [4096] fp32", "square", lambda a: a * a, lambda p, a: xp.ops.square(a, provider=p),
          lambda a: torch.ops.xrt.square(a, "triton"), lambda a: torch.ops.xrt.square_triton(a, "triton"), (x,))
    group("softmax [64, 1024] bf16", "softmax", lambda a: torch.softmax(a, -1),
          lambda p, a: xp.ops.softmax(a, provider=p), lambda a: torch.ops.xrt.softmax(a, "triton"),
          lambda a: torch.ops.xrt.softmax_triton(a, "triton"), (xs,))
    ln_torch = lambda a, c, d: F.layer_norm(a, (1024,), c, d, 1e-5)  # noqa: E731
    ln_xrt = lambda p, a, c, d: xp.ops.fused_layernorm(a, 1024, c, d, 1e-5, provider=p)  # noqa: E731
    ln_opaque = lambda a, c, d: torch.ops.xrt.layernorm(a, [1024], c, d, 1e-5, "triton")[0]  # noqa: E731
    ln_twin = lambda a, c, d: torch.ops.xrt.layernorm_triton(a, [1024], c, d, 1e-5, "triton")[0]  # noqa: E731
    # no input requires grad: the public call takes the twin without statistics, so its direct row does too
    ln_infer = lambda a, c, d: torch.ops.xrt.layernorm_infer_triton(a, [1024], c, d, 1e-5, "triton")  # noqa: E731
    group("layernorm [64, 1024] bf16", "layernorm", ln_torch, ln_xrt, ln_opaque, ln_infer, (xs, w, b))
    group("layernorm fwd+bwd [64, 1024] bf16", "layernorm", ln_torch, ln_xrt, ln_opaque, ln_twin, (xg, wg, bg),
          dout=dy)
    # causal attention at a small shape (host-bound): q, k, v [1, 8, 128, 64] bf16 seen per head, as a
    # model's ([B, S, H, D] in memory; separate tensors, not views of one); forward, and forward + backward
    q, k, v = (torch.randn(1, 128, 8, 64, device=dev, dtype=torch.bfloat16).transpose(1, 2) for _ in range(3))
    qg, kg, vg = (t.detach().requires_grad_(True) for t in (q, k, v))
    do = torch.randn(1, 8, 128, 64, device=dev, dtype=torch.bfloat16)
    scale = 64 ** -0.5
    at_torch = lambda a, c, d: F.scaled_dot_product_attention(a, c, d, is_causal=True)  # noqa: E731
    at_xrt = lambda p, a, c, d: xp.ops.fused_attention(a, c, d, is_causal=True, provider=p)  # noqa: E731
    at_opaque = lambda a, c, d: torch.ops.xrt.attention(a, c, d, True, scale, "triton")[0]  # noqa: E731
    at_twin = lambda a, c, d: torch.ops.xrt.attention_triton(a, c, d, True, scale, "triton")[0]  # noqa: E731
    group("attention causal [1, 8, 128, 64] bf16", "attention", at_torch, at_xrt, at_opaque, at_twin, (q, k, v))
    group("attention causal fwd+bwd [1, 8, 128, 64] bf16", "attention", at_torch, at_xrt, at_opaque, at_twin,
          (qg, kg, vg), dout=do)
    return rows


def static_user_launch(backend: str) -> bool:
    """Does Inductor launch user-defined Triton kernels (xrt's twins) with its static launcher?
    ``torch._inductor.config.static_launch_user_defined_triton_kernels`` (off unless set, e.g. by
    ``TORCHINDUCTOR_STATIC_LAUNCH_USER_DEFINED_TRITON_KERNELS=1``), which needs the static launcher
    itself and no C++ wrapper; any other backend launches nothing of its own."""
    if backend != "inductor":
        return False
    cfg = importlib.import_module("torch._inductor.config")
    return bool(getattr(cfg, "static_launch_user_defined_triton_kernels", False)
                and getattr(cfg, "use_static_cuda_launcher", False) and not getattr(cfg, "cpp_wrapper", False))


def markdown(result: dict) -> str:
    from benchmarks.host_cost import _met

    lines = [f"# Host cost per call under torch.compile on {result['device_name']}", "",
             f"`torch.compile(fullgraph=True, dynamic=False, backend={result['backend']!r})`; "
             f"{result['calls']} back-to-back calls, median of {result['repeats']} repeats "
             f"(benchmarks/compiled_host.py); torch {result['torch']}, triton {result['triton'] or '-'}; "
             f"{result['when']}; commit {result.get('commit') or '-'}; Inductor's static launch of user-defined "
             f"Triton kernels {'on' if result.get('static_user_launch') else 'off'}.", "",
             "| group | call | host µs / call | repeats (µs) | target | met |", "|---|---|---:|---|---|---|"]
    for r in result["rows"]:
        if r["host_us"] is None:
            why = r.get("skipped") or r.get("error", "")
            lines.append(f"| {r['group']} | {r['name']} | - | skipped: {why} | {r.get('target', '')} | - |")
            continue
        reps = ", ".join(f"{v:.1f}" for v in r["samples_us"])
        paired = f" (paired diff {r['paired_diff_us']:+.1f} µs)" if r.get("paired_diff_us") is not None else ""
        lines.append(f"| {r['group']} | {r['name']} | {r['host_us']:.2f} | {reps} | {r.get('target', '')}{paired} | "
                     f"{_met(r.get('met'))} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/compiled_host.py", description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu [cuda]")
    p.add_argument("--out", type=Path, required=True, help="JSON results")
    p.add_argument("--md", type=Path, help="also write the markdown table here")
    p.add_argument("--calls", type=int, default=3000, help="back-to-back calls per repeat [3000]")
    p.add_argument("--repeats", type=int, default=25, help="repeats; the median is reported [25]")
    p.add_argument("--warmup", type=int, default=100, help="calls before timing [100]")
    p.add_argument("--backend", default="inductor", help="torch.compile backend [inductor]")
    p.add_argument("--quick", action="store_true", help="20 calls, 2 repeats, 2 warm-up calls: does it run")
    p.add_argument("--only", metavar="TEXT", help="only the groups whose name contains TEXT (e.g. 'layernorm')")
    args = p.parse_args(argv)
    if args.quick:
        args.calls, args.repeats, args.warmup = 20, 2, 2
    for name in ("calls", "repeats"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1, got {getattr(args, name)}")

    sys.path.insert(0, str(ROOT))  # run from a checkout: this checkout's xrt and benchmarks
    import torch

    from benchmarks.host_cost import measure_rows

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("--device cuda: torch sees no CUDA GPU here (use --device cpu)")
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    name = torch.cuda.get_device_name(torch.device(args.device)) if args.device.startswith("cuda") \
        else f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
    print(f"host cost under torch.compile on {name}: {args.calls} calls x {args.repeats} repeats", flush=True)
    todo = [r for r in build_rows(args.device, args.backend) if args.only is None or args.only in r["group"]]
    if not todo:
        p.error(f"--only {args.only!r}: no group's name contains it")
    rows = measure_rows(todo, args.device, args.calls, args.repeats, args.warmup)
    import xrt
    from xrt.bench import worktrees

    source = Path(xrt.__file__).resolve().parents[1]
    try:
        commit = worktrees.resolve(source, "HEAD")
    except (worktrees.GitError, OSError):
        commit = None
    result = {"device": args.device, "device_name": name, "torch": torch.__version__, "triton": triton_version,
              "backend": args.backend, "xrt_source": str(source), "commit": commit, "calls": args.calls,
              "repeats": args.repeats, "warmup": args.warmup,
              "static_user_launch": static_user_launch(args.backend),
              "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    text = markdown(result)
    if args.md:
        args.md.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
