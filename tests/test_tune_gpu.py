"""The tuner on a GPU: configs that fault on the device, and a kill -9 of the tuner mid-run.

tests/test_tune.py checks crash isolation on the CPU with faults made in Python (a signal, an exit, a
sleep). Here the faults are the GPU's own: an illegal address (a sticky CUDA error that leaves the
process unable to run anything), a kernel that never ends, and a wrong result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import ROOT

from xrt.tune.journal import Journal

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

# Loaded by every worker through PYTHONPATH (sitecustomize). Square's configs with 2 warps misbehave
# on the device; the rest run the real kernel.
FAULTS = textwrap.dedent("""
    import dataclasses
    import torch
    import triton
    import triton.language as tl
    from xrt.bench import specs

    @triton.jit
    def _store_far(x_ptr):  # 2^40 bytes past the input: no allocation is there
        tl.store(x_ptr + (1 << 38) + tl.arange(0, 128), tl.zeros([128], tl.float32))

    @triton.jit
    def _spin(flag_ptr):  # waits for a flag nobody sets
        while tl.load(flag_ptr, volatile=True) == 0:
            pass

    _spec = specs.SPECS["square"]
    _call = _spec.call

    def call(args, provider, config):
        c = config or {}
        if c.get("BLOCK_SIZE") == 512 and c.get("num_warps") == 2:
            _store_far[(1,)](args[0])
        if c.get("BLOCK_SIZE") == 2048 and c.get("num_warps") == 2:
            _spin[(1,)](torch.zeros(1, dtype=torch.int32, device=args[0].device))
        out = _call(args, provider, config)
        if c.get("BLOCK_SIZE") == 256 and c.get("num_warps") == 2:
            out = out.clone(); out.view(-1)[::7] = 0  # drops elements, like a bad mask
        return out

    specs.SPECS["square"] = dataclasses.replace(_spec, call=call)
""")


def _env(extra_path: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    parts = [p for p in (extra_path, str(ROOT), os.environ.get("PYTHONPATH")) if p]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


def test_device_faults_are_recorded_and_the_search_goes_on(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FAULTS)
    out = tmp_path / "tuned"
    cmd = [sys.executable, "-m", "xrt.cli", "tune", "square", "--provider", "triton", "--shape", "1048576",
           "--dtype", "float32", "--jobs", "3", "--timeout", "20", "--out", str(out), "--json"]
    t0 = time.monotonic()
    run = subprocess.run(cmd, env=_env(str(site)), capture_output=True, text=True, timeout=900)
    took = time.monotonic() - t0
    assert run.returncode == 0, run.stderr[-3000:]
    (path,) = (out / "journal").rglob("*.jsonl")
    last = Journal(path).last()
    assert len(last) == 18, sorted(last)
    crash = last["BLOCK_SIZE=512,num_warps=2"]
    assert crash["status"] == "crash" and "CUDA context is lost" in crash["error"], crash
    assert "illegal" in crash["error"].lower(), crash
    assert last["BLOCK_SIZE=2048,num_warps=2"]["status"] == "timeout", last["BLOCK_SIZE=2048,num_warps=2"]
    assert last["BLOCK_SIZE=256,num_warps=2"]["status"] == "wrong"
    others = [r for k, r in last.items() if k not in {"BLOCK_SIZE=512,num_warps=2", "BLOCK_SIZE=2048,num_warps=2",
                                                       "BLOCK_SIZE=256,num_warps=2"}]
    # every other config was timed on the GPU after the faults, in fresh workers where one had died
    assert {r["status"] for r in others} == {"timed"} and all(r["median_s"] > 0 for r in others)
    res = json.loads(run.stdout)
    assert res["counts"] == {"crash": 1, "timeout": 1, "wrong": 1, "timed": 15}
    print(f"\n18 configs with 3 device faults: {took:.1f} s; " + "; ".join(
        f"{k}: {last[k]['status']}: {last[k].get('error', '')[:90]}"
        for k in ("BLOCK_SIZE=512,num_warps=2", "BLOCK_SIZE=2048,num_warps=2")))


def _records(path) -> list[dict]:
    return Journal(path).records if path.exists() else []


def test_kill_9_mid_run_then_the_same_command_measures_nothing_again(tmp_path):
    out = tmp_path / "tuned"
    cmd = [sys.executable, "-m", "xrt.cli", "tune", "matmul", "--provider", "triton", "--shape", "2048x2048x2048",
           "--dtype", "bfloat16", "--strategy", "exhaustive", "--budget-evals", "80", "--jobs", "8",
           "--timeout", "60", "--out", str(out), "--json"]
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(cmd, env=_env(), stdout=subprocess.DEVNULL, stderr=log)
    path = None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and first.poll() is None:
        found = list((out / "journal").rglob("*.jsonl")) if (out / "journal").exists() else []
        if found and len(_records(found[0])) >= 25:
            path = found[0]
            break
        time.sleep(0.05)
    assert path is not None and first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
    os.kill(first.pid, signal.SIGKILL)  # the tuner only, as a user's kill -9 would: its workers are orphaned
    first.wait()
    log.close()
    killed_at = Journal(path)
    before = {r["key"] for r in killed_at.records}
    assert 25 <= len(before) < 80
    time.sleep(1.0)  # the orphaned workers see their stdin close and finish
    again = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    recs = Journal(path).records
    new = recs[len(killed_at.records):]
    res = json.loads(again.stdout)
    assert res["skipped"] == len(before)  # what the journal held was told to the search, not measured
    assert not {r["key"] for r in new} & before, "a config journaled before the kill was measured again"
    assert len({r["key"] for r in recs}) == len(recs) == 80
    print(f"\nkill -9 after {len(before)} of 80 evaluations (torn lines: {killed_at.torn}); the same command "
          f"measured the other {len(new)}, none again")


def test_compile_only_compiles_and_runs_nothing():
    """The tuner's build workers share a GPU with the timing worker: they must not launch."""
    import torch
    import triton
    import triton.language as tl

    from xrt.kernels.triton import launch

    @triton.jit
    def _ones(o_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(o_ptr + offs, tl.full([BLOCK], 1.0, tl.float32), mask=offs < n)

    la = launch.Launcher(_ones)
    out = torch.full((1000,), 7.0, device="cuda")
    launch.compile_only(True)
    try:
        la((4,), out, 1000, BLOCK=256)
        la((4,), out, 1000, BLOCK=256)
    finally:
        launch.compile_only(False)
    torch.cuda.synchronize()
    assert la.compiles == 2 and not la.cache and bool((out == 7.0).all())
    la((4,), out, 1000, BLOCK=256)
    torch.cuda.synchronize()
    assert bool((out == 1.0).all())
