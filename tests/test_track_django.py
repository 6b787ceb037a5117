"""The tracker on real ingested data: the ubuntu-22.04 and macos-12 machines of the django-asv corpus."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from conftest import extract_django  # noqa: E402

from xrt.cli import main  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402
from xrt.db.query import query  # noqa: E402

MACHINES = ("ubuntu-22.04", "macos-12")  # macos-12 stored no samples, ubuntu-22.04 did


@pytest.fixture(scope="module")
def django_db(tmp_path_factory):
    out = extract_django(tmp_path_factory.mktemp("django-subset"), skip_machines=("windows-2022", "ubuntu-latest"))
    db = out / "django.duckdb"
    ingest(out, db, echo=lambda s: None)
    return db


def test_regressions_json_on_real_data(django_db, capsys):
    assert main(["regressions", "--db", str(django_db), "--format", "json", "--kind", "all", "--no-save",
                 "--flat"]) == 0
    recs = json.loads(capsys.readouterr().out)
    assert recs, "the two machines' histories have level shifts"
    names = {r for (r,) in query(django_db, "SELECT DISTINCT benchmark FROM results")[1]}
    for r in recs:
        assert r["machine"] in MACHINES and r["benchmark"] in names
        assert len(r["commit"]) == 40 and len(r["previous_commit"]) == 40 and r["commit"] != r["previous_commit"]
        assert r["kind"] in ("regression", "improvement") and r["p_value"] <= 1e-3
        assert abs(r["ratio"] - r["after"] / r["before"]) < 1e-9 and abs(r["ratio"] - 1) >= 0.02


def test_gate_on_real_data(django_db, capsys):
    # the two latest commits whose every value carries its samples (older asv runs stored none)
    (c1,), (c2,) = query(django_db, "SELECT r.commit_hash FROM results r JOIN runs u USING (run_id) "
                         "WHERE r.machine = 'ubuntu-22.04' GROUP BY r.commit_hash HAVING count(r.value) > 0 AND "
                         "count(r.samples) = count(r.value) ORDER BY max(u.commit_date) DESC LIMIT 2")[1]
    base = ["gate", "--db", str(django_db), "--machine", "ubuntu-22.04", "--no-history"]
    assert main(base + ["--base", c1, "--head", c1]) == 2  # the same commit: nothing new to judge
    assert main(base + ["--base", c2, "--head", "f" * 40]) == 2  # head never measured
    out = capsys.readouterr().out
    assert "matches 0 commits" in out
    code = main(base + ["--base", c2, "--head", c1])
    out = capsys.readouterr().out
    assert code in (0, 1, 2) and "xrt gate:" in out
    assert (code == 2) == ("cannot judge" in out)
    assert "ingest error" not in out  # django's removed benchmarks are history, not errors


def test_grouped_alerts_on_real_data(django_db, capsys):
    """One alert per (machine, commit); django's files record no machine, only asv's python and environments."""
    assert main(["regressions", "--db", str(django_db), "--format", "json", "--no-save", "--flat"]) == 0
    flat = json.loads(capsys.readouterr().out)
    assert main(["regressions", "--db", str(django_db), "--format", "json", "--no-save"]) == 0
    alerts = json.loads(capsys.readouterr().out)
    assert sum(len(a["records"]) for a in alerts) == len(flat)
    assert len(alerts) == len({(r["machine"], r["commit"]) for r in flat}) < len(flat)
    for a in alerts:
        # asv records only python, env_name and requirements: a commit where the set of Python
        # environments changed is an environment change; otherwise the machine is unknown
        assert (a["cause"], bool(a["env_changes"])) in (("unknown", False), ("environment", True)), a
        assert all(c.split(":")[0] in ("python", "env_name") for c in a["env_changes"]), a["env_changes"]
        assert {(r["machine"], r["commit"]) for r in a["records"]} == {(a["machine"], a["commit"])}
    assert main(["regressions", "--db", str(django_db), "--no-save"]) == 0
    out = capsys.readouterr().out
    assert "cause cannot be told (no machine environment recorded)" in out
    assert f"({len(alerts)} alerts, {len(flat)} steps)" in out
