"""The dashboard's pages under Streamlit's AppTest, on a small database shaped like xrt's own suites.

``bench_ops.Square.time_op`` with params shape x dtype x provider x config on two GPU machines,
30 commits, and one 20 % step (gpu-a, 4096, triton, default) at commit 20, stored as a regression
the way ``xrt regressions`` stores it. Every page, its filters, deep links, the empty states and the
acknowledge flow (written through xrt.track, i.e. ``xrt.db.store.write``).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("streamlit")
pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

from streamlit.testing.v1 import AppTest  # noqa: E402

from xrt.db import store  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "dashboard" / "app.py"
BENCH = "bench_ops.Square.time_op"
NAMES = ["shape", "dtype", "provider", "config"]
PARAMS = [["'1024'", "'4096'"], ["'float32'"], ["'torch'", "'triton'"],
          ["'default'", "'BLOCK=128,num_warps=4'", "'BLOCK=256,num_warps=4'", "'BLOCK=128,num_warps=8'"]]
MACHINES = {"gpu-a": "NVIDIA H100 80GB HBM3", "gpu-b": "NVIDIA H200"}
N_COMMITS, STEP_AT = 30, 20
STEPPED = ("gpu-a", "'4096', 'float32', 'triton', 'default'")


def build(db: Path) -> list[str]:
    rng = np.random.default_rng(5)
    hashes = [f"{i:02d}" + "ab" * 19 for i in range(N_COMMITS)]
    t0 = datetime(2026, 1, 1)

    def fill(con):
        con.executemany("INSERT INTO commits VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [[h, i, i, t0 + timedelta(days=i), "Dev <d@x>", f"commit {i}: change things",
                          [hashes[i - 1]] if i else [], "git"] for i, h in enumerate(hashes)])
        con.execute("INSERT INTO benchmarks (name, type, unit, params, param_names, version) VALUES "
                    "(?, 'time', 'seconds', ?, ?, 'v1')", [BENCH, json.dumps(PARAMS), NAMES])
        rid = 0
        for m, gpu in MACHINES.items():
            con.execute("INSERT INTO machines (machine, gpu_model) VALUES (?, ?)", [m, gpu])
            for i, h in enumerate(hashes):
                rid += 1
                con.execute("INSERT INTO runs (run_id, file, content_hash, machine, commit_hash, env_name, commit_date,"
                            " asv_schema, gpu_model, throttle_share, n_values, n_ok, n_failed, n_skipped, started_at,"
                            " ingested_at) VALUES (?, ?, ?, ?, ?, 'env', ?, 2, ?, 0.01, 16, 16, 0, 0, ?, now())",
                            [rid, f"{m}/{h[:8]}.json", h, m, h, t0 + timedelta(days=i), gpu,
                             t0 + timedelta(days=i, hours=3)])
                rows = []
                for k, combo in enumerate(itertools.product(*PARAMS)):
                    pk = ", ".join(combo)
                    n = 1024 if combo[0] == "'1024'" else 4096
                    level = n * 1e-9 * (1 + 0.3 * k / 16) * (1.2 if (m, pk) == STEPPED and i >= STEP_AT else 1.0)
                    smp = list(level * rng.lognormal(0, 0.01, 10))
                    v = float(np.median(smp))
                    nbytes = 8.0 * n
                    rows.append([rid, m, h, "env", BENCH, k, list(combo), pk, v, "ok", smp, "seconds", "v1",
                                 nbytes, nbytes / v / 1e9])
                con.executemany("INSERT INTO results (run_id, machine, commit_hash, env_name, benchmark, param_index,"
                                " params, param_key, value, status, samples, unit, version, bytes, gbps) VALUES "
                                "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    store.write(db, fill, fresh=True)
    return hashes


@pytest.fixture(scope="module")
def xdb(tmp_path_factory):
    from xrt.track import regressions as R

    db = tmp_path_factory.mktemp("dash") / "xrt.duckdb"
    hashes = build(db)
    recs = R.detect_db(db)
    R.save(db, recs)
    return db, hashes


@pytest.fixture
def db(xdb, tmp_path, monkeypatch):
    """A private copy (the ack test writes to it)."""
    p = tmp_path / "xrt.duckdb"
    p.write_bytes(xdb[0].read_bytes())
    monkeypatch.setenv("XRT_DB", str(p))
    return p


def app(page: str | None = None, **query) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60)
    for k, v in query.items():
        at.query_params[k] = v
    at.run()
    if page:
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def charts(at: AppTest) -> list:
    return at.get("vega_lite_chart")


def stepped_id(db: Path) -> str:
    from xrt.track import regressions as R

    (rid,) = [k for k, v in R.stored(db).items() if v["kind"] == "regression" and (v["machine"], v["param_key"])
              == STEPPED]
    return rid


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
    regs = at.dataframe[1].value
    assert len(regs) == 1 and regs["machine"][0] == "gpu-a" and regs["params"][0] == STEPPED[1]
    assert 1.15 < regs["ratio"][0] < 1.25 and regs["first_slow"][0].startswith(f"{STEP_AT}ababab")
    assert len(charts(at)) == 1


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

def test_detail_deep_link_chart_commits_and_ack_flow(db, served_at):
    from xrt.track import regressions as R

    served_at("127.0.0.1")  # the shipped config's address, whatever directory pytest runs from
    rid = stepped_id(db)
    at = app("detail", id=rid[:6])  # a prefix is enough
    assert at.subheader[0].value == f"{BENCH} [{STEPPED[1]}] on gpu-a"
    assert at.metric[0].value.startswith("1.2") and at.metric[4].value == "new"
    assert len(charts(at)) == 2  # the series with the change point, the before/after samples
    commits = at.dataframe[0].value
    assert commits["message"].tolist() == [f"commit {STEP_AT}: change things"]
    # acknowledge -> ignored with a note, through xrt.track (store.write), then the page says so
    at.radio[0].set_value("ignored")
    at.text_input[0].input("driver update on gpu-a")
    at.button[0].click().run()
    assert not at.exception
    assert "is now ignored" in at.success[0].value and at.metric[4].value == "ignored"
    row = R.stored(db)[rid]
    assert row["status"] == "ignored" and row["note"] == "driver update on gpu-a"
    assert not list(db.parent.glob(".xrt.duckdb.tmp-*"))  # the single-writer path swapped its copy in
    over = app()
    assert "No open regressions" in over.success[0].value  # ignored: no longer open
    # and it can be reopened
    at.radio[0].set_value("new")
    at.button[0].click().run()
    assert R.stored(db)[rid]["status"] == "new"


def test_detail_unknown_id_offers_the_open_ones(db):
    at = app("detail", id="ffffffff")
    assert "No stored regression has the id" in at.warning[0].value
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


def test_explorer_deep_link_reopens_the_view(db):
    at = app("explorer", **{"op": "Square", "m": ["gpu-a", "gpu-b"], "p.shape": ["4096"], "p.provider": ["triton"],
                            "metric": "GB/s", "x": "date"})
    s = at.sidebar
    assert s.multiselect(key="ex:m").value == ["gpu-a", "gpu-b"]
    assert s.multiselect(key="ex:p.shape").value == ["4096"] and s.multiselect(key="ex:p.provider").value == ["triton"]
    assert at.radio(key="ex:metric").value == "GB/s" and at.radio(key="ex:x").value == "date"
    assert len(at.dataframe[0].value) == 2
    # the regression page's link: one series by its param_key
    at = app("explorer", bench=BENCH, m="gpu-a", pk=STEPPED[1])
    assert at.sidebar.multiselect(key="ex:p.provider").value == ["triton"]
    assert at.sidebar.multiselect(key="ex:p.config").value == ["default"]


# ---------------------------------------------------------------------- compare

def test_compare_two_commits_marks_the_step(db, xdb):
    hashes = xdb[1]
    at = app("compare", ma="gpu-a", ca=hashes[STEP_AT - 1][:8], mb="gpu-a", cb=hashes[STEP_AT])
    t = at.dataframe[0].value
    assert t["change"].tolist() == ["+"] and t["params"].iloc[0] == STEPPED[1]
    assert 1.15 < t["ratio"].iloc[0] < 1.25 and t["p"].iloc[0] < 0.002
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


def test_tuning_prefers_the_tuner_table(db):
    def fn(con):
        con.execute("CREATE TABLE tuning_results (op VARCHAR, device VARCHAR, shape VARCHAR, dtype VARCHAR, "
                    "provider VARCHAR, config JSON, median_s DOUBLE, gbps DOUBLE)")
        con.executemany("INSERT INTO tuning_results VALUES ('layernorm', 'gpu-a', '4096x4096', 'bfloat16', 'triton', "
                        "?, ?, 100)", [[json.dumps({"BLOCK": b, "num_warps": w}), 1e-5 * b / w]
                                       for b in (64, 128, 256) for w in (2, 4, 8)])

    store.write(db, fn)
    at = app("tuning")
    assert "tuning_results table" in at.caption[0].value and len(charts(at)) == 1
    assert at.dataframe[0].value["config"].iloc[0] == json.dumps({"BLOCK": 64, "num_warps": 8})


def test_tuning_empty_state(tmp_path, monkeypatch):
    from xrt.db import store as S

    p = tmp_path / "plain.duckdb"
    S.write(p, lambda con: con.execute(
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
for page in ("overview", "detail", "explorer", "compare", "tuning"):
    at = AppTest.from_file({str(APP)!r}, default_timeout=60)
    at.run()
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
    import socket
    import time
    import urllib.request

    if not Path("/proc/net/tcp").exists():
        pytest.skip("reads the listening sockets from /proc/net/tcp")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(_clean_env(tmp_path), XRT_DB=str(xdb[0]))
    log = open(tmp_path / "streamlit.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "streamlit", "run", "dashboard/app.py", "--server.headless", "true",
                             "--server.port", str(port), "--server.fileWatcherType", "none"],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1).read() == b"ok":
                    break
            except OSError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "streamlit.log").read_text()
            time.sleep(0.2)
        bound = _listening(port)
        # 127.0.0.1 (IPv4) or ::1 / ::ffff:127.0.0.1 (IPv6); never 0.0.0.0 or ::
        assert bound and set(bound) <= {"0100007F", "00000000000000000000000001000000",
                                        "0000000000000000FFFF00000100007F"}, bound
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


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
