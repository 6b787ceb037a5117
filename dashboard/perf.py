"""Each page's render time on a database of one million values (the table in docs/dashboard.md).

    .venv/bin/python dashboard/perf.py [--work DIR]

Builds ``xrt db perf``'s synthetic database (``xrt.db.perf.build_synthetic``), adds one 30 % step
and a ``tuning_results`` table, judges every series' newest commit (as ``xrt db ingest`` does) and
stores the regressions, then times every page under AppTest: cold
(cache cleared) and warm, best and median of 3. A measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

APP = Path(__file__).resolve().parent / "app.py"


def build(db: Path) -> None:
    from xrt.db import store
    from xrt.db.perf import build_synthetic
    from xrt.track import newest, regressions

    build_synthetic(db, 1_000_000)

    def fn(con):
        con.execute("""UPDATE results SET value = value * 1.3, samples = list_transform(samples, lambda x: x * 1.3)
            WHERE machine = 'synthetic-0' AND benchmark = 'ops.Op7.time_op' AND param_index = 2
              AND commit_hash IN (SELECT hash FROM commits WHERE position >= 800)""")
        # tuning_results: created by the schema's migration 4 (xrt.db.schema)
        rows = [[f"op{o}", f"synthetic-{m}", str(1 << (10 + s)), "float32", "triton",
                 json.dumps({"BLOCK": 1 << (5 + b), "num_warps": 1 << w, "num_stages": st}),
                 1e-5 * (1 + (b - 3) ** 2 + w + st), 100.0]
                for o in range(5) for m in range(4) for s in range(3) for b in range(8) for w in range(4)
                for st in range(2)]
        con.executemany("INSERT INTO tuning_results VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        newest.after_ingest(con, echo=lambda s: None)  # what `xrt db ingest` does last: the grid's statuses
        regressions.save(con, regressions.detect_db(con))

    store.write(db, fn)


def measure(db: Path, repeat: int = 3) -> list[tuple[str, float, float, float]]:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    from xrt.db.query import query
    from xrt.db.store import DB_ENV

    os.environ[DB_ENV] = str(db)
    rid = query(db, "SELECT id FROM regressions ORDER BY ratio DESC LIMIT 1")[1]
    cm = [h for (h,) in query(db, "SELECT hash FROM commits ORDER BY position DESC LIMIT 2")[1]]
    pages = {"overview": ({}, None), "detail": ({"id": rid[0][0] if rid else ""}, "detail"),
             "explorer": ({"m": ["synthetic-0", "synthetic-1"]}, "explorer"),
             "compare": ({"ma": "synthetic-0", "ca": cm[1], "mb": "synthetic-0", "cb": cm[0], "rows": "all"},
                         "compare"),
             "tuning": ({}, "tuning")}
    AppTest.from_file(str(APP), default_timeout=120).run()  # imports paid once
    out = []
    for name, (qp, page) in pages.items():
        cold, warm = [], []
        for _ in range(repeat):
            st.cache_data.clear()
            for kind in ("cold", "warm"):
                at = AppTest.from_file(str(APP), default_timeout=120)
                for k, v in qp.items():
                    at.query_params[k] = v
                if page:
                    at.run()  # the default page first, not timed
                    if kind == "cold":
                        st.cache_data.clear()
                    t0 = time.perf_counter()
                    at.switch_page(f"views/{page}.py").run()
                else:
                    t0 = time.perf_counter()
                    at.run()
                dt = time.perf_counter() - t0
                assert not at.exception and not at.error, (name, [e.value for e in at.error])
                (cold if kind == "cold" else warm).append(dt)
        out.append((name, min(cold), statistics.median(cold), min(warm)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, help="keep the database here [a temporary directory]")
    args = ap.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="xrt-dash-perf-"))
    try:
        db = work / "synthetic-1m.duckdb"
        if not db.exists():
            build(db)
        print("| page | cold, best (s) | cold, median (s) | warm, best (s) |\n|---|---:|---:|---:|")
        for name, a, b, c in measure(db):
            print(f"| {name} | {a:.2f} | {b:.2f} | {c:.2f} |")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
