"""asv suites for xrt's ops: op × shape × dtype × provider × tuning config, device-timed.

One class per op, built from its :class:`xrt.bench.specs.BenchSpec` by
:func:`xrt.bench.suite.make_suite` (read that docstring for how timing works and why these are
``time_`` benchmarks with a device-time ``timer``). ``XRT_BENCH_PROFILE=quick`` selects the CI
profile (tiny shapes, no CUDA C); ``full`` (the default) the GPU shape sets. Nothing here touches
a device at import: inputs are made in ``setup``.
"""

try:
    # Imported (not initialised: no CUDA call) here so that asv's forkserver loads torch once and
    # every benchmark process forked from it starts with torch already in memory.
    import torch  # noqa: F401
except ImportError:  # pragma: no cover - the suites need torch to run, not to be listed
    pass

from xrt.bench import specs
from xrt.bench.suite import make_suite

_MODULE = __name__.split(".", 1)[-1]  # asv names benchmarks relative to benchmarks/

for _op in sorted(specs.SPECS):
    _cls = "".join(part.capitalize() for part in _op.split("_"))
    globals()[_cls] = make_suite(_op, _cls, _MODULE)
