"""The .xrt sidecar's names are defined once (xrt.db.sidecar_keys): the bench writer and the db reader agree."""

from __future__ import annotations

import ast
from pathlib import Path

from xrt.db import asv_files, sidecar_keys

ROOT = Path(__file__).resolve().parents[1]


def test_the_names_files_on_disk_already_use():
    # files written before the names moved here must still read
    assert (sidecar_keys.SCHEMA == "xrt-sidecar/1" and sidecar_keys.SUFFIXES == (".xrt", ".xrt.json")
            and sidecar_keys.CASES == "cases")
    assert (asv_files.SIDECAR_SUFFIXES is sidecar_keys.SUFFIXES
            and asv_files.SIDECAR_SUFFIX == sidecar_keys.LEGACY_SUFFIX)


def _record_keys() -> set[str]:
    """The keys the cases' ``record`` methods of xrt.bench.suite write (Case, HostCase; read from the
    source, the keys of ``**{...}`` parts included: no GPU needed)."""
    tree = ast.parse((ROOT / "xrt" / "bench" / "suite.py").read_text())
    keys: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "record":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Return) and isinstance(sub.value, ast.Dict):
                    keys |= {k.value for d in ast.walk(sub.value) if isinstance(d, ast.Dict)
                             for k in d.keys if isinstance(k, ast.Constant)}
    if not keys:
        raise AssertionError("Case.record not found in xrt/bench/suite.py")
    return keys


def test_the_case_writer_writes_every_key_the_reader_reads():
    keys = _record_keys()
    assert set(sidecar_keys.CASE_KEYS_READ) <= keys, set(sidecar_keys.CASE_KEYS_READ) - keys
    assert sidecar_keys.CASE_SAMPLES in keys


def test_bench_and_db_import_the_one_definition():
    for rel in ("xrt/bench/runner.py", "xrt/bench/machine.py", "xrt/db/asv_files.py"):
        src = (ROOT / rel).read_text()
        imported = {a.name for n in ast.walk(ast.parse(src))
                    if isinstance(n, ast.ImportFrom) and n.module == "xrt.db" for a in n.names}
        assert "sidecar_keys" in imported, rel
        assert '"xrt-sidecar/1"' not in src and '".xrt"' not in src, rel


def test_reader_takes_a_case_written_with_these_names():
    case = {sidecar_keys.CASE_BENCHMARK: "b.time_x", sidecar_keys.CASE_PARAMS: ["1"], sidecar_keys.CASE_BYTES: 8.0,
            sidecar_keys.CASE_FLOPS: 2.0, sidecar_keys.CASE_SM_MHZ: [1000, 1000],
            sidecar_keys.CASE_MEM_MHZ: [2000, 2000], sidecar_keys.CASE_CYCLES: [5.0, 7.0],
            sidecar_keys.CASE_THROTTLED_SHARE: 0.5}
    facts, cases, problems = asv_files.read_sidecar({sidecar_keys.SCHEMA_KEY: sidecar_keys.SCHEMA,
                                                     sidecar_keys.CASES: [case]})
    assert problems == [] and facts[sidecar_keys.SCHEMA_KEY] == sidecar_keys.SCHEMA
    f = cases[("b.time_x", ("1",))]
    assert (f.bytes, f.flops, f.sm_mhz, f.cycles_median, f.throttled_share) == (8.0, 2.0, 1000, 6.0, 0.5)
