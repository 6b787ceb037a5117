"""``python -m xrt.tune.worker``: one crash-isolated tuning process for one problem.

It makes the inputs and the torch reference once, says ``{"ready": ...}``, then reads one config
(JSON) a line from stdin and answers one JSON line each:

* ``--mode compile``: run the config once (compiling it) and check its output: ``compiled``,
  ``wrong`` (with the error against the reference) or ``error``;
* ``--mode build``: compile the config's Triton kernels without running anything on the device
  (:func:`xrt.kernels.triton.launch.compile_only`; inputs allocated, never written; no reference):
  ``compiled`` or ``error``. The tuner uses it to compile while another process times on the same
  GPU; the check then happens in the timing worker. It runs at a lower CPU priority (``BUILD_NICE``)
  so that, on a host whose cores the build pool fills, the timing workers get theirs first;
* ``--mode time``: the same check, then :func:`xrt.bench.timer.measure`: ``timed`` with the median.

The answers go to the stdout this process started with; everything else anything prints
(Triton, torch, pycuda, C libraries) is sent to stderr, so it cannot corrupt the protocol. If a
config kills this process or hangs it, the parent sees no answer and records a crash / timeout.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
import traceback
from typing import Any

# How much nicer than the tuner a build worker runs (os.nice): it yields the CPU to the timing
# workers, whose launches and synchronizations are on the timed path, whenever both want it.
BUILD_NICE = 10

# Largest error against the torch reference, relative to the reference's largest magnitude.
TOLERANCE = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 2e-2}


def _tensors(out: Any) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    return [t for t in out if isinstance(t, torch.Tensor)]


def error_vs_reference(out: Any, ref: Any) -> float:
    """max |out - ref| / max |ref| over the outputs (inf when shapes differ or values are not finite).

    A launcher may return more than the op (layernorm's forward also returns the mean and rstd it
    saves for the backward): the outputs the reference has are compared.
    """
    import torch

    worst = 0.0
    outs, refs = _tensors(out), _tensors(ref)
    if len(outs) < len(refs) or not refs:
        return float("inf")
    outs = outs[:len(refs)]
    for o, r in zip(outs, refs):
        if o.shape != r.shape:
            return float("inf")
        o64, r64 = o.detach().double(), r.detach().double()
        if not torch.isfinite(o64).all():
            return float("inf")
        scale = r64.abs().max().item() or 1.0
        worst = max(worst, (o64 - r64).abs().max().item() / scale)
    return worst


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xrt.tune.worker")
    p.add_argument("--op", required=True)
    p.add_argument("--provider", required=True)
    p.add_argument("--shape", required=True)
    p.add_argument("--dtype", required=True)
    p.add_argument("--mode", choices=["compile", "build", "time"], required=True)
    p.add_argument("--graph", choices=["auto", "on", "off"], default="auto")
    p.add_argument("--target-noise", type=float, default=0.005)
    a = p.parse_args(argv)
    from xrt.tune.timeline import process_start

    stamps = {"start": process_start()}  # wall clock; the tuner puts them on its timeline
    if a.mode == "build":
        os.nice(BUILD_NICE)  # before its imports, which are its heaviest work with a warm compile cache
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever else prints goes to stderr
    sys.stdout = sys.stderr

    def say(rec: dict[str, Any]) -> None:
        proto.write(json.dumps(rec) + "\n")
        proto.flush()

    try:
        import torch

        from xrt.bench import specs, suite, timer
        from xrt.device import default_device

        stamps["imports"] = time.time()
        spec = specs.get(a.op)
        dev = default_device()
        shape = suite.parse_shape(a.shape)
        dtype = getattr(torch, a.dtype)
        if a.mode == "build":
            from xrt.kernels.triton import launch

            args = _unwritten_inputs(spec, shape, dtype, dev.torch_device)
            launch.compile_only(True)
        else:
            args = spec.make_inputs(shape, dtype, dev.torch_device)
        from xrt.pytorch.ops import providers

        prov = providers(a.op).get(a.provider)  # as the suites check (layernorm_bwd is no policy op)
        why = "not registered" if prov is None else prov.missing(args[0])
        if why:
            raise RuntimeError(f"{a.op}[{a.provider}] cannot run here: {why}")
        ref = None if a.mode == "build" else spec.call(args, "torch", None)
        small = a.shape in {suite.shape_key(s) for s in spec.shapes.get("small", [])}
        graph = {"on": True, "off": False}.get(a.graph, dev.kind == "cuda" and a.provider != "cuda" and small)
    except Exception as e:
        say({"ready": False, "error": f"{type(e).__name__}: {e}"})
        return 2
    stamps["ready"] = time.time()
    say({"ready": True, "device": dev.torch_device, "uuid": dev.uuid, "graph": graph, "pid": os.getpid(),
         "t": stamps})

    for line in sys.stdin:
        if not line.strip():
            continue
        cfg = json.loads(line)
        rec: dict[str, Any] = {"config": cfg}
        try:
            out = spec.call(args, a.provider, cfg)
            if a.mode == "build":
                say({**rec, "status": "compiled"})
                continue
            if dev.kind == "cuda":
                torch.cuda.synchronize()
            err = error_vs_reference(out, ref)
            rec["max_rel_err"] = err
            if not err <= TOLERANCE.get(a.dtype, 1e-3):
                rec["status"] = "wrong"
            elif a.mode == "compile":
                rec["status"] = "compiled"
            else:
                m = timer.measure(functools.partial(spec.call, args, a.provider, cfg), dev.torch_device,
                                  graph=graph, target_noise=a.target_noise)
                s = m.summary()
                rec.update(status="timed", median_s=s["median_s"], rel_noise=s["rel_noise"], n=s["n"],
                           throttled_share=s["throttled_share"], median_sm_mhz=s["median_sm_mhz"], graph=graph)
        except Exception as e:
            rec["status"] = "error"
            rec["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            traceback.print_exc()
            if dev.kind == "cuda" and not context_alive(torch):
                # An illegal address or a trap is sticky: every later call in this process would fail
                # too. Say so as a crash of this config and exit; the parent starts a fresh worker.
                rec["status"] = "crash"
                rec["error"] = f"the CUDA context is lost ({rec['error']}); the worker exits"
                say(rec)
                return 3
        say(rec)
    return 0


def _unwritten_inputs(spec: Any, shape: Any, dtype: Any, device: str) -> tuple:
    """The spec's inputs with their shapes, strides and dtypes on ``device``, allocated but never
    written: made on the meta device (or the CPU where a spec needs values), so that nothing runs
    on the GPU."""
    import torch

    try:
        made = spec.make_inputs(shape, dtype, "meta")
    except Exception:  # noqa: BLE001 - a spec that reads its values: make them on the CPU instead
        made = spec.make_inputs(shape, dtype, "cpu")
    return tuple(torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=device)
                 if isinstance(t, torch.Tensor) else t for t in made)


def context_alive(torch: Any) -> bool:
    """False when the CUDA context of this process is unusable (a sticky error such as an illegal address)."""
    try:
        torch.cuda.synchronize()
        torch.ones(1, device="cuda").add_(1).item()
    except Exception:  # noqa: BLE001 - any failure here means the context cannot run the next config
        return False
    return True


if __name__ == "__main__":
    sys.exit(main())
