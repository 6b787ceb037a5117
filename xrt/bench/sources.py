"""Which source files each benchmarked unit's measurements depend on: the one home of op -> sources.

``xrt bench run --changed-only`` re-measures, per commit, only the units whose sources changed
since the commit last measured on that machine, and records the others as *carried forward*
(``<results>/<machine>/<commit>.carried``, ingested into the ``carried`` table); ``xrt gate``
judges a carried series on the samples of the commit it was measured at. Both import this module;
nothing else says which file belongs to which op.

A unit is an op of :data:`xrt.bench.specs.SPECS` (its ``bench_ops``, ``bench_host`` and ``bench_compiled`` series) or
``allocator`` (``bench_allocator``). A changed file is, in this order:

* not measured (:data:`NOT_MEASURED`: docs, tests, the dashboard, the database and tracker code,
  scripts, stored results except the tuner's): it changes no unit;
* one unit's own (:func:`own_files`: its kernels, launchers, reference, definition, op file,
  tuned configs; the kernels under :data:`KERNEL_DIRS`, in either layout; and the Triton kernels and
  reference of the ops its definition ``uses``): it changes that unit (and the others that own it);
* anything else (the timer, the suites, the specs, the launch helpers, the runtime, the build,
  a file this module does not know): it changes *every* unit. Unknown means re-measure: a unit
  is only ever carried when every changed file is known not to touch it.
"""

from __future__ import annotations

import fnmatch
import re

ALLOCATOR = "allocator"

# Files no measurement depends on (fnmatch patterns, "*" crosses "/").
NOT_MEASURED = (
    "docs/*", "tests/*", "dashboard/*", "scripts/*", "xrt/db/*", "xrt/track/*", "xrt/orchestrate/*", ".github/*",
    "*.md",
    "Makefile", ".gitignore", "results/asv/*", "results/html/*", "results/gpu/*", "results/*.md",
)

# Where the kernels live: the package's own folder, and the top-level kernels/ of the commits before
# they moved into it (``xrt bench run`` diffs old commits against each other too).
KERNEL_DIRS = ("xrt/kernels", "kernels")
_KERNEL_FILES = ("triton/{f}.py", "cuda/{f}.cu", "cuda/{f}.py", "reference/{f}.py", "defs/{f}.py")
_OP_FILES = (
    *(f"{d}/{k}" for d in KERNEL_DIRS for k in _KERNEL_FILES), "xrt/pytorch/ops/{f}.py", "results/tuned/{op}.json",
)
# The files of an op that another op ``uses`` (its definition's ``uses``: the kernels it imports).
_ALLOCATOR_FILES = ("xrt/pytorch/allocator.py", "benchmarks/bench_allocator.py")
ALLOCATOR_BENCHMARKS = ("bench_allocator.AllocatorFragmentation.track_peak_allocated",
                        "bench_allocator.AllocatorFragmentation.track_peak_reserved")


def units() -> list[str]:
    from xrt.bench import specs

    return sorted(specs.SPECS) + [ALLOCATOR]


def own_files(unit: str) -> list[str]:
    """The files only ``unit`` depends on (patterns relative to the repository root); a model's
    step adds those of the ops it uses (``OpDef.uses``)."""
    if unit == ALLOCATOR:
        return list(_ALLOCATOR_FILES)
    if unit not in units():
        raise ValueError(f"no benchmarked unit {unit!r}; known: {', '.join(units())}")
    from xrt.bench import specs

    used = [u for u in specs.SPECS[unit].uses if u in specs.SPECS]
    return [p.format(f=specs.SPECS[u].module or u, op=u) for u in (unit, *used) for p in _OP_FILES]


def _match(path: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(path, p) for p in patterns)


def affected(changed: list[str]) -> dict[str, list[str]]:
    """Per unit, the changed files (paths relative to the root) that change its measurements."""
    us = units()
    out: dict[str, list[str]] = {u: [] for u in us}
    own = {u: own_files(u) for u in us}
    for path in changed:
        if _match(path, NOT_MEASURED) and not path.startswith("results/tuned/"):
            continue
        owners = [u for u in us if _match(path, own[u])]
        for u in owners or us:  # a file no unit owns is shared: every unit
            out[u].append(path)
    return {u: files for u, files in out.items() if files}


def unit_of_benchmark(name: str) -> str | None:
    """``bench_ops.Square.time_op`` (or its host or compiled twin) -> ``square``; ``bench_allocator.*``
    -> ``allocator``; else None."""
    from xrt.bench.suite import class_name, series_of

    if name.split(".")[0] == "bench_allocator":
        return ALLOCATOR
    found = series_of(name)
    if found is not None:
        for u in units():
            if u != ALLOCATOR and class_name(u) == found[1]:
                return u
    return None


def bench_regex(selected: list[str], user: str | None = None) -> str:
    """An asv ``--bench`` regex for the benchmarks of ``selected`` units (and, if given, ``user``'s)."""
    from xrt.bench.suite import SERIES, class_name

    modules = "|".join(module for module, _ in SERIES.values())
    alts = [rf"({modules})\.{class_name(u)}\." for u in selected if u != ALLOCATOR]
    if ALLOCATOR in selected:
        alts.append(r"bench_allocator\.")
    ours = "^(" + "|".join(alts) + ")"
    return ours if not user else f"(?=.*(?:{user})){ours}"


def units_matching(user: str | None) -> list[str]:
    """The units with at least one benchmark that asv's ``--bench user`` (re.search) selects."""
    from xrt.bench.suite import SERIES, class_name

    if not user:
        return units()
    try:
        rx = re.compile(user)
    except re.error as e:
        raise ValueError(f"--bench {user!r}: not a regular expression ({e})") from None
    out = []
    for u in units():
        names = (list(ALLOCATOR_BENCHMARKS) if u == ALLOCATOR else
                 [f"{module}.{class_name(u)}.{method}" for module, method in SERIES.values()])
        if any(rx.search(n) for n in names):
            out.append(u)
    return out


def pairs_matching(user: str | None, selected: list[str]) -> list[tuple[str, str]]:
    """(series, op) of the ``selected`` units whose benchmark ``--bench user`` runs: what the one
    ``setup_cache`` measures (``^bench_compiled\\.Square\\.`` with VectorAdd's device series
    selected: no compiled series of VectorAdd)."""
    from xrt.bench.suite import SERIES, class_name

    ops = [u for u in selected if u != ALLOCATOR]
    rx = re.compile(user) if user else None
    return [(s, u) for s, (module, method) in SERIES.items() for u in ops
            if rx is None or rx.search(f"{module}.{class_name(u)}.{method}")]


def series_matching(user: str | None, selected: list[str]) -> list[str]:
    """Which suite series (``device``: ``bench_ops``, ``host``: ``bench_host``, ``compiled``:
    ``bench_compiled``; :data:`xrt.bench.suite.SERIES`) ``--bench user`` runs
    for the ``selected`` units (:func:`pairs_matching`)."""
    from xrt.bench.suite import SERIES

    if not user:
        return list(SERIES)
    got = {s for s, _ in pairs_matching(user, selected)}
    return [s for s in SERIES if s in got]
