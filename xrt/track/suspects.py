"""Withdrawing suspected regressions the detector could have confirmed and did not.

A series' newest commit is judged at ingest (:mod:`xrt.track.newest`) and a slowdown is stored as a
suspected regression; the detector's write (:func:`xrt.track.regressions.save`) settles those rows.
Both modules use this one, so neither imports the other for it.
"""

from __future__ import annotations

from typing import Any

from xrt.track.detect import DetectConfig
from xrt.track.load import order_expr


def settle(con: Any, scope_machine: str | None = None, min_points: int | None = None) -> int:
    """Inside the detector's write (:func:`xrt.track.regressions.save`): withdraw the suspected rows,
    still ``new``, that the detector could have found and did not: ``min_points`` commits with values
    before the step and twice that after it. (With fewer after it, a lasting step of a short series
    can still be missed: the step's own difference dominates the detector's run-to-run σ; measured
    on synthetic 1.3x steps, tests/test_track_newest.py.) Returns how many went."""
    k = DetectConfig().min_points if min_points is None else min_points
    order, where = order_expr(con)
    col = order.split(".")[-1]
    scope = "" if scope_machine is None else " AND g.machine = ?"
    sql = f"""
        SELECT g.id FROM regressions g JOIN commits gc ON gc.hash = g."commit"
        WHERE coalesce(g.suspected, false) AND g.status = 'new'{scope} AND (
            SELECT count(DISTINCT r.commit_hash) FILTER (c.{col} < gc.{col}) >= ?
               AND count(DISTINCT r.commit_hash) FILTER (c.{col} > gc.{col}) >= 2 * ?
            FROM results r JOIN commits c ON c.hash = r.commit_hash
            WHERE {where} AND r.machine = g.machine AND r.benchmark = g.benchmark
              AND r.param_key = g.param_key AND r.status = 'ok')"""
    ids = [r[0] for r in con.execute(sql, ([scope_machine] if scope_machine else []) + [k, k]).fetchall()]
    for rid in ids:
        con.execute("DELETE FROM regressions WHERE id = ?", [rid])
    return len(ids)
