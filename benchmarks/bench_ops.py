"""asv suites for xrt's ops: op × shape × dtype × provider × tuning config, device-timed.

One class per op, built from its :class:`xrt.bench.specs.BenchSpec` by
:func:`xrt.bench.suite.make_suite` (read that docstring for how timing works and why these are
``time_`` benchmarks with a device-time ``timer``). ``XRT_BENCH_PROFILE=quick`` selects the CI
profile (tiny shapes, no CUDA C); ``full`` (the default) the GPU shape sets. Nothing here touches
a device at import: inputs are made in ``setup``.
"""

from xrt.bench import specs
from xrt.bench.suite import class_name, make_suite

# No torch here: the module's one setup_cache process (xrt.bench.suite.measure_all) imports torch and
# measures; the per-combination processes asv forks only hand its samples on, and start light.
_MODULE = __name__.split(".", 1)[-1]  # asv names benchmarks relative to benchmarks/

for _op in sorted(specs.SPECS):
    _cls = class_name(_op)
    globals()[_cls] = make_suite(_op, _cls, _MODULE)
