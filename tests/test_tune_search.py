"""Pruned spaces, space hashes and search strategies (no kernels run: fast)."""

from __future__ import annotations

import json

import pytest

from xrt.device import DeviceInfo
from xrt.kernels import spaces
from xrt.tune import search
from xrt.tune.journal import Journal
from xrt.tune.tuner import Problem, TuneError, check_journal, device_problem, tune

# an H100's launch limits, as cuda_info reads them
H100 = DeviceInfo(kind="cuda", index=0, name="NVIDIA H100 80GB HBM3", compute_capability="9.0", sm_count=132,
                  max_threads_per_block=1024, max_shared_memory_per_block=232448, registers_per_block=65536,
                  warp_size=32)
AMPERE_SMALL = DeviceInfo(kind="cuda", index=0, name="fake sm_86", compute_capability="8.6",
                          max_threads_per_block=512, max_shared_memory_per_block=101376,
                          registers_per_block=65536, warp_size=32)


def gemm(shape=(4096, 4096, 4096), dev=H100, esize=2):
    return spaces.Problem(shape, esize, spaces.Limits.of(dev))


def test_gemm_pruning_counts_each_reason_and_keeps_the_default():
    kept, dropped = search.pruned("matmul.triton", gemm())
    assert len(search.grid("matmul.triton")) == 10368
    assert len(kept) + sum(dropped.values()) == 10368
    assert dropped == {"EPILOGUE_SUBTILE / warp_specialize on the tiled kernel (no effect)": 3888,
                       "SPLIT_K where C has two waves of tiles": 2624,
                       "shared memory over the device limit": 1960,
                       "registers per thread over 255 (accumulator spills)": 528}
    assert all(c["SPLIT_K"] == 1 for c in kept)  # 4096 x 4096: C fills the SMs without it
    assert kept[0] == spaces.default("matmul.triton")
    for c in kept:  # what is kept fits: the launcher would not shrink it into another config
        tma = c["BLOCK_M"] * c["BLOCK_N"] * 2 // (2 if c["EPILOGUE_SUBTILE"] else 1)
        tma = tma if c["kernel"] == "persistent_tma" else 0
        assert c["num_stages"] * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * 2 + tma <= 232448
        assert c["BLOCK_M"] * c["BLOCK_N"] // (32 * c["num_warps"]) + 32 <= 255


def test_split_k_is_searched_where_c_leaves_sms_idle():
    """A linear's narrow weight gradient (1024 x 1024 over K = 8192) keeps split configs; a K that
    does not split into 16-byte parts drops them (the launcher would ignore the knob)."""
    kept, _ = search.pruned("matmul.triton", gemm((1024, 1024, 8192)))
    assert {c["SPLIT_K"] for c in kept} == {1, 2, 4}
    _, dropped = search.pruned("matmul.triton", gemm((1024, 1024, 8196)))
    assert dropped["SPLIT_K that K cannot take (ignored)"] > 0


def test_pruning_follows_the_device_and_the_shape():
    kept, dropped = search.pruned("matmul.triton", gemm(dev=AMPERE_SMALL))
    assert dropped["persistent_tma needs Hopper (falls back to tiled)"] > 0
    assert all(c["kernel"] == "tiled" for c in kept[1:])  # the default stays, as the baseline
    _, skinny = search.pruned("matmul.triton", gemm((16, 8192, 8192)))
    assert skinny["BLOCK_M at least twice the shape's dimension"] > 0
    assert skinny["GROUP_M > 1 with one row of tiles"] > 0
    # CUDA C: threads per block and the shared-memory segment against the device
    _, d = search.pruned("window_sum.cuda", spaces.Problem((1 << 20,), 4, spaces.Limits(256, 4096)))
    assert d == {"threads per block over the device limit": 8,
                 "shared memory over the device limit": 5}  # (the default, 256 x 4, stays)
    # the CPU knows no limits: only the shape rules apply
    cpu = DeviceInfo(kind="cpu", index=0, name="cpu")
    assert search.pruned("square.triton", spaces.Problem((4096,), 4, spaces.Limits.of(cpu)))[1] == {}


def test_a_constraint_that_prunes_everything_is_named():
    tiny = spaces.Limits(max_threads_per_block=32, warp_size=32)
    with pytest.raises(ValueError, match="prune every config but the default for shape 4096"):
        search.pruned("square.triton", spaces.Problem((4096,), 4, tiny))


def test_space_hash_is_stable_and_changes_with_the_space(monkeypatch):
    h = spaces.space_hash("matmul.triton")
    assert h == spaces.space_hash("matmul.triton") and len(h) == 16
    assert h != spaces.space_hash("bmm.triton") or True  # (same values, other key: the key is hashed)
    assert spaces.space_hash("bmm.triton") != h
    monkeypatch.setattr(spaces, "CONSTRAINTS_VERSION", spaces.CONSTRAINTS_VERSION + 1)
    assert spaces.space_hash("matmul.triton") != h
    monkeypatch.undo()
    monkeypatch.setitem(spaces.SPACES, "matmul.triton", {**spaces.SPACES["matmul.triton"], "num_warps": [4, 8, 16]})
    assert spaces.space_hash("matmul.triton") != h


def test_a_journal_from_another_space_hash_is_refused_untouched(tmp_path, monkeypatch):
    from xrt.bench.machine import machine_name
    from xrt.device import default_device

    j = tmp_path / "journal" / machine_name(default_device()) / "square.triton-float32-4096.jsonl"
    j.parent.mkdir(parents=True)
    j.write_text(json.dumps({"key": "BLOCK_SIZE=1024,num_warps=4", "status": "timed", "median_s": 1e-5,
                             "config": {"BLOCK_SIZE": 1024, "num_warps": 4}, "space_hash": "0123456789abcdef"}) + "\n")
    before = j.read_bytes()
    with pytest.raises(TuneError, match="written for space hash 0123456789abcdef, this space is "
                                        f"{spaces.space_hash('square.triton')}.*nothing was overwritten"):
        tune(Problem("square", "triton", "4096", "float32"), out_dir=tmp_path, log=lambda m: None)
    assert j.read_bytes() == before
    with pytest.raises(TuneError, match="space hash None"):  # a journal from before space hashes
        check_journal(_journal(tmp_path, [{"key": "a", "status": "timed"}]), "x")


def _journal(tmp_path, recs):
    j = Journal(tmp_path / "old.jsonl")
    for r in recs:
        j.add(r)
    return Journal(j.path)


def test_bad_strategy_and_budgets_are_named():
    with pytest.raises(TuneError, match="--strategy 'tpe': choose one of exhaustive, random, model"):
        tune(Problem("square", "triton", "64", "float32"), strategy="tpe", log=lambda m: None)
    with pytest.raises(TuneError, match="--budget-evals 0"):
        tune(Problem("square", "triton", "64", "float32"), budget=0, log=lambda m: None)
    with pytest.raises(TuneError, match="--budget-seconds -1"):
        tune(Problem("square", "triton", "64", "float32"), budget_seconds=-1, log=lambda m: None)


def _walk(strategy, cands, times, seed, batch=4, limit=None):
    s = search.make(strategy, cands, seed)
    order = []
    while limit is None or len(order) < limit:
        cfgs = s.propose(batch if limit is None else min(batch, limit - len(order)))
        if not cfgs:
            return order
        for c in cfgs:
            k = search.key(c)
            order.append(k)
            s.observe(c, times[k])
    return order


def test_strategies_cover_the_space_once_default_first_and_are_seeded():
    cands, _ = search.pruned("matmul.triton", gemm((512, 512, 512)))
    times = {search.key(c): 1e-4 * (1 + (hash(search.key(c)) % 97) / 97) for c in cands}
    times[search.key(cands[5])] = None  # a failure
    keys = [search.key(c) for c in cands]
    assert _walk("exhaustive", cands, times, 0) == keys
    r0, r0b, r1 = (_walk("random", cands, times, s) for s in (0, 0, 1))
    assert r0 == r0b != r1 and sorted(r0) == sorted(keys) and r0[0] == keys[0]
    m0 = _walk("model", cands, times, 3, limit=40)
    assert m0 == _walk("model", cands, times, 3, limit=40) and m0[0] == keys[0]
    assert len(set(m0)) == 40 and set(m0) <= set(keys)


def test_the_model_walks_a_whole_small_space_and_learns_from_the_journal():
    cands = search.grid("square.triton")
    times = {search.key(c): float(i + 1) for i, c in enumerate(cands)}
    order = _walk("model", cands, times, 0, batch=3)
    assert sorted(order) == sorted(times)  # pruned or repeated proposals never stall it
    s = search.make("model", cands, 0)
    for c in cands[:5]:  # what a resumed search found in its journal
        s.observe(c, times[search.key(c)])
    nxt = s.propose(20)
    assert not {search.key(c) for c in nxt} & {search.key(c) for c in cands[:5]}


def test_space_command_prints_sizes_and_reasons(monkeypatch, capsys):
    from xrt import cli
    from xrt.tune import cli as tcli  # noqa: F401

    monkeypatch.setattr("xrt.device.default_device", lambda: H100)
    assert cli.main(["tune", "space", "matmul", "--shape", "4096x4096x4096", "--dtype", "bfloat16"]) == 0
    out = capsys.readouterr().out
    assert "configs: 10368 before pruning, 1368 after" in out
    assert "dropped  1960: shared memory over the device limit" in out
    assert cli.main(["tune", "space", "matmul", "--json", "--shape", "64x64x64"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["space_hash"] == spaces.space_hash("matmul.triton") and got["after_pruning"] < 10368
    assert cli.main(["tune", "space", "matmul", "--provider", "torch"]) != 0
    assert "--provider torch: matmul has no tuning space" in capsys.readouterr().err
    assert cli.main(["tune", "space"]) != 0
    assert "name the op" in capsys.readouterr().err
    assert cli.main(["tune", "matmul"]) != 0
    assert "--shape is required" in capsys.readouterr().err


def test_device_problem_reads_the_element_size():
    p = device_problem(Problem("matmul", "triton", "64x32x16", "bfloat16"), H100)
    assert p.esize == 2 and p.shape == (64, 32, 16) and p.limits.max_shared_memory_per_block == 232448
