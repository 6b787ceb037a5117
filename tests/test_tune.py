"""The tuner on the CPU (Triton under the interpreter): search, crash isolation, resume, feeding."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
import torch
from conftest import ROOT, foreground

from xrt.kernels import spaces
from xrt.tune import search
from xrt.tune.journal import Journal
from xrt.tune.tuner import Problem, TuneError, tune
from xrt.tune.worker import TOLERANCE

# Loaded by every worker process through PYTHONPATH (sitecustomize): makes chosen configs of
# square crash the process (SIGSEGV), hang, exit, or return a wrong result, as a bad kernel would.
SABOTAGE = textwrap.dedent("""
    import dataclasses, os, signal, time
    from xrt.bench import specs

    _spec = specs.SPECS["square"]
    _call = _spec.call

    def call(args, provider, config):
        c = config or {}
        if c.get("BLOCK_SIZE") == 512 and c.get("num_warps") == 2:
            os.kill(os.getpid(), signal.SIGSEGV)
        if c.get("BLOCK_SIZE") == 2048 and c.get("num_warps") == 2:
            time.sleep(600)
        if c.get("BLOCK_SIZE") == 8192 and c.get("num_warps") == 2:
            os._exit(3)
        out = _call(args, provider, config)
        if c.get("BLOCK_SIZE") == 256 and c.get("num_warps") == 8:
            out = out.clone(); out.view(-1)[::7] = 0  # drops elements, like a bad mask
        return out

    specs.SPECS["square"] = dataclasses.replace(_spec, call=call)
""")


def test_candidates_default_first_unique_and_seeded():
    full = search.candidates("square.triton")
    assert full[0] == spaces.default("square.triton") and len(full) == 18
    assert len({search.key(c) for c in full}) == 18
    a, b = search.candidates("square.triton", budget=5, seed=1), search.candidates("square.triton", budget=5, seed=1)
    assert a == b and len(a) == 5 and a[0] == full[0]
    # "auto" spellings of the default count once
    assert len(search.candidates("layernorm.triton")) == len(list(spaces.configs("layernorm.triton")))
    with pytest.raises(ValueError, match="--budget 0"):
        search.candidates("square.triton", budget=0)


def test_a_worker_takes_its_own_queue_first_then_steals_and_stops_once_closed():
    """The queue a tuner's worker thread reads: its own configs first, then one it may steal (a timing
    worker, from the build queue); a config put before closing is still taken; then None."""
    import queue
    import threading

    from xrt.tune.tuner import next_config

    own, steal, closed = queue.Queue(), queue.Queue(), threading.Event()
    own.put({"BLOCK": 1})
    steal.put({"BLOCK": 2})
    assert next_config(own, closed, steal) == {"BLOCK": 1}
    assert next_config(own, closed, steal) == {"BLOCK": 2}
    threading.Timer(0.2, own.put, args=({"BLOCK": 3},)).start()  # an open queue waits for more
    assert next_config(own, closed) == {"BLOCK": 3}
    own.put({"BLOCK": 4})
    closed.set()
    assert next_config(own, closed, steal) == {"BLOCK": 4}
    assert next_config(own, closed, steal) is None


def test_round_sizes_follow_the_strategy_and_the_clock():
    """Exhaustive and random search take all that is left in one round; the model a batch of --jobs (at
    least one per timing slot) so that it learns between rounds; a time budget makes rounds small
    enough that the clock is looked at."""
    from xrt.tune.tuner import batch_size

    assert batch_size("exhaustive", 4, 1, None, 37) == 37
    assert batch_size("random", 4, 1, None, 0) == 1
    assert batch_size("model", 4, 1, None, 37) == 4
    assert batch_size("model", 4, 8, 30.0, 37) == 8
    assert batch_size("exhaustive", 4, 1, 30.0, 37) == 16
    assert batch_size("random", 8, 1, 30.0, 37) == 32


def test_journal_survives_a_torn_line(tmp_path):
    j = Journal(tmp_path / "j.jsonl")
    j.add({"key": "a=1", "status": "timed", "median_s": 1.0})
    with open(j.path, "a") as f:
        f.write('{"key": "b=2", "sta')  # died mid-write
    j2 = Journal(j.path)
    assert j2.torn == 1 and j2.done() == {"a=1"}
    j2.add({"key": "b=2", "status": "crash"})
    j3 = Journal(j.path)
    assert j3.torn == 1 and j3.done() == {"a=1", "b=2"} and j3.done(retry_failed=True) == {"a=1"}


def test_bad_problems_are_named():
    with pytest.raises(TuneError, match="--provider torch: square has no tuning space"):
        tune(Problem("square", "torch", "4096", "float32"), log=lambda m: None)
    with pytest.raises(TuneError, match="--dtype 'float33'"):
        tune(Problem("square", "triton", "4096", "float33"), log=lambda m: None)
    with pytest.raises(ValueError, match="shape '40x'"):
        tune(Problem("square", "triton", "40x", "float32"), log=lambda m: None)


@pytest.mark.slow
@pytest.mark.serial  # counts the samples a time budget allowed: beside a busy worker it allows fewer
@pytest.mark.parametrize("pipeline", [None, True], ids=["phases", "pipelined"])
def test_crashes_hangs_and_wrong_results_are_isolated_then_resumed(tmp_path, monkeypatch, interpreter, pipeline):
    """Phases: every config compiles (and is checked) before any is timed, as on the CPU and for CUDA C.
    Pipelined (Triton on a GPU): build workers compile without running, a config is timed (and checked
    there) as soon as it compiled; the same faults end the same way."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SABOTAGE)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    out_dir = tmp_path / "tuned"
    lines: list[str] = []
    res = tune(Problem("square", "triton", "4096", "float32"), jobs=2, timeout=8, out_dir=out_dir, log=lines.append,
               pipeline=pipeline)
    last = Journal(res.journal).last()
    assert len(last) == 18
    assert last["BLOCK_SIZE=512,num_warps=2"]["status"] == "crash"
    assert "SIGSEGV" in last["BLOCK_SIZE=512,num_warps=2"]["error"]
    assert last["BLOCK_SIZE=8192,num_warps=2"]["status"] == "crash"
    assert "exit 3" in last["BLOCK_SIZE=8192,num_warps=2"]["error"]
    assert last["BLOCK_SIZE=2048,num_warps=2"]["status"] == "timeout"
    assert last["BLOCK_SIZE=256,num_warps=8"]["status"] == "wrong"
    # every 7th output zeroed: off by the largest zeroed square, relative to the largest square
    assert last["BLOCK_SIZE=256,num_warps=8"]["max_rel_err"] > TOLERANCE["float32"]
    assert res.counts == {"crash": 2, "timeout": 1, "wrong": 1, "timed": 14}
    # Every other config ran after the crashes, in restarted workers, and was timed.
    timed = [r for r in last.values() if r["status"] == "timed"]
    # (pipelined on this CPU the build workers run the interpreter on the cores the timer uses, so
    # its time budget ends some measurements early; on a GPU they run nothing on the device)
    least = 10 if pipeline is None else 3
    assert all(r["median_s"] > 0 and r["n"] >= least and r["ran_on"] == res.machine for r in timed), [
        (r["median_s"], r["n"], r["ran_on"], res.machine) for r in timed]
    assert [r["median_s"] for r in res.best] == sorted(r["median_s"] for r in timed)[:3]
    rows = json.loads((out_dir / "square.json").read_text())
    assert [r["rank"] for r in rows] == [1, 2, 3] and rows[0]["op"] == "square.triton"
    assert rows[0]["config"] == res.best[0]["config"] and rows[0]["default_median_s"] > 0
    assert any("crash" in ln for ln in lines) and any("18/18 evaluations" in ln for ln in lines)
    # every record names its space (hash), problem and place in the search
    assert {r["space_hash"] for r in last.values()} == {spaces.space_hash("square.triton")}
    assert sorted(r["eval"] for r in Journal(res.journal).records) == list(range(18))
    assert [r["default"] for r in last.values()].count(True) == 1
    # ... and every evaluation, each failure with its status and error, reaches the database
    from xrt.db import store, tuning

    db = tmp_path / "x.duckdb"
    assert tuning.sync(out_dir, db, lambda s: None)[:3] == (1, 0, 18)
    with store.read(db) as con:
        got = dict(con.execute("SELECT status, count(*) FROM tuning_results GROUP BY status").fetchall())
        err = con.execute("SELECT error FROM tuning_results WHERE config_key = 'BLOCK_SIZE=512,num_warps=2'").fetchone()
    assert got == {"crash": 2, "timeout": 1, "wrong": 1, "timed": 14} and "SIGSEGV" in err[0]

    # Resume: nothing left to try; a torn line and a forgotten config are tried again, alone.
    again = tune(Problem("square", "triton", "4096", "float32"), jobs=2, timeout=8, out_dir=out_dir,
                 log=lambda m: None)
    assert again.tried == 0 and again.skipped == 18
    text = res.journal.read_text().splitlines()
    keep = [ln for ln in text if json.loads(ln)["key"] != "BLOCK_SIZE=4096,num_warps=4"]
    res.journal.write_text("\n".join(keep) + '\n{"key": "BLOCK_SIZE=40')
    third = tune(Problem("square", "triton", "4096", "float32"), jobs=2, timeout=8, out_dir=out_dir,
                 log=lambda m: None)
    assert third.tried == 1 and third.torn == 1
    assert Journal(res.journal).last()["BLOCK_SIZE=4096,num_warps=4"]["status"] == "timed"


@pytest.mark.slow
def test_tuned_configs_feed_the_policy_and_the_suites(tmp_path, monkeypatch, capsys, interpreter):
    import xrt.pytorch as xp
    from xrt.bench import suite
    from xrt.pytorch import policy
    from xrt.pytorch.ops.kernel_providers import config

    out_dir = tmp_path / "tuned"
    res = tune(Problem("square", "triton", "1000", "float32"), budget=3, top_k=2, jobs=1, out_dir=out_dir,
               log=lambda m: None)
    best = res.best[0]["config"]
    x = torch.randn(1000)
    assert config("square", "square.triton", x) == spaces.default("square.triton")
    monkeypatch.setenv("XRT_TUNED", str(out_dir))
    assert config("square", "square.triton", x) == best  # rank 1 only, on this CPU's model
    assert config("square", "square.cuda", x) == spaces.default("square.cuda")  # not CUDA C's config
    torch.testing.assert_close(xp.ops.square(x, provider="triton"), x * x)
    # compare: the op with and without the file, side by side; it names the config the ops used.
    from xrt.tune import compare

    monkeypatch.delenv("XRT_TUNED")
    assert compare.main(["square", "--tuned", str(out_dir), "--shape", "1000", "--dtype", "float32",
                         "--provider", "triton"]) == 0
    (row,) = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| 1000 | triton |")]
    assert row.endswith(f"| {best} |") and float(row.split("|")[3]) > 0 and float(row.split("|")[5]) > 0
    assert "XRT_TUNED" not in os.environ  # compare leaves the environment as it found it
    monkeypatch.setenv("XRT_TUNED", str(out_dir))
    # The suites time every kept config as an extra parameter.
    monkeypatch.setenv("XRT_TUNED_DIR", str(out_dir))
    keys = suite.tuned_configs("square")
    kept = {suite.config_key(r["config"]) for r in res.best if r["config"] != spaces.default("square.triton")}
    assert keys == sorted(kept) and len(res.best) == 2  # the default is timed as "default" already
    assert suite.params_for("square", "full")[0][3] == ["default"] + keys
    assert suite.params_for("square", "quick")[0][3] == ["default"]  # GPU configs stay out of the CPU profile
    # An op-keyed config whose names are another provider's is not applied to this one; a scoped
    # policy still wins over XRT_TUNED (the lowest layer) where it applies.
    pol = policy.KernelPolicy().add_tuned("square", {"block": 512})
    with xp.kernel_policy(pol):
        assert config("square", "square.triton", x) == best
        assert config("square", "square.cuda", x)["block"] == 512
    monkeypatch.delenv("XRT_TUNED")
    with xp.kernel_policy(pol):
        assert config("square", "square.triton", x) == spaces.default("square.triton")
    other = {"BLOCK_SIZE": 256 if best["BLOCK_SIZE"] != 256 else 512, "num_warps": 2}
    monkeypatch.setenv("XRT_TUNED", str(out_dir))
    with xp.kernel_policy(policy.KernelPolicy().add_tuned("square", other)):
        assert config("square", "square.triton", x) == other


def test_xrt_tuned_names_a_missing_file(monkeypatch):
    from xrt.pytorch.ops.kernel_providers import config

    monkeypatch.setenv("XRT_TUNED", "/nonexistent/tuned.json")
    with pytest.raises(ValueError, match="XRT_TUNED=.*does not exist"):
        config("square", "square.triton", torch.randn(8))


@pytest.mark.parametrize("op", ["square", "vector_add", "window_sum", "softmax", "layernorm", "layernorm_bwd"])
def test_the_correctness_check_accepts_every_ops_default_config(op, interpreter):
    from xrt.bench import specs
    from xrt.tune.worker import error_vs_reference

    spec = specs.get(op)
    args = spec.make_inputs(spec.shapes["quick"][0], torch.float32, "cpu")
    ref = spec.call(args, "torch", None)
    out = spec.call(args, "triton", spaces.default(spec.spaces["triton"]))
    assert error_vs_reference(out, ref) < 1e-5
    broken = out.clone() if isinstance(out, torch.Tensor) else tuple(t.clone() for t in out)
    first = broken if isinstance(broken, torch.Tensor) else broken[0]
    first.view(-1)[::3] += 1.0
    assert error_vs_reference(broken, ref) > 1e-2


@pytest.mark.slow
def test_tunes_the_layernorm_backward(tmp_path, interpreter):
    # layernorm_bwd is a tuning space but no policy op: the worker must still set it up and check it.
    res = tune(Problem("layernorm_bwd", "triton", "4x1023", "float32"), budget=2, jobs=1, out_dir=tmp_path,
               log=lambda m: None)
    assert res.counts == {"timed": 2}
    (row, *_) = json.loads((tmp_path / "layernorm_bwd.json").read_text())
    assert row["op"] == "layernorm_bwd.triton" and row["shape"] == "4x1024"


def test_bad_gpus_and_a_broken_top_k_file_are_named(tmp_path):
    from xrt.device import cpu_info
    from xrt.tune.tuner import targets, write_top

    with pytest.raises(TuneError, match="--gpus '0,x': give all or GPU indices"):
        targets("0,x")
    (tmp_path / "square.json").write_text('{"op": "square"}')
    with pytest.raises(TuneError, match="expected a JSON list"):
        write_top(tmp_path, Problem("square", "triton", "64", "float32"), cpu_info(),
                  [{"config": {}, "median_s": 1.0}], None)


@pytest.mark.slow
def test_model_search_with_budgets_resumes_without_measuring_again(tmp_path, interpreter, capsys):
    from xrt import cli

    out_dir = tmp_path / "tuned"
    args = ["tune", "square", "--shape", "2048", "--strategy", "model", "--budget-evals", "5", "--jobs", "2",
            "--seed", "3", "--out", str(out_dir), "--json"]
    assert cli.main(args) == 0
    first = json.loads(capsys.readouterr().out)
    (path,) = (out_dir / "journal").rglob("*.jsonl")
    recs = Journal(path).records
    assert len(recs) == 5 and sum(r["default"] for r in recs) == 1 and {r["strategy"] for r in recs} == {"model"}
    assert sum(first["counts"].values()) == 5
    assert first["space_size"] == 15 and first["dropped"] == {"BLOCK_SIZE over twice the problem's elements": 3}
    # the same command again (as after a kill -9): nothing measured again, the same best
    assert cli.main(args) == 0
    assert len(Journal(path).records) == 5 and json.loads(capsys.readouterr().out)["best"] == first["best"]
    # a larger budget goes on from the journal; a seconds budget already spent stops at once
    assert cli.main(args[:7] + ["7"] + args[8:]) == 0
    assert len(Journal(path).records) == 7 and len({r["key"] for r in Journal(path).records}) == 7
    capsys.readouterr()
    assert cli.main(args[:7] + ["9"] + args[8:] + ["--budget-seconds", "1e-9"]) == 0
    assert len(Journal(path).records) == 7 and "--budget-seconds 1e-09 spent" in capsys.readouterr().err


def test_a_lost_cuda_context_is_told_from_a_failing_config():
    """After an illegal address every call fails: the worker must say crash and exit, not go on."""
    import types

    from xrt.tune.worker import context_alive

    class Cuda:
        def __init__(self, error: Exception | None):
            self.error = error

        def synchronize(self):
            if self.error:
                raise self.error

    class One:
        def add_(self, v):
            return self

        def item(self):
            return 2.0

    alive = types.SimpleNamespace(cuda=Cuda(None), ones=lambda *a, **k: One())
    lost = types.SimpleNamespace(cuda=Cuda(RuntimeError("CUDA error: an illegal memory access was encountered")),
                                 ones=lambda *a, **k: One())
    assert context_alive(alive) and not context_alive(lost)


@pytest.mark.slow
def test_the_timeline_says_when_each_step_happened(tmp_path, interpreter):
    """--json carries it, --verbose prints it: seconds since the tuner's process started, in the order
    the steps must happen, the workers' own stamps (their process start, imports, ready) among them."""
    import subprocess
    import sys
    import time

    cmd = [sys.executable, "-m", "xrt.cli", "tune", "square", "--shape", "1024", "--budget-evals", "2", "--jobs", "1",
           "--out", str(tmp_path / "tuned"), "--json", "--verbose"]
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])})
    wall = time.monotonic() - t0
    assert p.returncode == 0, p.stderr[-3000:]
    events = json.loads(p.stdout)["timeline"]
    at = {e["event"]: e["s"] for e in events}
    assert [e["s"] for e in events] == sorted(e["s"] for e in events)
    tuner = ["xrt tune started", "imports done", "devices found", "space built", "first config timed",
             "last config timed", "search done", "workers stopped", "results written", "output"]
    timing = ["xrt tune started", "time0 spawned", "time0 imports done", "time0 ready", "first config timed"]
    for order in (tuner, timing):
        assert [at[e] for e in order] == sorted(at[e] for e in order), [(e, at.get(e)) for e in order]
    assert 0 <= at["xrt tune started"] and at["output"] < wall
    # the timing worker starts first, before the tuner's own imports
    assert at["time0 spawned"] < at["imports done"] < at["first compile worker spawned"]
    # /proc counts a process's start in clock ticks (10 ms): started within a tick of being spawned
    assert at["time0 spawned"] - 0.02 <= at["time0 process started"] <= at["time0 imports done"]
    assert at["first compile worker spawned"] <= at["first compile worker ready"] <= at["first config compiled"]
    assert at["last config compiled"] <= at["search done"]
    shown = p.stderr[p.stderr.index("timeline (s since the process started):"):].splitlines()[1:]
    assert [ln.split(" s  ", 1)[1] for ln in shown] == [e["event"] for e in events] + ["exit"]


# Loaded by every process of the command below through PYTHONPATH: each says who it is.
WHO = textwrap.dedent("""
    import json, os, sys
    with open(os.environ["XRT_TEST_PIDS"], "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "argv": sys.orig_argv}) + "\\n")
""")


def _workers_of(pids_file) -> list[int]:
    recs = [json.loads(ln) for ln in pids_file.read_text().splitlines()] if pids_file.exists() else []
    return [r["pid"] for r in recs if "xrt.tune.worker" in r["argv"]]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("how", ["bad argument", "ctrl-c"])
def test_the_early_timing_worker_never_outlives_a_failed_or_interrupted_command(tmp_path, how):
    """`xrt tune` starts its timing worker before its own imports: a bad argument found after that
    still fails in one line, a Ctrl-C still ends it with 130, and the worker is gone either way."""
    import signal
    import subprocess
    import sys
    import time

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(WHO)
    pids = tmp_path / "pids.jsonl"
    env = {**os.environ, "XRT_TEST_PIDS": str(pids),
           "PYTHONPATH": os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "xrt.cli", "tune", "square", "--shape", "1024", "--budget-evals", "2", "--jobs", "1",
           "--out", str(tmp_path / "tuned")]
    if how == "bad argument":  # found after the tuner's imports; the worker itself can run this problem
        from xrt.bench.machine import machine_name
        from xrt.device import default_device

        journal = tmp_path / "tuned" / "journal" / machine_name(default_device()) / "square.triton-float32-1024.jsonl"
        assert Problem("square", "triton", "1024", "float32").name + ".jsonl" == journal.name
        journal.parent.mkdir(parents=True)
        journal.write_text(json.dumps({"key": "BLOCK_SIZE=1,num_warps=1", "status": "timed", "space_hash": "0ld"})
                           + "\n")
    p = subprocess.Popen(foreground(cmd), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    if how == "ctrl-c":
        deadline = time.monotonic() + 120
        while not _workers_of(pids) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.02)
        os.killpg(p.pid, signal.SIGINT)  # what a terminal sends the foreground group
    out, err = p.communicate(timeout=600)
    workers = _workers_of(pids)
    assert workers, "no timing worker was started early"
    assert not [w for w in workers if _alive(w)], "a worker outlived the command"
    if how == "bad argument":
        (line,) = err.strip().splitlines()
        assert p.returncode == 2 and line.startswith(f"xrt tune: error: {journal}: written for space hash 0ld"), err
        assert journal.read_text().count("\n") == 1  # nothing measured, nothing overwritten
    else:
        assert p.returncode == 130 and err.strip().splitlines()[-1] == "xrt: interrupted", err[-2000:]
    assert not (tmp_path / "tuned" / "square.json").exists()


@pytest.mark.slow
def test_build_workers_run_nicer_than_the_timing_worker(tmp_path, interpreter):
    """Builds beside the timing (pipelined): on a full host the timing worker gets the CPU first."""
    from xrt.tune.tuner import Worker
    from xrt.tune.worker import BUILD_NICE

    def nice(pid: int) -> int:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[16])  # field 19

    problem = Problem("square", "triton", "1024", "float32")
    mine = os.nice(0)
    got = {}
    for mode in ("build", "time"):
        w = Worker(problem, mode, {**os.environ, "PYTHONPATH": str(ROOT)}, tmp_path / f"{mode}.log", 300)
        try:
            w._start()
            got[mode] = nice(w.proc.pid)
        finally:
            w.stop()
    assert got == {"build": min(19, mine + BUILD_NICE), "time": mine}


# Loaded by every worker: a build worker starts only once the journal at XRT_TEST_JOURNAL has
# XRT_TEST_RECORDS lines (or after 120 s), as a slow build pool would.
SLOW_BUILDS = textwrap.dedent("""
    import os, sys, time
    if "build" in sys.orig_argv:
        path, want = os.environ["XRT_TEST_JOURNAL"], int(os.environ["XRT_TEST_RECORDS"])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if os.path.exists(path) and open(path).read().count("\\n") >= want:
                break
            time.sleep(0.05)
""")


@pytest.mark.slow
def test_an_idle_timing_worker_does_not_wait_for_the_build_pool(tmp_path, monkeypatch, interpreter):
    """Pipelined: the timing worker builds, checks and times configs itself while the build workers
    start; here they start only after every config was timed, so none of them built one."""
    from xrt.bench.machine import machine_name
    from xrt.device import default_device

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SLOW_BUILDS)
    problem = Problem("square", "triton", "2048", "float32")
    out_dir = tmp_path / "tuned"
    journal = out_dir / "journal" / machine_name(default_device()) / f"{problem.name}.jsonl"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("XRT_TEST_JOURNAL", str(journal))
    monkeypatch.setenv("XRT_TEST_RECORDS", "3")
    res = tune(problem, budget=3, jobs=2, timeout=60, out_dir=out_dir, log=lambda m: None, pipeline=True)
    assert res.journal == journal and res.counts == {"timed": 3}
    at = {e["event"]: e["s"] for e in res.timeline.as_list()}
    assert "first config timed" in at and "first config compiled" not in at, at
    assert at["last config timed"] < at["last build worker ready"] <= at["build workers stopped"], at
    assert {r["phase"] for r in Journal(journal).records} == {"time"}


def test_no_worker_starts_once_the_search_stops(tmp_path):
    """A build or timing thread that asks for a fresh worker after the search began to stop (its
    worker killed by the same Ctrl-C) starts none: it would outlive the command."""
    from xrt.tune.process import Gate, Stopping, Worker

    w = Worker(Problem("square", "triton", "1024", "float32"), "time", dict(os.environ), tmp_path / "w.log", 60)
    w.gate = Gate()
    w.gate.shut()
    with pytest.raises(Stopping):
        w.ask({"BLOCK_SIZE": 1024, "num_warps": 4}, 60)
    assert w.proc is None
