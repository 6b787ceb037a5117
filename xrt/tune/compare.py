"""``python -m xrt.tune.compare OP --tuned FILE --shape S [--shape S ...]``: the op with and without
the tuner's configs, side by side in one process (the policy path users get from ``XRT_TUNED``).

Prints a Markdown table: per shape and provider, the median with the default config and with the
tuned one (both through ``xrt.pytorch.ops``), GB/s from the bytes the op moves, and the config used.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xrt.tune.compare")
    p.add_argument("op")
    p.add_argument("--tuned", required=True, help="a tuned-config file or folder (what XRT_TUNED takes)")
    p.add_argument("--shape", action="append", required=True)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--provider", action="append", help="[every provider with a tuning space]")
    a = p.parse_args(argv)

    import torch

    from xrt.bench import specs, suite, timer
    from xrt.device import default_device
    from xrt.pytorch.ops.kernel_providers import config
    from xrt.pytorch.policy import TUNED_ENV

    spec = specs.get(a.op)
    dev = default_device()
    dtype = getattr(torch, a.dtype)
    print(f"{a.op} {a.dtype} on {dev.name}: default config vs XRT_TUNED={a.tuned}")
    print("| shape | provider | default (us) | GB/s | tuned (us) | GB/s | tuned config |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    before = os.environ.get(TUNED_ENV)
    try:
        for key in a.shape:
            shape = suite.parse_shape(key)
            args = spec.make_inputs(shape, dtype, dev.torch_device)
            nbytes = spec.bytes_moved(shape, args[0].element_size())
            for prov in a.provider or sorted(spec.spaces):
                row = []
                for tuned in (None, a.tuned):
                    if tuned:
                        os.environ[TUNED_ENV] = tuned
                    else:
                        os.environ.pop(TUNED_ENV, None)
                    cfg = config(a.op, spec.spaces[prov], args[0])
                    m = timer.measure(functools.partial(spec.call, args, prov, None), dev.torch_device)
                    row.append((m.median_s, cfg))
                (t0, _), (t1, cfg) = row
                print(f"| {key} | {prov} | {t0 * 1e6:.2f} | {nbytes / t0 / 1e9:.0f} | {t1 * 1e6:.2f} | "
                      f"{nbytes / t1 / 1e9:.0f} | {cfg} |")
    finally:  # leave the caller's environment as it was
        if before is None:
            os.environ.pop(TUNED_ENV, None)
        else:
            os.environ[TUNED_ENV] = before
    return 0


if __name__ == "__main__":
    sys.exit(main())
