"""Small asv results directories for the database tests (schema 1 and 2, plain and parameterized)."""

from __future__ import annotations

import json
import math
from pathlib import Path

COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a", "stats_ci_99_b",
           "stats_q_25", "stats_q_75", "stats_number", "stats_repeat", "samples", "profile"]
NAN = math.nan
PARAMS = [["'a'", "'b'"], ["1", "2"]]

BENCHMARKS = {
    "suite.time_plain": {"name": "suite.time_plain", "type": "time", "unit": "seconds", "params": [],
                         "param_names": [], "version": "v-plain", "code": "def time_plain(): pass"},
    "suite.time_param": {"name": "suite.time_param", "type": "time", "unit": "seconds", "params": PARAMS,
                         "param_names": ["kind", "n"], "version": "v-param",
                         "bytes": [1e9, 2e9, 3e9, 4e9], "flops": 2e12},
    "suite.time_failed": {"name": "suite.time_failed", "type": "time", "unit": "seconds", "params": [],
                          "param_names": [], "version": "v-failed"},
    "suite.track_count": {"name": "suite.track_count", "type": "track", "unit": "items", "params": [],
                          "param_names": [], "version": "v-track"},
}


def v2_results(scale: float = 1.0) -> dict:
    """4 ok + 2 failed + 1 skipped values."""
    s = scale
    return {
        "suite.time_plain": [[0.5 * s], [], "v-plain", 1_700_000_000_000, 1.0, [0.49 * s], [0.51 * s],
                             [0.495 * s], [0.505 * s], [10], [10], [[0.5 * s, 0.49 * s, 0.51 * s]]],
        "suite.time_param": [[1.0 * s, None, NAN, 4.0 * s], PARAMS, "v-param", 1_700_000_001_000, 2.0,
                             [0.9, None, None, 3.9], [1.1, None, None, 4.1], [0.95, None, None, 3.95],
                             [1.05, None, None, 4.05], [1, None, None, 1], [5, None, None, 5],
                             [[1.0, 1.1], None, None, [4.0, 4.1]]],
        "suite.time_failed": [None, [], "v-failed", 1_700_000_002_000, 0.1],
        "suite.track_count": [[42], [], "v-track", 1_700_000_003_000, 0.2],
    }


def v2_file(commit: str, machine: str = "m1", date_ms: int = 1_700_000_000_000, results: dict | None = None,
            **extra) -> dict:
    d = {"commit_hash": commit, "env_name": "virtualenv-py3.11", "date": date_ms,
         "params": {"machine": machine, "python": "3.11"}, "python": "3.11", "requirements": {},
         "env_vars": {}, "result_columns": COLUMNS, "results": v2_results() if results is None else results,
         "durations": {}, "version": 2}
    d.update(extra)
    return d


def v1_file(commit: str, machine: str = "m1", date_ms: int = 1_600_000_000_000) -> dict:
    """Schema 1: a scalar, a dict with params/stats/samples, a failure. 3 ok, 2 failed, 1 skipped."""
    st = {"ci_99": [1.0, 1.2], "q_25": 1.05, "q_75": 1.15, "number": 5, "repeat": 10}
    return {
        "commit_hash": commit, "env_name": "virtualenv-py3.8", "date": date_ms, "python": "3.8",
        "params": {"machine": machine, "python": "3.8"}, "requirements": {},
        "results": {
            "suite.time_plain": 0.6,
            "suite.time_param": {"result": [1.1, None, NAN, 4.1], "params": PARAMS,
                                 "stats": [st, None, None, st], "samples": [[1.1, 1.2], None, None, [4.1]]},
            "suite.time_failed": None,
        },
        "started_at": {"suite.time_plain": 1_600_000_100_000},
        "duration": {"suite.time_plain": 3.0},
        "benchmark_version": {"suite.time_plain": "v-plain", "suite.time_param": "v-param"},
        "version": 1,
    }


def write_json(path: Path, d) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(d))
    return path


def make_results(root: Path, files: dict[str, dict], machines=("m1",), benchmarks: dict | None = None) -> Path:
    """``files``: {"m1/abcdef12-env.json": result dict}. Writes benchmarks.json and machine.json too."""
    write_json(root / "benchmarks.json", {**(BENCHMARKS if benchmarks is None else benchmarks), "version": 2})
    for m in machines:
        write_json(root / m / "machine.json", {"machine": m, "os": "Linux", "arch": "x86_64", "cpu": "test",
                                               "num_cpu": "2", "ram": "8GB", "version": 1})
    for rel, d in files.items():
        write_json(root / rel, d)
    return root


def sha(i: int) -> str:
    return f"{i:040x}"


# ---------------------------------------------------------------- the timing layer's sidecar (X.xrt)

GPU_FACTS = {
    "schema": "xrt-sidecar/1", "machine": "gpuhost-nvidia-h100-80gb-hbm3-0", "written_at": "2025-01-01T00:00:00Z",
    "gpu_model": "NVIDIA H100 80GB HBM3", "device_kind": "cuda", "device_index": 0, "compute_capability": "9.0",
    "driver": "560.35.03", "cuda": "12.6", "torch": "2.5.1", "triton": "3.1.0", "sm_count": 132,
    "l2_bytes": 52428800, "total_memory_bytes": 85520809984, "power_limit_w": 700.0, "max_sm_clock_mhz": 1980,
    "max_mem_clock_mhz": 2619, "cpu_load": {"load1": 0.5, "load5": 0.4, "cores": 32, "load_per_core": 0.016},
    "host": "gpuhost", "profile": "full", "lock_clocks": None,
}


def xrt_case(benchmark: str, params: list[str], samples: list[float], sm: list, nbytes: float, flops: float,
             reasons: list[int] | None = None) -> dict:
    """One ``cases`` entry the way ``xrt.bench.suite.Case.record`` writes it."""
    reasons = reasons or [0] * len(samples)
    return {
        "benchmark": benchmark, "params": params, "op": "square", "bytes": nbytes, "flops": flops, "graph": False,
        "calls_per_sample": 1, "samples_s": samples, "sm_mhz": sm, "mem_mhz": [2619] * len(samples),
        "reasons": reasons, "throttled_share": sum(1 for r in reasons if r) / len(reasons),
        "cycles": [t * m * 1e6 if m else None for t, m in zip(samples, sm)],
        "pilot": {"n": len(samples), "median_s": sorted(samples)[len(samples) // 2]},
    }


def xrt_sidecar(commit: str, result_file: str, cases: list[dict], **facts) -> dict:
    """An ``xrt-sidecar/1`` file as ``xrt.bench.runner._collect`` writes it beside ``result_file``."""
    return {**GPU_FACTS, **facts, "commit": commit, "result_file": result_file, "cases": cases}


def write_xrt(path: Path, d) -> Path:
    """Write a sidecar; ``d`` may be raw text (to write a corrupt one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(d if isinstance(d, str) else json.dumps(d))
    return path
