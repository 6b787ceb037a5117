"""Scale-out on Ray: the tuner joins a local Ray cluster (several worker processes, two fake GPUs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from test_tune import SABOTAGE

from xrt.tune.journal import Journal

ray = pytest.importorskip("ray", reason="Ray is the optional `ray` extra (pip install -e '.[ray]')")


@pytest.mark.slow
def test_a_search_on_a_local_ray_cluster_records_every_config_once(tmp_path, monkeypatch, interpreter):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SABOTAGE)  # BLOCK_SIZE=512,num_warps=2 segfaults its worker
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "RAY_AUTH_MODE": "disabled",
           "RAY_USAGE_STATS_ENABLED": "0"}
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    ctx = ray.init(num_cpus=4, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        out = tmp_path / "tuned"
        cmd = [sys.executable, "-m", "xrt.cli", "tune", "square", "--shape", "4096", "--budget-evals", "6",
               "--jobs", "2", "--timeout", "8", "--out", str(out), "--address", ctx.address_info["address"], "--json"]
        # the sabotaged config is in the first six of the grid (BLOCK_SIZE=512 comes second)
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
        assert p.returncode == 0, p.stderr[-3000:]
        res = json.loads(p.stdout)
        assert "Ray cluster" in p.stderr and "2 timing actor(s) (2 GPU(s))" in p.stderr
        last = Journal(Path(res["journal"])).last()
        assert len(last) == 6 and res["counts"]["crash"] == 1
        assert last["BLOCK_SIZE=512,num_warps=2"]["status"] == "crash"
        timed = [r for r in last.values() if r["status"] == "timed"]
        # ran_on names the actor (host:pid:GPU); Ray pinned the timing actors to GPU 0 and GPU 1
        assert all(r["ran_on"].count(":") == 2 for r in timed)
        assert {r["ran_on"].rsplit(":", 1)[1] for r in timed} <= {"0", "1"}
        # the same command again: the journal is the record, nothing is evaluated twice
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
        assert again.returncode == 0 and len(Journal(Path(res["journal"])).records) == 6
    finally:
        ray.shutdown()


def test_a_bad_address_is_one_line(tmp_path):
    from xrt.tune.tuner import Problem, TuneError, tune

    with pytest.raises(TuneError, match="--address 127.0.0.1:1: cannot join the Ray cluster"):
        tune(Problem("square", "triton", "64", "float32"), out_dir=tmp_path, address="127.0.0.1:1",
             log=lambda m: None)



