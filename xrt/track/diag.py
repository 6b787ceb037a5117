"""``xrt regressions show ID``: the likely causes of one step, as a checklist.

First what changed between the two runs other than code (the runs' stored facts: driver, CUDA,
torch, Triton, Python, GPU model, tuning profile / policy / clock locking, SM clock, throttle
share, CPU load), then the op-specific checks of the CNN tuning checklist (docs/kernels.md) in the words and order of
:mod:`xrt.bench.diag` (memory format and NCHW↔NHWC round trips, layout / access-pattern settings,
tile and shared-memory size against the shape, first-step compilation), judged from what the
database holds, with the ``xrt diag`` command that checks them live on the GPU.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

from xrt.bench.diag import check_tiles, render  # noqa: F401  (render: re-exported)
from xrt.bench.diag_check import INFO, OK, WARN, Check
from xrt.bench.suite import SERIES
from xrt.db.store import Connection

VERSION_KEYS = ("driver", "cuda", "torch", "triton", "python")
SETTING_KEYS = re.compile(r"polic|tun|config|profile|lock_clocks|env|XRT_|TRITON_", re.I)
IGNORED_FACTS = {"written_at", "host", "cpu_load", "machine", "schema", "device_index"}


def _runs(con: Any, machine: str, commit: str) -> dict:
    keys = [*VERSION_KEYS, "gpu_model", "sm_clock_mhz", "throttle_share", "facts"]
    row = con.execute(f"SELECT {', '.join(keys)} FROM runs WHERE machine = ? AND commit_hash = ? "
                      "ORDER BY run_id DESC LIMIT 1", [machine, commit]).fetchall()
    if not row:
        return {}
    d = dict(zip(keys, row[0]))
    try:
        d["facts"] = json.loads(d.get("facts") or "{}") or {}
    except (TypeError, ValueError):
        d["facts"] = {}
    return d


def _result(con: Any, rec: Any, commit: str) -> dict:
    keys = ["samples", "sm_mhz", "throttled_share", "cycles_median"]
    row = con.execute(f"SELECT {', '.join(keys)} FROM results WHERE machine = ? AND commit_hash = ? AND "
                      "benchmark = ? AND param_key = ? LIMIT 1",
                      [rec.machine, commit, rec.benchmark, rec.param_key]).fetchall()
    return dict(zip(keys, row[0])) if row else {}


def _changed(a: dict, b: dict, keys) -> list[str]:
    return [f"{k} {a.get(k)!s} -> {b.get(k)!s}" for k in keys if a.get(k) != b.get(k)]


def _flat_settings(facts: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in facts.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat_settings(v, name + "."))
        elif SETTING_KEYS.search(name) and k not in IGNORED_FACTS:
            out[name] = v
    return out


def _load(facts: dict) -> float | None:
    v = facts.get("cpu_load")
    if isinstance(v, dict):
        v = v.get("load_per_core")
    return float(v) if isinstance(v, (int, float)) else None


def _num(v: float | None) -> str:
    """A load for people: two decimals (1.33, not 1.32763671875), as the run's own check prints it."""
    return "not recorded" if v is None else f"{v:.2f}"


def _unquote(p: str) -> str:
    return p[1:-1] if len(p) >= 2 and p[0] == p[-1] and p[0] in "'\"" else p


def op_params(benchmark: str, params: list[str]) -> dict[str, Any]:
    """The op and its (shape, dtype, provider, config) from an ``xrt`` asv name and params: any of
    an op's series (:data:`xrt.bench.suite.SERIES`: ``bench_ops.<Op>.time_op`` and its host and
    compiled twins)."""
    methods = "|".join(method for _, method in SERIES.values())
    m = re.search(rf"\.([A-Z][A-Za-z0-9]*)\.(?:{methods})$", benchmark)
    if not m or len(params) != 4:
        return {}
    op = re.sub(r"(?<!^)([A-Z])", r"_\1", m.group(1)).lower()
    shape, dtype, provider, config = (_unquote(p) for p in params)
    return {"op": op, "shape": shape, "dtype": dtype, "provider": provider, "config": config}


def checklist(con: Connection, rec: Any) -> list[Check]:
    return checklists(con, [rec])[0]


def checklists(con: Connection, recs: list[Any]) -> list[list[Check]]:
    """The checklist of each record, on the command's connection (runs' facts read once per run)."""
    memo: dict[tuple[str, str], dict] = {}

    def runs(con: Any, machine: str, commit: str) -> dict:
        if (machine, commit) not in memo:
            memo[machine, commit] = _runs(con, machine, commit)
        return memo[machine, commit]

    return [_checklist(rec, runs(con, rec.machine, rec.previous_commit), runs(con, rec.machine, rec.commit),
                       _result(con, rec, rec.previous_commit), _result(con, rec, rec.commit)) for rec in recs]


def _checklist(rec: Any, before: dict, after: dict, rb: dict, ra: dict) -> list[Check]:
    checks = [Check("step", INFO, f"{rec.kind} {rec.benchmark} [{rec.param_key or '-'}] on {rec.machine}: "
                    f"{rec.before:.4g} -> {rec.after:.4g} ({rec.ratio:.3f}x, p={rec.p_value:.1e}) at "
                    f"{rec.commit[:10]} (previous {rec.previous_commit[:10]})")]
    if not before or not after:
        checks.append(Check("runs", WARN, "the runs of the two commits are not both in the database"))
    ch = _changed(before, after, VERSION_KEYS)
    checks.append(Check("driver and toolkit versions", WARN if ch else OK, "; ".join(ch) or "unchanged",
                        "a version change between the two runs explains a step as well as code does: re-measure "
                        "both commits with one driver/toolkit" if ch else ""))
    gb, ga = before.get("gpu_model") or before.get("facts", {}).get("gpu_model"), \
        after.get("gpu_model") or after.get("facts", {}).get("gpu_model")
    checks.append(Check("machine", WARN if gb != ga else OK, f"GPU {gb} -> {ga}" if gb != ga else f"GPU {ga or '-'}",
                        "different GPUs: never compare timings across GPU models" if gb != ga else ""))
    sb, sa = _flat_settings(before.get("facts", {})), _flat_settings(after.get("facts", {}))
    ch = _changed(sb, sa, sorted(set(sb) | set(sa)))
    checks.append(Check("tuning config / policy / profile", WARN if ch else OK, "; ".join(ch) or
                        f"unchanged ({', '.join(sorted(sa)) or 'none recorded'})",
                        "the tuned config or policy in force changed between the runs" if ch else ""))
    clk = [f"cycles ratio {rec.cycles_ratio:.3f} vs time ratio {rec.ratio:.3f}"] if rec.cycles_ratio else []
    for label, a, b in (("SM clock (MHz)", rb.get("sm_mhz") or before.get("sm_clock_mhz"),
                         ra.get("sm_mhz") or after.get("sm_clock_mhz")),
                        ("throttled share", rb.get("throttled_share", before.get("throttle_share")),
                         ra.get("throttled_share", after.get("throttle_share")))):
        if a is not None or b is not None:
            clk.append(f"{label} {a} -> {b}")
    throttled = any(isinstance(v, (int, float)) and v > 0.05 for v in
                    (ra.get("throttled_share"), after.get("throttle_share")))
    checks.append(Check("clocks and throttle reasons", WARN if rec.kind == "clock" or throttled else
                        (OK if clk else INFO), "; ".join(clk) or "no clocks recorded",
                        "time moved but cycles did not: the GPU clock changed, not the code" if rec.kind == "clock"
                        else "throttled samples after the step: re-run on a cool GPU" if throttled else ""))
    lb, la = _load(before.get("facts", {})), _load(after.get("facts", {}))
    busy = la is not None and la > 0.5 and (lb is None or la > lb + 0.25)
    checks.append(Check("CPU load", WARN if busy else (OK if la is not None else INFO),
                        f"load per core {_num(lb)} -> {_num(la)}" if la is not None or lb is not None
                        else "not recorded",
                        "a busy host delays launches: re-measure on a quiet host" if busy else ""))
    checks += op_checks(rec, ra, after)
    return checks


def op_checks(rec: Any, result_after: dict, run_after: dict) -> list[Check]:
    """The op checks (memory format, layout settings, tile size against the problem, first-step
    compilation, the live check to run), from the benchmark's parameters and the stored samples."""
    p = op_params(rec.benchmark, list(rec.params or []))
    if not p:
        return [Check("op checks", INFO, f"{rec.benchmark} is not an xrt op suite: no op-specific checks")]
    shape = p["shape"]
    dims = [d for d in re.split(r"[x,]", shape) if d]
    live = (f"xrt diag {p['op']} --shape {shape} --dtype {p['dtype']} --provider {p['provider']} "
            f"--config {p['config']} --warmup 3")
    out = [Check("memory format", INFO if len(dims) != 4 else WARN,
                 f"shape {shape} ({len(dims)}-d)",
                 "4-d input: check channels_last (NHWC) against NCHW and hidden NCHW<->NHWC round trips "
                 f"(`{live}`)" if len(dims) == 4 else f"strided inputs are copied before the kernel: `{live}`"),
           Check("layout / access-pattern settings", INFO, f"provider {p['provider']}, config {p['config']}",
                 "the provider / layout choice in force at run time: compare the policy of both commits")]
    try:
        from xrt.bench import specs, suite

        spec = specs.get(p["op"])
        cfg = suite.parse_config(p["config"])
        facts = run_after.get("facts", {})
        out.append(check_tiles(spec, p["provider"], cfg, suite.parse_shape(shape), facts.get("sm_count")))
    except Exception as e:  # the op or its tuning space may be gone from this checkout
        out.append(Check("tile / shared-memory size vs problem", INFO, f"not checked here ({e})",
                         f"`{live}`"))
    smp = result_after.get("samples")
    if smp and len(smp) >= 3:
        first, med = smp[0], float(np.median(smp))
        ratio = first / med if med > 0 else 1.0
        out.append(Check("first-step compilation / warm-up", WARN if ratio > 3 else OK,
                         f"first sample {ratio:.1f}x the median after the step",
                         "the first sample pays for compilation or allocation: warm up before timing"
                         if ratio > 3 else ""))
    else:
        out.append(Check("first-step compilation / warm-up", INFO, "no samples stored", f"`{live}`"))
    out.append(Check("live check", INFO, f"on the GPU: {live}"))
    return out


def as_json(checks: list[Check]) -> list[dict]:
    return [{"name": c.name, "status": c.status, "detail": c.detail, "advice": c.advice} for c in checks]
