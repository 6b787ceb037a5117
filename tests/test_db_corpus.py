"""xrt.db on a real corpus: django/django-asv's results (4,675 result files, schema 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from conftest import extract_django  # noqa: E402

from xrt.db import perf  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402
from xrt.db.query import query  # noqa: E402


@pytest.fixture(scope="session")
def django_results(tmp_path_factory):
    return extract_django(tmp_path_factory.mktemp("django-asv"))


@pytest.mark.slow
def test_django_corpus_exact_counts(django_results, tmp_path):
    db = tmp_path / "django.duckdb"
    lines: list[str] = []
    rep = ingest(django_results, db, echo=lines.append)
    assert (rep.values_ok, rep.failures, rep.skips) == (197_101, 58_760, 0)
    rows = query(db, "SELECT count(value), count(*) FILTER (status = 'failed'), count(*) FILTER "
                 "(status = 'skipped'), count(DISTINCT run_id), count(DISTINCT machine) FROM results")[1]
    assert rows == [(197_101, 58_760, 0, 4_675, 4)]
    # benchmarks since removed from benchmarks.json: history, not errors; one notice names them, rows kept
    assert rep.errors == [] and query(db, "SELECT count(*) FROM ingest_errors")[1] == [(0,)]
    assert sum("not in benchmarks.json (removed from the suite)" in s for s in lines) == 1
    assert sum("no --repo" in s for s in lines) == 1
    assert query(db, "SELECT count(*) FROM results r LEFT JOIN commits c ON c.hash = r.commit_hash "
                 "WHERE c.position IS NULL")[1] == [(0,)]
    again = ingest(django_results, db, echo=lambda s: None)
    assert (again.ingested, again.unchanged, again.wrote) == (0, 4_675, False)


def test_perf_runs_on_a_tiny_size(tmp_path):
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "db_fixtures"))
    import asvgen

    root = asvgen.make_results(tmp_path / "results", {
        f"m1/{asvgen.sha(i)[-8:]}-env.json": asvgen.v2_file(asvgen.sha(i), date_ms=1_700_000_000_000 + i)
        for i in range(3)})
    figures = perf.run(corpus=str(root), values=2_000, repeat=1, workdir=str(tmp_path / "work"),
                       echo=lambda s: None, ingest_cmd=[sys.executable, "-m", "xrt.cli", "db", "ingest"])
    assert figures["corpus"]["files"] == 3 and figures["corpus"]["values"] == 12
    assert figures["corpus"]["ratio_cli_vs_json_load"] > 0 and "cli_skipped" not in figures["corpus"]
    assert {q["query"] for q in figures["queries"]} >= set(perf.QUERIES)
    assert all(q["rows"] > 0 for q in figures["queries"])
    md = perf.markdown(figures)
    assert "| query |" in md and "json.load" in md and "`xrt db ingest` command" in md
    # the caller names the ingest command (the database layer does not drive the CLI): none, none timed
    said: list[str] = []
    c = perf.time_corpus(root, tmp_path / "work", repeat=1, echo=said.append)
    assert said[0] == perf.NO_INGEST_CMD and c["cli_skipped"] == perf.NO_INGEST_CMD
    assert set(c["best_s"]) == {"json_load_keep", "json_load", "ingest", "reingest"}
    md = perf.markdown({**figures, "corpus": c})
    assert "`xrt db ingest` command" not in md and perf.NO_INGEST_CMD in md


def test_perf_corpus_is_explicit(tmp_path, capsys):
    """No default path outside the project: without --corpus the ingest timings are skipped and say so;
    a --corpus that does not exist is one line and exit 2, not a silent skip."""
    from xrt.cli import main

    said: list[str] = []
    figures = perf.run(values=500, repeat=1, workdir=str(tmp_path / "w"), echo=said.append)
    assert "corpus" not in figures and "perf: no --corpus given: ingest timings skipped" in said
    missing = tmp_path / "no-such-corpus.tar.gz"
    assert main(["db", "perf", "--corpus", str(missing), "--values", "500", "--repeat", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(missing) in err[0] and "no such file or directory" in err[0]
