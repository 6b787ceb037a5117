"""The auto-tuner: search a kernel's tuning space on this machine, keep the best configs.

``xrt tune OP --provider P --shape S --dtype D`` for one problem:

1. :mod:`xrt.tune.search` picks the candidates from the space in ``xrt/kernels/spaces.py`` (the whole
   grid, or the default plus a seeded random sample of ``--budget``);
2. the compile pool (``--jobs`` worker processes at once) runs each candidate once: that compiles
   it (Triton's and pycuda's caches are on disk, so the timing phase finds it compiled) and checks
   its output against the torch reference. A wrong result is rejected, never timed;
3. one timing worker per GPU times the survivors with :func:`xrt.bench.timer.measure`;
4. the top ``--top-k`` are written to ``results/tuned/<op>.json``, which the asv suites time as
   extra configs and :meth:`KernelPolicy.load_tuned` / ``XRT_TUNED`` feed to the ops.

Every worker is its own process (:mod:`xrt.tune.worker`): a config that crashes it (a bad launch,
an illegal address, a hang past ``--timeout``) is recorded as such, the worker is restarted and
the search goes on. Every result is appended to a journal (:mod:`xrt.tune.journal`) as it comes,
so an interrupted search resumes where it stopped.
"""
