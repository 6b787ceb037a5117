"""asv suites of the host cost of xrt's ops under ``torch.compile``: the twin of ``bench_host``.

``bench_compiled.<Op>.time_compiled`` is the host time per call of the op called from a
``torch.compile``'d function (``fullgraph=True``, static shapes), same classes and params as
``bench_ops`` (docs/timing.md, "Host time under torch.compile"), built by
:func:`xrt.bench.suite.make_compiled_suite`. Measured at the default config only; ops whose call is
not one op's (a backward alone, a model's step) are skipped with the reason.
"""

from xrt.bench import specs
from xrt.bench.suite import class_name, make_compiled_suite

# No torch imported here: see bench_ops.
_MODULE = __name__.split(".", 1)[-1]  # asv names benchmarks relative to benchmarks/

for _op in sorted(specs.SPECS):
    _cls = class_name(_op)
    globals()[_cls] = make_compiled_suite(_op, _cls, _MODULE)
