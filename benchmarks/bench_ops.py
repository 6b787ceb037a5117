"""asv suites for xrt's ops: op × shape × dtype × provider × tuning config, device-timed.

One class per op, built from its :class:`xrt.bench.specs.BenchSpec` by
:func:`xrt.bench.suite.make_suite` (read that docstring for how timing works and why these are
``time_`` benchmarks with a device-time ``timer``). ``XRT_BENCH_PROFILE=quick`` selects the CI
profile (tiny shapes, no CUDA C); ``full`` (the default) the GPU shape sets. Nothing here touches
a device at import: inputs are made in ``setup``.
"""

from xrt.bench import specs
from xrt.bench.suite import make_suite, preload

# Imported (not initialised: no CUDA call) here so that asv's forkserver loads torch, torch._dynamo
# and xrt.pytorch once and every benchmark process forked from it starts with them in memory.
preload()

_MODULE = __name__.split(".", 1)[-1]  # asv names benchmarks relative to benchmarks/

for _op in sorted(specs.SPECS):
    _cls = "".join(part.capitalize() for part in _op.split("_"))
    globals()[_cls] = make_suite(_op, _cls, _MODULE)
