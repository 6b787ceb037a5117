"""The ``auto`` tables from the results database: per GPU model, (op, dtype, shape bucket) -> the
provider that measured fastest, with each provider's median (``xrt kernels auto-table``).

What counts: the suites' device-time series ``bench_ops.<Op>.time_op`` at config ``default`` (each
provider as ``auto`` would run it: its tuned or default config), values that ran (status ok). For
each (op, dtype, shape) the newest commit that measured torch and at least one other provider gives
every provider's time, the median over that GPU model's machines; providers are never compared
across commits. The shapes of a bucket (:func:`xrt.kernels.autotable.bucket`) give each provider the
median of its times; the fastest wins, by a margin over torch (:func:`xrt.kernels.autotable.fastest`).
The layout and the runtime's rule: :mod:`xrt.kernels.autotable`.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from xrt.bench.suite import class_name, parse_shape
from xrt.db import store
from xrt.kernels import autotable, defs

SERIES = "time_op"  # bench_ops' device time per call
CONFIG = "default"


def _benchmarks() -> dict[str, str]:
    """asv benchmark name -> op, for every op the suites time."""
    return {f"bench_ops.{class_name(d.name)}.{SERIES}": d.name for d in defs.OPS.values() if d.shapes}


def _unquote(v: Any) -> str:
    return str(v).strip("'\"")


def rows(db_path: str | Path) -> list[tuple]:
    """(gpu model, machine, commit, commit date, op, shape, dtype, provider, seconds) for every
    value that counts (see the module docstring)."""
    names = _benchmarks()
    with store.read(db_path) as con:
        order = {n: list(p or []) for n, p in con.execute(
            "SELECT name, param_names FROM benchmarks WHERE name IN (SELECT unnest(?))", [list(names)]).fetchall()}
        got = con.execute(
            """SELECT coalesce(u.gpu_model, m.gpu_model), r.machine, r.commit_hash, u.commit_date, r.benchmark,
                      r.params, r.value
               FROM results r JOIN runs u USING (run_id) LEFT JOIN machines m ON m.machine = r.machine
               WHERE r.benchmark IN (SELECT unnest(?)) AND r.status = 'ok' AND r.value IS NOT NULL""",
            [list(names)]).fetchall()
    out = []
    for gpu, machine, commit, date, bench, params, value in got:
        pn = order.get(bench) or ["shape", "dtype", "provider", "config"]
        p = dict(zip(pn, (_unquote(v) for v in params)))
        if not gpu or p.get("config", CONFIG) != CONFIG or not {"shape", "dtype", "provider"} <= set(p):
            continue
        out.append((gpu, machine, commit, date, names[bench], p["shape"], p["dtype"], p["provider"], float(value)))
    return out


def _newest_comparison(by_commit: dict[tuple, dict[str, list[float]]]) -> tuple[tuple, dict[str, float]] | None:
    """The newest (date, commit) whose times hold torch and another provider, with each provider's
    median over machines; None when no commit compared torch with anything."""
    for key in sorted(by_commit, key=lambda k: (k[0] is not None, k[0] or "", k[1]), reverse=True):
        times = by_commit[key]
        if autotable.TORCH in times and len(times) > 1:
            return key, {p: statistics.median(v) for p, v in times.items()}
    return None


def tables(db_path: str | Path) -> dict[str, dict[str, Any]]:
    """GPU model -> its table (the JSON document :class:`xrt.kernels.autotable.Table` reads)."""
    # gpu -> (op, dtype, shape) -> (date, commit) -> provider -> [seconds per machine]
    found: dict[str, dict[tuple, dict[tuple, dict[str, list[float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list))))
    machines: dict[str, set[str]] = defaultdict(set)
    for gpu, machine, commit, date, op, shape, dtype, prov, value in rows(db_path):
        when = date.isoformat(timespec="seconds") if date is not None else None
        found[gpu][(op, dtype, shape)][(when, commit)][prov].append(value)
        machines[gpu].add(machine)
    out = {}
    for gpu, cases in sorted(found.items()):
        # (op, dtype, bucket) -> [(shape, (date, commit), medians)]
        buckets: dict[tuple, list] = defaultdict(list)
        for (op, dtype, shape), by_commit in cases.items():
            newest = _newest_comparison(by_commit)
            if newest is not None:
                buckets[(op, dtype, autotable.bucket(parse_shape(shape)))].append((shape, *newest))
        ops: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
        for (op, dtype, b), measured in sorted(buckets.items()):
            provs = set.intersection(*(set(m) for _, _, m in measured))
            med = {p: statistics.median(m[p] for _, _, m in measured) for p in sorted(provs)}
            date, commit = max(when for _, when, _ in measured)
            ops[op].setdefault(dtype, {})[b] = {
                "provider": autotable.fastest(med),
                "median_s": med, "shapes": sorted(s for s, _, _ in measured), "commit": commit, "date": date}
        out[gpu] = {"schema": autotable.SCHEMA, "gpu": gpu, "bucket": autotable.BUCKET_RULE,
                    "series": f"bench_ops.<Op>.{SERIES} at config {CONFIG}", "machines": sorted(machines[gpu]),
                    "ops": dict(ops)}
    return out


def write(tables_: dict[str, dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """Write each table as ``<out_dir>/<model key>.json``; the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for gpu, doc in sorted(tables_.items()):
        autotable.Table(doc)  # what the runtime will read: a bad document fails here, not there
        path = out / f"{autotable.model_key(gpu)}.json"
        path.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        paths.append(path)
    return paths
