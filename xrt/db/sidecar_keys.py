"""The ``.xrt`` sidecar's names, defined once: written by ``xrt.bench``, read by ``xrt.db``.

``xrt bench run`` leaves ``X.xrt`` beside each asv result file ``X.json``: the GPU and software
facts of the run (``xrt.bench.machine.sidecar``), the run's commit and result file, and one
``cases`` entry per benchmark x parameter combination (``xrt.bench.suite.Case.record``), put
together by ``xrt.bench.runner``. ``xrt.db.asv_files.read_sidecar`` reads it. Stdlib only and no
imports: the bench side imports this without pulling in the database layer.
"""

from __future__ import annotations

SCHEMA = "xrt-sidecar/1"  # the value of the SCHEMA_KEY
SUFFIX = ".xrt"  # X.json -> X.xrt (what the timing layer writes)
LEGACY_SUFFIX = ".xrt.json"  # X.json -> X.xrt.json (the older, hand-written form; still read)
SUFFIXES = (SUFFIX, LEGACY_SUFFIX)  # looked for in this order; the first found is the sidecar

# top level
SCHEMA_KEY = "schema"
COMMIT = "commit"
RESULT_FILE = "result_file"
CASES = "cases"

# one entry of CASES
CASE_BENCHMARK = "benchmark"  # the asv benchmark name
CASE_PARAMS = "params"  # its parameter values, as asv's strings
CASE_BYTES = "bytes"
CASE_FLOPS = "flops"
# a model's step (device series): how many tokens / images one call processes, and which (the noun)
CASE_ITEMS = "items"
CASE_ITEM_UNIT = "item_unit"
CASE_SAMPLES = "samples_s"  # seconds per sample
CASE_SM_MHZ = "sm_mhz"  # SM clock per sample
CASE_MEM_MHZ = "mem_mhz"  # memory clock per sample
CASE_CYCLES = "cycles"  # per sample: time x SM clock
CASE_THROTTLED_SHARE = "throttled_share"
# host series: per sample, the host seconds per call of the machine's reference call, timed in turn
# with the op's sample in the same process (xrt.bench.suite.HostCase); the gate judges op / reference
CASE_REF_SAMPLES = "ref_samples_s"

# what the reader takes from a case (the writer must write these)
CASE_KEYS_READ = (CASE_BENCHMARK, CASE_PARAMS, CASE_BYTES, CASE_FLOPS, CASE_SAMPLES, CASE_SM_MHZ, CASE_MEM_MHZ,
                  CASE_CYCLES, CASE_THROTTLED_SHARE, CASE_REF_SAMPLES, CASE_ITEMS, CASE_ITEM_UNIT)
