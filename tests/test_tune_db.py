"""The tuner's journals in the database (tuning_results, migration 8) and on the dashboard's Tuning page."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT  # noqa: F401  (puts the tests' folder on sys.path for dashboard_checks)

from xrt.db import store, tuning
from xrt.db.ingest import ingest
from xrt.kernels import spaces

H = spaces.space_hash("square.triton")
NAME = "journal/ci-gpu/square.triton-float32-4096.jsonl"


def rec(i, bs, w, status="timed", t=None, **kw):
    cfg = {"BLOCK_SIZE": bs, "num_warps": w}
    r = {"key": f"BLOCK_SIZE={bs},num_warps={w}", "config": cfg, "status": status, "space_hash": H, "op": "square",
         "provider": "triton", "shape": "4096", "dtype": "float32", "device": "nvidia-h100", "strategy": "model",
         "seed": 0, "eval": i, "default": (bs, w) == (1024, 4), "at": 1.8e9 + i, "ran_on": "ci-gpu",
         "machine": "ci-gpu", "phase": "time" if status == "timed" else "compile"}
    if status == "timed":
        r.update(median_s=t, rel_noise=0.01, n=20)
    r.update(kw)
    return r


SEARCH = [rec(0, 1024, 4, t=10e-6), rec(1, 512, 2, "crash", error="the worker died (exit -11, SIGSEGV)"),
          rec(2, 2048, 2, "timeout", error="no answer within 8 s"), rec(3, 256, 8, "wrong", max_rel_err=0.5),
          rec(4, 4096, 4, t=8e-6), rec(5, 2048, 8, t=9e-6), rec(6, 8192, 8, t=7.5e-6)]


def write_journal(tuned, recs, name=NAME, tail=""):
    p = tuned / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("".join(json.dumps(r) + "\n" for r in recs) + tail)
    return p


@pytest.fixture
def tuned_db(tmp_path):
    from db_fixtures import asvgen

    results = asvgen.make_results(tmp_path / "results" / "asv", {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1))})
    write_journal(tmp_path / "results" / "tuned", SEARCH)
    return results, tmp_path / "results" / "tuned", tmp_path / "x.duckdb"


def rows(db, sql="SELECT config_key, status, median_s, error, eval, is_default, space_hash, op, provider, shape, "
                 "dtype, device, machine FROM tuning_results ORDER BY eval"):
    with store.read(db) as con:
        return con.execute(sql).fetchall()


def test_ingest_loads_every_evaluation_failures_included_and_is_idempotent(tuned_db):
    results, tuned, db = tuned_db
    rep = ingest(results, db, echo=lambda s: None)  # tuned/ next to results/asv: found by itself
    assert rep.journals == (1, 0, 7) and "tuner journals: 1 loaded (7 evaluations)" in rep.summary()
    got = rows(db)
    assert [(k, s) for k, s, *_ in got] == [
        ("BLOCK_SIZE=1024,num_warps=4", "timed"), ("BLOCK_SIZE=512,num_warps=2", "crash"),
        ("BLOCK_SIZE=2048,num_warps=2", "timeout"), ("BLOCK_SIZE=256,num_warps=8", "wrong"),
        ("BLOCK_SIZE=4096,num_warps=4", "timed"), ("BLOCK_SIZE=2048,num_warps=8", "timed"),
        ("BLOCK_SIZE=8192,num_warps=8", "timed")]
    assert got[1][2] is None and "SIGSEGV" in got[1][3] and got[0][5] is True and got[1][5] is False
    assert {r[6:] for r in got} == {(H, "square", "triton", "4096", "float32", "nvidia-h100", "ci-gpu")}
    # the same files again: nothing written
    again = ingest(results, db, echo=lambda s: None)
    assert again.journals == (0, 1, 0) and not again.wrote
    # the journal grows (a resumed search): its rows are replaced, not doubled
    write_journal(tuned, SEARCH + [rec(7, 8192, 4, t=7e-6)])
    third = ingest(results, db, echo=lambda s: None)
    assert third.journals == (1, 0, 8) and len(rows(db)) == 8


def test_torn_lines_bad_names_and_older_journals(tuned_db):
    results, tuned, db = tuned_db
    write_journal(tuned, SEARCH[:2], tail='{"key": "BLOCK_SIZE=40')  # killed mid-write
    write_journal(tuned, [], name="journal/ci-gpu/notes.jsonl", tail="hello\n")
    old = [{k: v for k, v in r.items() if k not in ("space_hash", "default", "eval", "op", "device")}
           for r in SEARCH[:3]]  # a journal from before space hashes
    old[0]["config"], old[1]["config"] = {"BLOCK_SIZE": 256, "num_warps": 4}, spaces.default("square.triton")
    # (the default second: older journals are in completion order)
    write_journal(tuned, old, name="journal/old-box/square.triton-float32-4096x16384.jsonl")
    said = []
    rep = ingest(results, db, echo=said.append)
    assert rep.journals == (2, 0, 5)
    assert any("square.triton-float32-4096.jsonl: 1 torn" in s for s in said)
    assert any("notes.jsonl: not a tuner journal name" in s for s in said)
    with store.read(db) as con:
        errs = con.execute("SELECT file, kind FROM ingest_errors WHERE kind = 'tuning-journal' ORDER BY 1").fetchall()
        olds = con.execute("SELECT op, provider, shape, dtype, device, space_hash, is_default FROM tuning_results "
                           "WHERE machine = 'old-box' ORDER BY eval").fetchall()
    assert [f for f, _ in errs] == ["journal/ci-gpu/notes.jsonl", NAME]
    assert olds[0] == ("square", "triton", "4096x16384", "float32", "old-box", None, False)
    assert [o[-1] for o in olds] == [False, True, False]


def test_db_ingest_cli_names_a_bad_tuned_folder(tuned_db, capsys):
    from xrt import cli

    results, tuned, db = tuned_db
    assert cli.main(["db", "ingest", str(results), "--db", str(db), "--tuned", str(results)]) != 0
    assert f"--tuned {results}: no journal/ folder" in capsys.readouterr().err
    assert cli.main(["db", "ingest", str(results), "--db", str(db), "--tuned", "none", "--no-judge"]) == 0
    assert rows(db, "SELECT count(*) FROM tuning_results") == [(0,)]
    assert cli.main(["db", "ingest", str(results), "--db", str(db), "--tuned", str(tuned), "--no-judge"]) == 0
    assert rows(db, "SELECT count(*) FROM tuning_results") == [(7,)]


def test_parse_names_a_journal_with_no_readable_record():
    r, why = tuning.parse("journal/m/square.triton-float32-64.jsonl", b"not json\n[1, 2]\n")
    assert r == [] and why == "no readable record (2 torn or unreadable line(s))"


# ---------------------------------------------------------------------- the dashboard's Tuning page

def test_tuning_page_shows_best_vs_default_convergence_and_failures(tuned_db, monkeypatch):
    from dashboard_checks import open_app

    results, tuned, db = tuned_db
    ingest(results, db, echo=lambda s: None)
    monkeypatch.setenv("XRT_DB", str(db))
    at = open_app("tuning")
    cap = at.caption[0].value
    assert "tuning_results table: 7 evaluated configs, 4 timed, 3 failed" in cap
    assert "1 crash" in cap and "1 timeout" in cap and "1 wrong" in cap
    metrics = {m.label: m.value for m in at.metric}
    assert metrics == {"best (µs)": "7.5", "default (µs)": "10", "best vs default": "1.333×"}
    charts = at.get("vega_lite_chart")
    assert len(charts) == 2  # convergence, heat map
    top, failed = at.dataframe[0].value, at.dataframe[1].value
    assert list(top["time_us"].round(3)) == [7.5, 8.0, 9.0, 10.0]
    assert sorted(failed["status"]) == ["crash", "timeout", "wrong"]
    assert "SIGSEGV" in failed.set_index("status").loc["crash", "error"]


def test_tuning_page_on_an_empty_database(tmp_path, monkeypatch):
    from dashboard_checks import open_app

    db = tmp_path / "empty.duckdb"
    store.write(db, lambda con: None, fresh=True)
    monkeypatch.setenv("XRT_DB", str(db))
    at = open_app("tuning")
    assert "xrt tune" in at.info[0].value and "--tuned results/tuned" in at.info[0].value
