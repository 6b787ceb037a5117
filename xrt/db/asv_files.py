"""Parse what asv (and xrt's timing layer) leaves in a results directory.

- result files, asv schema 2 (``result_columns`` + positional rows) and the older schema 1
  (``results[name]`` a scalar or ``{"result", "params", "stats", "samples"}``), following
  ``asv/results.py`` (``Results.load``, ``Results.update_to_2``, ``_compatible_results``);
- ``benchmarks.json`` (type, unit, params, param_names, version, optional bytes/flops/sol_s);
- ``<machine>/machine.json``;
- sidecars beside a result file ``X.json``: ``X.xrt`` (the timing layer's ``xrt-sidecar/1``: GPU and
  software facts plus one ``cases`` entry per benchmark x parameter combination, with bytes, FLOPs,
  per-sample clocks and cycles) or ``X.xrt.json`` (facts and per-benchmark formula inputs), and
  ``gpu`` / ``xrt`` keys in machine.json or a result file's ``params``.

A result file becomes one :class:`ParsedRun`: the run's facts plus flat column lists with one
entry per benchmark x parameter combination. Parsing is all-or-nothing per file: any problem
raises :class:`BadFile` and the file contributes no rows.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import operator
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xrt.db import sidecar_keys

# The column lists of a parsed run, in the order of the `results` table's raw part.
VALUE_COLUMNS = (
    "benchmark", "param_index", "params", "param_key", "value", "status", "samples",
    "ci_99_a", "ci_99_b", "q25", "q75", "number", "repeat", "version", "started_at_ms",
    "duration", "bytes", "flops", "sol_s", "sm_mhz", "cycles", "cycles_median", "throttled_share",
    "ref_samples", "items", "item_unit",
)

SIDECAR_SUFFIX = sidecar_keys.LEGACY_SUFFIX  # the older, hand-written form
SIDECAR_SUFFIXES = sidecar_keys.SUFFIXES  # looked for in this order; the first found is the sidecar

try:  # a C parser, 3-4x faster than json; asv's NaN (a skip) and inf are not JSON, so json reads those
    import orjson as _orjson
except ImportError:  # pragma: no cover - optional (the `bench` extra has it)
    _orjson = None


class BadFile(Exception):
    """A file that cannot be ingested; the message is the reason (no file name)."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind


@dataclass
class ParsedRun:
    """One result file, flattened."""

    machine: str
    commit_hash: str
    env_name: str | None
    date_ms: int | None
    python: str | None
    schema: int
    params: dict[str, Any]
    requirements: dict[str, Any]
    facts: dict[str, Any]
    columns: dict[str, list] = field(default_factory=dict)
    unknown_benchmarks: list[str] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)  # (kind, reason): rows kept anyway
    bad_values: list[str] = field(default_factory=list)  # values/samples stored as status 'bad' (no value), why
    start: int = 0
    end: int = 0

    @property
    def n(self) -> int:
        return self.end - self.start


def loads(data: bytes) -> Any:
    """``json.loads`` that names truncation and corruption as such.

    orjson first; whatever it refuses (``NaN``/``Infinity``, which asv writes for skips and
    failures, huge numbers, and real errors) goes through ``json``, which decides and names the error.
    """
    if _orjson is not None:
        try:
            return _orjson.loads(data)
        except _orjson.JSONDecodeError:
            pass
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadFile("corrupt", f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        if e.pos >= len(text.rstrip()):
            raise BadFile("truncated", f"truncated JSON (ends at line {e.lineno} col {e.colno})") from None
        raise BadFile("corrupt", f"invalid JSON: {e.msg} at line {e.lineno} col {e.colno}") from None


def sidecar_paths(result_path: Path) -> list[Path]:
    """Where a result file's sidecar may be, in order of preference (``X.xrt``, then ``X.xrt.json``)."""
    stem = result_path.name[: -len(".json")]
    return [result_path.with_name(stem + suf) for suf in SIDECAR_SUFFIXES]


def sidecar_path(result_path: Path) -> Path:
    """The sidecar that exists (``X.xrt`` first), else where the timing layer writes it (``X.xrt``)."""
    paths = sidecar_paths(result_path)
    return next((p for p in paths if p.exists()), paths[0])


# ---------------------------------------------------------------- benchmarks.json, machine.json


@dataclass
class Benchmark:
    name: str
    type: str | None
    unit: str | None
    params: list
    param_names: list
    version: str | None
    bytes: list | None  # per parameter combination (product order), or None
    flops: list | None
    sol_s: list | None
    attrs: dict[str, Any]


def _per_combo(v: Any, n: int) -> list | None:
    """A formula input given as a scalar (same for every combination) or a list per combination."""
    if v is None:
        return None
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return [float(v)] * n
    if isinstance(v, list) and len(v) == n and all(x is None or isinstance(x, (int, float)) for x in v):
        return [None if x is None else float(x) for x in v]
    return None


def n_combos(params: list) -> int:
    n = 1
    for p in params:
        n *= len(p)
    return n


class Benchmarks(dict):
    """benchmarks.json: :class:`Benchmark` by name."""

    @functools.cached_property
    def with_formulas(self) -> frozenset:
        """The names that declare bytes, FLOPs or a speed-of-light time (computed once per ingest)."""
        return frozenset(n for n, b in self.items() if b.bytes or b.flops or b.sol_s)


def parse_benchmarks(data: bytes) -> Benchmarks:
    d = loads(data)
    if not isinstance(d, dict):
        raise BadFile("unknown-format", "benchmarks.json is not a JSON object")
    out = Benchmarks()
    for name, b in d.items():
        if name == "version" or not isinstance(b, dict):
            continue
        params = b.get("params") or []
        if not isinstance(params, list) or not all(isinstance(p, list) for p in params):
            params = []
        n = n_combos(params)
        attrs = {k: v for k, v in b.items() if k not in ("code",)}
        out[name] = Benchmark(
            name=name, type=b.get("type"), unit=b.get("unit"), params=params,
            param_names=b.get("param_names") or [], version=b.get("version"),
            bytes=_per_combo(b.get("bytes", b.get("bytes_moved")), n), flops=_per_combo(b.get("flops"), n),
            sol_s=_per_combo(b.get("sol_s", b.get("sol_seconds")), n), attrs=attrs,
        )
    return out


def parse_machine(data: bytes) -> dict[str, Any]:
    d = loads(data)
    if not isinstance(d, dict):
        raise BadFile("unknown-format", "machine.json is not a JSON object")
    return d


# ---------------------------------------------------------------- GPU / software facts

_FACT_KEYS = {
    "gpu_model": ("gpu_model", "gpu_name", "model", "name", "gpu"),
    "driver": ("driver", "driver_version"),
    "cuda": ("cuda", "cuda_version"),
    "torch": ("torch", "torch_version"),
    "triton": ("triton", "triton_version"),
    "sm_clock_mhz": ("sm_clock_mhz", "sm_clock", "clock_sm_mhz"),
    "mem_clock_mhz": ("mem_clock_mhz", "mem_clock", "clock_mem_mhz"),
    "throttle_share": ("throttle_share", "throttle_fraction", "throttled_share"),
    "peak_gbps": ("peak_gbps", "sol_gbps", "peak_bandwidth_gbps"),
    "peak_tflops": ("peak_tflops", "sol_tflops"),
}
TEXT_FACTS = ("gpu_model", "driver", "cuda", "torch", "triton")  # the machine's hardware and software, as text
NUMBER_FACTS = tuple(k for k in _FACT_KEYS if k not in TEXT_FACTS)  # clocks, throttling, peaks


def _flatten(d: Any, out: dict[str, Any]) -> None:
    if not isinstance(d, dict):
        return
    for k, v in d.items():
        if isinstance(v, dict):
            _flatten(v, out)
        elif isinstance(k, str):
            out.setdefault(k.lower(), v)


def gpu_facts(*sources: Any) -> dict[str, Any]:
    """Merge fact dicts (first wins) and pick out the well-known ones; all of them stay in ``all``."""
    merged: dict[str, Any] = {}
    for s in sources:
        if isinstance(s, str):  # e.g. machine.json {"gpu": "NVIDIA H100"}
            s = {"gpu_model": s}
        if isinstance(s, dict):
            for k, v in s.items():
                merged.setdefault(k, v)
    flat: dict[str, Any] = {}
    _flatten(merged, flat)
    known: dict[str, Any] = {}
    for fact, keys in _FACT_KEYS.items():
        for k in keys:
            v = flat.get(k)
            if v is not None and not isinstance(v, (list, dict)):
                known[fact] = v
                break
    known["all"] = merged
    return known


def facts_from(d: dict[str, Any]) -> list[Any]:
    """GPU fact sources inside a machine.json or a result file's params: ``gpu``/``xrt`` keys."""
    return [d[k] for k in ("xrt", "gpu") if isinstance(d, dict) and d.get(k) is not None]


# ---------------------------------------------------------------- the timing layer's sidecar


@dataclass
class CaseFacts:
    """One ``cases`` entry of an ``xrt-sidecar/1`` file, reduced to what a results row holds."""

    bytes: float | None
    flops: float | None
    sm_mhz: float | None  # median SM clock over the case's samples
    cycles: list | None  # per sample (time x SM clock), None where the clock was unknown
    cycles_median: float | None
    throttled_share: float | None
    samples_median: float | None = None  # the timer's own record of the samples asv was handed
    n_samples: int | None = None
    ref_samples: list | None = None  # host series: the reference call's sample beside each sample
    items: float | None = None  # a model's step: the tokens / images one call processes
    item_unit: str | None = None  # ... which ("tokens", "images")


def _median(xs: list) -> float | None:
    xs = [float(x) for x in xs if x is not None and not isinstance(x, bool) and isinstance(x, (int, float))
          and math.isfinite(x)]
    return statistics.median(xs) if xs else None


def read_sidecar(sc: Any) -> tuple[dict[str, Any], dict[tuple[str, tuple], CaseFacts], list[str]]:
    """A sidecar's run facts, its cases by ``(benchmark, params)``, and the problems found in it.

    Works for both forms: ``X.xrt`` (``xrt-sidecar/1``, with ``cases``) and ``X.xrt.json``. The
    cases are summarised into run facts where the sidecar does not give them itself:
    ``sm_clock_mhz`` (median over the cases of each case's median SM clock), ``mem_clock_mhz``
    (likewise) and ``throttle_share`` (mean over the cases of their throttled share). The cases
    themselves are not kept in the facts (their per-sample data lands in ``results``).
    Raises :class:`BadFile` (kind ``bad-sidecar``) when the sidecar is not a JSON object.
    """
    if not isinstance(sc, dict):
        raise BadFile("bad-sidecar", "not a JSON object")
    facts = {k: v for k, v in sc.items() if k != sidecar_keys.CASES}
    cases: dict[tuple[str, tuple], CaseFacts] = {}
    problems: list[str] = []
    raw = sc.get(sidecar_keys.CASES)
    if raw is None:
        return facts, cases, problems
    if not isinstance(raw, list):
        return facts, cases, [f"'{sidecar_keys.CASES}' is not a list"]
    sm_all, mem_all, thr_all, bad = [], [], [], 0
    for c in raw:
        params = c.get(sidecar_keys.CASE_PARAMS, []) if isinstance(c, dict) else None
        if (not isinstance(c, dict) or not isinstance(c.get(sidecar_keys.CASE_BENCHMARK), str)
                or not isinstance(params, list) or not all(isinstance(p, str) for p in params)):
            bad += 1
            continue
        sm = c.get(sidecar_keys.CASE_SM_MHZ) if isinstance(c.get(sidecar_keys.CASE_SM_MHZ), list) else []
        mem = c.get(sidecar_keys.CASE_MEM_MHZ) if isinstance(c.get(sidecar_keys.CASE_MEM_MHZ), list) else []
        cyc = c.get(sidecar_keys.CASE_CYCLES)
        cyc = [_num(x) for x in cyc] if isinstance(cyc, list) else None
        f = CaseFacts(bytes=_num(c.get(sidecar_keys.CASE_BYTES)), flops=_num(c.get(sidecar_keys.CASE_FLOPS)),
                      sm_mhz=_median(sm),
                      cycles=cyc, cycles_median=_median(cyc or []),
                      throttled_share=_num(c.get(sidecar_keys.CASE_THROTTLED_SHARE)))
        smp = c.get(sidecar_keys.CASE_SAMPLES)
        if isinstance(smp, list) and smp:
            f.samples_median, f.n_samples = _median(smp), len(smp)
        unit = c.get(sidecar_keys.CASE_ITEM_UNIT)
        if isinstance(unit, str) and unit and _num(c.get(sidecar_keys.CASE_ITEMS)):  # a count and its noun, or neither
            f.items, f.item_unit = _num(c.get(sidecar_keys.CASE_ITEMS)), unit
        ref = c.get(sidecar_keys.CASE_REF_SAMPLES)
        if isinstance(ref, list) and ref and len(ref) == f.n_samples:  # one beside each sample, or none
            f.ref_samples = [_num(x) for x in ref]
        cases[(c[sidecar_keys.CASE_BENCHMARK], tuple(params))] = f
        if f.sm_mhz is not None:
            sm_all.append(f.sm_mhz)
        m = _median(mem)
        if m is not None:
            mem_all.append(m)
        if f.throttled_share is not None:
            thr_all.append(f.throttled_share)
    if bad:
        problems.append(f"{bad} of {len(raw)} cases without a '{sidecar_keys.CASE_BENCHMARK}' name and a list of "
                        f"'{sidecar_keys.CASE_PARAMS}' strings (ignored)")
    derived = {"sm_clock_mhz": _median(sm_all), "mem_clock_mhz": _median(mem_all),
               "throttle_share": statistics.fmean(thr_all) if thr_all else None}
    for k, v in derived.items():
        if v is not None and facts.get(k) is None:
            facts[k] = v
    facts["n_cases"] = len(cases)
    return facts, cases, problems


# ---------------------------------------------------------------- result files

# asv's result columns (schema 2): the value, its parameters and run, its statistics, its samples
STATS = ("stats_ci_99_a", "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat")
V2_COLUMNS = ("result", "params", "version", "started_at", "duration", *STATS, "samples", "profile")


def _v1_to_rows(d: dict[str, Any]) -> tuple[list[str], dict[str, list]]:
    """asv schema 1 -> schema 2 rows: what ``asv.results.Results.update_to_2`` makes (tested), minus
    its rounding of stats and durations to 5 digits. asv's own is not called: it rounds, raises on a
    file without date/python/requirements, and importing asv costs 0.2 s. asv's ``Results.load``
    is not used either: it parses with ``json`` (orjson here) and refuses a file as a whole."""
    started = d.get("started_at") or {}
    duration = d.get("duration") or {}
    bversion = d.get("benchmark_version") or {}
    rows: dict[str, list] = {}
    for name, value in d["results"].items():
        if not isinstance(value, dict):
            value = {"result": [value], "samples": None, "stats": None, "params": []}
        result = value.get("result")
        if result is not None and not isinstance(result, list):
            result = [result]
        stats = value.get("stats")
        if stats is not None and not isinstance(stats, list):
            stats = [stats]

        def stat(get, stats=stats):
            if stats is None:
                return None
            return [None if z is None else get(z) for z in stats]

        def ci(z, i):
            c = z.get("ci_99")
            return c[i] if isinstance(c, list) and len(c) == 2 else None

        rows[name] = [
            result, value.get("params") or [], bversion.get(name), started.get(name), duration.get(name),
            stat(lambda z: ci(z, 0)), stat(lambda z: ci(z, 1)), stat(lambda z: z.get("q_25")),
            stat(lambda z: z.get("q_75")), stat(lambda z: z.get("number")), stat(lambda z: z.get("repeat")),
            value.get("samples"), None,
        ]
    return list(V2_COLUMNS), rows


def _num(v: Any) -> float | None:
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


# What one result file may expand to, so that a hostile or broken file is refused by name instead
# of taking the machine's memory: rows (benchmark x parameter combinations), the characters of the
# parameter strings copied into them, and the length of the identifiers copied into every row.
MAX_ROWS_PER_FILE = 100_000
MAX_PARAM_CHARS_PER_FILE = 20_000_000
MAX_NAME_CHARS = 256  # machine, env_name, python, a benchmark's name, one parameter's repr
_HEX_HASH = re.compile(r"[0-9a-fA-F]{1,64}")


def _too_long(what: str, v: Any) -> BadFile | None:
    if isinstance(v, str) and len(v) > MAX_NAME_CHARS:
        return BadFile("too-big", f"{what} is {len(v):,} characters long (at most {MAX_NAME_CHARS})")
    return None


def check_bounds(d: dict, cols: list, rows: dict) -> None:
    """:class:`BadFile` (kind ``too-big`` or ``unknown-format``) for a file beyond the limits above,
    checked before anything is expanded."""
    h = d["commit_hash"]
    if not _HEX_HASH.fullmatch(h):
        shown = h if len(h) <= 80 else h[:40] + f"... ({len(h):,} characters)"
        raise BadFile("unknown-format", f"'commit_hash' {shown!r} is not a hexadecimal hash of at most 64 digits")
    rparams = d.get("params") if isinstance(d.get("params"), dict) else {}
    for what, v in (("'env_name'", d.get("env_name")), ("'python'", d.get("python")),
                    ("'params.machine'", rparams.get("machine"))):
        if (e := _too_long(what, v)) is not None:
            raise e
    at = cols.index("params") if "params" in cols else None
    n_rows = n_chars = 0
    for name, row in rows.items():
        if (e := _too_long("a benchmark name", name)) is not None:
            raise e
        params = row[at] if at is not None and isinstance(row, list) and len(row) > at else None
        combos, width = 1, 0
        if isinstance(params, list):
            for axis in params:
                if not isinstance(axis, list):
                    break  # malformed: the row reader names it
                combos *= len(axis)
                longest = max((len(str(v)) for v in axis), default=0)
                if longest > MAX_NAME_CHARS:
                    raise BadFile("too-big", f"benchmark {name!r}: a parameter value is {longest:,} characters long "
                                  f"(at most {MAX_NAME_CHARS})")
                width += longest
        n_rows += combos
        n_chars += combos * width
        if n_rows > MAX_ROWS_PER_FILE:
            raise BadFile("too-big", f"expands to more than {MAX_ROWS_PER_FILE:,} rows (benchmark {name!r} alone: "
                          f"{combos:,} parameter combinations); split the parameters over several benchmarks")
        if n_chars > MAX_PARAM_CHARS_PER_FILE:
            raise BadFile("too-big", f"its parameter strings expand to more than {MAX_PARAM_CHARS_PER_FILE:,} "
                          "characters")


def parse_result(data: bytes, machine_dir: str, known: dict[str, Benchmark] | None,
                 sidecar: dict[str, Any] | None = None, machine_facts: list[Any] | None = None,
                 into: dict[str, list] | None = None, rows_only: bool = False) -> ParsedRun:
    """Flatten one asv result file. ``known`` is benchmarks.json (None: not available).

    ``rows_only``: skip the column-wise fast path for plain files, which leaves the samples'
    check to the caller (``xrt.db.batch`` checks them on the Arrow column and re-parses a file
    with a NaN, inf, negative or non-numeric sample this way, so that the row loop names it).

    The rows are appended to the column lists ``into`` (new ones when None); the run's rows are
    ``columns[c][start:end]``. On :class:`BadFile` nothing stays appended.
    """
    d = loads(data)
    if not isinstance(d, dict):
        raise BadFile("unknown-format", "not a JSON object")
    schema = d.get("version", 1)
    if "results" not in d or "commit_hash" not in d or not isinstance(d["results"], dict):
        raise BadFile("unknown-format", "not an asv result file (no 'results' / 'commit_hash')")
    if schema == 2:
        cols = d.get("result_columns")
        if not isinstance(cols, list) or "result" not in cols:
            raise BadFile("unknown-format", "asv schema 2 file without 'result_columns'")
        rows = d["results"]
    elif schema == 1:
        cols, rows = _v1_to_rows(d)
    else:
        raise BadFile("unknown-format", f"unknown asv result schema version {schema!r} (know 1 and 2)")
    if not isinstance(d["commit_hash"], str) or not d["commit_hash"]:
        raise BadFile("unknown-format", "'commit_hash' is not a string")
    check_bounds(d, cols, rows)

    if known is not None and not isinstance(known, Benchmarks):
        known = Benchmarks(known)
    cl: dict[str, list] = into if into is not None else {c: [] for c in VALUE_COLUMNS}
    start = len(cl["benchmark"])
    warnings: list[tuple[str, str]] = []
    cases: dict[tuple[str, tuple], CaseFacts] = {}
    if sidecar is not None:
        try:
            sidecar, cases, problems = read_sidecar(sidecar)
        except BadFile as e:
            sidecar, problems = None, [str(e)]
        warnings += [("bad-sidecar", p) for p in problems]
    bad: list[str] = []
    try:
        unknown = _flatten_rows(cols, rows, known, sidecar, cl, cases, bad, not rows_only)
    except (TypeError, IndexError, KeyError, AttributeError, BadFile) as e:
        for c in VALUE_COLUMNS:
            del cl[c][start:]
        if isinstance(e, BadFile):
            raise
        raise BadFile("unknown-format", f"malformed result rows ({type(e).__name__}: {e})") from None
    rparams = d.get("params") if isinstance(d.get("params"), dict) else {}
    machine = rparams.get("machine") or machine_dir
    date = d.get("date")
    facts = gpu_facts(sidecar if isinstance(sidecar, dict) else None, *facts_from(rparams), *(machine_facts or []))
    return ParsedRun(
        machine=str(machine), commit_hash=d["commit_hash"], env_name=d.get("env_name"),
        date_ms=date if isinstance(date, int) and not isinstance(date, bool) else None,
        python=d.get("python"), schema=schema, params=rparams,
        requirements=d.get("requirements") if isinstance(d.get("requirements"), dict) else {},
        facts=facts, columns=cl, unknown_benchmarks=unknown, warnings=warnings, bad_values=bad, start=start,
        end=len(cl["benchmark"]),
    )


_NO_PARAMS: list = []


# Benchmarks whose values cannot be negative (times, sizes): by benchmarks.json's type, else asv's name prefix.
_NONNEG_TYPES = frozenset(("time", "memory", "peakmemory", "mem", "peakmem"))
_NONNEG_PREFIXES = ("time_", "timeraw_", "mem_", "peakmem_")
BAD = "bad"  # status of a value that is no measurement (a boolean, a string, a negative time, bad samples)


def _nonneg(name: str, b: Benchmark | None) -> bool:
    t = b.type if b is not None else None
    if t:
        return t in _NONNEG_TYPES
    return name.rsplit(".", 1)[-1].startswith(_NONNEG_PREFIXES)


def _show(v: Any) -> str:
    try:
        s = json.dumps(v, allow_nan=True)
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _bad_value(v: Any, nonneg: bool) -> str | None:
    """Why a result value (not None, NaN or inf: asv's failure and skip) is no measurement; None if it is one."""
    c = v.__class__
    if c is bool:
        return f"value {_show(v)} is a boolean, not a number"
    if c is not float and c is not int:
        return f"value {_show(v)} is not a number"
    if nonneg and v < 0:
        return f"value {v!r} is negative"
    return None


def _bad_samples(sm: Any, nonneg: bool) -> str | None:
    """Why a ``samples`` entry is not a list of finite (and, for times, non-negative) numbers; None if it is."""
    if sm is None:
        return None
    if sm.__class__ is not list:
        return f"samples {_show(sm)} is not a list"
    if not sm:
        return None
    if set(map(type, sm)) <= {float, int}:  # the usual case, checked at C speed
        t = sum(sm)
        if t - t == 0.0 and (not nonneg or min(sm) >= 0):
            return None
    for x in sm:
        c = x.__class__
        if c is bool or (c is not float and c is not int):
            return f"sample {_show(x)} is not a number"
        if not x - x == 0.0:
            return f"sample {_show(x)} is not finite"
        if nonneg and x < 0:
            return f"sample {x!r} is negative"
    return None  # pragma: no cover - the fast check said otherwise


_MAX_BAD_NAMED = 20  # per file; the rest are counted


def _note_bad(bad: list[str] | None, name: str, combo: list, why: str) -> None:
    if bad is None:
        return
    if len(bad) < _MAX_BAD_NAMED:
        bad.append(f"{name}{' [' + ', '.join(combo) + ']' if combo else ''}: {why}; stored with status 'bad', "
                   "no value")
    elif len(bad) == _MAX_BAD_NAMED:
        bad.append("more bad values in this file (not named one by one)")


class _Layout:
    """Where a file's columns sit in its rows (its ``result_columns``). Index ``ncol`` reads None in a
    padded row: a column this file does not have (asv trims trailing nulls, so a short row means None)."""

    def __init__(self, cols: list):
        self.ncol = ncol = len(cols)
        pos = {c: i for i, c in enumerate(cols)}
        self.result = pos["result"]
        self.params, self.version, self.started, self.duration, self.samples = (
            pos.get(c, ncol) for c in ("params", "version", "started_at", "duration", "samples"))
        self.stats = [pos.get(c, ncol) for c in STATS]
        self.pad = [None] * (ncol + 1)

    def padded(self, name: str, row: Any) -> list:
        if not isinstance(row, list) or len(row) <= self.result:
            raise BadFile("unknown-format", f"benchmark {name!r}: result row is not a list with a 'result'")
        return row + self.pad[len(row):] if len(row) <= self.ncol else row


@dataclass
class _Benchmark:
    """One benchmark's row of a result file, as lists with one entry per parameter combination."""

    name: str
    combos: list  # the parameter combinations, asv's order (itertools.product of the params)
    values: list
    samples: list
    stats: list  # per STATS column
    version: str | None
    started: int | None
    duration: float | None
    nonneg: bool
    bytes: list | None = None  # declared formula inputs, per combination
    flops: list | None = None
    sol_s: list | None = None


def _one(x: Any) -> Any:
    """A plain benchmark's entry of a per-combination column: its first element, None for null / []."""
    return x[0] if x else None


def _per_combination(what: str, name: str, x: Any, n: int) -> list:
    """A stats column of a parameterized benchmark: None (all missing), a scalar or a list of ``n``."""
    x = [None] * n if x is None else x if isinstance(x, list) else [x]
    if len(x) != n:
        raise BadFile("unknown-format", f"benchmark {name!r}: {what} of length {len(x)}, expected {n}")
    return x


def _read_benchmark(name: str, row: list, lay: _Layout, b: Benchmark | None, sc: Any, plain: bool) -> _Benchmark:
    """The benchmark's row as per-combination lists; raises :class:`BadFile` on a malformed row.

    ``plain``: no parameters and no formulas, the value a list of one (or None); its other columns
    are read as asv writes them for one value (the first element, None for null or an empty list)."""
    result, params = row[lay.result], row[lay.params] or _NO_PARAMS
    version, started, duration = row[lay.version], row[lay.started], row[lay.duration]
    bench = _Benchmark(
        name=name, combos=[_NO_PARAMS], values=[], samples=[], stats=[],
        version=version if isinstance(version, str) else None,
        started=started if isinstance(started, int) and not isinstance(started, bool) else None,
        duration=duration if isinstance(duration, (int, float)) and not isinstance(duration, bool) else None,
        nonneg=_nonneg(name, b))
    if plain:
        if result is not None and len(result) != 1:
            raise BadFile("unknown-format", f"benchmark {name!r}: {len(result)} results for 1 parameter combination")
        bench.values = [None if result is None else result[0]]
        bench.samples = [_one(row[lay.samples])]
        bench.stats = [[_one(row[i])] for i in lay.stats]
        return bench
    if not isinstance(params, list) or not all(isinstance(p, list) for p in params):
        raise BadFile("unknown-format", f"benchmark {name!r}: 'params' is not a list of lists")
    n = n_combos(params)
    values = [None] * n if result is None else result if isinstance(result, list) else [result]
    if len(values) != n:
        raise BadFile("unknown-format", f"benchmark {name!r}: {len(values)} results for {n} parameter "
                      "combinations")
    bench.values = values
    bench.stats = [_per_combination("stats", name, row[i], n) for i in lay.stats]
    samples = row[lay.samples]
    if samples is None:
        samples = [None] * n
    elif not isinstance(samples, list) or len(samples) != n:
        raise BadFile("unknown-format", f"benchmark {name!r}: samples do not match its {n} results")
    bench.samples = samples
    if isinstance(sc, dict):
        bench.bytes = _per_combo(sc.get("bytes", sc.get("bytes_moved")), n)
        bench.flops = _per_combo(sc.get("flops"), n)
        bench.sol_s = _per_combo(sc.get("sol_s", sc.get("sol_seconds")), n)
    if b is not None and len(b.params) == len(params) and n_combos(b.params) == n:
        bench.bytes, bench.flops, bench.sol_s = bench.bytes or b.bytes, bench.flops or b.flops, bench.sol_s or b.sol_s
    if params:
        bench.combos = [list(c) for c in itertools.product(*params)]
    return bench


def classify(value: Any) -> str:
    """asv's status of a result value: ``failed`` (None, or +-inf), ``skipped`` (NaN), else ``ok``.

    Whether an ``ok`` value is a measurement (not a boolean, a string, a negative time) is
    :func:`_bad_value`'s question; the row keeps a value only when its status is ``ok``."""
    if value is None:
        return "failed"
    if value.__class__ is float and value - value != 0.0:  # NaN or +-inf
        return "failed" if value == value else "skipped"
    return "ok"


_FACT_COLUMNS = ("sm_mhz", "cycles", "cycles_median", "throttled_share", "ref_samples", "items", "item_unit")
_STAT_COLUMNS = ("ci_99_a", "ci_99_b", "q25", "q75", "number", "repeat")


def _add_rows(cl: dict[str, list], bench: _Benchmark, cases: dict, bad: list[str] | None) -> None:
    """The row builder: one row per parameter combination of ``bench``, appended to the column lists.

    A value that is no measurement (a boolean, a string, a negative time, or samples with NaN, inf,
    a negative time or a non-number, or samples that are not the timer's) becomes a row with status
    ``bad`` and no value, samples or stats; ``bad`` collects why (benchmark, parameters, value)."""
    name, combos, nonneg = bench.name, bench.combos, bench.nonneg
    for j, v in enumerate(bench.values):
        combo, sm = combos[j], bench.samples[j]
        st = classify(v)
        cf = cases.get((name, tuple(combo))) if cases else None
        why = None
        if st == "ok":
            why = _bad_value(v, nonneg) or _bad_samples(sm, nonneg) or (cf and _not_the_timers(sm, cf))
            if why:
                _note_bad(bad, name, combo, why)
                st = BAD
        ok, kept = st == "ok", st != BAD
        cl["benchmark"].append(name)
        cl["param_index"].append(j)
        cl["params"].append(combo)
        cl["param_key"].append(", ".join(combo))
        cl["value"].append(v if ok else None)
        cl["status"].append(st)
        cl["samples"].append(sm if kept and isinstance(sm, list) else None)
        for c, s in zip(_STAT_COLUMNS, bench.stats):
            cl[c].append(s[j] if kept else None)
        cl["version"].append(bench.version)
        cl["started_at_ms"].append(bench.started)
        cl["duration"].append(bench.duration)
        # measured for exactly this combination (the timing layer) first, then the declared formulas
        cl["bytes"].append(cf.bytes if cf is not None and cf.bytes is not None else
                           bench.bytes[j] if bench.bytes else None)
        cl["flops"].append(cf.flops if cf is not None and cf.flops is not None else
                           bench.flops[j] if bench.flops else None)
        cl["sol_s"].append(bench.sol_s[j] if bench.sol_s else None)
        for c in _FACT_COLUMNS:
            cl[c].append(None if cf is None else getattr(cf, c))


def _flatten_rows(cols: list, rows: dict, known: Benchmarks | None, sidecar: Any, cl: dict[str, list],
                  cases: dict[tuple[str, tuple], CaseFacts] | None = None, bad: list[str] | None = None,
                  fast: bool = True) -> list[str]:
    """One entry per benchmark x parameter combination in each column list; returns the benchmarks
    not in benchmarks.json. ``fast``: a file of plain benchmarks only goes column by column
    (:func:`_flatten_plain`), which leaves its samples' check to the caller."""
    lay = _Layout(cols)
    sc_bench = sidecar.get("benchmarks") if isinstance(sidecar, dict) else None
    sc_bench = sc_bench if isinstance(sc_bench, dict) else {}
    cases = cases or {}
    unknown: list[str] = [name for name in rows if name not in known] if known is not None else []
    if fast and not cases and not sc_bench and _flatten_plain(rows, known, cl, lay):
        return unknown
    case_names = {b for b, _ in cases}
    for name, row in rows.items():
        row = lay.padded(name, row)
        b = known.get(name) if known is not None else None
        sc = sc_bench.get(name)
        formulas = b is not None and (b.bytes or b.flops or b.sol_s) or isinstance(sc, dict) or name in case_names
        result = row[lay.result]
        plain = not row[lay.params] and not formulas and (result is None or isinstance(result, list))
        _add_rows(cl, _read_benchmark(name, row, lay, b, sc, plain), cases, bad)
    return unknown


def _not_the_timers(samples: Any, cf: CaseFacts) -> str | None:
    """Why asv's samples of a combination are not the ones the timer recorded for it, or None.

    The suites hand asv the timer's samples; the sidecar keeps the timer's own copy under the
    combination's parameters. Where they differ, asv filed the samples under other parameters (a
    process that saw another parameter grid), and no figure of that row can be trusted."""
    if cf.samples_median is None or not isinstance(samples, list) or not samples:
        return None
    mine = _median(samples)
    if mine is None or len(samples) != cf.n_samples or not math.isclose(mine, cf.samples_median, rel_tol=1e-6):
        return (f"asv's samples ({len(samples)}, median {mine!r}) are not the timer's for these parameters "
                f"({cf.n_samples}, median {cf.samples_median!r}): filed under the wrong parameters")
    return None


_not_none = functools.partial(operator.is_not, None)


def _flatten_plain(rows: dict, known: Benchmarks | None, cl: dict[str, list], lay: _Layout) -> bool:
    """The fast path for a file whose benchmarks are all plain (no params, no formulas, one value each).

    The rows of :func:`_add_rows`, built column by column with comprehensions (or C-level checks) over
    the transposed rows instead of one row at a time: the django corpus is all like this, and this
    is 2-3 times faster there (docs/database.md). Returns False (nothing appended) when the file is
    not, or holds a value that is no measurement; the row loop then handles it (and names what is wrong).
    """
    rowl = list(rows.values())
    if not rowl:
        return True
    if set(map(type, rowl)) != {list} or min(map(len, rowl)) <= lay.result:
        return False
    # columns 0..ncol; a row shorter than that reads None (what asv's trimmed trailing nulls mean),
    # index ncol is None for every row that has no more (a column this file does not have)
    t = list(itertools.zip_longest(*rowl))
    n = len(rowl)
    nones = [None] * n
    if len(t) <= lay.ncol:
        t += [nones] * (lay.ncol + 1 - len(t))
    if any(t[lay.params]):
        return False
    res = t[lay.result]
    if not set(map(type, res)) <= {list, type(None)} or not set(map(len, filter(_not_none, res))) <= {1}:
        return False
    if known is not None and not known.with_formulas.isdisjoint(rows):
        return False
    vals = [None if x is None else x[0] for x in res]
    if not set(map(type, vals)) <= {float, int, type(None)}:
        return False  # a boolean, a string...: the row loop names it
    status = list(map(classify, vals))
    if status.count("ok") != n:
        vals = [v if st == "ok" else None for v, st in zip(vals, status)]
    if min(filter(_not_none, vals), default=0) < 0:
        return False  # a negative value: the row loop decides (times cannot be, tracks can)
    # The samples are not checked here, one Python object at a time (0.15 s of the django corpus):
    # xrt.db.batch checks the whole Arrow column at once and re-parses a file with a bad sample
    # (or a 0.0 / 1.0, which is what Arrow makes of a JSON false / true) row by row (rows_only).
    cl["benchmark"] += rows
    cl["param_index"] += [0] * n
    cl["params"] += [_NO_PARAMS] * n
    cl["param_key"] += [""] * n
    cl["value"] += vals
    cl["status"] += status
    for c, i in zip(("samples", *_STAT_COLUMNS), (lay.samples, *lay.stats)):
        cl[c] += [x[0] if x else None for x in t[i]]  # _one, inline: 7 columns x 256 k rows of the django corpus
    col = t[lay.version]
    cl["version"] += col if set(map(type, col)) == {str} else [x if x.__class__ is str else None for x in col]
    col = t[lay.started]
    cl["started_at_ms"] += col if set(map(type, col)) == {int} else [
        x if x.__class__ is int else None for x in col]
    col = t[lay.duration]
    cl["duration"] += col if set(map(type, col)) <= {float, int} else [
        x if x.__class__ is float or x.__class__ is int else None for x in col]
    for c in ("bytes", "flops", "sol_s", *_FACT_COLUMNS):
        cl[c] += nones
    return True
