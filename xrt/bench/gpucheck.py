"""One GPU run that times every memory-bound op x provider beside torch, plus the copy baseline.

    python -m xrt.bench.gpucheck --out DIR [--ops softmax,layernorm] [--sets large]
        [--dtypes bfloat16] [--shapes 2048x32768] [--providers torch,triton,cuda]
        [--sweep-ops layernorm_bwd] [--sweep PARAM=V1/V2,...] [--budget 200] [--no-configs]

Every time here comes from xrt's one timer, :mod:`xrt.bench.timer` (docs/timing.md), so these
tables read the same as the asv suites and ``xrt bench measure``: the "µs" column is
:func:`~xrt.bench.timer.measure`'s median device time (L2 flushed, 2 x the L2, before each
large-shape call; small shapes without the flush, CUDA C included; the batch queued behind a
``torch.cuda._sleep`` so the host cost of a call never shows in the events); the "host µs" column
is :func:`~xrt.bench.timer.measure_host`'s median host time per call (back-to-back calls, no
device wait inside). Until this module moved here from the kernels it had a timer of its own (a
256 MiB flush, a measured sleep), and its tables were not comparable with the suites'.
TB/s = bytes_moved (``xrt.bench.specs``) / time; "% copy" against ``y.copy_(x)`` of 1 GiB fp16,
measured in the same run. After the default-config table, the tuning configs of
``xrt/kernels/spaces.py`` are swept on the large bf16 shapes (or ``--dtypes``' first) until the time
budget runs out, and the best config per (op, provider, shape) is reported, to pick defaults
from; ``--sweep`` keeps the configs whose named parameters take the listed values. A failing
provider writes its error into its row and the run goes on. Writes DIR/kernels.md and
DIR/kernels.json.
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path
from typing import Any

from xrt.bench import specs, timer
from xrt.kernels import defs

OPS = [d.name for d in defs.OPS.values() if d.gpucheck]  # the memory-bound ops (xrt/kernels/defs: gpucheck=True)
QUICK = {"max_time": 0.15}  # the config sweep: shorter per config than the default table
HOST_SAMPLES = 20


def _first(out: Any) -> Any:
    return out[0] if isinstance(out, (tuple, list)) else out


def gpu_time(fn, device: str = "cuda", flush: bool = True, quick: bool = False) -> tuple[float, float]:
    """``(median device ms of fn, median host ms per call)``, both from :mod:`xrt.bench.timer`."""
    m = timer.measure(fn, device, flush_l2=flush, **(QUICK if quick else {}))
    h = timer.measure_host(fn, device, samples=HOST_SAMPLES)
    return m.median_s * 1e3, h.median_s * 1e3


def copy_bandwidth() -> float:
    """TB/s of ``y.copy_(x)`` over 1 GiB of fp16 (read + write counted)."""
    import torch

    bufs = [torch.randn(1 << 29, device="cuda", dtype=torch.float16)]
    bufs.append(torch.empty_like(bufs[0]))
    ms = timer.measure(lambda: bufs[1].copy_(bufs[0]), "cuda").median_s * 1e3
    nbytes = 2 * bufs[0].numel() * bufs[0].element_size()
    bufs.clear()
    torch.cuda.empty_cache()
    return nbytes / (ms * 1e-3) / 1e12


def _err(out: Any, ref: Any) -> float:
    """Max relative error of the first output against torch's (a sanity column, not a test)."""
    a, b = _first(out).double(), _first(ref).double()
    return float(((a - b).abs() / (b.abs() + 1e-2)).max()) if b.numel() else 0.0


def measure_row(op: str, set_name: str, shape, dtype_name: str, provider: str, config: dict | None,
                copy_tbs: float, cache: dict, quick: bool = False, device: str = "cuda") -> dict:
    import torch

    spec = specs.get(op)
    cuda = device.startswith("cuda")
    dtype = getattr(torch, dtype_name)
    row = {"op": op, "set": set_name, "shape": "x".join(map(str, shape)), "dtype": dtype_name,
           "provider": provider, "config": config, "us": None, "tbs": None, "pct_copy": None,
           "host_us": None, "timing": "device" if set_name == "small" else "device, L2 flushed",
           "err_vs_torch": None, "error": None}
    try:
        key = (op, tuple(shape), dtype_name)
        if key not in cache:
            cache.clear()  # one input set alive at a time: large shapes are GiBs
            if cuda:
                torch.cuda.empty_cache()
            args = spec.make_inputs(tuple(shape), dtype, device)
            cache[key] = (args, spec.call(args, "torch", None))
        args, ref = cache[key]
        fn = (lambda: spec.call(args, provider, config))
        out = fn()
        if cuda:
            torch.cuda.synchronize()
        row["err_vs_torch"] = _err(out, ref)
        ms, host_ms = gpu_time(fn, device, flush=set_name != "small", quick=quick)
        esize = torch.empty((), dtype=dtype).element_size()
        tbs = spec.bytes_moved(tuple(shape), esize) / (ms * 1e-3) / 1e12
        row.update(us=round(ms * 1e3, 2), tbs=round(tbs, 3), pct_copy=round(100 * tbs / copy_tbs, 1),
                   host_us=round(host_ms * 1e3, 1))
    except Exception as e:  # noqa: BLE001  (a failing provider is a row, not the end of the run)
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        row["traceback"] = traceback.format_exc()[-2000:]
    return row


def _table(rows: list[dict], title: str) -> str:
    head = ("| op | set | shape | dtype | provider | config | µs | TB/s | % copy | host µs | "
            "max rel err vs torch | note |")
    lines = [f"### {title}", "", head, "|" + "---|" * 12]
    for r in rows:
        cfg = "default" if not r["config"] else ", ".join(f"{k}={v}" for k, v in r["config"].items())
        err = "" if r["err_vs_torch"] is None else f"{r['err_vs_torch']:.2g}"
        note = r["error"] or ""
        host = r.get("host_us")
        lines.append(f"| {r['op']} | {r['set']} | {r['shape']} | {r['dtype']} | {r['provider']} | {cfg} | "
                     f"{r['us'] if r['us'] is not None else '-'} | {r['tbs'] if r['tbs'] is not None else '-'} | "
                     f"{r['pct_copy'] if r['pct_copy'] is not None else '-'} | "
                     f"{host if host is not None else '-'} | {err} | {note} |")
    return "\n".join(lines) + "\n"


def _keep(cfg: dict, sweep: dict[str, list[str]]) -> bool:
    """``cfg`` takes one of the listed values (compared as text) of every parameter ``sweep`` names."""
    return all(str(cfg[k]) in vals for k, vals in sweep.items() if k in cfg)


def _parse_sweep(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for item in filter(None, (t.strip() for t in text.split(","))):
        if "=" not in item:
            raise SystemExit(f"--sweep item {item!r} must look like PARAM=V1/V2")
        k, v = item.split("=", 1)
        out[k.strip()] = [x.strip() for x in v.split("/")]
    return out


# Over the complexity bound (pyproject.toml, C901): being split into named steps separately.
def main(argv: list[str] | None = None) -> int:  # noqa: C901
    p = argparse.ArgumentParser(prog="python -m xrt.bench.gpucheck", description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--sets", default="large,small", help="shape sets of the default-config table")
    p.add_argument("--dtypes", default="", help="dtypes (default: each op's); the sweep takes bfloat16 if listed")
    p.add_argument("--shapes", default="", help="only these shapes, e.g. 4096x16384,2048x32768")
    p.add_argument("--providers", default="", help="only these providers (default: each op's)")
    p.add_argument("--sweep-ops", default="", help="ops whose tuning configs are swept (default: --ops)")
    p.add_argument("--sweep", default="", help="keep the configs with these values: path=tiled/rows,num_warps=4/8")
    p.add_argument("--budget", type=float, default=210.0, help="seconds for the whole run (configs stop first)")
    p.add_argument("--no-configs", action="store_true", help="skip the tuning-config sweep")
    args = p.parse_args(argv)

    import torch

    from xrt.kernels import spaces

    if not torch.cuda.is_available():
        raise SystemExit("gpucheck needs a CUDA GPU")
    t0 = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    split = (lambda t: [o.strip() for o in t.split(",") if o.strip()])
    ops, sets, only_dtypes = split(args.ops), split(args.sets), split(args.dtypes)
    only_shapes, only_providers = set(split(args.shapes)), split(args.providers)
    sweep_ops = split(args.sweep_ops) or ops
    sweep = _parse_sweep(args.sweep)
    shape_ok = (lambda shape: not only_shapes or "x".join(map(str, shape)) in only_shapes)
    dev = torch.cuda.get_device_name()
    copy_tbs = copy_bandwidth()
    print(f"device: {dev}; copy bandwidth (1 GiB fp16 y.copy_(x)): {copy_tbs:.3f} TB/s", flush=True)
    rows: list[dict] = []
    cache: dict = {}
    for op in ops:
        spec = specs.get(op)
        provs = [q for q in spec.providers if not only_providers or q in only_providers]
        for set_name in ("large", "small"):
            if set_name not in sets:
                continue
            dtypes = [d for d in spec.dtypes if not only_dtypes or d in only_dtypes]
            dtypes = dtypes if set_name == "large" else dtypes[:1]
            for shape in spec.shapes[set_name]:
                if not shape_ok(shape):
                    continue
                for dt in dtypes:
                    for prov in provs:
                        r = measure_row(op, set_name, shape, dt, prov, None, copy_tbs, cache)
                        rows.append(r)
                        print(_table([r], "").splitlines()[-1], flush=True)
    cache.clear()
    tuned: list[dict] = []
    best: list[dict] = []
    if not args.no_configs:
        for op in sweep_ops:
            spec = specs.get(op)
            pref = [d for d in ("bfloat16", *only_dtypes, *spec.dtypes) if d in spec.dtypes
                    and (not only_dtypes or d in only_dtypes)]
            dt = pref[0] if pref else spec.dtypes[0]
            for shape in spec.shapes["large"]:
                if not shape_ok(shape):
                    continue
                for prov, key in spec.spaces.items():
                    if only_providers and prov not in only_providers:
                        continue
                    cands = []
                    for cfg in spaces.configs(key):
                        if not _keep(cfg, sweep):
                            continue
                        if time.monotonic() - t0 > args.budget:
                            break
                        r = measure_row(op, "large", shape, dt, prov, cfg, copy_tbs, cache, quick=True)
                        tuned.append(r)
                        if r["tbs"] is not None:
                            cands.append(r)
                    if cands:
                        best.append(max(cands, key=lambda r: r["tbs"]))
                        print(_table([best[-1]], "").splitlines()[-1] + " (best)", flush=True)
        if time.monotonic() - t0 > args.budget:
            print(f"config sweep stopped at the {args.budget:.0f} s budget", flush=True)
    summary = (f"Copy baseline (1 GiB fp16, `y.copy_(x)`): **{copy_tbs:.3f} TB/s**. "
               f"torch {torch.__version__}; run took {time.monotonic() - t0:.0f} s. "
               "µs: device time (xrt.bench.timer.measure); host µs: host time per call "
               "(xrt.bench.timer.measure_host); docs/timing.md defines both.")
    md = [f"# xrt kernels on {dev}", "", summary, "",
          _table(rows, "Default configs, side by side with torch")]
    if best:
        md += ["", _table(best, "Best tuning config per (op, provider, shape)")]
    if tuned:
        md += ["", _table(tuned, "Every swept config")]
    text = "\n".join(md)
    (args.out / "kernels.md").write_text(text)
    (args.out / "kernels.json").write_text(json.dumps({"device": dev, "copy_tbs": copy_tbs, "rows": rows,
                                                        "configs": tuned, "best": best}, indent=1, default=str))
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
