"""The gate fails closed: every way it used to pass (or crash) without judging, on real ingested files.

Each test here was written against the gate that passed or crashed on it (issue #18), and failed there.
The rule they hold it to: exit 0 only when every series it was asked to judge was compared on enough
valid samples on both sides; a slowdown is exit 1; anything else is exit 2 with the reasons listed.
"""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from xrt.cli import main  # noqa: E402
from xrt.db import store  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402
from xrt.track import gate, stats, synth  # noqa: E402

N = 4


@pytest.fixture
def world(tmp_path):
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, N)
    return repo, commits, tmp_path / "results", np.random.default_rng(11), tmp_path / "xrt.duckdb"


def _ingest(root, db, repo):
    ingest(root, db, repo=str(repo), echo=lambda s: None)


def _gate(capsys, db, base, head, *extra, repo=None):
    args = ["gate", "--db", str(db), "--base", base, "--head", head, "--no-history", *extra]
    code = main(args + (["--repo", str(repo)] if repo else []))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def _one_line(out: str, err: str) -> str:
    lines = [ln for ln in (out + err).splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert "Traceback" not in out + err
    return lines[0]


def _runs(world, base_op, base_plain, head_op, head_plain, machine="h100"):
    repo, commits, root, rng, db = world
    synth.write_run(root, machine, commits[-2], base_op, base_plain, N - 2, 1980)
    synth.write_run(root, machine, commits[-1], head_op, head_plain, N - 1, 1980)
    _ingest(root, db, repo)
    return commits[-2], commits[-1]


# --- 1. a base without ok results ------------------------------------------------------------------

def test_base_that_failed_entirely_is_not_a_pass_though_head_is_slower(world, capsys):
    _, _, _, rng, db = world
    base, head = _runs(world, None, None, synth.samples(rng, 75e-6), synth.samples(rng, 7.5e-6))
    code, out, _ = _gate(capsys, db, base, head)
    assert code == 2, out
    assert out.count("failed at base") == 2 and "0 series compared" in out


def test_series_failed_at_base_is_named_even_when_others_pass(world, capsys):
    """A 2x slowdown on exactly the series that failed at base used to pass without a word."""
    _, _, _, rng, db = world
    base, head = _runs(world, synth.samples(rng, 50e-6), None, synth.samples(rng, 50e-6), synth.samples(rng, 10e-6))
    code, out, _ = _gate(capsys, db, base, head)
    assert code == 2, out
    assert f"{synth.PLAIN} [-]: failed at base" in out and "1 series compared" in out


# --- 2./3. a database that is not one, or is newer than this xrt ----------------------------------

def _bad_db(kind: str, tmp_path):
    p = tmp_path / f"bad-{kind}.duckdb"
    if kind == "empty-duckdb":
        import duckdb

        duckdb.connect(str(p)).close()
    elif kind == "zero-bytes":
        p.write_bytes(b"")
    elif kind == "random":
        p.write_bytes(np.random.default_rng(0).bytes(64 * 1024))
    elif kind == "text":
        p.write_text("machine,benchmark\nh100,x\n")
    elif kind == "sqlite":
        con = sqlite3.connect(p)
        con.execute("CREATE TABLE results (x)")
        con.commit()
        con.close()
    elif kind == "directory":
        p.mkdir()
    elif kind == "dev-null":
        return "/dev/null"
    elif kind == "empty-string":
        return ""
    return str(p)


@pytest.mark.parametrize("kind", ["empty-duckdb", "zero-bytes", "random", "text", "sqlite", "directory", "dev-null",
                                  "empty-string"])
@pytest.mark.parametrize("with_repo", [False, True])
def test_a_database_that_is_not_one_cannot_judge_in_one_line(world, capsys, kind, with_repo):
    repo, commits, *_ = world
    db = _bad_db(kind, world[0].parent)
    code, out, err = _gate(capsys, db, commits[0], commits[1], repo=repo if with_repo else None)
    assert code == 2, out + err
    line = _one_line(out, err)
    assert "cannot judge" in line and (db in line if db else "--db" in line or "database" in line), line


def test_an_unreadable_database_cannot_judge(world, capsys, monkeypatch):
    """Root reads any file, so the refusal is the operating system's answer to the header read
    (``store._header``, where another user's read of a chmod 000 file fails), not chmod."""
    _, _, _, rng, db = world
    base, head = _runs(world, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), synth.samples(rng, 50e-6),
                       synth.samples(rng, 5e-6))
    import errno

    def denied(path):
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(store, "_header", denied)
    code, out, err = _gate(capsys, db, base, head)
    assert code == 2 and "Permission denied" in _one_line(out, err)


def test_a_database_newer_than_this_xrt_is_not_judged(world, capsys):
    _, _, _, rng, db = world
    base, head = _runs(world, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), synth.samples(rng, 75e-6),
                       synth.samples(rng, 5e-6))

    def bump(con):
        con.execute("INSERT INTO schema_version VALUES (999, now()::TIMESTAMP, 'from the future')")

    store.write(db, bump)
    code, out, err = _gate(capsys, db, base, head)
    assert code == 2, out
    assert "999" in _one_line(out, err)


# --- 4. knobs that judge nothing ----------------------------------------------------------------

@pytest.mark.parametrize("option,value", [("--alpha", "0"), ("--alpha", "-1"), ("--alpha", "1"), ("--alpha", "nan"),
                                          ("--alpha", "x"), ("--threshold", "inf"), ("--threshold", "nan"),
                                          ("--threshold", "1.0"), ("--threshold", "0"), ("--threshold", "-0.05"),
                                          ("--threshold", "1e308"), ("--min-samples", "1"),
                                          ("--min-samples", "2.5"), ("--min-samples", "-3")])
def test_a_knob_that_would_pass_anything_is_refused(world, capsys, option, value):
    _, _, _, rng, db = world
    base, head = _runs(world, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), synth.samples(rng, 75e-6),
                       synth.samples(rng, 5e-6))
    code, out, err = _gate(capsys, db, base, head, option, value)
    assert code == 2, out
    line = _one_line(out, err)
    assert option in line and repr(value) in line, line


def test_threshold_as_fraction_or_ratio_means_the_same(world, capsys):
    _, _, _, rng, db = world
    base, head = _runs(world, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), synth.samples(rng, 60e-6),
                       synth.samples(rng, 5e-6))
    assert gate.parse_threshold("1.25") == pytest.approx(0.25) == gate.parse_threshold("0.25")
    assert _gate(capsys, db, base, head, "--threshold", "1.10")[0] == 1
    assert _gate(capsys, db, base, head, "--threshold", "0.10")[0] == 1
    assert _gate(capsys, db, base, head, "--threshold", "0.30")[0] == 0


# --- 5. impossible values ---------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [-50e-6, float("nan"), float("inf"), 0.0])
def test_impossible_samples_never_reach_the_judge(world, capsys, bad):
    """Ingest refuses them; a database written some other way must still not yield ``ratio -1`` or ``nan``."""
    _, _, _, rng, db = world
    base, head = _runs(world, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), synth.samples(rng, 50e-6),
                       synth.samples(rng, 5e-6))

    def spoil(con):
        con.execute("UPDATE results SET samples = "
                    "list_transform(samples, lambda x, i: CASE WHEN i = 1 THEN ? ELSE x END) "
                    "WHERE commit_hash = ? AND benchmark = ?", [bad, head, synth.OP])

    store.write(db, spoil)
    code, out, _ = _gate(capsys, db, base, head)
    assert code == 2, out
    assert f"{synth.OP} " in out and "invalid samples" in out and "1 at head" in out
    assert "ratio" not in out and "nan" not in out.lower().replace("cannot", "")


# --- 6. nothing new ------------------------------------------------------------------------------------

def test_base_equal_to_head_is_not_a_pass(world, capsys):
    _, _, _, rng, db = world
    base, head = _runs(world, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), synth.samples(rng, 50e-6),
                       synth.samples(rng, 5e-6))
    code, out, _ = _gate(capsys, db, head, head[:10])
    assert code == 2, out
    assert "same commit" in out and "nothing new to judge" in out and "0 series compared" in out


# --- enough samples means enough to reach alpha -------------------------------------------------------------

def test_samples_too_few_for_alpha_are_not_a_pass(world, capsys):
    """6 against 6 samples cannot reach p <= 0.002 (min p 0.005): a 2x slowdown used to pass here."""
    _, _, _, rng, db = world
    base, head = _runs(world, synth.samples(rng, 50e-6, n=6), synth.samples(rng, 5e-6),
                       synth.samples(rng, 100e-6, n=6), synth.samples(rng, 5e-6))
    assert stats.min_p(6, 6) > 0.002 and stats.samples_needed(0.002) == 8
    code, out, _ = _gate(capsys, db, base, head)
    assert code == 2, out
    assert "too few samples (6 at base, 6 at head; need 8: p <= 0.002 is out of reach with fewer)" in out
    # with a bar the samples can reach, the same data is judged, and it is a regression
    assert _gate(capsys, db, base, head, "--alpha", "0.01")[0] == 1


# --- what does not block, and says so --------------------------------------------------------------------------

def _with_nan(path, benchmark):
    d = json.loads(path.read_text())
    d["results"][benchmark][0] = [float("nan")]  # asv's mark for a skipped benchmark
    path.write_text(json.dumps(d, allow_nan=True))


def test_new_and_skipped_series_are_listed_not_hidden(world, capsys):
    repo, commits, root, rng, db = world
    fb = synth.write_run(root, "h100", commits[-2], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), 0, 1980)
    fh = synth.write_run(root, "h100", commits[-1], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), 1, 1980)
    _with_nan(fb, synth.PLAIN)
    _ingest(root, db, repo)
    code, out, _ = _gate(capsys, db, commits[-2], commits[-1])
    assert code == 0, out
    assert "not judged (does not block): 1 series new at head" in out and "1 series compared" in out
    _with_nan(fh, synth.PLAIN)
    _ingest(root, db, repo)
    code, out, _ = _gate(capsys, db, commits[-2], commits[-1])
    assert code == 0 and "1 series skipped at base and head" in out


def test_skipped_at_head_after_running_at_base_blocks(world, capsys):
    repo, commits, root, rng, db = world
    synth.write_run(root, "h100", commits[-2], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), 0, 1980)
    fh = synth.write_run(root, "h100", commits[-1], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), 1, 1980)
    _with_nan(fh, synth.PLAIN)
    _ingest(root, db, repo)
    code, out, _ = _gate(capsys, db, commits[-2], commits[-1])
    assert code == 2 and f"{synth.PLAIN} [-]: skipped at head (ran at base)" in out, out


def test_a_machine_measured_only_at_head_blocks(world, capsys):
    repo, commits, root, rng, db = world
    synth.write_run(root, "h100", commits[-2], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), 0, 1980)
    synth.write_run(root, "h100", commits[-1], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), 1, 1980)
    synth.write_run(root, "h200", commits[-1], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), 1, 1980)
    _ingest(root, db, repo)
    code, out, _ = _gate(capsys, db, commits[-2], commits[-1])
    assert code == 2 and "base " in out and "was not measured on h200 (2 series at head not judged)" in out, out
    assert _gate(capsys, db, commits[-2], commits[-1], "--machine", "h100")[0] == 0


def test_every_outcome_is_in_the_documented_table():
    from conftest import ROOT

    doc = (ROOT / "docs" / "regressions.md").read_text()
    table = doc[doc.index("## The gate's rule"):]
    for o in gate.OUTCOMES:
        assert f"`{o.name}`" in table, o.name


# --- a machine that changed under its name (issue #19) -------------------------------------------------------

def test_a_slowdown_on_a_changed_machine_is_not_a_regression(world, capsys):
    repo, commits, root, rng, db = world
    synth.write_run(root, "h100", commits[-2], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), 0, 1980)
    synth.write_run(root, "h100", commits[-1], synth.samples(rng, 60e-6), synth.samples(rng, 5e-6), 1, 1980,
                    torch="2.6.0")
    _ingest(root, db, repo)
    code, out, _ = _gate(capsys, db, commits[-2], commits[-1])
    assert code == 2, out
    assert "machine changed on h100 between base and head (torch: 2.5.1 → 2.6.0)" in out
    assert "REGRESSION" not in out.replace("CANNOT JUDGE", "")
    assert f"slower on a changed machine (not judged as a regression): {synth.OP}" in out


def test_a_new_processor_or_kernel_under_a_cpu_machine_is_a_machine_change(world, capsys):
    repo, commits, root, rng, db = world
    for c, i, cpu, kernel in ((commits[-3], 0, "Xeon 8480", "6.8.0"), (commits[-2], 1, "Xeon 8480", "6.8.0"),
                              (commits[-1], 2, "EPYC 9654", "6.8.0")):
        synth.write_run(root, "ci-cpu", c, synth.samples(rng, 50e-6 * (1.2 if i == 2 else 1)),
                        synth.samples(rng, 5e-6), i, 1980, cpu_model=cpu, kernel=kernel)
    _ingest(root, db, repo)
    code, out, _ = _gate(capsys, db, commits[-2], commits[-1])
    assert code == 2 and "machine changed on ci-cpu between base and head (cpu_model: Xeon 8480 → EPYC 9654)" in out
    assert "REGRESSION " not in out, out
    # the same processor and kernel at base and head: judged as usual
    code, out, _ = _gate(capsys, db, commits[-3], commits[-2])
    assert code == 0 and "machine changed" not in out, out


def test_the_same_slowdown_on_an_unchanged_machine_fails(world, capsys):
    repo, commits, root, rng, db = world
    synth.write_run(root, "h100", commits[-2], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), 0, 1980)
    synth.write_run(root, "h100", commits[-1], synth.samples(rng, 60e-6), synth.samples(rng, 5e-6), 1, 1980)
    _ingest(root, db, repo)
    code, out, _ = _gate(capsys, db, commits[-2], commits[-1])
    assert code == 1 and "machine changed" not in out, out


def test_without_a_recorded_environment_the_gate_says_it_cannot_tell(world, capsys):
    repo, commits, root, rng, db = world
    synth.write_run(root, "h100", commits[-2], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), 0)
    synth.write_run(root, "h100", commits[-1], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), 1)
    _ingest(root, db, repo)
    code, out, _ = _gate(capsys, db, commits[-2], commits[-1])
    assert code == 0 and "h100: no machine environment recorded at base or head" in out, out


# --- the suite measures another way at head (asv benchmark version) ---------------------------------------

def test_a_changed_benchmark_version_is_not_compared(world, capsys):
    """The single-process suite timed CUDA C small shapes 18 x slower than the suite before it: a
    head measured by another benchmark version must not pass or fail against the old base."""
    repo, commits, root, rng, db = world
    synth.write_run(root, "h100", commits[-2], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), 0, 1980)
    synth.write_run(root, "h100", commits[-1], synth.samples(rng, 50e-6), synth.samples(rng, 90e-6), 1, 1980,
                    version="xrt-suite-2")
    _ingest(root, db, repo)
    code, out, _ = _gate(capsys, db, commits[-2], commits[-1])
    assert code == 2, out
    assert out.count("benchmark version changed between base and head") == 2, out
    assert "REGRESSION" not in out
