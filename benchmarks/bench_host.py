"""asv suites of the host cost of xrt's ops: the twin of ``bench_ops``, same classes and params.

``bench_host.<Op>.time_host`` is the host time per call of the combination whose device time is
``bench_ops.<Op>.time_op`` (docs/timing.md, "Host time"): wall time of back-to-back calls with no
device wait inside, built by :func:`xrt.bench.suite.make_host_suite`. A module of its own, so that
its processes never build the device series' case (the pilot measurement) and vice versa.
"""

from xrt.bench import specs
from xrt.bench.suite import class_name, make_host_suite

# No torch imported here: see bench_ops.
_MODULE = __name__.split(".", 1)[-1]  # asv names benchmarks relative to benchmarks/

for _op in sorted(specs.SPECS):
    _cls = class_name(_op)
    globals()[_cls] = make_host_suite(_op, _cls, _MODULE)
