"""``xrt explain``: why one benchmark case got slower between two commits.

For the case (op, shape, dtype, provider, config) of a stored regression, or one named with
``--base/--head/--bench/--params``, each commit is checked out in a temporary worktree
(:mod:`xrt.bench.worktrees`, as ``xrt bench run`` does) and, in a subprocess per side that imports
that commit's own xrt (:mod:`xrt.orchestrate.explain_side`), four things are collected.

explain is split in two only where the layers require it. This module is its part on data (the
tracker's layer): it names the case, parses what was collected, compares, renders and stores it,
and the gate and the dashboard read it. Checking out commits, running each side and profiling
drive the layers below the tracker, so they are orchestration: :mod:`xrt.orchestrate.explain_collect`
(with :mod:`xrt.orchestrate.explain_side`, the script a side runs), and the command is
:mod:`xrt.orchestrate.cli`'s. What is collected:

* **Nsight Compute** (GPU and ``ncu`` only): one profiled launch per kernel of one call after
  warm-up (``--profile-from-start off``; the target brackets that call with cudaProfilerStart and
  Stop), sections SpeedOfLight, LaunchStats and Occupancy, CSV.
  ``--clock-control none`` is passed deliberately and recorded: ncu otherwise locks the clocks to
  base for its measurement; xrt never changes clocks, and the numbers then compare with the
  benchmark's own (which run at the GPU's own clocks).
* **torch.profiler** (GPU only): the kernels of one call after warm-up, with counts, times and
  launch configuration (grid, block, registers, shared memory) from its Chrome trace.
* **compiled code**: the commit's ``xrt kernels dump`` of the op's provider (PTX, cubin, SASS;
  works without a GPU, Triton and nvcc compile for a target given by name), with per-function
  registers, local memory (spills), stack, shared memory and instruction counts.
* **settings in force**: provider, the config and where it came from, ``XRT_*``/``TRITON_*`` knobs,
  torch and Triton versions.

:func:`compare` ranks what changed: the kernel list first, then launch configuration, registers and
spills, throughput, NCU's rule findings, settings. The result (payload JSON plus rendered
Markdown) is stored in the ``explanations`` table (schema migration 9), shown on the dashboard's
regression page and in ``xrt gate --summary``. A part that could not run says why and is skipped.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xrt.bench.suite import SERIES
from xrt.track.markdown import lit

SCHEMA = "xrt-explain/1"
# the op suites whose params are shape x dtype x provider x config
SUITES = tuple(module for module, _ in SERIES.values())


class ExplainError(ValueError):
    """Bad input to ``xrt explain``: one line naming the input and what is wrong (exit 2)."""


# ---------------------------------------------------------------------------------------- the case

@dataclass
class Case:
    benchmark: str
    op: str
    shape: str
    dtype: str
    provider: str
    config: str

    @property
    def params(self) -> list[str]:
        return [self.shape, self.dtype, self.provider, self.config]

    @property
    def param_key(self) -> str:
        """As the database stores it: asv's repr of each parameter, comma separated."""
        return ", ".join(repr(p) for p in self.params)


def op_of(benchmark: str) -> str:
    """``bench_ops.LayernormBwd.time_op`` -> ``layernorm_bwd``; other suites are refused."""
    parts = benchmark.split(".")
    if len(parts) != 3 or parts[0] not in SUITES or not parts[1][:1].isupper():
        raise ExplainError(f"benchmark {benchmark!r}: xrt explain takes a case of the op suites "
                           f"({' or '.join(s + '.<Op>.<method>' for s in SUITES)})")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", parts[1]).lower()


def split_params(text: str | list[str]) -> list[str]:
    """The four parameters from a stored list, the database's param key (``'4096', 'float32',
    'triton', 'default'``) or plain ``4096,float32,triton,default`` (the config may hold commas)."""
    if isinstance(text, list):
        items = [str(p) for p in text]
    elif "'" in text:
        items = re.findall(r"'((?:[^'\\]|\\.)*)'", text)
    else:
        items = [p.strip() for p in text.split(",", 3)]
    items = [p[1:-1] if len(p) >= 2 and p[0] == p[-1] == "'" else p for p in items]
    if len(items) != 4 or not all(items):
        raise ExplainError(f"--params {text!r}: expected shape, dtype, provider, config "
                           "(like 4096,float32,triton,default)")
    return items


def make_case(benchmark: str, params: str | list[str]) -> Case:
    op = op_of(benchmark)
    shape, dtype, provider, config = split_params(params)
    if not re.fullmatch(r"\d+(x\d+)*", shape):
        raise ExplainError(f"--params: shape {shape!r} must look like 4096 or 4096x4096")
    if dtype not in ("float32", "float16", "bfloat16"):
        raise ExplainError(f"--params: dtype {dtype!r} must be float32, float16 or bfloat16")
    return Case(benchmark, op, shape, dtype, provider, config)


# ---------------------------------------------------------------------------------------- parsers

_TIME = {"nsecond": 1.0, "ns": 1.0, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6, "second": 1e9, "s": 1e9}
_BYTES = {"byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "KiB": 1024.0,
          "MiB": 1024.0 ** 2}
# (section keyword, metric name) -> key; the section keyword disambiguates names NCU reuses
_NCU_METRICS = {
    ("Speed Of Light", "Duration"): "duration_ns",
    ("Speed Of Light", "Compute (SM) Throughput"): "sm_pct",
    ("Speed Of Light", "Memory Throughput"): "memory_pct",
    ("Speed Of Light", "DRAM Throughput"): "dram_pct",
    ("Speed Of Light", "Elapsed Cycles"): "cycles",
    ("Speed Of Light", "SM Frequency"): "sm_frequency",
    ("Launch Statistics", "Block Size"): "block_size",
    ("Launch Statistics", "Grid Size"): "grid_size",
    ("Launch Statistics", "Registers Per Thread"): "registers",
    ("Launch Statistics", "Static Shared Memory Per Block"): "static_smem_bytes",
    ("Launch Statistics", "Dynamic Shared Memory Per Block"): "dynamic_smem_bytes",
    ("Launch Statistics", "Threads"): "threads",
    ("Launch Statistics", "Waves Per SM"): "waves_per_sm",
    ("Occupancy", "Achieved Occupancy"): "occupancy_pct",
    ("Occupancy", "Theoretical Occupancy"): "theoretical_occupancy_pct",
}


def _number(text: str) -> float | None:
    t = (text or "").strip().replace(",", "")
    try:
        return float(t)
    except ValueError:
        return None


def parse_ncu_csv(text: str) -> list[dict[str, Any]]:
    """Nsight Compute's ``--csv --page details`` output: one dict per profiled launch, in order.

    Each: ``id``, ``name`` (the demangled kernel name), ``grid`` and ``block`` (NCU's "(x, y, z)"),
    ``metrics`` ({key: value}: durations in ns, shared memory in bytes, percentages as printed) and
    ``rules`` (the rule findings: name, type, description, estimated speedup, where NCU's version
    prints them as columns). Lines that are not the table (``==PROF==`` messages, the program's own
    output before the header) are skipped; a text without the table is an error that says so.
    """
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID","Process ID"')), None)
    if start is None:
        raise ValueError("not Nsight Compute CSV: no header line starting with \"ID\",\"Process ID\"")
    table = [ln for ln in lines[start:] if ln.startswith('"')]
    launches: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(io.StringIO("\n".join(table))):
        lid = row.get("ID", "")
        k = launches.setdefault(lid, {"id": int(lid) if lid.isdigit() else lid, "name": row.get("Kernel Name", ""),
                                      "grid": row.get("Grid Size", ""), "block": row.get("Block Size", ""),
                                      "metrics": {}, "rules": []})
        rule = (row.get("Rule Name") or "").strip()
        if rule:
            k["rules"].append({"rule": rule, "type": (row.get("Rule Type") or "").strip(),
                               "text": (row.get("Rule Description") or "").strip(),
                               "speedup": _number(row.get("Estimated Speedup") or "")})
            continue
        section, name, unit = row.get("Section Name", ""), row.get("Metric Name", ""), row.get("Metric Unit", "")
        key = next((v for (s, n), v in _NCU_METRICS.items() if n == name and s in section), None)
        value = _number(row.get("Metric Value", ""))
        if key is None or value is None:
            continue
        base_unit = unit.split("/")[0]
        if key == "duration_ns":
            value *= _TIME.get(unit, 1.0)
        elif key.endswith("_bytes"):
            value *= _BYTES.get(base_unit, 1.0)
        k["metrics"][key] = value
    for k in launches.values():
        m = k["metrics"]
        if "static_smem_bytes" in m or "dynamic_smem_bytes" in m:
            m["smem_per_block_bytes"] = m.get("static_smem_bytes", 0.0) + m.get("dynamic_smem_bytes", 0.0)
    return list(launches.values())


GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def parse_trace(trace: dict | list | str) -> list[dict[str, Any]]:
    """torch.profiler's Chrome trace (``export_chrome_trace``): the GPU work of the profiled call,
    one entry per distinct kernel (or memcpy/memset) in order of first launch, with ``count``,
    ``total_us``, and ``grid``, ``block``, ``registers``, ``shared_bytes`` of its first launch."""
    if isinstance(trace, str):
        trace = json.loads(trace)
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    out: dict[str, dict[str, Any]] = {}
    for ev in sorted((e for e in events if isinstance(e, dict) and e.get("ph") == "X"
                      and e.get("cat") in GPU_CATEGORIES), key=lambda e: e.get("ts", 0)):
        name = ev.get("name", "?")
        a = ev.get("args") or {}
        k = out.setdefault(name, {"name": name, "category": ev["cat"], "count": 0, "total_us": 0.0,
                                  "grid": a.get("grid"), "block": a.get("block"),
                                  "registers": a.get("registers per thread"), "shared_bytes": a.get("shared memory")})
        k["count"] += 1
        k["total_us"] += float(ev.get("dur") or 0.0)
    return list(out.values())


def parse_res_usage(text: str) -> dict[str, dict[str, int]]:
    """``cuobjdump -res-usage``: per function, registers, stack, shared and local memory (spills)."""
    out: dict[str, dict[str, int]] = {}
    fn = None
    for line in text.splitlines():
        m = re.match(r"\s*Function\s+(\S+?):?\s*$", line)
        if m:
            fn = m.group(1)
            continue
        if fn and "REG:" in line:
            vals = dict(re.findall(r"(\w+):(\d+)", line))
            out[fn] = {"registers": int(vals.get("REG", 0)), "stack": int(vals.get("STACK", 0)),
                       "shared": int(vals.get("SHARED", 0)), "local": int(vals.get("LOCAL", 0))}
            fn = None
    return out


_SASS_LINE = r"\s*/\*[0-9a-f]{4,}\*/\s+"  # an instruction line: its address, then the instruction


def _sass_functions(text: str) -> dict[str, list[str]]:
    """``cuobjdump -sass`` per function: its instruction lines as printed (address, instruction,
    encoding comment), what :func:`parse_sass`, :func:`parse_sass_memory_ops` and :func:`split_sass` read."""
    out: dict[str, list[str]] = {}
    fn = None
    for line in text.splitlines():
        m = re.match(r"\s*Function\s*:\s*(\S+)", line)
        if m:
            fn = m.group(1)
            out[fn] = []
        elif fn and re.match(_SASS_LINE + r"\S", line):
            out[fn].append(line)
    return out


def parse_sass(text: str) -> dict[str, int]:
    """``cuobjdump -sass``: instructions per function (NOPs included, as the code holds them)."""
    return {fn: len(lines) for fn, lines in _sass_functions(text).items()}


MEMORY_OPS = ("LDG", "STG", "LDS", "STS", "LDL", "STL", "LD.", "ST.", "LDGSTS", "ATOM", "RED", "LDSM", "UTMA")


def parse_sass_memory_ops(text: str) -> dict[str, dict[str, int]]:
    """``cuobjdump -sass``: per function, its memory instructions by full mnemonic (``LDG.E.128``:
    a 16-byte vector load; ``LDG.E``: a scalar one; ``LDL``/``STL``: spills)."""
    out: dict[str, dict[str, int]] = {}
    for fn, lines in _sass_functions(text).items():
        ops = out[fn] = {}
        for line in lines:
            m = re.match(_SASS_LINE + r"(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
            if m and m.group(1).startswith(MEMORY_OPS):
                ops[m.group(1)] = ops.get(m.group(1), 0) + 1
    return out


def parse_ptx(text: str) -> dict[str, int]:
    """PTX: instructions per ``.entry`` (lines ending in ``;`` inside its body, declarations excluded)."""
    out: dict[str, int] = {}
    fn, depth = None, 0
    for line in text.splitlines():
        s = line.strip()
        m = re.match(r"(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$]+)", s)
        if m:
            fn, depth = m.group(1), 0
            out[fn] = 0
            continue
        if fn is None:
            continue
        depth += s.count("{") - s.count("}")
        if depth <= 0 and s.startswith("}"):
            fn = None
            continue
        if s.endswith(";") and not s.startswith((".reg", ".shared", ".local", ".param", ".loc", "//", ".pragma")):
            out[fn] += 1
    return out


# ---------------------------------------------------------------------------------------- comparing

GROUPS = ("kernel list", "launch configuration", "registers/spills", "throughput", "ncu findings", "settings",
          "compiled code")


def _short(name: str, n: int = 90) -> str:
    name = re.sub(r"^void\s+", "", name or "")
    return name if len(name) <= n else name[: n - 1] + "…"


def _kernel_lists(side: dict) -> tuple[list[str], dict[str, dict], str]:
    """(kernel names in order, {name: facts}, where the list came from)."""
    if side.get("kernels"):
        return [k["name"] for k in side["kernels"]], {k["name"]: k for k in side["kernels"]}, "profiler"
    if side.get("ncu"):
        names: list[str] = []
        facts: dict[str, dict] = {}
        for k in side["ncu"]:
            if k["name"] not in facts:
                names.append(k["name"])
                facts[k["name"]] = {"name": k["name"], "count": 0}
            facts[k["name"]]["count"] += 1
        return names, facts, "ncu"
    return [], {}, ""


def _rel(a: float | None, b: float | None) -> str:
    if a is None or b is None:
        return ""
    if a == 0:
        return "" if b == 0 else "new"
    return f"{(b / a - 1) * 100:+.1f} %"


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


def _launches(k: dict, ncu: dict | None) -> str:
    """``2 launch(es), 27.6 us`` (the profiler's time; else NCU's duration of its one launch)."""
    text = f"{k.get('count', 1)} launch(es)"
    if k.get("total_us"):
        return text + f", {k['total_us']:.3g} us"
    dur = (ncu or {}).get("metrics", {}).get("duration_ns")
    return text + (f", {dur / 1e3:.3g} us each (NCU)" if dur else "")


def _pairs(bn: list[str], hn: list[str]) -> list[tuple[str, str]]:
    """Kernels of base and head to compare: same name first, then the rest in launch order."""
    same = [(n, n) for n in bn if n in hn]
    rb, rh = [n for n in bn if n not in hn], [n for n in hn if n not in bn]
    return same + list(zip(rb, rh))


def _ncu_by_name(side: dict) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for k in side.get("ncu") or []:
        out.setdefault(k["name"], k)
    return out


def _ncu_for(name: str, by_name: dict[str, dict]) -> dict | None:
    """NCU's launch of the profiler's kernel ``name``: NCU prints the function's base name by default
    (``vectorized_elementwise_kernel``), the profiler the whole demangled signature."""
    if name in by_name:
        return by_name[name]
    hits = [n for n in by_name if len(n) > 3 and re.search(rf"(?<!\w){re.escape(n)}(?!\w)", name)]
    return by_name[max(hits, key=len)] if hits else None


THROUGHPUT = (("duration_ns", "duration (ns)"), ("sm_pct", "SM throughput %"), ("dram_pct", "DRAM throughput %"),
              ("memory_pct", "memory throughput %"), ("occupancy_pct", "achieved occupancy %"))


class _Changes:
    """The rows of :func:`compare` as its steps find them; :meth:`ranked` orders them."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, group: str, what: str, kernel: str, b: Any, h: Any, change: str = "", weight: float = 0.0) -> None:
        self.rows.append({"group": group, "what": what, "kernel": kernel, "base": _fmt(b), "head": _fmt(h),
                          "change": change, "_w": weight})

    def ranked(self) -> list[dict[str, Any]]:
        """By group (:data:`GROUPS`' order), then the larger weight first; in the order found otherwise."""
        order = {g: i for i, g in enumerate(GROUPS)}
        self.rows.sort(key=lambda r: (order[r["group"]], -r["_w"]))
        for r in self.rows:
            del r["_w"]
        return self.rows


@dataclass
class _Side:
    """One side's collection and its kernel list (:func:`_kernel_lists`), and NCU's launches by name."""

    data: dict
    names: list[str]
    facts: dict[str, dict]
    source: str
    ncu: dict[str, dict]

    @classmethod
    def of(cls, data: dict) -> _Side:
        return cls(data, *_kernel_lists(data), _ncu_by_name(data))


def compare(base: dict, head: dict) -> list[dict[str, Any]]:
    """The ranked list of what changed between the two sides' collections
    (:func:`xrt.orchestrate.explain_collect.collect_side`): dicts with ``group`` (one of :data:`GROUPS`, in
    that order), ``what``, ``kernel``, ``base``, ``head``, ``change``; within a group, the larger relative
    change first.

    The steps, in order: the kernel lists, then per pair of kernels (:func:`_pairs`) the launch
    configuration, registers, throughput and NCU's findings; the compiled code; the settings."""
    out = _Changes()
    b, h = _Side.of(base), _Side.of(head)
    if b.source and h.source:
        _kernel_list_changes(out, b, h)
    for bk, hk in _pairs(b.names, h.names):
        _kernel_changes(out, b, h, bk, hk)
    _compiled_changes(out, b, h)
    _settings_changes(out, base.get("settings") or {}, head.get("settings") or {})
    return out.ranked()


def _kernel_list_changes(out: _Changes, b: _Side, h: _Side) -> None:
    """Kernels replaced, added and gone; launches per call, per kernel and in all."""
    bf, hf = b.facts, h.facts
    rb, rh = [n for n in b.names if n not in hf], [n for n in h.names if n not in bf]
    for x, y in zip(rb, rh):  # in launch order: the head's kernel in the base's place
        out.add("kernel list", "kernel replaced", f"{_short(x, 40)} → {_short(y, 40)}", _short(x), _short(y),
                "replaced", 3)
    for n in rh[len(rb):]:
        out.add("kernel list", "new kernel", _short(n), "-", _launches(hf[n], _ncu_for(n, h.ncu)), "added", 4)
    for n in rb[len(rh):]:
        out.add("kernel list", "kernel gone", _short(n), _launches(bf[n], _ncu_for(n, b.ncu)), "-", "removed", 2)
    for n in b.names:
        if n in hf and bf[n].get("count") != hf[n].get("count"):
            out.add("kernel list", "launches per call", _short(n), bf[n].get("count"), hf[n].get("count"),
                    _rel(bf[n].get("count"), hf[n].get("count")), 1)
    tb, th = sum(k.get("count", 1) for k in bf.values()), sum(k.get("count", 1) for k in hf.values())
    if tb != th:
        out.add("kernel list", "GPU launches per call (all kernels)", "", tb, th, _rel(tb, th), 0.5)


def _kernel_changes(out: _Changes, b: _Side, h: _Side, bk: str, hk: str) -> None:
    """One pair of kernels: launch configuration and registers (NCU's, else the profiler's), then
    throughput and NCU's findings (or the profiler's time per launch)."""
    label = _short(bk) if bk == hk else f"{_short(bk, 40)} → {_short(hk, 40)}"
    nb, nh = _ncu_for(bk, b.ncu), _ncu_for(hk, h.ncu)
    profiled = bk in b.facts and hk in h.facts
    if nb and nh:
        _ncu_launch_changes(out, label, nb, nh)
    elif profiled:
        for key in ("grid", "block", "shared_bytes"):
            x, y = b.facts[bk].get(key), h.facts[hk].get(key)
            if x != y:
                out.add("launch configuration", key, label, x, y)
    x = (nb or {}).get("metrics", {}).get("registers", b.facts.get(bk, {}).get("registers"))
    y = (nh or {}).get("metrics", {}).get("registers", h.facts.get(hk, {}).get("registers"))
    if x != y and (x is not None or y is not None):
        out.add("registers/spills", "registers per thread", label, x, y, _rel(x, y), abs(_ratio(x, y)))
    if nb and nh:
        _ncu_throughput_changes(out, label, nb, nh)
    elif profiled and b.facts[bk].get("total_us") and h.facts[hk].get("total_us"):
        fb, fh = b.facts[bk], h.facts[hk]
        x, y = fb["total_us"] / max(fb["count"], 1), fh["total_us"] / max(fh["count"], 1)
        out.add("throughput", "profiler time per launch (us)", label, x, y, _rel(x, y), abs(_ratio(x, y)))


def _ncu_launch_changes(out: _Changes, label: str, kb: dict, kh: dict) -> None:
    """Grid, block, waves per SM and shared memory per block, as NCU saw the two launches."""
    for what, x, y in (("grid", kb["grid"], kh["grid"]), ("block", kb["block"], kh["block"])):
        if x != y:
            out.add("launch configuration", what, label, x, y)
    for key, what in (("waves_per_sm", "waves per SM"), ("smem_per_block_bytes", "shared memory per block (B)")):
        x, y = kb["metrics"].get(key), kh["metrics"].get(key)
        if x != y:
            out.add("launch configuration", what, label, x, y, _rel(x, y))


def _ncu_throughput_changes(out: _Changes, label: str, kb: dict, kh: dict) -> None:
    """NCU's throughput metrics (:data:`THROUGHPUT`; the duration first, then by size) and the rule
    findings that only the head has."""
    for key, what in THROUGHPUT:
        x, y = kb["metrics"].get(key), kh["metrics"].get(key)
        if key == "memory_pct" and (x, y) == (kb["metrics"].get("dram_pct"), kh["metrics"].get("dram_pct")):
            continue  # the same numbers as DRAM's (a DRAM-bound kernel): said once
        if x is not None and y is not None and x != y:
            out.add("throughput", what, label, x, y, _rel(x, y), abs(_ratio(x, y)) + (10 if key == "duration_ns"
                                                                                     else 0))
    rb = {r["rule"] for r in kb["rules"]}
    for r in kh["rules"]:
        if r["rule"] not in rb:
            out.add("ncu findings", f"new finding: {r['rule']} ({r['type'] or 'rule'})", label, "-",
                    _short(r["text"], 200), f"est. speedup {r['speedup']:.3g} %" if r.get("speedup") else "")


_CODE_FACTS = (("registers", "registers (ptxas)", "registers/spills"),
               ("local", "local memory / spills (B)", "registers/spills"),
               ("stack", "stack (B)", "registers/spills"),
               ("shared", "static shared memory (B)", "launch configuration"),
               ("sass_instructions", "SASS instructions", "compiled code"),
               ("ptx_instructions", "PTX instructions", "compiled code"))


def _compiled_changes(out: _Changes, b: _Side, h: _Side) -> None:
    """The compiled code: the case's functions (those that ran, else those its config selects), paired
    as the kernels are; else every function of the dump, by name (:func:`code_pairs`)."""
    cb, ch = b.data.get("compiled") or {}, h.data.get("compiled") or {}
    fb, fh = _case_functions(b.data, b.names), _case_functions(h.data, h.names)
    cpairs, note = code_pairs(b.data, h.data)
    if fb and fh and fb[1] == fh[1] == "selected by the config" and fb[0] != fh[0]:
        out.add("kernel list", "kernel the config selects (not observed: no kernel list)",
                " → ".join([", ".join(fb[0]), ", ".join(fh[0])]), ", ".join(fb[0]), ", ".join(fh[0]), "replaced", 3)
    for xn, yn in cpairs:
        x, y = cb.get(xn), ch.get(yn)
        label = (xn if xn == yn else f"{xn} → {yn}") + note
        if x is None or y is None:
            out.add("compiled code", "function only on one side", label, "present" if x else "-",
                    "present" if y else "-")
            continue
        for key, what, group in _CODE_FACTS:
            if x.get(key) != y.get(key):
                out.add(group, what, label, x.get(key), y.get(key), _rel(x.get(key), y.get(key)),
                        abs(_ratio(x.get(key), y.get(key))) * 0.5)
        mx, my = x.get("memory_ops") or {}, y.get("memory_ops") or {}
        if mx != my and (mx or my):
            out.add("compiled code", "memory instructions (SASS)", label, _ops_text(mx), _ops_text(my), weight=5)


def _settings_changes(out: _Changes, sb: dict, sh: dict) -> None:
    """Provider, tuning space, config and its source, torch and Triton versions, and the knobs in the
    environment."""
    for key, what in (("provider_resolved", "provider"), ("space", "tuning space"), ("config", "config"),
                      ("config_source", "config from"), ("torch", "torch"), ("triton", "triton")):
        if sb.get(key) != sh.get(key):
            out.add("settings", what, "", sb.get(key), sh.get(key), weight=1 if key == "config" else 0)
    eb, eh = sb.get("env") or {}, sh.get("env") or {}
    for k in sorted(set(eb) | set(eh)):
        if eb.get(k) != eh.get(k):
            out.add("settings", f"env {k}", "", eb.get(k), eh.get(k))


def code_pairs(base: dict, head: dict) -> tuple[list[tuple[str, str]], str]:
    """The compiled functions to compare, (base's, head's), and the note that says how they were
    chosen: the case's functions, paired as the kernels are; else every function, by name."""
    bn, _, _ = _kernel_lists(base)
    hn, _, _ = _kernel_lists(head)
    fb, fh = _case_functions(base, bn), _case_functions(head, hn)
    if fb and fh:
        return _pairs(fb[0], fh[0]), "" if fb[1] == fh[1] == "ran" else f" ({fh[1]})"
    names = sorted(set(base.get("compiled") or {}) | set(head.get("compiled") or {}))
    return [(f, f) for f in names], " (not known to run: no kernel list)"


def split_sass(text: str) -> dict[str, list[str]]:
    """``cuobjdump -sass`` per function: its instructions without addresses and encodings (what a
    diff of two compilations should compare)."""
    out: dict[str, list[str]] = {}
    for fn, lines in _sass_functions(text).items():
        matches = (re.match(_SASS_LINE + r"(.*?)\s*;?\s*(?:/\*.*\*/)?\s*$", line) for line in lines)
        out[fn] = [" ".join(m.group(1).split()) for m in matches if m and m.group(1)]
    return out


def sass_diffs(base_dir: Path, head_dir: Path, pairs: list[tuple[str, str]], note: str,
               keep: Path | None) -> list[dict[str, Any]]:
    """Unified diffs of the SASS of each compared pair that differs: the counts (rows of the table)
    and, with ``keep``, the diff itself in ``keep/diffs/``."""
    import difflib

    def load(d: Path) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for f in sorted(d.glob("*.sass")) if d.is_dir() else []:
            out.update(split_sass(f.read_text(errors="replace")))
        return out

    sb, sh = load(base_dir), load(head_dir)
    rows = []
    for xn, yn in pairs:
        a, b = sb.get(xn), sh.get(yn)
        if a is None or b is None or a == b:
            continue
        diff = list(difflib.unified_diff(a, b, f"base/{xn}", f"head/{yn}", lineterm="", n=2))
        added = sum(1 for ln in diff if ln.startswith("+") and not ln.startswith("+++"))
        removed = sum(1 for ln in diff if ln.startswith("-") and not ln.startswith("---"))
        row = {"base_fn": xn, "head_fn": yn, "added": added, "removed": removed, "note": note}
        if keep is not None:
            d = keep / "diffs"
            d.mkdir(parents=True, exist_ok=True)
            name = f"{xn}.sass.diff" if xn == yn else f"{xn}--{yn}.sass.diff"
            (d / name).write_text("\n".join(diff) + "\n")
            row["file"] = f"diffs/{name}"
        rows.append(row)
    return rows


def _ops_text(ops: dict[str, int]) -> str:
    return ", ".join(f"{k} ×{v}" for k, v in sorted(ops.items())) or "-"


_SUFFIX = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}


def _case_functions(side: dict, ran: list[str]) -> tuple[list[str], str] | None:
    """The compiled functions of the case, in launch order, and how they were told: ``ran`` (the
    kernel list names them), ``selected by the config`` (CUDA C's ``<op>_<version>_<dtype>``
    naming, without a kernel list) or ``the op's kernels`` (a Triton dump); None when unknown."""
    compiled = side.get("compiled") or {}
    if not compiled:
        return None
    if ran:
        out = [f for n in ran for f in compiled if f == n or re.search(rf"(?<!\w){re.escape(f)}(?!\w)", n)]
        return (list(dict.fromkeys(out)), "ran") if out else None
    st = side.get("settings") or {}
    cfg, dtype = st.get("config") or {}, _SUFFIX.get(str(st.get("dtype")))
    if isinstance(cfg, dict) and cfg.get("version") and dtype:
        out = [f for f in compiled if f.split("_")[-1] == dtype and str(cfg["version"]) in f.split("_")]
        if out:
            return out, "selected by the config"
    if str(st.get("provider_resolved", "")).startswith("triton"):
        return sorted(compiled), "the op's kernels"
    return None


def _ratio(a: Any, b: Any) -> float:
    try:
        return (float(b) / float(a)) - 1 if float(a) else 1.0
    except (TypeError, ValueError):
        return 0.0


def diff_rows(diffs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The table's rows for :func:`sass_diffs` (last: the compiled-code group is the last one)."""
    return [{"group": "compiled code", "what": "SASS diff (lines)",
             "kernel": (d["base_fn"] if d["base_fn"] == d["head_fn"] else f"{d['base_fn']} → {d['head_fn']}")
             + d.get("note", ""), "base": f"-{d['removed']}", "head": f"+{d['added']}",
             "change": d.get("file", "")} for d in diffs]


# ---------------------------------------------------------------------------------------- rendering

def skipped(payload: dict) -> list[str]:
    out = []
    for label in ("base", "head"):
        for part, state in (payload.get("sides", {}).get(label, {}).get("parts") or {}).items():
            if state != "ok":
                out.append(f"{label}: {part}: {state}")
    return out


def _cell(v: Any) -> str:
    return lit(v, None, cell=True)


def collected_on(payload: dict) -> str:
    """The machine an explanation was collected on: its full machine name where the payload has it
    (older payloads carry only the host name, e.g. ``vm``, which is then marked as a host)."""
    if payload.get("collected_on"):
        return str(payload["collected_on"])
    return f"host {payload['host']}" if payload.get("host") else "?"


def render_markdown(payload: dict, heading: str = "###") -> str:
    """The explanation as Markdown. Names and collected values (the benchmark, its parameters, the
    host, kernel names, settings) come from the commits and the machine, so each goes through
    :func:`xrt.track.markdown.lit`."""
    c = payload["case"]
    lines = [f"{heading} xrt explain: {lit(c['benchmark'], None, code=True)} [{_cell(payload['param_key'])}]",
             "", f"base `{payload['base'][:10]}` → head `{payload['head'][:10]}`"
             + (f" (regression {lit(payload['regression_id'], code=True)}, {payload['ratio']:.3f}×)"
                if payload.get("regression_id") and payload.get("ratio") else "")
             + f"; collected on {lit(collected_on(payload))}"
             + (f" ({lit(payload['gpu'])})" if payload.get("gpu") else "")
             + f"; ncu clock control: {lit(payload['ncu']['clock_control'], code=True)}.", ""]
    rows = payload.get("changes") or []
    if rows:
        lines += ["| # | group | what | kernel | base | head | change |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {i} | {_cell(r['group'])} | {_cell(r['what'])} | {_cell(r['kernel'] or '-')} | "
                  f"{_cell(r['base'])} | {_cell(r['head'])} | {_cell(r['change'])} |" for i, r in enumerate(rows, 1)]
    else:
        lines.append("Nothing that was collected differs between base and head.")
    src = payload.get("sources")
    if src:
        lines += ["", "Sources that change this series' measurements, changed between base and head:", ""]
        lines += [f"- {lit(f['path'], code=True)} (+{f['added']} −{f['removed']})" for f in src]
    elif src is not None:
        lines += ["", "No source that this series' measurements depend on changed between base and head."]
    sk = skipped(payload)
    if sk:
        lines += ["", "Not collected:", ""] + [f"- {lit(s, None)}" for s in sk]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------- storing

def save(con: Any, payload: dict, markdown: str) -> None:
    """Store (replace) the explanation of this case and commit pair (and regression, if any), on a
    write connection (:func:`xrt.db.store.write`)."""
    c = payload["case"]
    key = [payload.get("regression_id") or "", c["benchmark"], payload["param_key"], payload["base"], payload["head"]]

    con.execute("DELETE FROM explanations WHERE coalesce(regression_id, '') = ? AND benchmark = ? AND "
                "param_key = ? AND base_commit = ? AND head_commit = ?", key)
    con.execute("INSERT INTO explanations VALUES (?, ?, ?, ?, ?, ?, now()::TIMESTAMP, ?, ?, ?)",
                [payload.get("regression_id"), payload.get("machine"), c["benchmark"], payload["param_key"],
                 payload["base"], payload["head"], payload.get("host"), json.dumps(payload, default=str),
                 markdown])


def stored(con: Any, *, regression_id: str | None = None, head: str | None = None) -> list[dict]:
    """Stored explanations (newest first), of one regression or of cases whose head is ``head``."""
    where, args = [], []
    if regression_id is not None:
        where.append("regression_id = ?")
        args.append(regression_id)
    if head is not None:
        where.append("head_commit = ?")
        args.append(head)
    cur = con.execute("SELECT * FROM explanations" + (f" WHERE {' AND '.join(where)}" if where else "")
                      + " ORDER BY created_at DESC", args)
    names = [d[0] for d in cur.description]
    rows = [dict(zip(names, r)) for r in cur.fetchall()]
    for r in rows:
        r["payload"] = json.loads(r["payload"]) if r.get("payload") else {}
    return rows


def for_gate(con: Any, head: str, items: list[dict]) -> list[str]:
    """Markdown of the stored explanations of the gate's slower series at ``head`` (newest each),
    rendered again from the stored payload: the stored Markdown is text anyone with the file could
    have written, and the summary goes to a pull request."""
    want = {(r["benchmark"], r["param_key"]) for r in items}
    seen, out = set(), []
    for row in stored(con, head=head):
        key = (row["benchmark"], row["param_key"])
        if key in want and key not in seen:
            seen.add(key)
            try:
                out.append(render_markdown(row["payload"]))
            except (KeyError, TypeError, ValueError):  # a payload that is not an explanation's: left out
                continue
    return out
