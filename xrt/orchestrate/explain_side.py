"""One side of ``xrt explain``: run inside a commit's worktree (``PYTHONPATH`` = the worktree), this
script collects what that commit does for one benchmark case and writes it to ``--out``.

It is started as a script file of the explaining xrt, not as a module, so it imports the commit's
own ``xrt`` and ``kernels`` (never the explaining checkout's): only what every commit since the
asv suites has (``xrt.bench.specs``, ``xrt.bench.suite``, ``xrt.kernels.spaces``, ``xrt.pytorch``,
``xrt.commands.kernels``) is used, each behind a guard that records why a part is missing.

Modes:

* ``collect`` (default): ``settings.json`` (provider, config and its source, ``XRT_*`` knobs,
  versions), the compiled code (``dump/``, the commit's ``xrt kernels dump``) and, on a CUDA
  device, ``trace.json`` (torch.profiler's Chrome trace of one call after warm-up).
* ``target``: warm up, then one call between cudaProfilerStart and cudaProfilerStop: what ``ncu
  --profile-from-start off`` profiles (one launch per kernel of the call).

Every part writes ``parts.json``: {part: "ok" | why it was skipped}. A separate file from
:mod:`xrt.orchestrate.explain_collect` because it runs in the commit's checkout, not the explaining one.
"""

from __future__ import annotations

import os.path
import sys

# Run as a script, Python puts this file's folder first on sys.path: its bisect.py (xrt.orchestrate's)
# would shadow the standard library's for every module imported after this.
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

WARMUP = 10


def _case(args):
    import torch

    from xrt.bench import specs, suite

    spec = specs.get(args.op)
    cfg = suite.parse_config(args.config)
    from xrt.device import default_device

    dev = default_device()
    inputs = spec.make_inputs(suite.parse_shape(args.shape), getattr(torch, args.dtype), dev.torch_device)
    return spec, cfg, dev, inputs


def _settings(args) -> dict:
    import torch

    out: dict = {"op": args.op, "shape": args.shape, "dtype": args.dtype, "provider_requested": args.provider,
                 "config_requested": args.config,
                 "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("XRT_", "TRITON_"))
                         and k not in ("XRT_EXPLAIN_OUT",)},
                 "torch": torch.__version__}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    import xrt

    out["xrt_source"] = str(Path(xrt.__file__).resolve().parent)
    try:
        from xrt.bench import specs, suite

        spec = specs.get(args.op)
        cfg = suite.parse_config(args.config)
        space = getattr(spec, "spaces", {}).get(args.provider)
        out["space"] = space
        from xrt.pytorch import policy

        try:
            out["provider_resolved"] = policy.resolve(args.op, args.provider)
        except Exception as e:  # an op the policy does not know: the requested one runs
            out["provider_resolved"] = f"{args.provider} ({type(e).__name__}: {e})"
        if cfg is not None:
            out["config"], out["config_source"] = cfg, "the benchmark's config parameter"
        elif space:
            from xrt.kernels import spaces

            try:  # what the op's launcher looks up for an input like the case's (xrt.pytorch.ops.kernel_providers)
                from xrt.device import default_device
                from xrt.pytorch.ops import kernel_providers

                x = torch.empty(suite.parse_shape(args.shape), dtype=getattr(torch, args.dtype),
                                device=default_device().torch_device)
                t = kernel_providers.config(args.op, space, x)
                default = getattr(t, "is_default", dict(t) == spaces.default(space))
                out["config"] = dict(t)
                out["config_source"] = (f"default of {space} (xrt/kernels/spaces.py)" if default else
                                        "tuned policy (XRT_TUNED / XRT_KERNEL_POLICY)")
            except Exception as e:  # a commit without this lookup (or its module): the space's default
                out["config"] = spaces.default(space)
                out["config_source"] = f"default of {space} (xrt/kernels/spaces.py; lookup failed: {type(e).__name__})"
        else:
            out["config"], out["config_source"] = None, "the provider has no tuning space"
    except Exception as e:
        out["settings_error"] = f"{type(e).__name__}: {e}"
    return out


def _dump(args, out: Path) -> str:
    import torch

    try:
        from xrt.commands import kernels as kernels_command
    except ImportError as e:
        return f"skipped: this commit has no `xrt kernels dump` ({e})"
    arch = args.arch
    if arch is None:
        arch = "sm_{}{}".format(*torch.cuda.get_device_capability()) if torch.cuda.is_available() else "sm_90"
    d = out / "dump"
    d.mkdir(parents=True, exist_ok=True)
    def public(name: str):  # a commit from before these names were public had them with a leading _
        return getattr(kernels_command, name, None) or getattr(kernels_command, "_" + name)

    try:
        if args.provider == "cuda":
            written = public("dump_cuda")(args.op, d, arch)
        elif args.provider == "triton":
            dtype = args.dtype if args.dtype in public("DTYPES") else "float32"
            written = public("dump_triton")(args.op, d, dtype, arch)
        else:
            return f"skipped: provider {args.provider!r} has no kernels of xrt's own to dump"
    except Exception as e:  # CLIError and friends: the reason in one line
        return f"skipped: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
    (out / "dump.json").write_text(json.dumps({"arch": arch, "written": written}))
    return "ok"


def _trace(args, out: Path) -> str:
    import torch

    if not torch.cuda.is_available():
        return "skipped: no CUDA device (the profiler's kernel list needs a GPU)"
    spec, cfg, dev, inputs = _case(args)
    if dev.kind != "cuda":
        return f"skipped: the default device is {dev.kind}, not CUDA"
    for _ in range(WARMUP):
        spec.call(inputs, args.provider, cfg)
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        spec.call(inputs, args.provider, cfg)
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(out / "trace.json"))
    return "ok"


def _target(args) -> int:
    import torch

    spec, cfg, dev, inputs = _case(args)
    for _ in range(WARMUP):
        spec.call(inputs, args.provider, cfg)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
    spec.call(inputs, args.provider, cfg)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    for name in ("op", "shape", "dtype", "provider", "config"):
        ap.add_argument(f"--{name}", required=True)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--arch", default=None)
    ap.add_argument("--mode", choices=("collect", "target"), default="collect")
    args = ap.parse_args(argv)
    if args.mode == "target":
        return _target(args)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    parts = {}
    try:
        (out / "settings.json").write_text(json.dumps(_settings(args), default=str))
        parts["settings"] = "ok"
    except Exception as e:
        parts["settings"] = f"failed: {type(e).__name__}: {e}"
    for name, fn in (("compiled", _dump), ("profiler", _trace)):
        try:
            parts[name] = fn(args, out)
        except Exception as e:
            parts[name] = f"failed: {type(e).__name__}: {e}"
            (out / f"{name}.error.txt").write_text(traceback.format_exc())
    (out / "parts.json").write_text(json.dumps(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
