"""Alerts: the steps of one machine at one commit as one thing to read, with their cause (issue #19)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from xrt.cli import main  # noqa: E402
from xrt.db import store  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402
from xrt.track import env, synth  # noqa: E402

N = 16


def _history(tmp_path, step_at: int, *, torch_from: int | None = None, driver_from: int | None = None,
             sidecar: bool = True):
    """Both synthetic series 15 % slower from ``step_at`` on; the software recorded changes where told."""
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, N)
    root, db = tmp_path / "results", tmp_path / "xrt.duckdb"
    rng = np.random.default_rng(5)
    for i, c in enumerate(commits):
        f = 1.15 if i >= step_at else 1.0
        kw = {"torch": "2.6.0" if torch_from is not None and i >= torch_from else "2.5.1",
              "driver": "570.1" if driver_from is not None and i >= driver_from else "560.35"}
        synth.write_run(root, "h100", c, synth.samples(rng, 50e-6 * f), synth.samples(rng, 5e-6 * f), i,
                        1980 if sidecar else None, **kw)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    return commits, db


def _alerts(db, capsys):
    assert main(["regressions", "--db", str(db), "--format", "json", "--no-save"]) == 0
    return json.loads(capsys.readouterr().out)


def test_two_series_that_moved_at_one_commit_are_one_code_alert(tmp_path, capsys):
    commits, db = _history(tmp_path, 8)
    alerts = _alerts(db, capsys)
    assert len(alerts) == 1, alerts
    a = alerts[0]
    assert (a["machine"], a["commit"], a["previous_commit"]) == ("h100", commits[8], commits[7])
    assert a["cause"] == "code" and a["counts"] == {"regression": 2} and len(a["records"]) == 2
    assert main(["regressions", "--db", str(db), "--no-save"]) == 0
    out = capsys.readouterr().out
    assert f"h100 at {commits[8][:10]} (from {commits[7][:10]}): 2 regressions; code change" in out
    assert "(1 alert, 2 steps)" in out
    assert main(["regressions", "--db", str(db), "--no-save", "--flat"]) == 0
    assert "(2 steps)" in capsys.readouterr().out


def test_an_environment_change_at_the_step_is_told_apart(tmp_path, capsys):
    commits, db = _history(tmp_path, 8, torch_from=8)
    (a,) = _alerts(db, capsys)
    assert a["cause"] == "environment" and a["env_changes"] == ["torch: 2.5.1 → 2.6.0"]
    assert main(["regressions", "--db", str(db), "--no-save", "--format", "markdown"]) == 0
    assert "environment change (not a code regression): ` torch: 2.5.1 → 2.6.0 `" in capsys.readouterr().out


def test_an_environment_change_elsewhere_does_not_excuse_the_step(tmp_path, capsys):
    commits, db = _history(tmp_path, 8, driver_from=4)
    (a,) = _alerts(db, capsys)
    assert a["cause"] == "code", a


def test_without_a_sidecar_the_cause_cannot_be_told(tmp_path, capsys):
    commits, db = _history(tmp_path, 8, sidecar=False)
    (a,) = _alerts(db, capsys)
    assert a["cause"] == "unknown" and a["env_changes"] == []


def test_environment_reads_columns_and_facts_and_says_unknown_not_same(tmp_path):
    commits, db = _history(tmp_path, 8, torch_from=8)

    def add_facts(con):
        con.execute("UPDATE runs SET facts = json_object('cpu_model', 'EPYC 9654', 'kernel', '6.8') "
                    "WHERE commit_hash = ?", [commits[9]])

    store.write(db, add_facts)
    with store.read(db) as con:
        envs = env.environments(con, "h100")
    assert envs[("h100", commits[7])]["torch"] == "2.5.1" and envs[("h100", commits[8])]["torch"] == "2.6.0"
    # facts the sidecar began recording later count only where both sides have them
    assert env.changes(envs[("h100", commits[8])], envs[("h100", commits[9])]) == []
    later = dict(envs[("h100", commits[9])], cpu_model="EPYC 9754", kernel="6.9")
    assert env.changes(envs[("h100", commits[9])], later) == ["cpu_model: EPYC 9654 → EPYC 9754",
                                                             "kernel: 6.8 → 6.9"]
    assert env.changes(envs[("h100", commits[9])], envs[("h100", commits[9])]) == []
    assert env.changes(None, envs[("h100", commits[9])]) is None
