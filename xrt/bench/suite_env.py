"""The environment ``xrt bench run`` (:mod:`xrt.bench.runner`) hands the asv suites (:mod:`xrt.bench.suite`):
the variables' names, defined once. No imports: the suites read them in asv's benchmark processes."""

SIDECAR_DIR = "XRT_SIDECAR_DIR"  # where each combination's case record (for the .xrt sidecar) goes
PROGRESS_FILE = "XRT_PROGRESS_FILE"  # a line per combination and series, appended; the runner follows it
PROFILE = "XRT_BENCH_PROFILE"  # quick or full
OPS = "XRT_BENCH_OPS"  # the ops the one setup_cache measures, comma-separated ("none": the allocator suite only)
SERIES = "XRT_BENCH_SERIES"  # device, host or both, comma-separated
PAIRS = "XRT_BENCH_PAIRS"  # series:op, comma-separated: of OPS x SERIES, only these (unset: all)
