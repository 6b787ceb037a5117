"""Where the seconds of one suite combination go, on this machine (docs/timing.md, "Suite cost").

    TRITON_INTERPRET=1 python scripts/suite_cost.py [--profile quick] [--json OUT]

Times, separately: a bare Python process start; importing torch, torch._dynamo, triton and
xrt.pytorch in a fresh process (what asv's forkserver pays once and a spawned process pays every
time); a fork of a process that holds them (what asv pays per combination with forkserver); and,
per combination of the profile's device and host series: building the inputs, the first call
(compile / load), the timer's measurement (uncapped, as the pre-#15 pilot ran), the clock's
calibration, a second pass of single synchronised calls as many as the suites' sample count (what
asv's re-sampling cost before issue #15; the suites no longer do it) and the host measurement.
Nothing here is asv's own code: it is the cost of our pieces (docs/timing.md, "Suite cost").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from xrt.bench import suite_env


def _spawn(code: str, n: int = 3) -> float:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def _fork(n: int = 10) -> float:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="quick", choices=["quick", "full"])
    ap.add_argument("--ops", help="comma-separated ops [all]")
    ap.add_argument("--json", help="write the breakdown here")
    args = ap.parse_args(argv)
    os.environ[suite_env.PROFILE] = args.profile
    res: dict = {"machine": f"{os.cpu_count()} cores", "profile": args.profile}
    base = _spawn("pass")
    res["process_start_s"] = base
    res["import_torch_s"] = _spawn("import torch") - base
    res["import_torch_dynamo_s"] = _spawn("import torch, torch._dynamo") - base - res["import_torch_s"]
    res["import_triton_s"] = _spawn("import torch, triton") - base - res["import_torch_s"]
    res["import_xrt_pytorch_s"] = _spawn("import torch, torch._dynamo, xrt.pytorch") - base - res["import_torch_s"] \
        - res["import_torch_dynamo_s"]
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401

    import xrt.pytorch  # noqa: F401
    from xrt.bench import specs, suite, timer
    from xrt.device import default_device

    res["fork_loaded_process_s"] = _fork()
    dev = default_device()
    rows = []
    ops = args.ops.split(",") if args.ops else sorted(specs.SPECS)
    for op in ops:
        spec = specs.get(op)
        params, _ = suite.params_for(op, args.profile)
        for shape in params[0]:
            for dtype in params[1]:
                for provider in params[2]:
                    for config in params[3]:
                        row = {"op": op, "params": [shape, dtype, provider, config]}
                        t0 = time.perf_counter()
                        inputs = spec.make_inputs(suite.parse_shape(shape), getattr(torch, dtype), dev.torch_device)
                        row["inputs_s"] = time.perf_counter() - t0
                        try:
                            spec.runnable(inputs, provider)
                        except Exception as e:  # noqa: BLE001 - an asv skip
                            row["skipped"] = str(e)
                            rows.append(row)
                            continue
                        cfg = suite.parse_config(config)
                        fn = lambda s=spec, a=inputs, p=provider, c=cfg: s.call(a, p, c)  # noqa: E731
                        t0 = time.perf_counter()
                        fn()
                        row["first_call_s"] = time.perf_counter() - t0
                        t0 = time.perf_counter()
                        m = timer.measure(fn, dev.torch_device)
                        row["measure_s"] = time.perf_counter() - t0
                        row["measure_n"] = m.n
                        clock = timer.Clock(dev.torch_device)
                        t0 = time.perf_counter()
                        clock.calibrate(fn)
                        row["calibrate_s"] = time.perf_counter() - t0
                        # What asv's sampling of a device-time series costs when it calls the op once per
                        # sample (before): n single calls with a sync each.
                        n = min(suite.MAX_ASV_SAMPLES, max(10, m.n))
                        t0 = time.perf_counter()
                        for _ in range(n):
                            clock.batch(fn, 1)
                        row["resample_s"] = time.perf_counter() - t0
                        t0 = time.perf_counter()
                        h = timer.measure_host(fn, dev.torch_device, samples=suite.HOST_SAMPLES)
                        row["host_measure_s"] = time.perf_counter() - t0
                        row["host_n"] = h.n
                        rows.append(row)
                        print(f"{op} {' '.join(row['params'])}: inputs {row['inputs_s']:.3f} s, first call "
                              f"{row['first_call_s']:.3f} s, measure {row['measure_s']:.3f} s ({m.n} samples), "
                              f"asv re-sampling {row['resample_s']:.3f} s, host {row['host_measure_s']:.3f} s",
                              file=sys.stderr, flush=True)
    res["combinations"] = rows
    ran = [r for r in rows if "skipped" not in r]
    keys = ("inputs_s", "first_call_s", "measure_s", "calibrate_s", "resample_s", "host_measure_s")
    res["totals_s"] = {k: sum(r.get(k, 0.0) for r in rows) for k in keys}
    res["measured"], res["skipped"] = len(ran), len(rows) - len(ran)
    print(json.dumps({k: v for k, v in res.items() if k != "combinations"}, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
