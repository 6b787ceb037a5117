"""``xrt bench run --processes N``: the host series measured in N processes, each stored as a run of its
own, end to end on the CPU; and the option's bad values."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from test_bench_suite import clone_repo

from xrt.db import result_names, sidecar_keys

HOST = "bench_host.Square.time_host"


def _xrt(*cmd: str, cwd, env, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xrt.cli", *cmd], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _relabel(folder, commit: str, as_commit: str) -> None:
    """Copy ``commit``'s result files and sidecars in ``folder`` as ``as_commit``'s (an A/A pair of the
    same processes: what a second commit that changed nothing would have measured, at best)."""
    for f in sorted(folder.iterdir()):
        if not f.name.startswith(result_names.result_file_prefix(commit)):
            continue
        d = json.loads(f.read_text())
        for key in ("commit_hash", sidecar_keys.COMMIT):
            if key in d:
                d[key] = as_commit
        dest = f.with_name(result_names.result_file_prefix(as_commit) + f.name[len(result_names.result_file_prefix(
            commit)):])
        dest.write_text(json.dumps(d))


@pytest.mark.slow
def test_bench_run_processes_stores_each_process_and_the_gate_uses_them(tmp_path):
    clone = clone_repo(ROOT, tmp_path / "repo")
    git = lambda *a: subprocess.run(["git", "-C", str(clone), *a], check=True, capture_output=True,  # noqa: E731
                                    text=True).stdout.strip()
    head, base = git("rev-parse", "HEAD"), git("rev-parse", "HEAD~1")
    env = dict(os.environ, HOME=str(tmp_path), PYTHONPATH="", XRT_CPU_SPAN="0")  # asv keeps its machine file in ~
    results = tmp_path / "asv"
    out = _xrt("bench", "run", "--repo", str(clone), "--commits", head, "--quick", "--results", str(results),
               "--bench", HOST, "--processes", "2", cwd=clone, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout)
    assert summary["processes"] == 2
    (machine,) = summary["machines"]
    files = sorted(f.name for f in (results / machine).iterdir() if result_names.is_result_file(f.name))
    assert [f.rsplit("-", 1)[1] for f in files] == ["proc1.json", "proc2.json"], files
    assert all((results / machine / (f[:-5] + sidecar_keys.SUFFIX)).is_file() for f in files)
    _relabel(results / machine, head, base)

    db = tmp_path / "xrt.duckdb"
    ing = _xrt("db", "ingest", str(results), "--db", str(db), "--repo", str(clone), "--strict", cwd=clone, env=env)
    assert ing.returncode == 0, ing.stdout[-2000:] + ing.stderr[-2000:]
    q = _xrt("db", "query", "--db", str(db), "--format", "json",
             f"SELECT commit_hash, count(DISTINCT run_id) AS runs FROM results WHERE benchmark = '{HOST}' "
             "GROUP BY commit_hash", cwd=clone, env=env)
    assert q.returncode == 0, q.stderr
    assert sorted(r["runs"] for r in json.loads(q.stdout)) == [2, 2], q.stdout
    gate = _xrt("gate", "--db", str(db), "--repo", str(clone), "--base", base, "--head", head, "--no-history",
                cwd=clone, env=env)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "several result files" not in gate.stdout and "series compared" in gate.stdout, gate.stdout


@pytest.mark.parametrize("bad", ["0", "-1", "two"])
def test_bench_run_processes_refuses_a_bad_count(bad, capsys):
    from xrt.cli import main

    with pytest.raises(SystemExit) as e:
        main(["bench", "run", "--processes", bad])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"--processes: {bad!r}" in err and "Traceback" not in err, err
