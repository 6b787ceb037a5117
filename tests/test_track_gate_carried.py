"""Series carried forward by `xrt bench run --changed-only`: the gate judges them on the samples of the
commit they were measured at, shows them as their own outcome, and never passes on a carried failure."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from conftest import ro

from xrt.cli import main  # noqa: E402
from xrt.db import store  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402
from xrt.track import gate, synth  # noqa: E402

N = 5


@pytest.fixture
def world(tmp_path):
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, N)
    return repo, commits, tmp_path / "results", np.random.default_rng(5), tmp_path / "xrt.duckdb"


def _head_without_square(root, commit, rng):
    """head ran, but not Square (its op was carried): only the other series in its result file."""
    f = synth.write_run(root, "h100", commit, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), N - 1, 1980)
    d = json.loads(f.read_text())
    del d["results"][synth.OP]
    f.write_text(json.dumps(d))


def _carry(root, commit, frm, unit="square"):
    (root / "h100" / f"{commit}.carried").write_text(json.dumps(
        {"schema": "xrt-carried/1", "commit": commit, "machine": "h100",
         "carried": {unit: {"from": frm, "since": frm, "reason": "sources unchanged"}}}))


def _gate(capsys, db, base, head):
    code = main(["gate", "--db", str(db), "--base", base, "--head", head, "--no-history"])
    return code, capsys.readouterr().out


def test_carried_from_base_is_its_own_outcome_and_passes(world, capsys):
    repo, commits, root, rng, db = world
    base, head = commits[-2], commits[-1]
    synth.write_run(root, "h100", base, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), N - 2, 1980)
    _head_without_square(root, head, rng)
    _carry(root, head, base)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = _gate(capsys, db, base, head)
    assert code == 0, out
    assert "1 series carried forward at head" in out and f"1 from {base[:10]} (base)" in out, out
    v = gate.judge(ro(db), base, head, history=False)
    assert v.counts["carried"] == 1 and v.counts["compared"] == 1 and v.carried_compared == 0
    assert v.carried_from == {base: 1}
    with store.read(db) as con:
        assert con.execute("SELECT unit, from_commit FROM carried WHERE commit_hash = ?", [head]).fetchall() == [
            ("square", base)]


def test_without_the_record_the_same_results_block(world, capsys):
    repo, commits, root, rng, db = world
    base, head = commits[-2], commits[-1]
    synth.write_run(root, "h100", base, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), N - 2, 1980)
    _head_without_square(root, head, rng)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = _gate(capsys, db, base, head)
    assert code == 2 and "missing at head" in out, out


def test_a_slowdown_carried_from_a_later_commit_is_a_regression(world, capsys):
    repo, commits, root, rng, db = world
    base, mid, head = commits[-3], commits[-2], commits[-1]
    synth.write_run(root, "h100", base, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), N - 3, 1980)
    synth.write_run(root, "h100", mid, synth.samples(rng, 100e-6), synth.samples(rng, 5e-6), N - 2, 1980)
    _head_without_square(root, head, rng)
    _carry(root, head, mid)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = _gate(capsys, db, base, head)
    assert code == 1 and f"REGRESSION {synth.OP}" in out and f"1 from {mid[:10]}" in out, out
    assert gate.judge(ro(db), base, head, history=False).carried_compared == 1


def test_a_carried_failure_never_passes(world, capsys):
    repo, commits, root, rng, db = world
    base, mid, head = commits[-3], commits[-2], commits[-1]
    synth.write_run(root, "h100", base, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), N - 3, 1980)
    synth.write_run(root, "h100", mid, None, synth.samples(rng, 5e-6), N - 2, 1980)  # Square failed at mid
    _head_without_square(root, head, rng)
    _carry(root, head, mid)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = _gate(capsys, db, base, head)
    assert code == 2 and f"failed at head (carried forward from {mid[:10]})" in out, out


def test_carried_from_a_commit_without_results_cannot_be_judged(world, capsys):
    repo, commits, root, rng, db = world
    base, head = commits[-2], commits[-1]
    synth.write_run(root, "h100", base, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), N - 2, 1980)
    _head_without_square(root, head, rng)
    _carry(root, head, commits[0])  # never measured
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = _gate(capsys, db, base, head)
    assert code == 2 and f"carried forward at head {head[:10]} from {commits[0][:10]}, which has no results" in out


def test_a_bad_carried_file_is_named_and_blocks(world, capsys):
    repo, commits, root, rng, db = world
    base, head = commits[-2], commits[-1]
    synth.write_run(root, "h100", base, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), N - 2, 1980)
    _head_without_square(root, head, rng)
    (root / "h100" / f"{head}.carried").write_text('{"schema": "xrt-carried/1", "carried": ')
    lines = []
    ingest(root, db, repo=str(repo), echo=lines.append)
    assert any(f"h100/{head}.carried: not a carried-forward record" in ln for ln in lines), lines
    code, out = _gate(capsys, db, base, head)
    assert code == 2 and f"h100/{head}.carried" in out, out
    # fixed: the error goes, the record comes in
    _carry(root, head, base)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    assert _gate(capsys, db, base, head)[0] == 0


def test_a_commit_with_nothing_but_carried_units_is_found_and_judged(world, capsys):
    """A docs-only commit: no result file at all, only its .carried record; the gate finds it by prefix."""
    repo, commits, root, rng, db = world
    base, head = commits[-2], commits[-1]
    synth.write_run(root, "h100", base, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), N - 2, 1980)
    (root / "h100" / f"{head}.carried").write_text(json.dumps(
        {"schema": "xrt-carried/1", "commit": head, "machine": "h100",
         "carried": {"square": {"from": base, "since": base, "reason": "sources unchanged"}}}))
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    # the other series (bench_ops.Launch) belongs to no unit: it was not carried, so it is missing
    code = main(["gate", "--db", str(db), "--base", base[:10], "--head", head[:10], "--no-history"])
    out = capsys.readouterr().out
    assert code == 2 and "1 series carried forward at head" in out and "missing at head" in out, out
