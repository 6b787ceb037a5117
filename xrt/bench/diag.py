"""``xrt diag``: the "tuned it and it got slower?" checklist, for any op.

The four axes of a CNN kernel-tuning checklist (a fused conv+BN+ReLU tuning lab asks them of
every slow step), then the machine: memory format (channels_last, NCHW<->NHWC round trips);
the layout / access-pattern settings in force (policy, env, tuning config); tile and
shared-memory sizes against the problem; first-step compilation and warm-up; then clocks and
throttle reasons, other processes on the GPU, CPU load, driver and toolkit versions. Each check
says what it saw and what to change.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from xrt.bench.diag_check import INFO, OK, WARN, Check


def _tensors(args: tuple) -> list:
    import torch

    return [a for a in args if isinstance(a, torch.Tensor)]


def check_memory_format(args: tuple) -> Check:
    import torch

    notes, bad = [], False
    for i, t in enumerate(_tensors(args)):
        fmt = "contiguous"
        if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous():
            fmt = "channels_last (NHWC)"
        elif not t.is_contiguous():
            fmt, bad = f"strided {tuple(t.stride())}", True
        notes.append(f"input {i}: {tuple(t.shape)} {fmt}")
    if bad:
        return Check("memory format", WARN, "; ".join(notes),
                     "a strided input is copied to a contiguous one before the kernel (a hidden round trip): "
                     "keep tensors contiguous, or channels_last throughout for NHWC kernels")
    return Check("memory format", OK, "; ".join(notes) or "no tensor inputs")


def check_settings(op: str, provider: str, config: dict | None, device: Any, dtype: Any, shape: tuple) -> Check:
    from xrt.pytorch import policy

    chosen = policy.resolve(op, None if provider == "auto" else provider)
    env = {k: v for k, v in os.environ.items() if k.startswith(("XRT_", "TRITON_")) and k != "XRT_DEBUG"}
    tuned = policy.lookup_tuned(op, device=device, dtype=dtype, shape=shape)
    source = "given on the command line" if config else ("tuned config from the policy" if tuned else
                                                         "the tuning space's default")
    detail = (f"provider in force: {chosen}; config: {config or tuned or 'default'} ({source}); "
              f"env: {env or 'none'}")
    if os.environ.get("TRITON_INTERPRET") == "1" and device is not None:
        return Check("layout / access-pattern settings", WARN, detail,
                     "TRITON_INTERPRET=1 runs Triton kernels in the Python interpreter: unset it for GPU timing")
    return Check("layout / access-pattern settings", OK if chosen != "auto" else INFO, detail,
                 "" if chosen != "auto" else "auto picks the first provider that runs here; pin one "
                 "(--provider or set_kernel_policy) before comparing timings")


def check_tiles(spec: Any, provider: str, config: dict | None, shape: tuple, sm_count: int | None) -> Check:
    from xrt.kernels import defs, spaces

    key = spec.spaces.get(provider)
    if key is None:
        return Check("tile / shared-memory size vs problem", INFO, f"provider {provider} has no tiles to tune")
    cfg = spaces.check(key, config or {})
    tile_names = [k for k in cfg if k.upper().startswith(("BLOCK", "TILE")) or k in ("block",)]
    if not tile_names:
        return Check("tile / shared-memory size vs problem", INFO, f"config {cfg} has no tile parameter")
    n = 1
    for d in shape:
        n *= d
    last = shape[-1] if shape else 1
    problems, notes = [], []
    for name in tile_names:
        tile = int(cfg[name])
        extent = n if len(shape) == 1 or defs.get(spec.op).flat else last
        programs = -(-extent // tile) * (1 if extent == n else n // max(last, 1))
        notes.append(f"{name}={tile} over {extent} elements -> {programs} programs/blocks")
        if tile > extent:
            problems.append(f"{name}={tile} is larger than the {extent} elements it covers: "
                            f"{(tile - extent) / tile:.0%} of its lanes are masked off")
        if sm_count and programs < sm_count:
            problems.append(f"only {programs} programs for {sm_count} SMs: the GPU is not filled; "
                            f"use a smaller {name} or more work per launch")
    if problems:
        return Check("tile / shared-memory size vs problem", WARN, "; ".join(notes), "; ".join(problems))
    return Check("tile / shared-memory size vs problem", OK, "; ".join(notes))


def check_first_step(fn, sync, warmup: int) -> Check:
    for _ in range(warmup):
        fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - t0
    steady = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn()
        sync()
        steady.append(time.perf_counter() - t0)
    steady.sort()
    med = steady[2]
    ratio = first / med if med > 0 else 1.0
    detail = f"first call {first * 1e3:.2f} ms after {warmup} warm-up call(s); steady {med * 1e3:.3f} ms ({ratio:.0f}x)"
    if ratio > 3:
        return Check("first-step compilation / warm-up", WARN, detail,
                     "the first call compiles or allocates: warm up (xrt diag --warmup N, or the timer's "
                     "warm-up) before timing, and never time the first step")
    return Check("first-step compilation / warm-up", OK, detail)


def check_clocks(dev: Any, nvml: Any = None) -> Check:
    from xrt.bench.nvml import DeviceClocks, decode

    if dev.kind != "cuda":
        return Check("clocks and throttle reasons", INFO, f"{dev.kind}: no NVML clocks to read")
    clk = DeviceClocks(dev.index, nvml, uuid=dev.uuid)
    if not clk.available:
        return Check("clocks and throttle reasons", WARN, "NVML is unavailable",
                     "pip install nvidia-ml-py to record clocks and throttle reasons with each sample")
    reads = [clk.read() for _ in range(5)]
    sm = [r.sm_mhz for r in reads if r.sm_mhz]
    reasons = 0
    for r in reads:
        reasons |= r.reasons
    detail = (f"SM clock {min(sm)}-{max(sm)} MHz (max {dev.max_sm_clock_mhz}); "
              f"reasons: {', '.join(decode(reasons)) or 'none'}")
    locked = bool(reasons & 0x2)
    if any(r.throttled for r in reads):
        return Check("clocks and throttle reasons", WARN, detail,
                     "a power/thermal/hardware slowdown is active: timings now are slow for reasons other "
                     "than code; the detector compares cycles, but re-run when the GPU is cool")
    return Check("clocks and throttle reasons", OK, detail + ("; clocks look locked (applications clocks)"
                                                              if locked else "; clocks float (boost)"),
                 "" if locked else "floating clocks add run-to-run noise; where the operator permits, "
                 "xrt bench run --lock-clocks base")


def check_other_processes(dev: Any, nvml: Any = None) -> Check:
    from xrt.bench.nvml import DeviceClocks

    if dev.kind != "cuda":
        return Check("other processes on the GPU", INFO, f"{dev.kind}: not applicable")
    pids = DeviceClocks(dev.index, nvml, uuid=dev.uuid).other_processes()
    if pids:
        return Check("other processes on the GPU", WARN, f"PIDs {pids} also hold a context on this GPU",
                     "other work on the GPU shares its SMs and memory bandwidth: benchmark on an idle GPU")
    return Check("other processes on the GPU", OK, "none besides this one")


def check_cpu_load() -> Check:
    from xrt.bench.machine import cpu_load

    load = cpu_load()
    if not load:
        return Check("CPU load", INFO, "load average unavailable")
    detail = f"1-min load {load['load1']:.2f} on {load['cores']} cores ({load['load_per_core']:.2f} per core)"
    if load["load_per_core"] > 0.5:
        return Check("CPU load", WARN, detail, "a busy host delays launches and skews baselines: benchmark on a "
                     "quiet host, or use CUDA-graph mode for launch-bound kernels")
    return Check("CPU load", OK, detail)


def check_versions(dev: Any) -> Check:
    nvcc = shutil.which("nvcc")
    nvcc_v = None
    if nvcc:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
        releases = [ln.split("release")[-1].split(",")[0].strip() for ln in out.splitlines() if "release" in ln]
        nvcc_v = releases[0] if releases else None
    detail = (f"driver {dev.driver or '-'}; CUDA (torch) {dev.cuda or '-'}; nvcc {nvcc_v or 'absent'}; "
              f"torch {dev.torch}; triton {dev.triton or 'absent'}")
    advice = ""
    if dev.cuda and nvcc_v and dev.cuda.split(".")[0] != nvcc_v.split(".")[0]:
        advice = (f"torch was built for CUDA {dev.cuda} but nvcc is {nvcc_v}: CUDA C kernels (pycuda) and torch "
                  "use different toolkits; compare timings only within one toolkit")
    return Check("driver and toolkit versions", WARN if advice else OK, detail,
                 advice or "a version change between two runs explains a step as well as code does")


def diagnose(op: str, *, shape: str | None = None, dtype: str = "float32", provider: str = "auto",
             config: str = "default", warmup: int = 0, profile_dir: Path | None = None,
             nvml: Any = None) -> list[Check]:
    import torch

    from xrt.bench import specs, suite
    from xrt.device import default_device

    spec = specs.get(op)
    dev = default_device()
    if shape is None:
        sets = spec.shapes.get("large" if dev.kind != "cpu" else "quick") or next(iter(spec.shapes.values()))
        shape_t = sets[0]
    else:
        shape_t = suite.parse_shape(shape)
    if not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise ValueError(f"--dtype {dtype!r} is not a torch dtype")
    cfg = suite.parse_config(config)
    args = spec.make_inputs(shape_t, getattr(torch, dtype), dev.torch_device)
    from xrt.pytorch import policy

    chosen = policy.resolve(op, None if provider == "auto" else provider)
    if chosen == "auto":
        from xrt.pytorch.ops.dispatch import choose

        chosen = choose(op, args[0]).name
    spec.runnable(args, chosen)
    fn = lambda: spec.call(args, chosen, cfg)  # noqa: E731
    sync = torch.cuda.synchronize if dev.kind == "cuda" else (lambda: None)
    gpu = dev if dev.kind == "cuda" else None
    sms = dev.sm_count if dev.kind == "cuda" else None
    if op == "conv_bn_relu":  # its own first three axes: layout path, knobs and their sources, tiles
        from xrt.bench.diag_conv import check_stats, conv_checks

        axes = [*conv_checks(args, chosen, cfg, gpu, sms), check_first_step(fn, sync, warmup), check_stats()]
    else:
        axes = [check_memory_format(args), check_settings(op, provider, cfg, gpu, getattr(torch, dtype), shape_t),
                check_tiles(spec, chosen, cfg, shape_t, sms), check_first_step(fn, sync, warmup)]
    checks = [
        Check("problem", INFO, f"{op} {suite.shape_key(shape_t)} {dtype} on {dev.summary()}; provider {chosen}"),
        *axes,
        check_clocks(dev, nvml),
        check_other_processes(dev, nvml),
        check_cpu_load(),
        check_versions(dev),
    ]
    if profile_dir is not None:
        import xrt.pytorch as xp

        profile_dir.mkdir(parents=True, exist_ok=True)
        trace = profile_dir / f"{op}-{chosen}-{suite.shape_key(shape_t)}-{dtype}.json"
        with xp.profile(export_chrome_trace=trace):
            for _ in range(3):
                fn()
            sync()
        checks.append(Check("profile", INFO, f"torch.profiler trace written to {trace} "
                            "(open in chrome://tracing, Perfetto or TensorBoard)"))
    return checks


def render(checks: list[Check]) -> str:
    mark = {OK: "[ok]  ", WARN: "[warn]", INFO: "[info]"}
    lines = []
    for c in checks:
        lines.append(f"{mark[c.status]} {c.name}: {c.detail}")
        if c.advice:
            lines.append(f"        -> {c.advice}")
    warns = sum(c.status == WARN for c in checks)
    lines.append(f"{warns} warning(s)" if warns else "nothing to change found")
    return "\n".join(lines)
