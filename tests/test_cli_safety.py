"""The tracker's commands and outputs under hostile input and careless use: every bad input is one
line naming it and exit 2, no listing changes what is stored, the gate never exits 1 unless it judged
a slowdown, and every Markdown output shows names as they are."""

from __future__ import annotations

import math
import re
import shutil
import warnings

import numpy as np
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from conftest import ro, rw
from markdown_checks import outside_code  # noqa: E402

from xrt.cli import main  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402
from xrt.track import explain, gate, regressions, synth  # noqa: E402
from xrt.track.units import fmt_value  # noqa: E402

N = 16  # commits; the op slows down by 10 % at STEP and stays slow
STEP = 8


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A database with one stored `new` regression (what `xrt regressions` saved) and its commits."""
    tmp = tmp_path_factory.mktemp("safety")
    repo, root, db = tmp / "repo", tmp / "results", tmp / "xrt.duckdb"
    commits = synth.git_history(repo, N)
    rng = np.random.default_rng(5)
    for i, c in enumerate(commits):
        synth.write_run(root, "h100", c, synth.samples(rng, 50e-6 * (1.10 if i >= STEP else 1.0)),
                        synth.samples(rng, 5e-6), i, 1980)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    assert main(["regressions", "--db", str(db)]) == 0
    stored = regressions.stored(ro(db))
    assert [(r["kind"], r["status"], r["commit"]) for r in stored.values()] == [("regression", "new", commits[STEP])]
    return db, commits


@pytest.fixture
def db(saved, tmp_path):
    """A copy of ``saved``'s database for a test that might change it."""
    p = tmp_path / "xrt.duckdb"
    shutil.copy(saved[0], p)
    return p


def _table(db) -> dict:
    """What a listing must leave alone: every stored row's status and whether it is still detected."""
    return {k: (r["status"], r["still_detected"], r["note"]) for k, r in regressions.stored(ro(db)).items()}


def _one_line(err: str, *names: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for n in names:
        assert n in lines[0], (n, lines[0])


# ---------------------------------------------------------------------- xrt regressions: its inputs

@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "-1", "-0.5", "", "2%"])
def test_a_min_effect_that_is_no_fraction_is_one_line_and_stores_nothing(db, capsys, value):
    before = _table(db)
    assert main(["regressions", "--db", str(db), f"--min-effect={value}"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    _one_line(err, "--min-effect", repr(value))
    assert _table(db) == before  # the stored `new` regression is still there


def test_min_effect_and_effects_change_the_listing_not_the_stored_table(db, capsys, tmp_path):
    rid = next(iter(regressions.stored(ro(db))))
    assert main(["regressions", "ack", rid, "--db", str(db), "--note", "seen"]) == 0
    before = _table(db)
    assert main(["regressions", "--db", str(db), "--min-effect", "0.5"]) == 0
    assert "(0 alerts, 0 steps)" in capsys.readouterr().out  # a 10 % step is below a 50 % bar...
    assert _table(db) == before  # ...and the acknowledged row is neither dropped nor marked gone
    effects = tmp_path / "e.json"
    effects.write_text('{"Square": 0.5, "Launch": 0.5}')
    assert main(["regressions", "--db", str(db), "--effects", str(effects), "--flat"]) == 0
    assert "(0 steps)" in capsys.readouterr().out and _table(db) == before
    assert main(["regressions", "--db", str(db), "--flat"]) == 0  # the default run still stores and lists it
    assert rid in capsys.readouterr().out and _table(db) == before


@pytest.mark.parametrize("text, names", [('{"Square": NaN}', ["'Square'", "nan"]), ('{"Square": -1}', ["'Square'"]),
                                         ('{"((": 0.05}', ["'(('", "not a regular expression"]),
                                         ('["Square"]', ["expected a table"]), ('{"Square": ', ["not valid json"]),
                                         ('{"Square": true}', ["'Square'"])])
def test_a_bad_effects_file_is_one_line_naming_it(db, capsys, tmp_path, text, names):
    f = tmp_path / "effects.json"
    f.write_text(text)
    before = _table(db)
    assert main(["regressions", "--db", str(db), "--effects", str(f)]) == 2
    _one_line(capsys.readouterr().err, "--effects", str(f), *names)
    assert _table(db) == before


@pytest.mark.parametrize("regex", ["((", "[a-", "(?=lookahead)", "a{2,1}"])
def test_a_benchmark_regex_that_does_not_parse_is_one_line(saved, capsys, regex):
    assert main(["regressions", "--db", str(saved[0]), "--benchmark", regex]) == 2
    _one_line(capsys.readouterr().err, "--benchmark", repr(regex), "not a regular expression")


def test_a_bad_since_is_found_before_anything_is_stored(saved, tmp_path, capsys):
    """--since is checked before the detection run saves: a fresh database stays without a table."""
    p = tmp_path / "fresh.duckdb"
    shutil.copy(saved[0], p)
    from xrt.db import store

    store.write(p, lambda con: con.execute("DELETE FROM regressions"))
    assert main(["regressions", "--db", str(p), "--since", "ffff0000"]) == 2
    _one_line(capsys.readouterr().err, "'ffff0000'")
    assert regressions.stored(ro(p)) == {}


# ---------------------------------------------------------------------- xrt gate: exit 2, never a traceback or 1

def _gate(db, commits, *extra):
    return main(["gate", "--db", str(db), "--base", commits[-2], "--head", commits[-1], *extra])


def test_a_summary_that_is_a_directory_is_exit_2_on_a_passing_gate(saved, tmp_path, capsys):
    db, commits = saved
    assert _gate(db, commits) == 0  # the gate passes...
    capsys.readouterr()
    assert _gate(db, commits, "--summary", str(tmp_path)) == 2  # ...but its summary cannot be written
    out, err = capsys.readouterr()
    _one_line(err, "cannot judge", "--summary", str(tmp_path))
    assert out == ""
    missing = tmp_path / "no" / "summary.md"
    assert _gate(db, commits, "--summary", str(missing)) == 2
    _one_line(capsys.readouterr().err, str(missing))


@pytest.mark.parametrize("where", ["report", "summary_markdown", "judge"])
@pytest.mark.parametrize("exc", [KeyError("machine"), TypeError("boom"), AttributeError("x"), ZeroDivisionError()])
def test_any_exception_inside_the_gate_is_one_line_and_exit_2(saved, tmp_path, capsys, monkeypatch, where, exc):
    db, commits = saved

    def broken(*a, **k):
        raise exc

    monkeypatch.setattr(gate, where, broken)
    summary = tmp_path / "summary.md"
    assert _gate(db, commits, "--summary", str(summary)) == 2
    out, err = capsys.readouterr()
    _one_line(out + err, "cannot judge", "internal error", type(exc).__name__)
    assert "cannot judge" in summary.read_text()


# ---------------------------------------------------------------------- tracebacks of other commands

def test_export_to_the_current_directory_is_one_line(saved, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["db", "export", "--db", str(saved[0]), "--parquet", "."])
    out, err = capsys.readouterr()
    assert rc == 2
    _one_line(err, "xrt db")
    assert tmp_path.is_dir()


def test_report_out_a_directory_is_one_line_and_leaves_no_temporary_file(saved, tmp_path, capsys):
    db, commits = saved
    args = ["report", "--db", str(db), "--base", commits[-2], "--head", commits[-1]]
    assert main([*args, "--out", str(tmp_path)]) == 2
    _one_line(capsys.readouterr().err, "--out", str(tmp_path), "directory")
    assert main([*args, "--out", str(tmp_path / "no" / "r.html")]) == 2
    _one_line(capsys.readouterr().err, "does not exist")
    assert main([*args, "--out", str(tmp_path / "r.html")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html"]


# ---------------------------------------------------------------------- Markdown: names shown as they are

EVIL = {"machine": "gpu <script>alert(1)</script>", "benchmark": "ops.X![img](http://evil/i.png).time_`op`",
        "param_key": "'1' | <img src=x onerror=alert(1)>, '[l](http://evil/l)'"}




def assert_inert(md: str) -> None:
    """No HTML, image, link or escape from a code span outside the code spans; every table row keeps
    its cells (a ``|`` of a name is escaped, GFM's rule, even inside a span)."""
    plain = outside_code(md)
    for bad in ("<script", "<img", "![", "](", "onerror"):
        assert bad not in plain, (bad, plain)
    for block in re.findall(r"(?m)(?:^\|.*\n?)+", md):  # each table: every row as many cells as its header
        counts = {len(re.findall(r"(?<!\\)\|", row)) for row in block.splitlines()}
        assert len(counts) == 1, block


def _item(**kw) -> dict:
    return {**EVIL, "params": [], "before": 4e-5, "after": 5e-5, "ratio": 1.25, "p_value": 1e-4, "z": None,
            "judged": "on samples", "unit": "seconds", "cycles_ratio": 1.0, **kw}


def test_the_gate_summary_shows_hostile_names_as_text():
    v = gate.Verdict(base="a" * 40, head="b" * 40)
    v.regressions.append(_item())
    v.clock.append(_item())
    v.within_noise.append(_item())
    v.changed_machine.append(_item())
    v.problems.append(f"{EVIL['machine']} {EVIL['benchmark']} [{EVIL['param_key']}]: failed at head")
    v.notes.append(f"{EVIL['machine']}: no environment recorded")
    v.code = gate.REGRESSION
    md = gate.summary_markdown(v)
    assert_inert(md)
    assert md.count("`` ops.X![img](http://evil/i.png).time_`op` ``") >= 3  # the name, whole, in a code span


def test_regressions_markdown_shows_hostile_names_as_text():
    recs = regressions.gate_records("a" * 40, "b" * 40, [_item()])
    recs[0].unit = "seconds"
    for fmt_md in (regressions.render(recs, "markdown"),
                   regressions.render_alerts(regressions.group(recs, {}), "markdown")):
        assert_inert(fmt_md)
        assert "`` ops.X![img](http://evil/i.png).time_`op` ``" in fmt_md
    env_changed = regressions.Alert(EVIL["machine"], "b" * 40, "a" * 40, "environment",
                                    ["gpu: H100 → <img src=x onerror=alert(1)>"], recs)
    assert_inert(regressions.render_alerts([env_changed], "markdown"))


def test_explain_markdown_and_the_gate_show_hostile_names_from_the_database(tmp_path):
    payload = {"case": {"benchmark": EVIL["benchmark"]}, "param_key": EVIL["param_key"], "base": "a" * 40,
               "head": "b" * 40, "host": "<img src=x onerror=1>", "gpu": "![g](http://evil/g)",
               "regression_id": "r1", "ratio": 1.2, "ncu": {"clock_control": "none`|"},
               "sides": {"base": {"parts": {"ncu": "skipped: ![s](http://evil/s)"}}, "head": {"parts": {}}},
               "changes": [{"group": "kernel list", "what": "kernel <b>replaced</b>", "kernel": "k|[x](http://evil)",
                            "base": "a", "head": "![b](http://evil/b)", "change": "|"}]}
    md = explain.render_markdown(payload)
    assert_inert(md)
    db = tmp_path / "x.duckdb"
    rw(db, lambda con: explain.save(con, payload, "# stored <script>alert(1)</script> ![x](http://evil/x)"))
    [shown] = explain.for_gate(ro(db), "b" * 40, [{"benchmark": EVIL["benchmark"], "param_key": EVIL["param_key"]}])
    assert shown == md  # rendered again from the payload, not the stored text


def test_the_html_report_escapes_hostile_names():
    """`xrt report` writes HTML, not Markdown: every name through html.escape (this held before)."""
    from xrt.track import report

    v = gate.Verdict(base="a" * 40, head="b" * 40)
    v.regressions.append(_item())
    v.code = gate.REGRESSION
    pair = {**EVIL, "unit": "seconds", "base": 4e-5, "head": 5e-5, "ratio": 1.25, "base_status": "ok<b>",
            "head_status": "ok"}
    page = report.render(v, [pair], gate.Settings.from_text("0.05", "0.002", "5"))
    assert "<script" not in page and "<img" not in page and "<b>" not in page
    assert "ops.X![img](http://evil/i.png).time_`op`" in page  # shown as typed


def test_lit_is_the_one_rule_and_the_dashboard_uses_it():
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "dashboard"))
    import dashui

    from xrt.track import markdown

    assert dashui.lit is markdown.lit
    assert markdown.lit("a|b", cell=True) == "` a\\|b `" and markdown.lit("`x", None) == "`` `x ``"
    assert markdown.lit("plain words") == "plain words" and markdown.lit("ab", code=True) == "` ab `"


# ---------------------------------------------------------------------- numbers for people

@pytest.mark.parametrize("v, text", [(0.0009999, "1 ms"), (999.95e-9, "1 µs"), (0.9999999, "1 s"), (999.4e-9, "999 ns"),
                                     (-0.0009999, "-1 ms"), (5e-5, "50 µs"), (1e308, "1e+308 s")])
def test_fmt_value_rounds_into_the_next_unit(v, text):
    assert fmt_value(v, "seconds") == text


def test_fmt_value_never_shows_a_thousand_of_a_unit():
    near = [b * (1 - d) for b in (1e-6, 1e-3, 1.0) for d in np.geomspace(1e-7, 1e-2, 60)]  # below each boundary
    for x in [*np.geomspace(1e-10, 10, 401), *near]:
        num, unit = fmt_value(float(x), "seconds").split()
        assert abs(float(num)) < 1000 or unit == "s", (x, num, unit)


def test_fmt_value_and_the_unit_rule_take_a_null_unit():
    from xrt.track.detect import higher_is_better
    from xrt.track.units import fmt_ratio

    for null in (None, math.nan, np.nan, float("nan")):
        assert higher_is_better(null) is False
        assert fmt_value(1.5, null) == "1.5"
    assert fmt_ratio(math.inf) == "∞" and fmt_ratio(None) == "—" and fmt_ratio(1.23456) == "1.235"


def test_a_value_near_1e308_gives_no_numpy_warning_and_no_inf(tmp_path, capsys):
    repo, root, db = tmp_path / "repo", tmp_path / "results", tmp_path / "xrt.duckdb"
    commits = synth.git_history(repo, 2)
    rng = np.random.default_rng(1)
    synth.write_run(root, "h100", commits[0], synth.samples(rng, 50e-6), synth.samples(rng, 5e-6), 0, 1980)
    synth.write_run(root, "h100", commits[1], [1e307] * 60, [1e307] * 60, 1, 1980)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    summary = tmp_path / "s.md"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        rc = main(["gate", "--db", str(db), "--base", commits[0], "--head", commits[1], "--summary", str(summary)])
        out = capsys.readouterr().out
        assert main(["report", "--db", str(db), "--base", commits[0], "--head", commits[1],
                     "--out", str(tmp_path / "r.html")]) == 0
    assert rc == 1, out
    assert [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)] == []
    assert "inf" not in out and "∞" in out and "**∞**" in summary.read_text()
    assert "inf×" not in (tmp_path / "r.html").read_text()
