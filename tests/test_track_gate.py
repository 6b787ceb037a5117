"""xrt gate's three exits, on asv result files ingested for real into a database."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from xrt.cli import main  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402
from xrt.track import synth  # noqa: E402

N = 8  # commits in the repository; the last one (HEAD) is measured only where a test says so


@pytest.fixture
def world(tmp_path):
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, N)
    root = tmp_path / "results"
    rng = np.random.default_rng(7)
    for i, c in enumerate(commits[:-1]):
        synth.write_run(root, "h100", c, synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), i, sm_clock_mhz=1980)
    return repo, commits, root, rng, tmp_path / "xrt.duckdb"


def _ingest(root, db, repo):
    ingest(root, db, repo=str(repo), echo=lambda s: None)


def _gate(db, repo, base, head, capsys, *extra):
    code = main(["gate", "--db", str(db), "--repo", str(repo), "--base", base, "--head", head, *extra])
    return code, capsys.readouterr().out


def test_exit_0_when_nothing_changed(world, capsys):
    repo, commits, root, rng, db = world
    synth.write_run(root, "h100", commits[-1], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), N - 1, 1980)
    _ingest(root, db, repo)
    summary = db.parent / "summary.md"
    summary.write_text("earlier step\n")
    code, out = _gate(db, repo, commits[-2], "HEAD", capsys, "--summary", str(summary))
    assert code == 0, out
    assert "REGRESSION" not in out and "2 series compared" in out
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "xrt gate: ✅ pass" in text  # appended, not replaced


def test_exit_1_names_the_slow_benchmark_with_its_ratio(world, capsys):
    repo, commits, root, rng, db = world
    synth.write_run(root, "h100", commits[-1], synth.samples(rng, 60e-6), synth.samples(rng, 5e-6), N - 1, 1980)
    _ingest(root, db, repo)
    code, out = _gate(db, repo, commits[-2], commits[-1][:10], capsys)
    assert code == 1, out
    lines = [ln for ln in out.splitlines() if ln.startswith("REGRESSION")]
    assert len(lines) == 1 and synth.OP in lines[0] and "'16777216'" in lines[0]
    ratio = float(lines[0].split("] ")[1].split()[0])
    assert 1.15 < ratio < 1.25
    # a 20 % slowdown is below a 25 % threshold
    assert _gate(db, repo, commits[-2], commits[-1], capsys, "--threshold", "1.25")[0] == 0


def test_clock_drop_is_not_a_regression(world, capsys):
    repo, commits, root, rng, db = world
    # 10 % lower SM clock, 11 % longer time: the same cycles
    synth.write_run(root, "h100", commits[-1], synth.samples(rng, 50e-6 / 0.9), synth.samples(rng, 5e-6),
                    N - 1, 1980 * 0.9)
    _ingest(root, db, repo)
    code, out = _gate(db, repo, commits[-2], commits[-1], capsys)
    assert code == 0, out
    assert "clock change (not failing)" in out and synth.OP in out


def test_exit_2_when_head_was_never_measured(world, capsys):
    repo, commits, root, rng, db = world
    _ingest(root, db, repo)
    code, out = _gate(db, repo, commits[-2], "HEAD", capsys)
    assert code == 2 and "never measured" in out


def test_exit_2_when_base_is_missing(world, capsys):
    repo, commits, root, rng, db = world
    synth.write_run(root, "h100", commits[-1], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), N - 1, 1980)
    (root / "h100" / f"{commits[2][:8]}-existing-py.json").unlink()
    _ingest(root, db, repo)
    code, out = _gate(db, repo, commits[2], commits[-1], capsys)
    assert code == 2 and "base" in out and "never measured" in out


def test_exit_2_on_an_ingest_error_for_head(world, capsys):
    repo, commits, root, rng, db = world
    f = synth.write_run(root, "h100", commits[-1], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), N - 1)
    f.write_text(f.read_text()[:200])  # truncated
    _ingest(root, db, repo)
    code, out = _gate(db, repo, commits[-2], commits[-1], capsys)
    assert code == 2 and f"ingest error in h100/{commits[-1][:8]}-existing-py.json" in out


def test_exit_2_on_too_few_samples_and_failures(world, capsys):
    repo, commits, root, rng, db = world
    synth.write_run(root, "h100", commits[-1], synth.samples(rng, 50e-6, n=3), None, N - 1)
    _ingest(root, db, repo)
    code, out = _gate(db, repo, commits[-2], commits[-1], capsys)
    assert code == 2 and "failed at head" in out
    # 3 samples cannot be tested, but 7 commits of history can judge them (tests/test_track_noise.py)
    assert "1 series compared (1 against history)" in out


def test_missing_database_and_unknown_rev_cannot_judge(world, capsys):
    repo, commits, root, rng, db = world
    assert _gate(db, repo, commits[0], commits[1], capsys)[0] == 2  # no database yet
    _ingest(root, db, repo)
    code, out = _gate(db, repo, commits[0], "no-such-rev", capsys)
    assert code == 2 and "not a commit" in out


def test_regressions_json_lifecycle_and_show(tmp_path, capsys):
    """A slowdown at commit 10 fixed at commit 20, in a real ingested database."""
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, 30)
    root, db = tmp_path / "results", tmp_path / "xrt.duckdb"
    rng = np.random.default_rng(3)
    for i, c in enumerate(commits):
        slow = 1.10 if 10 <= i < 20 else 1.0
        synth.write_run(root, "h100", c, synth.samples(rng, 50e-6 * slow), synth.samples(rng, 5e-6), i, 1980)
    _ingest(root, db, repo)
    assert main(["regressions", "--db", str(db), "--format", "json", "--kind", "all", "--flat"]) == 0
    recs = json.loads(capsys.readouterr().out)
    assert [(r["kind"], r["commit"]) for r in recs] == [("regression", commits[10]), ("improvement", commits[20])]
    reg = recs[0]
    keys = {"machine", "benchmark", "params", "commit", "previous_commit", "before", "after", "ratio", "p_value",
            "status"}
    assert keys <= set(reg)
    assert reg["benchmark"] == synth.OP and reg["params"] == ["'16777216'", "'float32'", "'triton'", "'default'"]
    assert reg["previous_commit"] == commits[9] and reg["status"] == "fixed" and reg["fixed_by"] == commits[20]
    assert 1.07 < reg["ratio"] < 1.13 and reg["p_value"] < 1e-3
    # acknowledge, and the note survives the next detection run
    assert main(["regressions", "ack", reg["id"][:6], "--note", "known", "--status", "ignored", "--db", str(db)]) == 0
    capsys.readouterr()
    assert main(["regressions", "--db", str(db), "--format", "json", "--flat"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again[0]["status"] == "ignored" and again[0]["note"] == "known"
    assert main(["regressions", "--db", str(db), "show", reg["id"]]) == 0
    out = capsys.readouterr().out
    for check in ("driver and toolkit versions", "memory format", "layout / access-pattern settings",
                  "tile / shared-memory size vs problem", "first-step compilation / warm-up", "CPU load",
                  "clocks and throttle reasons", "xrt diag square --shape 16777216"):
        assert check in out, check
    assert main(["regressions", "--db", str(db), "--format", "markdown", "--since", commits[15][:8]]) == 0
    assert "(0 steps)" not in capsys.readouterr().out


def test_failing_series_are_grouped_into_alerts_per_machine_and_commit(world, capsys):
    """The terminal and markdown summaries group like `xrt regressions`: one alert per (machine, commit)."""
    repo, commits, root, rng, db = world
    synth.write_run(root, "h100", commits[-1], synth.samples(rng, 60e-6), synth.samples(rng, 6e-6), N - 1, 1980)
    for i, c in enumerate(commits[-2:]):  # a second machine: only its op got slower (no sidecar: cause unknown)
        synth.write_run(root, "a100", c, synth.samples(rng, 80e-6 * (1.3 if i else 1)), synth.samples(rng, 9e-6), i)
    _ingest(root, db, repo)
    summary = db.parent / "summary.md"
    code, out = _gate(db, repo, commits[-2], commits[-1], capsys, "--summary", str(summary))
    assert code == 1, out
    lines = out.splitlines()
    heads = [i for i, ln in enumerate(lines) if ln.startswith("alert: ")]
    assert [lines[i] for i in heads] == [
        f"alert: h100 at {commits[-1][:10]} (from {commits[-2][:10]}): 2 regressions; code change",
        f"alert: a100 at {commits[-1][:10]} (from {commits[-2][:10]}): 1 regression; cause cannot be told "
        "(no machine environment recorded)"]
    # each alert's REGRESSION lines follow it
    h100 = lines[heads[0] + 1:heads[1]]
    assert sorted(ln.split()[1] for ln in h100) == sorted([synth.OP, synth.PLAIN])
    assert all(ln.startswith("REGRESSION ") and "machine h100" in ln for ln in h100)
    assert lines[heads[1] + 1].startswith(f"REGRESSION {synth.OP} ") and "machine a100" in lines[heads[1] + 1]
    md = summary.read_text()
    assert md.count("#### ") == 2 and "#### h100 at" in md and md.index("#### h100") < md.index("#### a100")
    a100 = md[md.index("#### a100"):]
    assert a100.count("| a100 |") == 1 and "| h100 |" not in a100.split("####")[1]


def test_report_writes_one_static_page_with_the_verdict_and_every_series(world, capsys):
    import html.parser

    repo, commits, root, rng, db = world
    synth.write_run(root, "h100", commits[-1], synth.samples(rng, 60e-6), synth.samples(rng, 5e-6), N - 1, 1980)
    _ingest(root, db, repo)
    out = db.parent / "report.html"
    code = main(["report", "--db", str(db), "--repo", str(repo), "--base", commits[-2], "--head", "HEAD",
                 "--out", str(out)])
    said = capsys.readouterr().out
    assert code == 0 and f"wrote {out} (gate: regression, 2 series compared, 1 regression(s))" in said
    page = out.read_text()
    cells: list[str] = []

    class P(html.parser.HTMLParser):
        def handle_data(self, data):
            cells.append(data)

    P().feed(page)
    text = " ".join(cells)
    assert "gate: regression" in text and "<script" not in page  # static: no script
    assert "Every series at both commits (2)" in text and synth.OP in text
    import re

    assert re.search(r"\b(59|60|61)(\.\d)? µs\b", text) and "e-05" not in text  # in its unit, not 6e-05
    assert text.index("1.2") < text.index("Every series")  # the regression's ratio, in its alert, first
    # bad input: one line, exit 2, nothing written
    out.unlink()
    code = main(["report", "--db", str(db), "--repo", str(repo), "--base", "nosuchrev", "--head", "HEAD",
                 "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("xrt report: ") and "nosuchrev" in err[0]
    assert not out.exists()
