"""The dashboard's pages under Streamlit's AppTest, on a small database shaped like xrt's own suites.

``bench_ops.Square.time_op`` with params shape x dtype x provider x config on two GPU machines,
30 commits, and one 20 % step (gpu-a, 4096, triton, default) at commit 20, stored as a regression
the way ``xrt regressions`` stores it. Every page, its filters, deep links, the empty states and the
acknowledge flow (written through xrt.track, i.e. ``xrt.db.store.write``).
"""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

from conftest import ro, rw  # noqa: E402
from dashboard_checks import APP, CHROMIUM, grid_of, launch_chromium, open_app, steps_table  # noqa: E402
from markdown_checks import outside_code  # noqa: E402
from streamlit.testing.v1 import AppTest  # noqa: E402
from streamlit_server import streamlit_server  # noqa: E402

from xrt.db import store  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BENCH = "bench_ops.Square.time_op"
NAMES = ["shape", "dtype", "provider", "config"]
PARAMS = [["'1024'", "'4096'"], ["'float32'"], ["'torch'", "'triton'"],
          ["'default'", "'BLOCK=128,num_warps=4'", "'BLOCK=256,num_warps=4'", "'BLOCK=128,num_warps=8'"]]
MACHINES = {"gpu-a": "NVIDIA H100 80GB HBM3", "gpu-b": "NVIDIA H200"}
N_COMMITS, STEP_AT = 30, 20
STEPPED = ("gpu-a", "'4096', 'float32', 'triton', 'default'")


def build(db: Path, bench: str = BENCH, names: list = NAMES, params: list = PARAMS, machines: dict = MACHINES,
          message: str = "commit {i}: change things") -> list[str]:
    """The database; the hostile-strings tests pass other names (the step is on the first machine,
    second shape, first dtype, second provider, first config, as STEPPED)."""
    stepped = (list(machines)[0], ", ".join([params[0][1], params[1][0], params[2][1], params[3][0]]))
    rng = np.random.default_rng(5)
    hashes = [f"{i:02d}" + "ab" * 19 for i in range(N_COMMITS)]
    t0 = datetime(2026, 1, 1)

    def fill(con):
        con.executemany("INSERT INTO commits VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [[h, i, i, t0 + timedelta(days=i), "Dev <d@x>", message.format(i=i),
                          [hashes[i - 1]] if i else [], "git"] for i, h in enumerate(hashes)])
        con.execute("INSERT INTO benchmarks (name, type, unit, params, param_names, version) VALUES "
                    "(?, 'time', 'seconds', ?, ?, 'v1')", [bench, json.dumps(params), names])
        rid = 0
        for m, gpu in machines.items():
            con.execute("INSERT INTO machines (machine, gpu_model) VALUES (?, ?)", [m, gpu])
            for i, h in enumerate(hashes):
                rid += 1
                con.execute("INSERT INTO runs (run_id, file, content_hash, machine, commit_hash, env_name, commit_date,"
                            " asv_schema, gpu_model, throttle_share, n_values, n_ok, n_failed, n_skipped, started_at,"
                            " ingested_at) VALUES (?, ?, ?, ?, ?, 'env', ?, 2, ?, 0.01, 16, 16, 0, 0, ?, now())",
                            [rid, f"{m}/{h[:8]}.json", h, m, h, t0 + timedelta(days=i), gpu,
                             t0 + timedelta(days=i, hours=3)])
                rows = []
                for k, combo in enumerate(itertools.product(*params)):
                    pk = ", ".join(combo)
                    n = 1024 if combo[0] == params[0][0] else 4096
                    level = n * 1e-9 * (1 + 0.3 * k / 16) * (1.2 if (m, pk) == stepped and i >= STEP_AT else 1.0)
                    smp = list(level * rng.lognormal(0, 0.01, 10))
                    v = float(np.median(smp))
                    nbytes = 8.0 * n
                    rows.append([rid, m, h, "env", bench, k, list(combo), pk, v, "ok", smp, "seconds", "v1",
                                 nbytes, nbytes / v / 1e9])
                con.executemany("INSERT INTO results (run_id, machine, commit_hash, env_name, benchmark, param_index,"
                                " params, param_key, value, status, samples, unit, version, bytes, gbps) VALUES "
                                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    store.write(db, fill, fresh=True)
    return hashes


@pytest.fixture(scope="module")
def xdb(tmp_path_factory):
    from xrt.track import regressions

    db = tmp_path_factory.mktemp("dash") / "xrt.duckdb"
    hashes = build(db)
    recs = regressions.detect_db(ro(db))
    rw(db, lambda con: regressions.save(con, recs))
    return db, hashes


def stamp(path: Path) -> tuple:
    s = path.stat()
    return s.st_ino, s.st_mtime_ns, s.st_size


@pytest.fixture
def db(xdb, monkeypatch):
    """The module's database itself, for the tests that only read it: one file for all of them, so the
    dashboard's cache (keyed by the file's path and stamp) serves what an earlier test read, as it does
    for a second viewer. A test that writes takes db_copy; writing here fails the test."""
    before = stamp(xdb[0])
    monkeypatch.setenv("XRT_DB", str(xdb[0]))
    yield xdb[0]
    assert stamp(xdb[0]) == before, "this test wrote to the shared database: give it db_copy"


@pytest.fixture
def db_copy(xdb, tmp_path, monkeypatch):
    """A private copy, for the tests that write (the ack flow, stored explanations, extra rows)."""
    p = tmp_path / "xrt.duckdb"
    p.write_bytes(xdb[0].read_bytes())
    monkeypatch.setenv("XRT_DB", str(p))
    return p


app = open_app  # XRT_DB: the db fixture sets it


def charts(at: AppTest) -> list:
    return at.get("vega_lite_chart")


def stepped_id(db: Path) -> str:
    from xrt.track import regressions

    (rid,) = [k for k, v in regressions.stored(ro(db)).items()
              if v["kind"] == "regression" and (v["machine"], v["param_key"]) == STEPPED]
    return rid


# ---------------------------------------------------------------------- what the runs share

def test_apptest_runs_share_one_component_scan_and_one_script_cache(db):
    """Two fresh AppTests (two sessions) scan the installed packages once and compile each script once."""
    from streamlit.components.v2 import manifest_scanner
    from streamlit.testing.v1 import app_test

    scan = manifest_scanner.scan_component_manifests
    app("explorer")
    before = scan.cache_info()
    at = app("explorer")
    assert scan.cache_info().misses == before.misses and scan.cache_info().hits > before.hits
    cache = app_test.ScriptCache()
    assert cache is app_test.ScriptCache() and str(APP.parent / "views" / "explorer.py") in cache._cache
    assert charts(at) and at.sidebar.selectbox(key="ex:op").value == "Square"  # the shared code still renders


# ---------------------------------------------------------------------- empty states

@pytest.mark.parametrize("page", [None, "detail", "explorer", "compare", "tuning"])
def test_no_database_says_what_to_run(tmp_path, monkeypatch, page):
    monkeypatch.setenv("XRT_DB", str(tmp_path / "none.duckdb"))
    at = app(page)
    assert "xrt db ingest" in at.info[0].value and not charts(at)


def test_empty_database_and_no_regressions_yet(tmp_path, monkeypatch, xdb):
    empty = tmp_path / "empty.duckdb"
    store.write(empty, lambda con: None, fresh=True)
    monkeypatch.setenv("XRT_DB", str(empty))
    assert "no benchmark results yet" in app().info[0].value
    # results but `xrt regressions` never ran
    bare = tmp_path / "bare.duckdb"
    build(bare)
    monkeypatch.setenv("XRT_DB", str(bare))
    at = app()
    assert at.dataframe[0].value["machine"].tolist() == ["gpu-a", "gpu-b"]
    assert "xrt regressions --db" in at.info[0].value
    assert "xrt regressions --db" in app("detail").info[0].value


# ---------------------------------------------------------------------- overview

def test_overview_machines_and_open_regressions(db):
    at = app()
    assert at.title[0].value == "Regressions"
    m = at.dataframe[0].value
    assert m["GPU"].tolist() == list(MACHINES.values())
    assert m["commit"].tolist() == ["29abababab"] * 2 and (m["status"] == "16 ok").all()
    regs = steps_table(at)  # every step, after the alerts (and before the grid of every benchmark)
    assert len(regs) == 1 and regs["machine"][0] == "gpu-a" and regs["params"][0] == STEPPED[1]
    assert 1.15 < regs["ratio"][0] < 1.25 and regs["first_slow"][0].startswith(f"{STEP_AT}ababab")
    assert len(charts(at)) == 1


def test_overview_groups_steps_into_alerts_per_machine_and_commit(db_copy):
    """One expandable row per (machine, first slow commit), with its series and their ratios."""
    from xrt.track import regressions

    rid = stepped_id(db_copy)
    other = "'4096', 'float32', 'torch', 'default'"

    def more(con):  # a second series of gpu-a at the same commit, and one of gpu-b there
        for new_id, machine, pk, ratio in (("a2", "gpu-a", other, 1.5), ("b1", "gpu-b", other, 1.1)):
            con.execute("INSERT INTO regressions SELECT * REPLACE (? AS id, ? AS machine, ? AS param_key, "
                        "? AS ratio) FROM regressions WHERE id = ?", [new_id, machine, pk, ratio, rid])

    store.write(db_copy, more)
    assert len(regressions.stored(ro(db_copy))) >= 3
    at = app()
    labels = [e.label for e in at.expander]
    assert len(labels) == 2, labels
    a = next(x for x in labels if x.startswith("gpu-a"))
    assert f"at {STEP_AT}ababab" in a and "2 regressions" in a and "largest 1.500×" in a and "(2 series)" in a
    assert next(x for x in labels if x.startswith("gpu-b")).count("1 regression") == 1
    frames = [d.value for d in at.dataframe]
    last = next(i for i, d in enumerate(frames) if "first_slow" in d.columns)
    inside = frames[1:last]  # machines first, then the alerts, then every step, then the grid
    by_len = sorted(inside, key=len)
    assert [len(d) for d in by_len] == [1, 2]
    assert sorted(by_len[1]["params"]) == sorted([STEPPED[1], other])
    ratio = regressions.stored(ro(db_copy))[rid]["ratio"]
    assert sorted(round(x, 3) for x in by_len[1]["ratio"]) == [round(ratio, 3), 1.5]
    assert len(frames[last]) == 3  # the flat table keeps every step


def test_overview_filters_and_deep_link(db):
    at = app()
    at.multiselect(key="ov:m").select("gpu-b").run()
    assert "No open regressions" in at.success[0].value
    assert at.query_params["m"] in ("gpu-b", ["gpu-b"])
    # the URL reopens the view: the same query parameters on a fresh session
    at2 = app(m=["gpu-b"], status="all")
    assert at2.multiselect(key="ov:m").value == ["gpu-b"] and at2.radio(key="ov:status").value == "all"
    at3 = app(kind=["improvement"], status="all")
    assert at3.multiselect(key="ov:kind").value == ["improvement"]


# ---------------------------------------------------------------------- detail and the ack flow

def test_detail_deep_link_chart_commits_and_ack_flow(db_copy, served_at):
    from xrt.track import regressions

    served_at("127.0.0.1")  # the shipped config's address, whatever directory pytest runs from
    rid = stepped_id(db_copy)
    at = app("detail", id=rid[:6])  # a prefix is enough
    assert at.subheader[0].value == f"` {BENCH} ` [` {STEPPED[1]} `] on gpu-a"  # names as code: never Markdown
    assert at.metric[0].value.startswith("1.2") and at.metric[4].value == "new"
    assert len(charts(at)) == 2  # the series with the change point, the before/after samples
    spec = json.loads(charts(at)[0].proto.spec)
    marks = [ly.get("mark", {}).get("type", ly.get("mark")) for ly in spec["layer"]]
    assert marks[0] == "rect" and "rule" in marks  # the threshold band under the series, the step's line
    assert "threshold (2%)" in at.markdown[[i for i, m in enumerate(at.markdown) if "The series" in m.value][0]].value
    commits = at.dataframe[0].value
    assert commits["message"].tolist() == [f"commit {STEP_AT}: change things"]
    # acknowledge -> ignored with a note, through xrt.track (store.write), then the page says so
    at.radio[0].set_value("ignored")
    at.text_input[0].input("driver update on gpu-a")
    at.button[0].click().run()
    assert not at.exception
    assert "is now ignored" in at.success[0].value and at.metric[4].value == "ignored"
    row = regressions.stored(ro(db_copy))[rid]
    assert row["status"] == "ignored" and row["note"] == "driver update on gpu-a"
    assert not list(db_copy.parent.glob(".xrt.duckdb.tmp-*"))  # the single-writer path swapped its copy in
    over = app()
    assert "No open regressions" in over.success[0].value  # ignored: no longer open
    # and it can be reopened
    at.radio[0].set_value("new")
    at.button[0].click().run()
    assert regressions.stored(ro(db_copy))[rid]["status"] == "new"


def test_detail_shows_the_stored_explanation(db_copy):
    """`xrt explain`'s stored result (tests/explain_fixtures: square v2 -> v1 under NCU) on the page,
    ranked, with what was not collected; without one, the command that collects it."""
    from xrt.track import explain, regressions

    rid = stepped_id(db_copy)
    at = app("detail", id=rid)
    (ex,) = [e for e in at.expander if "xrt explain" in e.label]
    assert f"xrt explain {rid} --db" in ex.caption[0].value and not ex.dataframe
    rec = regressions.stored(ro(db_copy))[rid]
    fx = Path(__file__).resolve().parent / "explain_fixtures"
    sides = {}
    for label, f, version in (("base", "ncu_square_v2.csv", "v2"), ("head", "ncu_square_v1.csv", "v1")):
        sides[label] = {"ncu": explain.parse_ncu_csv((fx / f).read_text()), "parts": {"ncu": "ok", "profiler": (
            "ok" if label == "base" else "skipped: no CUDA device (the profiler's kernel list needs a GPU)")},
                        "settings": {"config": {"block": 256, "version": version}}}
    payload = {"schema": explain.SCHEMA, "case": {"benchmark": BENCH}, "param_key": rec["param_key"],
               "regression_id": rid,
               "machine": rec["machine"], "ratio": rec["ratio"], "base": rec["previous_commit"], "head": rec["commit"],
               "host": "gpu-host", "gpu": "NVIDIA H100 80GB HBM3", "ncu": {"clock_control": "none"},
               "sides": sides, "changes": explain.compare(sides["base"], sides["head"])}
    rw(db_copy, lambda con: explain.save(con, payload, explain.render_markdown(payload)))
    at = app("detail", id=rid)
    (ex,) = [e for e in at.expander if "xrt explain" in e.label]
    assert "collected on gpu-host" in ex.caption[0].value and "` none `" in ex.caption[0].value
    table = ex.dataframe[0].value
    assert list(table.columns) == ["group", "what", "kernel", "base", "head", "change"]
    assert table.iloc[0].tolist()[:5] == ["kernel list", "kernel replaced", "square_v2_f32 → square_v1_f32",
                                          "square_v2_f32", "square_v1_f32"]
    dram = table[table["what"] == "DRAM throughput %"].iloc[0]
    assert (dram["base"], dram["head"], dram["change"]) == ("89.61", "74.02", "-17.4 %")
    assert "head: profiler: skipped: no CUDA device" in ex.text[0].value
    # the ack form is still the page's first radio and button
    assert at.radio[0].options == ["acknowledged", "ignored", "new"]


def test_detail_shows_the_culprit_and_the_measured_commits(db_copy):
    """`xrt culprit`'s stored culprit (a hostile subject, shown as text) and its bisect's measured commits."""
    from xrt.track import regressions

    rid = stepped_id(db_copy)
    rec = regressions.stored(ro(db_copy))[rid]
    at = app("detail", id=rid)
    assert not any("Culprit" in m for m in markdown_strings(at))  # nothing stored: no section
    r = regressions.Record(**{k: rec[k] for k in regressions.Record.__dataclass_fields__})
    culprit, good = rec["commit"], rec["previous_commit"]
    steps = [{"commit": culprit, "good_value": 4e-6, "value": 4.8e-6, "ratio": 1.2, "p_value": 1e-5, "bad": True,
              "seconds": 20.0},
             {"commit": good, "good_value": 4e-6, "value": 4.01e-6, "ratio": 1.0025, "p_value": 0.4, "bad": False,
              "seconds": 21.0}]
    evidence = {"good": good, "bad": culprit, "status": "found", "steps": steps,
                                                 "subject": "evil <b>[x](http://e)</b> *subject*",
                                                 "explanation": {"rows": [{"group": "settings", "what": "block",
                                                                           "kernel": "-", "base": "128", "head": "256",
                                                                           "change": ""}], "n_rows": 1}}
    rw(db_copy, lambda con: regressions.save_culprit(con, [r], culprit, evidence))
    at = app("detail", id=rid)
    text = markdown_strings(at)
    assert any(f"culprit ` {culprit[:12]} `" in m and "` evil <b>[x](http://e)</b> *subject* `" in m
               for m in text), text
    tables = [d.value for d in at.dataframe]
    measured = next(t for t in tables if "verdict" in t.columns)
    assert measured["commit"].tolist() == [culprit[:10], good[:10]] and measured["verdict"].tolist() == ["bad", "good"]
    assert any("what" in t.columns and t.iloc[0]["head"] == "256" for t in tables)
    # a later detection run keeps the row and its culprit
    rw(db_copy, lambda con: regressions.save(con, regressions.detect_db(con)))
    assert regressions.stored(ro(db_copy))[rid]["culprit"] == culprit


def test_detail_unknown_id_offers_the_open_ones(db):
    at = app("detail", id="ffffffff")
    assert "` id ` = ` ffffffff ` was ignored: no stored regression has this id" in at.warning[0].value
    assert len(at.selectbox[0].options) == 1


def test_detail_links_to_the_series(db):
    rid = stepped_id(db)
    at = app("detail", id=rid)
    link = at.get("page_link")[0]
    assert "explorer" in link.proto.page


# ---------------------------------------------------------------------- explorer

def test_explorer_filters_come_from_param_names(db):
    at = app("explorer")
    side = at.sidebar
    assert side.selectbox(key="ex:op").value == "Square"
    labels = [w.label for w in side.multiselect]
    assert labels == ["Machines (GPUs)", "Shape", "Dtype", "Provider", "Config"]
    assert side.multiselect(key="ex:p.config").options == ["default", "BLOCK=128,num_warps=4",
                                                             "BLOCK=128,num_warps=8", "BLOCK=256,num_warps=4"]
    # two GPUs and two providers overlaid: 4 series
    side.multiselect(key="ex:m").select("gpu-b").run()
    at.sidebar.multiselect(key="ex:p.provider").select("triton").run()
    assert not at.exception and not at.error
    assert len(at.dataframe[0].value) == 4 and len(charts(at)) == 1
    assert sorted(at.query_params["p.provider"]) == ["torch", "triton"]
    # GB/s is there for xrt's suites; % of peak is not recorded here: the page says so
    at.radio(key="ex:metric").set_value("GB/s").run()
    assert len(charts(at)) == 1 and not at.info
    at.radio(key="ex:metric").set_value("% of peak").run()
    assert "% of peak" in at.info[0].value


def test_explorer_deep_link_reopens_the_view(db_copy):
    at = app("explorer", **{"op": "Square", "m": ["gpu-a", "gpu-b"], "p.shape": ["4096"], "p.provider": ["triton"],
                            "metric": "GB/s", "x": "date"})
    s = at.sidebar
    assert s.multiselect(key="ex:m").value == ["gpu-a", "gpu-b"]
    assert s.multiselect(key="ex:p.shape").value == ["4096"] and s.multiselect(key="ex:p.provider").value == ["triton"]
    assert at.radio(key="ex:metric").value == "GB/s" and at.radio(key="ex:x").value == "date"
    assert len(at.dataframe[0].value) == 2
    # the regression page's link: one series by its param_key
    at = app("explorer", bench=BENCH, m="gpu-a", pk=STEPPED[1])
    layers = json.loads(charts(at)[0].proto.spec)["layer"]
    assert not [ly for ly in layers if ly.get("mark", {}).get("type") == "rule"]  # no CI recorded: no bars
    import duckdb

    with duckdb.connect(str(db_copy)) as con:  # asv's 99 % confidence interval, as result files carry it
        con.execute("UPDATE results SET ci_99_a = value * 0.99, ci_99_b = value * 1.01")
    at = app("explorer", bench=BENCH, m="gpu-a", pk=STEPPED[1])
    layers = json.loads(charts(at)[0].proto.spec)["layer"]
    assert [ly for ly in layers if ly.get("mark", {}).get("type") == "rule"]  # a bar per commit
    assert any("99 % confidence interval" in c.value for c in at.caption)
    assert at.sidebar.multiselect(key="ex:p.provider").value == ["triton"]
    assert at.sidebar.multiselect(key="ex:p.config").value == ["default"]


# ---------------------------------------------------------------------- explorer: device and host time

HOST, COMPILED = "bench_host.Square.time_host", "bench_compiled.Square.time_compiled"
ALLOC = "bench_allocator.Square.time_alloc"  # the same class name, not an op suite series
COMPILED_FACTOR = 10.0
EVERY = {"m": list(MACHINES), "p.shape": ["1024", "4096"], "p.provider": ["torch", "triton"],
         "p.config": ["default", "BLOCK=128,num_warps=4"]}
NEWEST = f"{N_COMMITS - 1:02d}" + "ab" * 19  # build()'s newest commit


def host_factor(k: int) -> float:
    """Host time over device time of combination ``k`` (its param_index): another factor for each, so
    a row matched with another row's device time shows."""
    return 2.0 + k


def add_twins(con, compiled: bool = True) -> None:
    """The host twin of every device value (times host_factor), the compiled twin (default config
    only, the others skipped, as the suites record them) and a plain benchmark of the same class."""
    for name in (HOST, COMPILED) if compiled else (HOST,):
        con.execute("INSERT INTO benchmarks SELECT * REPLACE (? AS name) FROM benchmarks WHERE name = ?", [name, BENCH])
    con.execute("INSERT INTO results SELECT * REPLACE (? AS benchmark, value * (2 + param_index) AS value, "
                "list_transform(samples, lambda x: x * (2 + param_index)) AS samples, NULL AS bytes, NULL AS gbps) "
                "FROM results WHERE benchmark = ?", [HOST, BENCH])
    if compiled:
        default = "params[4] = '''default'''"
        con.execute(f"INSERT INTO results SELECT * REPLACE (? AS benchmark, CASE WHEN {default} THEN value * ? END "
                    f"AS value, CASE WHEN {default} THEN 'ok' ELSE 'skipped' END AS status, CASE WHEN {default} "
                    "THEN list_transform(samples, lambda x: x * ?) END AS samples, NULL AS bytes, NULL AS gbps) "
                    "FROM results WHERE benchmark = ?", [COMPILED, COMPILED_FACTOR, COMPILED_FACTOR, BENCH])
    con.execute("INSERT INTO results SELECT * REPLACE (? AS benchmark, 0 AS param_index, [] AS params, '' AS "
                "param_key, 1e-6 AS value, [1e-6] AS samples) FROM results WHERE benchmark = ? AND param_index = 0",
                [ALLOC, BENCH])


@pytest.fixture(scope="module")
def twin_xdb(xdb, tmp_path_factory):
    db = tmp_path_factory.mktemp("twins") / "xrt.duckdb"
    db.write_bytes(xdb[0].read_bytes())
    store.write(db, add_twins)
    return db


@pytest.fixture
def twin_db(twin_xdb, monkeypatch):
    monkeypatch.setenv("XRT_DB", str(twin_xdb))
    return twin_xdb


def twin_charts(at: AppTest) -> dict[str, dict]:
    """The section's charts by title (the explorer's own chart has none)."""
    specs = [json.loads(c.proto.spec) for c in charts(at)]
    return {s["title"]: s for s in specs if "title" in s}


def twin_table(at: AppTest):
    (t,) = [d.value for d in at.dataframe if "device time" in d.value.columns]
    return t


def test_explorer_shows_host_time_beside_device_time(twin_db):
    at = app("explorer", bench=BENCH, **EVERY)
    assert at.sidebar.selectbox(key="ex:bench").value == BENCH
    assert "Device and host time" in [h.value for h in at.subheader]
    assert len(charts(at)) == 4  # the explorer's chart, then device, host and compiled side by side
    tc = twin_charts(at)
    assert list(tc) == ["device time", "host time", "host time, torch.compile"]
    assert {s["encoding"]["y"]["title"] for s in tc.values()} == {"µs per call"}
    # each series in the colour it has in the explorer's chart (its legend: the names sorted), and a
    # commit at the same place in each chart
    legend = sorted(at.dataframe[0].value["series"])
    assert [s["encoding"]["color"]["scale"]["domain"] for s in tc.values()] == [legend] * 3
    assert {tuple(s["encoding"]["x"]["scale"]["domain"]) for s in tc.values()} == {(0.0, N_COMMITS - 1.0)}
    t = twin_table(at)
    assert len(t) == 16 and set(t["commit"]) == {NEWEST[:10]} and set(t["machine"]) == set(MACHINES)
    keys = [", ".join(c) for c in itertools.product(*PARAMS)]
    want = [host_factor(keys.index(pk)) for pk in t["params"]]
    assert np.allclose(t["host ÷ device"], want) and np.allclose(t["host time"] / t["device time"], want)
    default = t["params"].str.endswith("'default'")
    assert default.sum() == 8 and np.allclose(t.loc[default, "compile ÷ device"], COMPILED_FACTOR)
    assert t.loc[~default, "compile ÷ device"].isna().all()  # skipped there: no ratio
    import duckdb

    with duckdb.connect(str(twin_db), read_only=True) as con:  # the device column: the newest value, in µs
        stored = dict(con.execute("SELECT machine || '|' || param_key, value * 1e6 FROM results WHERE benchmark = ? "
                                  "AND commit_hash = ?", [BENCH, NEWEST]).fetchall())
    assert np.allclose(t["device time"], [stored[f"{m}|{pk}"] for m, pk in zip(t["machine"], t["params"])])
    assert not [c.value for c in at.caption if COMPILED in c.value or HOST in c.value]


def test_explorer_on_the_host_series_shows_its_device_twin(twin_db):
    """The link of the overview's grid (op, bench, m, pk) to a host series."""
    at = app("explorer", op="Square", bench=HOST, m="gpu-a", pk=STEPPED[1])
    assert at.sidebar.selectbox(key="ex:bench").value == HOST
    assert list(twin_charts(at)) == ["device time", "host time", "host time, torch.compile"]
    assert any("this benchmark is the host time" in c.value for c in at.caption)
    t = twin_table(at)
    keys = [", ".join(c) for c in itertools.product(*PARAMS)]
    assert t["params"].tolist() == [STEPPED[1]] and t["machine"].tolist() == ["gpu-a"]
    assert t["host ÷ device"].iloc[0] == pytest.approx(host_factor(keys.index(STEPPED[1])))
    assert t["compile ÷ device"].iloc[0] == pytest.approx(COMPILED_FACTOR)
    # the explorer's own chart and table are the host series'
    assert len(at.dataframe[0].value) == 1 and at.subheader[0].value == f"` {HOST} `"
    # against dates, the charts share the commits' dates (as ISO text: a browser misreads epoch numbers there)
    at.radio(key="ex:x").set_value("date").run()
    assert [s["encoding"]["x"]["scale"]["domain"] for s in twin_charts(at).values()] == \
        [["2026-01-01T00:00:00", f"2026-01-{N_COMMITS:02d}T00:00:00"]] * 3


def test_explorer_twin_without_values_says_so(twin_db, tmp_path, monkeypatch):
    at = app("explorer", bench=BENCH, m="gpu-a", **{"p.config": ["BLOCK=128,num_warps=4"]})
    assert list(twin_charts(at)) == ["device time", "host time"]
    (line,) = [c.value for c in at.caption if COMPILED in c.value]
    assert line.startswith("host time, torch.compile") and "no ok results for these machines and parameters" in line
    assert "compile ÷ device" not in twin_table(at).columns
    # a database from before the compiled series: the same line says it was never measured
    old = tmp_path / "old.duckdb"
    old.write_bytes(twin_db.read_bytes())
    store.write(old, lambda con: con.execute("DELETE FROM results WHERE benchmark = ?", [COMPILED]))
    monkeypatch.setenv("XRT_DB", str(old))
    at = app("explorer", bench=BENCH)
    assert list(twin_charts(at)) == ["device time", "host time"]
    (line,) = [c.value for c in at.caption if COMPILED in c.value]
    assert "not in this database" in line


def test_explorer_without_twins_is_as_before(db, twin_xdb, monkeypatch):
    """A device series measured alone, and a benchmark that is not an op suite series (of the same
    class as one that is): one chart, one table, no twin section."""
    for path, bench in ((db, BENCH), (twin_xdb, ALLOC)):
        monkeypatch.setenv("XRT_DB", str(path))
        at = app("explorer", bench=bench)
        assert at.sidebar.selectbox(key="ex:bench").value == bench
        assert len(charts(at)) == 1 and len(at.dataframe) == 1 and not twin_charts(at)
        assert "Device and host time" not in [h.value for h in at.subheader]


def test_explorer_opens_an_op_on_its_device_series(twin_db):
    """Without a link to one benchmark, the op's device series (its host and compiled twins sort first)."""
    at = app("explorer", op="Square")
    assert at.sidebar.selectbox(key="ex:bench").options == [ALLOC, COMPILED, HOST, BENCH]
    assert at.sidebar.selectbox(key="ex:bench").value == BENCH
    at.radio(key="ex:metric").set_value("GB/s").run()  # the explorer's chart; the section stays in µs per call
    assert not at.exception and not at.error
    assert json.loads(charts(at)[0].proto.spec)["layer"][-1]["encoding"]["y"]["title"] == "GB/s"
    assert len(twin_charts(at)) == 3


@pytest.fixture
def twin_served(twin_xdb, tmp_path):
    import os

    env = dict(os.environ, XRT_DB=str(twin_xdb))
    with streamlit_server(APP, tmp_path, env, tmp_path, "--server.address", "127.0.0.1",
                          "--browser.gatherUsageStats", "false") as (url, _):
        yield url


def coloured_pixels(png: bytes) -> int:
    """Pixels of a chart's screenshot that are neither grey nor white: its lines and points."""
    import io

    from PIL import Image

    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    return int((rgb.max(axis=-1) - rgb.min(axis=-1) > 60).sum())


@pytest.mark.slow
@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                    "(apt-get install -y chromium); Playwright drives it by path, it downloads no browser")
def test_twin_charts_render_in_a_browser(twin_served):
    """In a real headless Chromium, the explorer on a host series: its chart, then the device, host and
    compiled charts side by side, each drawn with its lines, and the table of the latest values."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]' (playwright)")
    with sync_api.sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 2400})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(twin_served + f"/explorer?bench={HOST}&m=gpu-a&p.shape=4096", wait_until="domcontentloaded")
            page.get_by_role("heading", name="Device and host time").first.wait_for(timeout=30_000)
            drawn = page.locator("[data-testid='stVegaLiteChart'] canvas, [data-testid='stVegaLiteChart'] svg")
            drawn.nth(3).wait_for(timeout=30_000)
            page.locator("[data-testid='stDataFrame']").nth(1).wait_for(timeout=30_000)
            page.wait_for_timeout(1000)  # let vega paint
            assert drawn.count() == 4
            boxes = [drawn.nth(i).bounding_box() for i in range(4)]
            assert all(b["width"] > 200 and b["height"] > 150 for b in boxes), boxes
            assert len({round(b["y"]) for b in boxes[1:]}) == 1 and boxes[1]["x"] < boxes[2]["x"] < boxes[3]["x"]
            for i in (1, 2, 3):
                assert coloured_pixels(drawn.nth(i).screenshot()) > 100, i
            text = page.inner_text("body")
            assert "this benchmark is the host time" in text and "Each row's newest commit" in text
            assert "could not be shown" not in text and "Traceback" not in text and not errors, errors
        finally:
            browser.close()

# ---------------------------------------------------------------------- model series: throughput beside time

GPT = "bench_ops.GptTrain.time_op"
GPT_TOKENS = 8 * 1024  # what the suites record for a (8, 1024, ...) step: batch x sequence
GPT_MS = {"torch": 30e-3, "triton": 60e-3}


def add_model_series(con) -> None:
    """A GPT train step's two providers on gpu-a over the last 5 commits, each row with the tokens its
    step processes (results.items), as the suites' sidecar and the ingest store them."""
    params = [["'8x1024x1024x16x4'"], ["'bfloat16'"], ["'torch'", "'triton'"], ["'default'"]]
    con.execute("INSERT INTO benchmarks (name, type, unit, params, param_names, version) VALUES "
                "(?, 'time', 'seconds', ?, ?, 'v1')", [GPT, json.dumps(params), NAMES])
    runs = con.execute("SELECT run_id, commit_hash FROM runs WHERE machine = 'gpu-a' ORDER BY commit_date DESC "
                       "LIMIT 5").fetchall()
    for rid, h in runs:
        for k, combo in enumerate(itertools.product(*params)):
            v = GPT_MS[combo[2].strip("'")]
            con.execute("INSERT INTO results (run_id, machine, commit_hash, env_name, benchmark, param_index, params,"
                        " param_key, value, status, samples, unit, version, items, item_unit) VALUES "
                        "(?, 'gpu-a', ?, 'env', ?, ?, ?, ?, ?, 'ok', ?, 'seconds', 'v1', ?, 'tokens')",
                        [rid, h, GPT, k, list(combo), ", ".join(combo), v, [v] * 10, GPT_TOKENS])


def test_model_series_show_tokens_per_second_beside_time(db_copy):
    """The front page's grid gives a model's step its throughput beside its time (a kernel's: —); the
    explorer offers tokens/s as a metric for it (not for a kernel) and puts it beside ms in its table."""
    rw(db_copy, add_model_series)
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.run()
    assert not at.exception and not at.error
    g = grid_of(at)
    model = g[g["op"] == "GptTrain"].set_index("params")["throughput"]
    rate = {p: f"{GPT_TOKENS / v:,.0f} tokens/s" for p, v in GPT_MS.items()}
    assert model.to_dict() == {f"'8x1024x1024x16x4', 'bfloat16', '{p}', 'default'": r for p, r in rate.items()}
    assert set(g.loc[g["op"] == "Square", "throughput"]) == {"—"}
    assert list(g.loc[g["op"] == "GptTrain", "latest"]) == ["30 ms", "60 ms"]
    # the explorer: a kernel has no throughput to show
    at.switch_page("views/explorer.py").run()
    assert at.sidebar.selectbox(key="ex:op").value == "Square"
    assert "tokens/s" not in at.radio(key="ex:metric").options
    at.sidebar.selectbox(key="ex:op").set_value("GptTrain").run()
    at.sidebar.multiselect(key="ex:p.provider").select("triton").run()
    assert not at.exception and not at.error
    assert at.radio(key="ex:metric").options[:2] == ["time", "tokens/s"]
    table = at.dataframe[0].value.set_index("series")
    assert sorted(table["throughput"]) == sorted(round(GPT_TOKENS / v) for v in GPT_MS.values())
    assert sorted(table["last"]) == pytest.approx(sorted(v * 1e3 for v in GPT_MS.values()))  # ms
    at.radio(key="ex:metric").set_value("throughput").run()
    assert not at.info and len(charts(at)) == 1
    assert sorted(at.dataframe[0].value["last"]) == pytest.approx(sorted(GPT_TOKENS / v for v in GPT_MS.values()))
    assert "tokens/s" in json.dumps(charts(at)[0].spec)


# ---------------------------------------------------------------------- compare

def test_compare_two_commits_marks_the_step(db, xdb):
    hashes = xdb[1]
    at = app("compare", ma="gpu-a", ca=hashes[STEP_AT - 1][:8], mb="gpu-a", cb=hashes[STEP_AT])
    t = at.dataframe[0].value
    assert t["change"].tolist() == ["+"] and t["params"].iloc[0] == STEPPED[1]
    assert 1.15 < t["ratio"].iloc[0] < 1.25 and t["p"].iloc[0] < 0.002
    assert t["a"].iloc[0].endswith(" µs") and t["b"].iloc[0].endswith(" µs")  # in its unit, not raw seconds
    assert at.metric[1].value == "1"
    at.radio(key="cmp:rows").set_value("all").run()
    assert len(at.dataframe[0].value) == 16


def test_compare_two_machines(db, xdb):
    hashes = xdb[1]
    at = app("compare", ma="gpu-a", ca=hashes[5], mb="gpu-b", cb=hashes[5], rows="all")
    assert len(at.dataframe[0].value) == 16 and set(at.dataframe[0].value["change"]) <= {"", "~", "+", "−"}


# ---------------------------------------------------------------------- tuning

def test_tuning_from_results_heat_map_and_top_k(db):
    at = app("tuning", op="Square", dev="gpu-a", shape="1024", prov="triton", k="2")
    assert "benchmark results with a tuned config" in at.caption[0].value
    assert at.selectbox(key="tun:hx").value == "BLOCK" and at.selectbox(key="tun:hy").value == "num_warps"
    assert len(charts(at)) == 1
    top = at.dataframe[0].value
    assert len(top) == 2 and top["time_us"].is_monotonic_increasing
    assert "default" not in set(top["config"])


def test_tuning_prefers_the_tuner_table(db_copy):
    def fn(con):
        con.executemany("INSERT INTO tuning_results (op, device, shape, dtype, provider, config, median_s, gbps) "
            "VALUES ('layernorm', 'gpu-a', '4096x4096', 'bfloat16', 'triton', "
                        "?, ?, 100)", [[json.dumps({"BLOCK": b, "num_warps": w}), 1e-5 * b / w]
                                       for b in (64, 128, 256) for w in (2, 4, 8)])

    store.write(db_copy, fn)
    at = app("tuning")
    assert "tuning_results table" in at.caption[0].value and len(charts(at)) == 1
    assert at.dataframe[0].value["config"].iloc[0] == json.dumps({"BLOCK": 64, "num_warps": 8})


def test_tuning_empty_state(tmp_path, monkeypatch):
    p = tmp_path / "plain.duckdb"
    store.write(p, lambda con: con.execute(
        "INSERT INTO results (run_id, machine, commit_hash, benchmark, param_key, params, value, status) "
        "VALUES (1, 'm', 'c', 'x.time_y', '', [], 1.0, 'ok')"), fresh=True)
    monkeypatch.setenv("XRT_DB", str(p))
    assert "xrt tune" in app("tuning").info[0].value


# ---------------------------------------------------------------------- what it imports, how it is served

def test_every_page_imports_only_the_database_layer(xdb):
    code = f"""
import os, sys
os.environ["XRT_DB"] = {str(xdb[0])!r}
from streamlit.testing.v1 import AppTest
at = AppTest.from_file({str(APP)!r}, default_timeout=60)  # one session visits every page
at.run()
for page in ("overview", "detail", "explorer", "compare", "tuning"):
    if page != "overview":
        at.switch_page(f"views/{{page}}.py").run()
    assert not at.exception and not at.error, page
bad = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "pycuda", "triton"))
assert not bad, bad
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().endswith("ok"), out.stderr[-2000:]


def test_cli_serves_app_on_localhost(tmp_path):
    from xrt.cli import build_parser
    from xrt.commands import dashboard

    args = build_parser().parse_args(["dashboard", "--db", str(tmp_path / "x.duckdb")])
    assert args.host == "127.0.0.1" and args.port == 8501 and args.func is dashboard.run
    assert dashboard.find_app() == APP
    cmd = dashboard.command(APP, args.host, args.port)
    assert cmd[1:4] == ["-m", "streamlit", "run"] and cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--client.showErrorDetails") + 1] == "none"
    assert "not shipped in the wheel" in build_parser()._subparsers._group_actions[0].choices["dashboard"].description


# ---------------------------------------------------------------------- served by hand: bind, stats, writes

CONFIGS = [ROOT / ".streamlit" / "config.toml", ROOT / "dashboard" / ".streamlit" / "config.toml"]


def _clean_env(home: Path) -> dict:
    """No STREAMLIT_* settings and an empty ~/.streamlit: only the repository's config files speak."""
    import os

    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMLIT_")}
    env["HOME"] = str(home)
    return env


@pytest.mark.parametrize("path", CONFIGS, ids=["repo-root", "beside-app"])
def test_streamlit_config_binds_loopback_and_gathers_no_stats(path):
    import tomllib

    cfg = tomllib.loads(path.read_text())
    assert cfg["server"]["address"] == "127.0.0.1"
    assert cfg["browser"]["gatherUsageStats"] is False
    assert cfg["client"]["showErrorDetails"] == "none"
    assert path.read_text() == CONFIGS[0].read_text()  # one setting, two places Streamlit looks


@pytest.mark.parametrize("where", ["repo-root", "elsewhere"])
def test_streamlit_finds_the_config_where_the_documented_command_runs(tmp_path, where):
    """What Streamlit itself resolves for `streamlit run dashboard/app.py`: from the repository root
    (the documented cwd) through .streamlit/, from anywhere else through dashboard/.streamlit/."""
    from streamlit import config

    if where == "elsewhere" and not hasattr(config, "_main_script_path"):
        pytest.skip("this Streamlit reads no config beside the script")
    code = f"""
from streamlit import config
config._main_script_path = {str(APP)!r}
from streamlit.web import bootstrap
bootstrap.load_config_options(flag_options={{}})
print(repr(config.get_option("server.address")), config.get_option("browser.gatherUsageStats"))
"""
    cwd = ROOT if where == "repo-root" else tmp_path
    out = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=_clean_env(tmp_path), capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.split() == ["'127.0.0.1'", "False"], out.stderr[-2000:]


def _listening(port: int) -> list[str]:
    """Local addresses (hex, as /proc/net/tcp writes them) of the sockets listening on ``port``."""
    found = []
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(f).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, _, p = local.rpartition(":")
            if state == "0A" and int(p, 16) == port:  # 0A: LISTEN
                found.append(addr)
    return found


def test_documented_manual_start_binds_loopback_only(tmp_path, xdb):
    """`streamlit run dashboard/app.py` from the repository root, no flags but headless and a port."""
    if not Path("/proc/net/tcp").exists():
        pytest.skip("reads the listening sockets from /proc/net/tcp")
    env = dict(_clean_env(tmp_path), XRT_DB=str(xdb[0]))
    with streamlit_server("dashboard/app.py", tmp_path, env, ROOT) as (_, port):
        bound = _listening(port)
    # 127.0.0.1 (IPv4) or ::1 / ::ffff:127.0.0.1 (IPv6); never 0.0.0.0 or ::
    assert bound and set(bound) <= {"0100007F", "00000000000000000000000001000000",
                                    "0000000000000000FFFF00000100007F"}, bound


@pytest.fixture
def served_at(monkeypatch):
    """Pretend the server was started with ``--server.address ADDR`` (AppTest runs the app in this process)."""
    from streamlit import config

    old = config.get_option("server.address")

    def set_address(addr):
        config.set_option("server.address", addr)

    monkeypatch.delenv("XRT_DASHBOARD_READONLY", raising=False)
    monkeypatch.delenv("XRT_DASHBOARD_WRITES", raising=False)
    yield set_address
    config.set_option("server.address", old)


def _has_ack_form(at: AppTest) -> bool:
    return any(b.label == "Save" for b in at.button) or bool(at.text_input)


@pytest.mark.parametrize("addr", ["0.0.0.0", "", "::", "192.168.1.7", "dashboard.example.com"])
def test_exposed_dashboard_is_read_only_without_the_flag(db, served_at, addr):
    served_at(addr)
    at = app("detail", id=stepped_id(db))
    assert not _has_ack_form(at)
    assert any("read-only" in c.value and "XRT_DASHBOARD_WRITES=1" in c.value for c in at.caption)


@pytest.mark.parametrize("addr", ["127.0.0.1", "localhost", "::1", "127.0.1.1"])
def test_loopback_dashboard_can_write(db, served_at, addr):
    served_at(addr)
    assert _has_ack_form(app("detail", id=stepped_id(db)))


def test_exposed_dashboard_writes_only_when_told(db, served_at, monkeypatch):
    served_at("0.0.0.0")
    monkeypatch.setenv("XRT_DASHBOARD_WRITES", "1")
    assert _has_ack_form(app("detail", id=stepped_id(db)))
    monkeypatch.setenv("XRT_DASHBOARD_WRITES", "0")
    assert not _has_ack_form(app("detail", id=stepped_id(db)))
    monkeypatch.delenv("XRT_DASHBOARD_WRITES")
    monkeypatch.setattr(sys, "argv", ["dashboard/app.py", "--allow-writes"])  # `streamlit run app.py -- --allow-writes`
    assert _has_ack_form(app("detail", id=stepped_id(db)))
    # --read-only (XRT_DASHBOARD_READONLY) wins over everything
    monkeypatch.setenv("XRT_DASHBOARD_READONLY", "1")
    served_at("127.0.0.1")
    at = app("detail", id=stepped_id(db))
    assert not _has_ack_form(at) and any("XRT_DASHBOARD_READONLY" in c.value for c in at.caption)


# ---------------------------------------------------------------------- strings from users and data are text

EVIL_NOTE = "![x](http://evil/x.png) <img src=http://evil/y>"
EVIL_BENCH = "evil_suite.Op[l](http://evil/l)<img src=http://evil/o>.time_op"
EVIL_NAMES = ["shape", "dtype ![d](http://evil/d.png)", "provider", "config"]
EVIL_PARAMS = [["'1024'", "'4096 ![s](http://evil/s.png)'"], ["'float32 <img src=http://evil/t>'"],
               ["'torch'", "'triton [p](http://evil/p)'"],
               ["'default'", "'BLOCK=128,num_warps=4'", "'BLOCK=256,![k](http://evil/k.png)=4'",
                "'BLOCK=128,num_warps=8'"]]
EVIL_MACHINES = {"gpu-a ![m](http://evil/m.png)": "NVIDIA <img src=http://evil/g>",
                 "gpu-b :red[www.evil.example] $x$": "NVIDIA H200"}
EVIL_MESSAGE = "commit {i}: ![c](http://evil/c.png) see www.evil.example `x` **bold**"




def markdown_strings(at: AppTest) -> list[str]:
    """Every string the page hands Streamlit's Markdown renderer: bodies, headings, alerts, captions,
    metric labels and values, widget labels and help."""
    out = []
    for node in at._tree:
        t = getattr(node, "type", None)
        if t in ("markdown", "title", "header", "subheader", "error", "warning", "info", "success", "toast"):
            out.append(node.value)
        elif t == "metric":
            out += [node.label, node.value, node.proto.delta]
        elif hasattr(node, "label") and isinstance(getattr(node, "label", None), str):
            out += [node.label, getattr(node, "help", "") or ""]
    return [s for s in out if s]


def assert_no_markup(at: AppTest, needle: str = "evil") -> None:
    bad = [s for s in markdown_strings(at) if needle in outside_code(s)]
    assert not bad, bad


def test_outside_code_follows_commonmark():
    assert outside_code("a `b` c") == "a  c"
    assert outside_code("a `` b ` c `` d") == "a  d"
    assert outside_code("a ` b") == "a ` b"
    assert outside_code("`a`` b") == "`a`` b"


def test_note_is_shown_as_text(db_copy, served_at):
    from xrt.track import regressions

    served_at("127.0.0.1")
    rid = stepped_id(db_copy)
    rw(db_copy, lambda con: regressions.set_status(con, rid, "acknowledged", EVIL_NOTE))
    at = app("detail", id=rid)
    assert any(EVIL_NOTE in t.value for t in at.text)  # literally, as typed
    assert at.text_input[0].value == EVIL_NOTE  # the form keeps it for editing
    assert_no_markup(at)


@pytest.fixture(scope="module")
def evil_db(tmp_path_factory):
    from xrt.track import regressions

    db = tmp_path_factory.mktemp("evil") / "xrt.duckdb"
    hashes = build(db, EVIL_BENCH, EVIL_NAMES, EVIL_PARAMS, EVIL_MACHINES, EVIL_MESSAGE)

    def tuning(con):
        con.executemany("INSERT INTO tuning_results (op, device, shape, dtype, provider, config, median_s, gbps) "
            "VALUES (?, ?, ?, ?, 'triton', ?, ?, 100)",
                        [["op ![o](http://evil/o.png)", list(EVIL_MACHINES)[0], "4096", "bf16",
                          json.dumps({"BLOCK.x": b, "w:Q [k](http://evil/k)": w}), 1e-5 * b / w]
                         for b in (64, 128) for w in (2, 4)])

    store.write(db, tuning)
    recs = regressions.detect_db(ro(db))
    rw(db, lambda con: regressions.save(con, recs))
    (rid,) = [r.id for r in recs if r.kind == "regression"]
    rw(db, lambda con: regressions.set_status(con, rid, "acknowledged", EVIL_NOTE))
    return db, hashes, rid


@pytest.mark.parametrize("page", ["overview", "detail", "explorer", "compare", "tuning"])
def test_names_params_machines_and_messages_are_shown_as_text(evil_db, monkeypatch, served_at, page):
    db, hashes, rid = evil_db
    monkeypatch.setenv("XRT_DB", str(db))
    served_at("127.0.0.1")
    m = list(EVIL_MACHINES)
    query = {"detail": {"id": rid}, "explorer": {"m": m},
             "compare": {"ma": m[0], "ca": hashes[STEP_AT - 1], "mb": m[0], "cb": hashes[STEP_AT], "rows": "all"},
             }.get(page, {})
    at = app(None if page == "overview" else page, **query)
    assert_no_markup(at)
    strings = " ".join(markdown_strings(at))
    if page == "detail":
        assert "Op[l](http://evil/l)" in strings  # the benchmark is named, inside a code span
        assert any(EVIL_NOTE in t.value for t in at.text)
    if page == "explorer":
        assert "Dtype ![d](http://evil/d.png)" in strings and len(charts(at)) == 1
    if page == "compare":
        assert len(at.dataframe[0].value) == 16
    if page == "tuning":
        assert "tuning_results table" in at.caption[0].value and len(charts(at)) == 1


@pytest.mark.parametrize("s", [EVIL_NOTE, EVIL_BENCH, EVIL_MESSAGE, "`", "``x``", " `a` b`", "a\n\nb ![x](http://evil/z)",
                               "www.evil.example", ":red[x] :material/home: $x^2$", "-x", "1. x", "# h", "> q",
                               "x" * 500, "plain words", "gpu-a", "under_score"])
def test_lit_shows_any_string_as_it_is(s):
    sys.path.insert(0, str(ROOT / "dashboard"))
    import dashui

    out = dashui.lit(s)
    words = " ".join(s.split())
    if outside_code(out) == out:  # left plain: words only (letters, digits, inner - and _)
        assert out == words and re.fullmatch(r"[^\W_][\w-]*( [^\W_][\w-]*)*", out)
    else:  # one code span around all of it; CommonMark drops one space each side
        assert outside_code(out) == ""
        fence = re.match(r"`+", out).group()
        assert out.endswith(fence) and out[len(fence)] == " " and out[-len(fence) - 1] == " "
        body = out[len(fence) + 1:-len(fence) - 1]
        assert body == (words if len(words) <= 200 else words[:199] + "…")


@pytest.fixture
def evil_served(evil_db, tmp_path):
    import os

    env = dict(os.environ, XRT_DB=str(evil_db[0]))
    with streamlit_server(APP, tmp_path, env, tmp_path, "--server.address", "127.0.0.1",
                          "--browser.gatherUsageStats", "false") as (url, _):
        yield url


@pytest.mark.slow
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs Debian's chromium at /usr/bin/chromium "
                    "(apt-get install -y chromium); Playwright drives it by path, it downloads no browser")
def test_hostile_strings_load_nothing_in_a_browser(evil_served, evil_db):
    """In a real headless Chromium: no <img> or <a> points at the hostile host, no request goes to it,
    and the note reads as typed."""
    from urllib.parse import quote, urlsplit

    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[dev]' (playwright)")
    m, h = list(EVIL_MACHINES), evil_db[1]
    pages = {"Regression detail": f"/regression?id={evil_db[2]}",
             "Series explorer": "/explorer?" + "&".join(f"m={quote(x)}" for x in m),
             "Tuning": "/tuning", "Regressions": "/overview",
             "Compare": f"/compare?ma={quote(m[0])}&ca={h[STEP_AT - 1]}&mb={quote(m[0])}&cb={h[STEP_AT]}&rows=all"}
    with sync_api.sync_playwright() as p:
        browser = launch_chromium(p)
        try:
            for title, path in pages.items():
                page = browser.new_page(viewport={"width": 1400, "height": 1500})
                requests: list[str] = []
                page.on("request", lambda rq, seen=requests: seen.append(rq.url))
                page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(evil_served)
                           else route.abort())
                page.goto(evil_served + path, wait_until="domcontentloaded")
                page.get_by_role("heading", name=title).first.wait_for(timeout=30_000)
                page.locator("[data-testid='stVegaLiteChart'] canvas, [data-testid='stVegaLiteChart'] svg, "
                             ".vega-embed canvas, .vega-embed svg, [data-testid='stMetric']").first.wait_for(
                    timeout=30_000)
                page.wait_for_timeout(1000)
                text = page.inner_text("body")
                assert "could not be shown" not in text and "Traceback" not in text, (title, text[:2000])
                # anchors and this app's own links may carry the names in their path or query: only
                # the host matters
                linked = page.eval_on_selector_all(
                    "img, a, [src], [href], [srcset]", "els => els.map(e => e.getAttribute('src') || "
                    "e.getAttribute('href') || e.getAttribute('srcset')).filter(u => u && "
                    "new URL(u, document.baseURI).hostname.includes('evil'))")
                assert not linked, (title, linked)
                # (no request leaves the server at all: tests/test_dashboard_offline.py)
                assert not [u for u in requests if "evil" in (urlsplit(u).hostname or "")], (title, requests)
                if title == "Regression detail":
                    assert EVIL_NOTE in text and "Op[l](http://evil/l)" in text
                if title == "Compare":  # the pickers hold the commits' messages; the table is drawn
                    assert "slower (+)" in text
                    page.locator("[data-testid='stDataFrame']").first.wait_for(timeout=30_000)
                page.close()
        finally:
            browser.close()


# ---------------------------------------------------------------------- deep links: every parameter validated

LONG = "9" * 40 + "x" * 4000
HOSTILE = {"nan": "nan", "inf": "inf", "neg": "-5", "huge": "1e308", "empty": "", "long": LONG,
           "unknown": "not-a-choice"}
# page, parameter, a valid value ("LIST" repeats it: a list for a one-value parameter), widget key and
# the value it falls back to (None: no widget to check), whether the parameter takes several values
H = "{hash}"
PARAMS_OF_PAGES = [
    ("overview", "m", "gpu-a", "ov:m", [], True),
    ("overview", "kind", "clock", "ov:kind", ["regression", "clock"], True),
    ("overview", "status", "all", "ov:status", "open", False),
    ("detail", "id", "{rid}", None, None, False),
    ("explorer", "op", "Square", "ex:op", "Square", False),
    ("explorer", "bench", BENCH, "ex:bench", BENCH, False),
    ("explorer", "m", "gpu-b", "ex:m", ["gpu-a"], True),
    ("explorer", "p.shape", "4096", "ex:p.shape", ["1024"], True),
    ("explorer", "p.config", "default", "ex:p.config", ["default"], True),
    ("explorer", "metric", "GB/s", "ex:metric", "time", False),
    ("explorer", "x", "date", "ex:x", "commit", False),
    ("explorer", "pk", STEPPED[1], None, None, False),
    ("compare", "ma", "gpu-b", "cmp:ma", "gpu-a", False),
    ("compare", "ca", H, "cmp:ca", "{second}", False),
    ("compare", "mb", "gpu-b", "cmp:mb", "gpu-a", False),
    ("compare", "cb", H, "cmp:cb", "{newest}", False),
    ("compare", "thr", "10", "cmp:thr", 5.0, False),
    ("compare", "alpha", "0.01", "cmp:alpha", 0.002, False),
    ("compare", "rows", "all", "cmp:rows", "changed", False),
    ("tuning", "op", "Square", "tun:op", "Square", False),
    ("tuning", "dev", "gpu-b", "tun:dev", "gpu-a", False),
    ("tuning", "shape", "4096", "tun:shape", "1024", False),
    ("tuning", "dtype", "float32", "tun:dtype", "float32", False),
    ("tuning", "prov", "triton", "tun:prov", "torch", False),
    ("tuning", "hx", "num_warps", "tun:hx", "BLOCK", False),
    ("tuning", "hy", "num_warps", "tun:hy", "num_warps", False),
    ("tuning", "k", "3", "tun:k", 5, False),
]
TITLES = {"overview": "Regressions", "detail": "Regression detail", "explorer": "Series explorer",
          "compare": "Compare", "tuning": "Tuning"}


def open_page(page: str, query: dict) -> AppTest:
    """A fresh session opened on ``page`` by a link with exactly ``query`` (as a browser would)."""
    at = app(None if page == "overview" else page, **query)
    assert at.title[0].value == TITLES[page]
    return at


def _fill(v, db, hashes):
    if v == "{rid}":  # read from the database only where a value names it
        return stepped_id(db)
    subs = {H: hashes[STEP_AT][:10], "{second}": hashes[-2], "{newest}": hashes[-1]}
    return subs.get(v, v) if isinstance(v, str) else v


def _hostile(bad: str, good, several: bool):
    if bad == "list":  # a one-value parameter given twice (valid alone); a list parameter with a bad member
        return [good, "nan"] if several else [good, good]
    return [HOSTILE[bad]] if several else HOSTILE[bad]


def _shown(bad: str, several: bool) -> str:
    """What the warning must quote of the bad value."""
    if bad == "list":
        return "nan" if several else "given 2 times"
    return HOSTILE[bad][:20] or "(empty)"


def went_on(at: AppTest, page: str) -> None:
    """The page rendered its content after the warnings."""
    if page == "detail":
        assert at.selectbox[0].label == "Regression"  # the open ones, to pick from
    elif page == "compare":
        assert len(at.metric) == 7  # compared both sides (the default commits: nothing moved)
    elif page in ("explorer", "tuning"):
        assert len(at.dataframe) == 1 and len(charts(at)) == 1
    else:  # the machines, the regressions of the selection (its one alert and every step, or the message
        # that there are none), then the grid of every benchmark
        assert at.dataframe[0].value["machine"].tolist() == list(MACHINES)
        assert len(at.dataframe) == 4 or (at.success and len(at.dataframe) == 2)
        assert "trend" in at.dataframe[-1].value.columns


def _widgets(at: AppTest) -> list:
    return [*at.get("selectbox"), *at.get("multiselect"), *at.get("radio"), *at.get("number_input")]


@pytest.mark.parametrize("bad", ["nan", "list"])
@pytest.mark.parametrize(("page", "name", "good", "key", "fallback", "several"), PARAMS_OF_PAGES,
                         ids=[f"{p}-{n}" for p, n, *_ in PARAMS_OF_PAGES])
def test_each_link_parameter_warns_and_falls_back(db, xdb, page, name, good, key, fallback, several, bad):
    """One bad parameter at a time: one warning naming it and quoting the value, the default shown."""
    good, fallback = _fill(good, db, xdb[1]), _fill(fallback, db, xdb[1])
    at = open_page(page, {name: _hostile(bad, good, several)})
    warned = [w.value for w in at.warning if f"` {name} `" in w.value]
    assert len(warned) == 1 and _shown(bad, several) in warned[0], [w.value for w in at.warning]
    if key is not None:
        (w,) = [w for w in _widgets(at) if w.key == key]
        assert w.value == ([good] if bad == "list" and several else fallback)
    went_on(at, page)
    # the address bar no longer holds the bad value: the next run (a click, a reload) is clean
    assert name not in at.query_params or _shown(bad, several) not in str(at.query_params[name])
    at.run()
    assert not at.exception and not at.error and not at.warning, [w.value for w in at.warning]
    went_on(at, page)


@pytest.mark.parametrize("bad", [*HOSTILE, "list"])
@pytest.mark.parametrize("page", list(TITLES))
def test_every_hostile_value_on_every_parameter_at_once(db, xdb, page, bad):
    """nan, inf, -5, 1e308, empty, 4,000 characters, an unknown choice, a list: every parameter of
    the page at once; each is named in one warning and the page still renders."""
    params = [p_ for p_ in PARAMS_OF_PAGES if p_[0] == page]
    at = open_page(page, {n: _hostile(bad, _fill(g, db, xdb[1]), sev) for _, n, g, _, _, sev in params})
    for _, name, _, _, _, several in params:
        warned = [w.value for w in at.warning if f"` {name} `" in w.value]
        assert len(warned) == 1 and _shown(bad, several) in warned[0], (name, [w.value for w in at.warning])
    assert_no_markup(at, "xxxx")  # the long value is quoted in code spans only
    went_on(at, page)


def test_explorer_link_to_a_parameter_the_benchmark_lacks(db):
    at = open_page("explorer", {"p.shape": ["4096"], "p.bogus": ["1", "2"], "p.": ["nan"]})
    assert at.sidebar.multiselect(key="ex:p.shape").value == ["4096"]
    for q, shown in (("p.bogus", "` 1 `, ` 2 `"), ("p.", "` nan `")):
        (w,) = [w.value for w in at.warning if f"` {q} `" in w.value]
        assert shown in w and "has no parameter" in w and "shape, dtype, provider, config" in w
    assert "p.bogus" not in at.query_params and len(at.warning) == 2
    went_on(at, "explorer")


@pytest.mark.parametrize("page", list(TITLES))
def test_valid_links_warn_nothing(db, xdb, page):
    query = {p_[1]: _fill(p_[2], db, xdb[1]) for p_ in PARAMS_OF_PAGES if p_[0] == page and p_[1] not in ("hy",)}
    if page == "explorer":
        query.pop("pk")
    at = open_page(page, query)
    assert not at.warning, [w.value for w in at.warning]


def test_tuning_list_valued_and_mixed_configs_render(db_copy):
    def fn(con):
        cfgs = [{"BLOCK": [64, 128], "num_warps": 4}, {"BLOCK": 64, "num_warps": 8}, {"BLOCK": "auto", "num_warps": 2},
                {"BLOCK": {"x": 1}, "num_warps": [1, 2]}, [1, 2], {"BLOCK": None, "num_warps": 4}]
        con.executemany("INSERT INTO tuning_results (op, device, shape, dtype, provider, config, median_s, gbps) "
            "VALUES ('ln', 'gpu-a', '4096', 'bf16', 'triton', ?, ?, 1)",
                        [[json.dumps(c), 1e-5 * (i + 1)] for i, c in enumerate(cfgs)])

    store.write(db_copy, fn)
    at = open_page("tuning", {})
    assert len(charts(at)) == 1 and len(at.dataframe[0].value) == 5
    assert at.dataframe[0].value["config"].iloc[0] == json.dumps({"BLOCK": [64, 128], "num_warps": 4})


@pytest.mark.parametrize("page", list(TITLES))
def test_unreadable_database_is_one_line_naming_it(tmp_path, monkeypatch, page):
    bad = tmp_path / "not a database.duckdb"
    bad.write_text("this is not a DuckDB file\n" * 100)
    monkeypatch.setenv("XRT_DB", str(bad))
    at = AppTest.from_file(str(APP), default_timeout=60)
    if page == "detail":
        at.run()
    if page != "overview":
        at.switch_page(f"views/{page}.py")
    at.run()
    assert not at.exception
    (err,) = at.error
    assert f"` {bad} `" in err.value and "cannot be read" in err.value and "could not be shown" not in err.value
    assert len(err.value.splitlines()) == 1
