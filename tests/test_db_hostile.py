"""xrt.db against hostile or careless input: exports that would delete, names that are not text,
files that expand without bound, revisions that are options, two files for one commit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

duckdb = pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

sys.path.insert(0, str(Path(__file__).parent / "db_fixtures"))
import asvgen  # noqa: E402

from xrt.cli import main as xrt_main  # noqa: E402
from xrt.db import asv_files, store  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402


def _one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _q(db: Path, sql: str, args=None) -> list[tuple]:
    with store.read(db) as con:
        return con.execute(sql, args or []).fetchall()


# ---------------------------------------------------------------- export never deletes what it did not write

@pytest.fixture
def project(tmp_path) -> tuple[Path, Path]:
    """proj/results holding the database, the asv JSON and a NOTES.md, as in a real checkout."""
    res = tmp_path / "proj" / "results"
    asvgen.make_results(res, {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1))})
    (res / "NOTES.md").write_text("keep me\n")
    db = res / "xrt.duckdb"
    ingest(res, db, echo=lambda s: None)
    return res, db


def _tree(p: Path) -> dict[str, bytes]:
    return {str(f.relative_to(p)): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}


@pytest.mark.parametrize("target", ["results", "proj", "notes", "asv-results", "export-and-notes"])
def test_export_refuses_a_folder_it_did_not_write(target, project, tmp_path, capsys):
    res, db = project
    out = {"results": res, "proj": res.parent}.get(target, res.parent / "other")
    if target == "notes":
        out.mkdir()
        (out / "NOTES.md").write_text("mine\n")
    if target == "asv-results":  # a folder named like an export's results/ that holds asv's JSON
        asvgen.make_results(out / "results", {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1))})
    if target == "export-and-notes":  # an earlier export someone added a file to
        assert xrt_main(["db", "export", "--db", str(db), "--parquet", str(out)]) == 0
        (out / "NOTES.md").write_text("mine\n")
        capsys.readouterr()
    before = _tree(res.parent)
    assert xrt_main(["db", "export", "--db", str(db), "--parquet", str(out)]) == 2
    line = _one_line(capsys)
    assert str(out) in line
    want = {"results": "holds the database", "proj": "holds the database", "asv-results": "not an earlier export "
            "(results)"}.get(target, "not an earlier export (NOTES.md)")
    assert want in line, line
    assert _tree(res.parent) == before  # nothing deleted, nothing written
    assert [p.name for p in res.parent.iterdir() if p.name.startswith(".")] == []


def test_export_replaces_an_earlier_export_and_writes_into_an_empty_folder(project, tmp_path, capsys):
    res, db = project
    out = tmp_path / "pq"
    out.mkdir()  # empty: fine
    assert xrt_main(["db", "export", "--db", str(db), "--parquet", str(out)]) == 0
    assert (out / "xrt-export.json").exists() and (out / "results").is_dir()
    asvgen.write_json(res / "m1" / "00000002-env.json", asvgen.v2_file(asvgen.sha(2)))
    ingest(res, db, echo=lambda s: None)
    assert xrt_main(["db", "export", "--db", str(db), "--parquet", str(out)]) == 0  # an earlier export: replaced
    got = duckdb.execute("SELECT count(DISTINCT commit_hash) FROM read_parquet(?)",
                         [f"{out}/results/*/*.parquet"]).fetchall()
    assert got == [(2,)]
    (out / "xrt-export.json").unlink()  # an export from before the marker: only our names, still ours
    assert xrt_main(["db", "export", "--db", str(db), "--parquet", str(out)]) == 0
    capsys.readouterr()


# ---------------------------------------------------------------- names that are not text

def test_a_file_name_that_is_not_utf8_is_named_and_the_rest_ingested(tmp_path, capsys):
    root = asvgen.make_results(tmp_path / "results", {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1))})
    bad = os.fsencode(root / "m1") + b"/00000002-env\xff.json"
    with open(bad, "w") as f:
        json.dump(asvgen.v2_file(asvgen.sha(2)), f)
    db = tmp_path / "x.duckdb"
    assert xrt_main(["db", "ingest", str(root), "--db", str(db), "--no-judge"]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    named = [ln for ln in err.splitlines() if "\\xff" in ln]
    assert named == ["xrt db ingest: m1/00000002-env\\xff.json: name is not valid UTF-8; rename it"]
    assert _q(db, "SELECT commit_hash FROM runs") == [(asvgen.sha(1),)]
    assert _q(db, "SELECT file, kind FROM ingest_errors") == [("m1/00000002-env\\xff.json", "unreadable")]


def test_a_newline_in_a_machine_folder_is_one_line(tmp_path, capsys):
    root = asvgen.make_results(tmp_path / "results", {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1)),
                                                      "m\nx/00000002-env.json": asvgen.v2_file(asvgen.sha(2))})
    db = tmp_path / "x.duckdb"
    assert xrt_main(["db", "ingest", str(root), "--db", str(db), "--no-judge"]) == 0
    err = capsys.readouterr().err
    assert [ln for ln in err.splitlines() if "m\\nx" in ln] == [
        "xrt db ingest: m\\nx/: name has a control character (a newline, a tab...); rename it"]
    assert not [ln for ln in err.splitlines() if ln.startswith("x/")]
    assert _q(db, "SELECT count(*) FROM runs") == [(1,)]


def test_two_machine_json_with_one_machine_are_named(tmp_path, capsys):
    root = asvgen.make_results(tmp_path / "results", {}, machines=("m1", "m1-copy"))
    asvgen.write_json(root / "m1-copy" / "machine.json", {"machine": "m1", "os": "Other", "cpu": "copy"})
    db = tmp_path / "x.duckdb"
    assert xrt_main(["db", "ingest", str(root), "--db", str(db), "--no-judge"]) == 0
    err = capsys.readouterr().err
    assert ("xrt db ingest: m1-copy/machine.json: says machine 'm1', as m1/machine.json does; not used (one "
            "machine.json per machine: rename the machine in one of them)") in err.splitlines()
    assert _q(db, "SELECT machine, cpu, file FROM machines") == [("m1", "test", "m1/machine.json")]
    assert _q(db, "SELECT file, kind FROM ingest_errors") == [("m1-copy/machine.json", "duplicate-machine")]


def test_an_empty_results_dir_is_refused(tmp_path, capsys, monkeypatch):
    asvgen.make_results(tmp_path, {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1))})
    monkeypatch.chdir(tmp_path)  # before, "" meant the current folder
    db = tmp_path / "x.duckdb"
    assert xrt_main(["db", "ingest", "", "--db", str(db)]) == 2
    assert "empty path" in _one_line(capsys)
    assert not db.exists()


# ---------------------------------------------------------------- what one file may expand to

def _huge_params() -> dict:
    axis = [str(i) for i in range(100)]
    return asvgen.v2_file(asvgen.sha(2), results={
        "suite.time_param": [[1.0], [axis, axis, axis, axis], "v", 1_700_000_000_000, 1.0]})


@pytest.mark.parametrize("case", ["params", "env_name", "commit_hash", "machine", "param_value"])
def test_a_file_beyond_the_bounds_is_named_and_the_rest_ingested(case, tmp_path, capsys):
    d = {
        "params": _huge_params(),  # 3.7 KB that expand to 10^8 rows
        "env_name": asvgen.v2_file(asvgen.sha(2), env_name="e" * 1_000_000),
        "commit_hash": asvgen.v2_file("a" * 100_000),
        "machine": asvgen.v2_file(asvgen.sha(2), params={"machine": "m" * 10_000}),
        "param_value": asvgen.v2_file(asvgen.sha(2), results={
            "suite.time_param": [[1.0], [["'" + "x" * 5000 + "'"]], "v", 1_700_000_000_000, 1.0]}),
    }[case]
    root = asvgen.make_results(tmp_path / "results", {"m1/00000001-env.json": asvgen.v2_file(asvgen.sha(1)),
                                                      "m1/00000002-env.json": d})
    db = tmp_path / "x.duckdb"
    assert xrt_main(["db", "ingest", str(root), "--db", str(db), "--no-judge"]) == 0
    err = capsys.readouterr().err
    named = [ln for ln in err.splitlines() if ln.startswith("xrt db ingest: m1/00000002-env.json: ")]
    assert len(named) == 1 and len(named[0]) < 400, named
    assert {"params": "more than 100,000 rows", "env_name": "'env_name' is 1,000,000 characters",
            "commit_hash": "not a hexadecimal hash", "machine": "'params.machine' is 10,000 characters",
            "param_value": "a parameter value is 5,002 characters"}[case] in named[0]
    assert _q(db, "SELECT commit_hash FROM runs") == [(asvgen.sha(1),)]
    kind = "unknown-format" if case == "commit_hash" else "too-big"
    assert _q(db, "SELECT file, kind FROM ingest_errors") == [("m1/00000002-env.json", kind)]


def test_the_bounds_leave_room_for_real_suites():
    assert asv_files.MAX_ROWS_PER_FILE >= 100_000 and asv_files.MAX_NAME_CHARS >= 256


# ---------------------------------------------------------------- a revision is never an option

def test_rev_that_is_an_option_is_refused(tmp_path, capsys):
    repo = tmp_path / "repo"
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "--allow-empty", "-m", "x"], check=True, env=env)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()
    root = asvgen.make_results(tmp_path / "results", {f"m1/{head[:8]}-env.json": asvgen.v2_file(head)})
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    db = tmp_path / "x.duckdb"
    assert xrt_main(["db", "ingest", str(root), "--db", str(db), "--repo", str(repo),
                     f"--rev=--output={victim}"]) == 2
    line = _one_line(capsys)
    assert "is not a revision (it starts with '-'" in line, line
    assert victim.read_text() == "precious\n"
    assert xrt_main(["db", "ingest", str(root), "--db", str(db), "--repo", str(repo), "--rev", "HEAD"]) == 0


# ---------------------------------------------------------------- two result files for one commit

SHA = [f"{i + 1:x}" * 40 for i in range(9)]  # asv names files by hash[:8]: all different


def _history(root: Path, envs: tuple[str, ...], head_scale: dict[str, float]) -> None:
    """Eight commits of m1 in each environment, then a head (SHA[8]) scaled per environment."""
    for i in range(9):
        for env in envs:
            scale = head_scale.get(env, 1.0) if i == 8 else 1.0 + 0.002 * (i % 3)
            asvgen.write_json(root / "m1" / f"{SHA[i][:8]}-{env}.json", asvgen.v2_file(
                SHA[i], env_name=env, date_ms=1_700_000_000_000 + i * 1000, results=asvgen.v2_results(scale)))


def _gate(db: Path, capsys) -> tuple[int, str]:
    code = xrt_main(["gate", "--db", str(db), "--base", SHA[7], "--head", SHA[8], "--no-history"])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_environments_are_judged_apart_never_pooled(tmp_path, capsys):
    """Two asv environments at every commit; at head only py-b got 8 % slower. Pooled, its samples
    hid in py-a's and the gate passed ("within noise"); judged per environment, py-b is the regression."""
    root = asvgen.make_results(tmp_path / "results", {})
    _history(root, ("py-a", "py-b"), {"py-b": 1.08})
    db = tmp_path / "x.duckdb"
    assert xrt_main(["db", "ingest", str(root), "--db", str(db)]) == 0
    assert "several-runs" not in capsys.readouterr().err  # asv's environment matrix is no conflict
    code, text = _gate(db, capsys)
    assert code == 1, text
    slow = [ln for ln in text.splitlines() if ln.startswith("REGRESSION suite.time_plain")]
    assert slow and all("environment py-b" in ln for ln in slow), text
    assert "environment py-a" not in text.split("xrt gate:")[0].split("cannot judge")[0], text
    got = _q(db, "SELECT verdict, reason FROM newest_judgements WHERE benchmark = 'suite.time_plain'")
    assert len(got) == 1 and got[0][0] == "regression" and got[0][1].startswith("environment py-b"), got


def test_a_copied_result_file_is_named_and_not_pooled(tmp_path, capsys):
    """A head with a copy ``X (1).json`` (same environment) where only the copy got slower: ingest
    names both files, the gate and the newest-commit judgement do not judge those series."""
    root = asvgen.make_results(tmp_path / "results", {})
    _history(root, ("py-a",), {})
    asvgen.write_json(root / "m1" / f"{SHA[8][:8]}-py-a (1).json", asvgen.v2_file(
        SHA[8], env_name="py-a", date_ms=1_700_000_008_000, results=asvgen.v2_results(1.6)))
    db = tmp_path / "x.duckdb"
    assert xrt_main(["db", "ingest", str(root), "--db", str(db)]) == 0
    err = capsys.readouterr().err
    pair = f"m1/{SHA[8][:8]}-py-a (1).json, m1/{SHA[8][:8]}-py-a.json"
    named = [ln for ln in err.splitlines() if "several" in ln or "2 result files" in ln]
    assert len(named) == 2 and all(pair in ln and "environment py-a" in ln for ln in named), err
    code, text = _gate(db, capsys)
    assert code == 2 and "several-runs" in text and "not pooled, not judged" in text, text
    assert "pass" not in text.split("xrt gate:")[-1].split(":")[0], text
    verdicts = _q(db, "SELECT DISTINCT verdict, reason LIKE '%not pooled%' FROM newest_judgements "
                      "WHERE benchmark = 'suite.time_plain'")
    assert verdicts == [("not judged", True)]
