"""``auto``'s measured table: the writer (xrt kernels auto-table) on small asv results, the rule for
unmeasured shapes, and the runtime's lookup on a made-up GPU (fake CUDA tensors, no GPU needed)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch

from xrt.kernels import autotable

GPU = "Fake GPU X1"
OTHER_GPU = "Fake GPU Z9"
OLD, NEW = "a" * 40, "b" * 40


# -- a small fixture of asv results ----------------------------------------------------------------

def _bench(name: str, params: list[list[str]]) -> dict:
    return {"name": name, "type": "time", "unit": "seconds", "params": params,
            "param_names": ["shape", "dtype", "provider", "config"], "version": "v1"}


def _q(*xs: str) -> list[str]:
    return [f"'{x}'" for x in xs]


# Per benchmark: the grid and a function (commit, machine, combo) -> seconds (None: failed, nan: skipped).
SOFTMAX = "bench_ops.Softmax.time_op"
MATMUL = "bench_ops.Matmul.time_op"
GRIDS = {
    SOFTMAX: [_q("4x1000", "32x4096"), _q("float32"), _q("torch", "triton", "cuda"), _q("default", "block=64")],
    MATMUL: [_q("16x8x32"), _q("bfloat16"), _q("torch", "triton", "cuda"), _q("default")],
}


def _value(bench: str, commit: str, machine: str, combo: tuple[str, ...]) -> float | None:
    shape, _, prov, config = (c.strip("'") for c in combo)
    if bench == SOFTMAX:
        if config != "default":
            return 1e-9  # a tuning candidate: never what auto runs
        if shape == "4x1000":
            # the old commit found triton fastest, the new one cuda; the machines differ by a little
            # (ms: far above the host penalty a call to xrt is charged, autotable.HOST_PENALTY_S)
            base = {"torch": 10e-3, "triton": 5e-3, "cuda": 8e-3} if commit == OLD else \
                   {"torch": 10e-3, "triton": 9e-3, "cuda": 6e-3}
            return base[prov] * (1.1 if machine == "m2" else 1.0)
        return {"torch": 20e-3, "triton": 30e-3, "cuda": None}[prov]  # torch fastest; cuda failed
    # matmul: triton 1 % ahead of torch (inside the margin); cuda skips bf16
    return {"torch": 10e-3, "triton": 9.9e-3, "cuda": math.nan}[prov]


def write_results(root: Path, commits: tuple[str, ...] = (OLD, NEW)) -> Path:
    """asv result files (schema 2) of ``commits`` on machines m1 and m2 (GPU) and m3 (OTHER_GPU)."""
    from xrt.db import result_names
    from xrt.db.asv_files import V2_COLUMNS

    root.mkdir(parents=True, exist_ok=True)
    (root / "benchmarks.json").write_text(json.dumps(
        {**{b: _bench(b, g) for b, g in GRIDS.items()}, "version": 2}))
    for machine, gpu in (("m1", GPU), ("m2", GPU), ("m3", OTHER_GPU)):
        (root / machine).mkdir(exist_ok=True)
        (root / machine / "machine.json").write_text(json.dumps({"machine": machine, "version": 1}))
        for i, commit in enumerate(commits):
            results = {}
            for bench, grid in GRIDS.items():
                values = [_value(bench, commit, machine, c) for c in itertools.product(*grid)]
                results[bench] = [values, grid, "v1", 1_700_000_000_000, 1.0]
            d = {"commit_hash": commit, "env_name": "existing-py", "date": 1_700_000_000_000 + i * 60_000,
                 "params": {"machine": machine, "gpu": gpu}, "python": "3.11", "requirements": {},
                 "env_vars": {}, "result_columns": list(V2_COLUMNS[:-1]), "results": results,
                 "durations": {}, "version": 2}
            (root / machine / result_names.result_file_name(commit, "existing-py")).write_text(
                json.dumps(d, allow_nan=True))
    return root


@pytest.fixture
def db(tmp_path):
    pytest.importorskip("duckdb")
    from xrt.db.ingest import ingest

    path = tmp_path / "xrt.duckdb"
    ingest(write_results(tmp_path / "results"), path, echo=lambda s: None, tuned=None)
    return path


# -- the writer ------------------------------------------------------------------------------------

def test_writer_picks_the_fastest_provider_per_bucket_from_the_newest_commit(db):
    from xrt.db import auto_table

    tables = auto_table.tables(db)
    assert sorted(tables) == [GPU, OTHER_GPU]
    t = tables[GPU]
    small = t["ops"]["softmax"]["float32"]["4x1024"]  # 4x1000's bucket
    # the newest commit's times (cuda fastest there; triton was at the old one), the median of m1 and m2
    assert small["provider"] == "cuda" and small["commit"] == NEW and small["shapes"] == ["4x1000"]
    assert small["median_s"] == pytest.approx({"torch": 10.5e-3, "triton": 9.45e-3, "cuda": 6.3e-3})
    assert small["date"].startswith("2023-11-14")
    big = t["ops"]["softmax"]["float32"]["32x4096"]
    assert big["provider"] == "torch" and set(big["median_s"]) == {"torch", "triton"}  # cuda failed: not a time
    mm = t["ops"]["matmul"]["bfloat16"]["16x8x32"]
    assert mm["provider"] == "torch" and mm["median_s"]["triton"] < mm["median_s"]["torch"]  # 1 %: within the margin
    assert t["machines"] == ["m1", "m2"] and tables[OTHER_GPU]["machines"] == ["m3"]


def test_writer_ignores_a_commit_that_measured_torch_alone(tmp_path):
    pytest.importorskip("duckdb")
    from xrt.db import auto_table
    from xrt.db.ingest import ingest

    root = write_results(tmp_path / "results", commits=(OLD,))
    GRIDS_TORCH_ONLY = {SOFTMAX: [_q("4x1000"), _q("float32"), _q("torch"), _q("default")]}
    newer = write_results(tmp_path / "only_torch", commits=(NEW,))
    for machine in ("m1", "m2", "m3"):  # the new commit measured torch alone: the old comparison stays
        f = next((newer / machine).glob("b*.json"))
        d = json.loads(f.read_text())
        d["results"] = {SOFTMAX: [[5e-6], GRIDS_TORCH_ONLY[SOFTMAX], "v1", 1_700_000_000_000, 1.0]}
        d["date"] += 3_600_000
        (root / machine / f.name).write_text(json.dumps(d))
    ingest(root, tmp_path / "x.duckdb", echo=lambda s: None, tuned=None)
    small = auto_table.tables(tmp_path / "x.duckdb")[GPU]["ops"]["softmax"]["float32"]["4x1024"]
    assert small["commit"] == OLD and small["provider"] == "triton"


def test_the_command_writes_one_file_per_gpu_that_the_runtime_reads(tmp_path, capsys):
    pytest.importorskip("duckdb")
    from xrt.cli import main

    root = write_results(tmp_path / "results")
    out = tmp_path / "auto"
    assert main(["kernels", "auto-table", "--results", str(root), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["fake-gpu-x1.json", "fake-gpu-z9.json"]
    t = autotable.find(GPU, out)
    assert t is not None and t.pick("softmax", "float32", (3, 1000)) == ("cuda", autotable.MEASURED)
    # bad input: one line naming it, exit 2
    assert main(["kernels", "auto-table", "--results", str(tmp_path / "nowhere")]) == 2
    assert "nowhere: not a directory" in capsys.readouterr().err
    assert main(["kernels", "auto-table", "--db", str(tmp_path / "none.duckdb")]) == 2


# -- the rule ---------------------------------------------------------------------------------------

def _doc(ops: dict) -> dict:
    return {"schema": autotable.SCHEMA, "gpu": GPU, "ops": {
        op: {dt: {b: {"provider": p, "median_s": {"torch": 1.0, p: 0.5}, "commit": NEW, "date": "2026-01-01"}
                  for b, p in buckets.items()} for dt, buckets in by_dtype.items()} for op, by_dtype in ops.items()}}


TABLE = _doc({"softmax": {"float32": {"64x1024": "triton", "4096x4096": "cuda"}},
              "matmul": {"bfloat16": {"1024x1024x1024": "triton"}},
              "attention": {"float16": {"1x16x512x64x0": "triton"}}})


def test_bucket_rounds_each_dim_up_and_keeps_flags():
    assert autotable.bucket((4097, 4096, 4096)) == "8192x4096x4096"
    assert autotable.bucket((1, 16, 500, 64, 0)) == "1x16x512x64x0"
    assert autotable.bucket((3, 1)) == "4x1"
    assert autotable.row_shape((2, 3, 1000), flat=False) == (6, 1000)
    assert autotable.row_shape((2, 3, 1000), flat=True) == (6000,)
    with pytest.raises(ValueError, match="negative"):
        autotable.bucket((-1, 4))


def test_unmeasured_shapes_follow_the_documented_rule():
    t = autotable.Table(TABLE)
    assert t.pick("softmax", "float32", (60, 1000)) == ("triton", autotable.MEASURED)
    # a memory-bound op: the nearest measured bucket when each dim is within NEAR powers of two
    assert t.pick("softmax", "float32", (100, 2000)) == ("triton", autotable.NEAREST)  # 128x2048
    assert t.pick("softmax", "float32", (2048, 4096)) == ("cuda", autotable.NEAREST)
    assert t.pick("softmax", "float32", (16, 256)) == ("torch", autotable.FALLBACK)  # too far
    # GEMM and attention: torch unless this very bucket was measured
    assert t.pick("matmul", "bfloat16", (1024, 1024, 1024)) == ("triton", autotable.MEASURED)
    assert t.pick("matmul", "bfloat16", (1024, 1024, 2048)) == ("torch", autotable.FALLBACK)
    assert t.pick("attention", "float16", (1, 16, 512, 64, 1)) == ("torch", autotable.FALLBACK)  # causal: not measured
    # an op or dtype the table does not hold
    assert t.pick("softmax", "bfloat16", (64, 1024)) == ("torch", autotable.FALLBACK)
    assert t.pick("layernorm", "float32", (64, 1024)) == ("torch", autotable.FALLBACK)


def _medians(by_bucket: dict[str, dict[str, float]]) -> dict:
    return {b: {"provider": autotable.fastest(m), "median_s": m, "commit": NEW, "date": "2026-01-01"}
            for b, m in by_bucket.items()}


# layernorm: triton wins the forward of both buckets; its backward is slow at 64x1024, so training
# there is torch's. attention has no backward measured in bfloat16: the forward decides.
TRAIN = {"schema": autotable.SCHEMA, "gpu": GPU, "ops": {
    "layernorm": {"float16": _medians({"64x1024": {"torch": 10.0, "triton": 5.0},
                                       "4096x4096": {"torch": 10.0, "triton": 5.0, "cuda": 4.0}})},
    "layernorm_bwd": {"float16": _medians({"64x1024": {"torch": 10.0, "triton": 20.0},
                                           "4096x4096": {"torch": 10.0, "triton": 9.0}})},
    "attention": {"bfloat16": _medians({"1x16x512x64x0": {"torch": 10.0, "triton": 5.0}})},
    "softmax": {"float32": _medians({"64x1024": {"torch": 10.0, "triton": 10.0}})},
}}


def test_training_calls_pick_by_forward_plus_backward_where_the_backward_was_measured():
    t = autotable.Table(TRAIN)
    assert t.pick("layernorm", "float16", (64, 1024)) == ("triton", autotable.MEASURED)
    assert t.pick("layernorm", "float16", (64, 1024), train=True) == ("torch", autotable.MEASURED)  # 25 > 20
    # providers timed both ways only: cuda's forward alone does not make it the training pick
    assert t.pick("layernorm", "float16", (4096, 4096), train=True) == ("triton", autotable.MEASURED)  # 14 < 20
    assert t.pick("layernorm", "float16", (4096, 4096)) == ("cuda", autotable.MEASURED)
    # a memory-bound op's nearest measured bucket, summed too
    assert t.pick("layernorm", "float16", (100, 2000), train=True) == ("torch", autotable.NEAREST)
    # no backward measured: the forward's times
    assert t.pick("attention", "bfloat16", (1, 16, 512, 64, 0), train=True) == ("triton", autotable.MEASURED)
    assert autotable.BACKWARD == {"layernorm": "layernorm_bwd", "attention": "attention_bwd",
                                  "add_layernorm": "add_layernorm_bwd", "linear_gelu": "linear_gelu_bwd"}


def test_routes_says_whether_a_table_names_an_xrt_provider_for_an_op():
    t = autotable.Table(TRAIN)
    assert t.routes(["layernorm"]) and t.routes(["attention"])
    assert not t.routes(["softmax"])  # a tie: torch's in every entry
    assert not t.routes(["matmul", "bmm"])  # not in the table


def _all_torch_up_to(t: autotable.Table, op: str, width: int) -> list[tuple]:
    """Every call of ``op`` no wider than ``width`` that ``t`` does not give torch: each dtype the
    table holds and one it does not, rows 1 to 2**24, widths up to ``width`` (powers of two, one
    above each, ``width`` itself), forward and training."""
    dtypes = {d for o, d in t.entries if o == op} | {"float64"}
    widths = sorted({w for k in range(width.bit_length()) for w in (1 << k, (1 << k) + 1) if w <= width} | {width})
    return [(d, m, n, train) for d in dtypes for m in (1 << k for k in range(25)) for n in widths
            for train in (False, True) if t.pick(op, d, (m, n), train)[0] != autotable.TORCH]


def test_torch_width_bounds_every_call_the_table_leaves_to_torch():
    """A routed row op's call no wider than ``torch_width`` is torch's whatever its rows: the wrapper
    skips the lookup for it. Checked against ``pick`` over rows, dtypes and modes, on a planted table
    (training's winner narrower than the forward's), the committed H100 table, and one naming no xrt
    provider; and the bound is tight: a call one power of two wider can be another provider's."""
    t = autotable.Table(TRAIN)  # layernorm: triton at 64x1024 forward, 4096x4096 both ways; softmax: ties
    assert t.torch_width("layernorm") == 256  # 1024 one power of two away (NEAR) is nearest, 512 can hit it
    assert _all_torch_up_to(t, "layernorm", 256) == []
    assert t.pick("layernorm", "float16", (64, 512)) == ("triton", autotable.NEAREST)
    assert t.torch_width("softmax") == t.torch_width("matmul") == autotable.ANY_WIDTH
    h100 = autotable.find("NVIDIA H100 80GB HBM3")
    assert h100 is not None and h100.torch_width("layernorm") >= 1024  # a GPT's d 768 and 1024: no lookup
    for op in ("layernorm", "softmax"):
        assert _all_torch_up_to(h100, op, h100.torch_width(op)) == [], op


def test_the_default_tables_are_the_checkouts():
    from conftest import ROOT

    assert autotable.DEFAULT_DIR == ROOT / "results" / "auto" and autotable.DEFAULT_DIR.is_dir()


def test_fastest_needs_a_margin_over_torch():
    assert autotable.fastest({"torch": 1.0, "triton": 0.99, "cuda": 1.5}) == "torch"
    assert autotable.fastest({"torch": 1.0, "triton": 0.9, "cuda": 0.8}) == "cuda"
    assert autotable.fastest({"triton": 0.5}) == "torch"  # nothing to compare with


def test_a_bad_table_names_its_file(tmp_path):
    (tmp_path / "fake-gpu-x1.json").write_text('{"schema": "other"}')
    with pytest.raises(ValueError, match=r"fake-gpu-x1.json: schema 'other'"):
        autotable.find(GPU, tmp_path)
    assert autotable.find(OTHER_GPU, tmp_path) is None


# -- the runtime --------------------------------------------------------------------------------------

@pytest.fixture
def fake_gpu(tmp_path, monkeypatch):
    """A table for GPU in XRT_AUTO_TABLES, this process's GPU 0 named by ``names[0]``."""
    from xrt.pytorch import auto

    (tmp_path / f"{autotable.model_key(GPU)}.json").write_text(json.dumps(TABLE))
    monkeypatch.setenv(autotable.ENV, str(tmp_path))
    names = [GPU]
    monkeypatch.setattr(auto, "gpu_name", lambda index: names[0])
    auto.clear()
    yield names
    auto.clear()


def cuda(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A fake CUDA tensor: device, dtype and shape without a GPU."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode(allow_non_fake_inputs=True):
        return torch.empty(*shape, device="cuda", dtype=dtype)


def test_runtime_picks_the_tables_provider_for_this_gpu(fake_gpu):
    from xrt.pytorch import auto

    assert auto.pick("softmax", cuda(64, 1000), (64, 1000)) == "triton"
    assert auto.pick("matmul", cuda(1, dtype=torch.bfloat16), (1000, 1000, 1000)) == "triton"
    assert auto.pick("matmul", cuda(1, dtype=torch.bfloat16), (1000, 1000, 3000)) == "torch"  # unmeasured GEMM
    assert auto.pick("softmax", torch.empty(64, 1000), (64, 1000)) == "torch"  # off CUDA


def test_runtime_falls_back_to_torch_on_an_unknown_gpu(fake_gpu):
    from xrt.pytorch import auto

    fake_gpu[0] = OTHER_GPU
    assert auto.table(0) is None and auto.pick("softmax", cuda(64, 1000), (64, 1000)) == "torch"


def test_runtime_warns_once_about_a_bad_table_and_runs_torch(fake_gpu, tmp_path):
    from xrt.pytorch import auto

    (tmp_path / f"{autotable.model_key(GPU)}.json").write_text("{not json")
    with pytest.warns(RuntimeWarning, match=r"fake-gpu-x1.json: .*auto runs torch"):
        assert auto.pick("softmax", cuda(64, 1000), (64, 1000)) == "torch"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert auto.pick("softmax", cuda(65, 1000), (65, 1000)) == "torch"  # said once


def test_runtime_reads_the_table_once(fake_gpu, monkeypatch):
    from xrt.pytorch import auto

    reads = []
    real = autotable.find
    monkeypatch.setattr(autotable, "find", lambda gpu, where=None: reads.append(gpu) or real(gpu, where))
    for n in (64, 60, 33, 64):
        auto.pick("softmax", cuda(n, 1000), (n, 1000))
    assert reads == [GPU]


def test_routing_auto_takes_the_table_and_never_a_provider_that_cannot_run(fake_gpu, interpreter, monkeypatch):
    from torch._subclasses.fake_tensor import FakeTensor

    import xrt.pytorch as xp
    from xrt.pytorch import routing
    from xrt.pytorch.ops import dispatch

    monkeypatch.setattr(routing, "_PLAIN", (*routing._PLAIN, FakeTensor))  # the fake CUDA tensors pass as plain

    xp.clear_kernel_policy()
    with xp.kernel_policy(softmax="auto", matmul="auto", attention="auto"):
        assert routing.provider("softmax", cuda(64, 1000)) == "triton"
        # the table names cuda for 4096x4096, which cannot run here (no GPU): torch's, never cuda
        assert dispatch.get("softmax", "cuda").missing(cuda(4096, 4096)) is not None
        assert routing.provider("softmax", cuda(4096, 4096)) == "torch"
        x = cuda(1000, 1000, dtype=torch.bfloat16)
        w = cuda(1000, 1000, dtype=torch.bfloat16)
        assert routing.provider("matmul", x, lambda: routing._linear_measured((x, w), {})) == "triton"
        w2 = cuda(3000, 1000, dtype=torch.bfloat16)
        assert routing.provider("matmul", x, lambda: routing._linear_measured((x, w2), {})) == "torch"
        q = cuda(1, 16, 512, 64, dtype=torch.float16)
        assert routing.provider("attention", q, lambda: routing._sdpa_measured((q, q, q), {})) == "triton"
        causal = {"is_causal": True}
        assert routing.provider("attention", q, lambda: routing._sdpa_measured((q, q, q), causal)) == "torch"
    xp.clear_kernel_policy()


def test_runtime_auto_picks_by_training_times_for_a_tensor_that_requires_grad(tmp_path, monkeypatch):
    from xrt.pytorch import auto

    (tmp_path / f"{autotable.model_key(GPU)}.json").write_text(json.dumps(TRAIN))
    monkeypatch.setenv(autotable.ENV, str(tmp_path))
    monkeypatch.setattr(auto, "gpu_name", lambda index: GPU)
    auto.clear()
    x = cuda(64, 1024, dtype=torch.float16)
    assert auto.pick("layernorm", x, (64, 1024)) == "triton"
    assert auto.pick("layernorm", x.requires_grad_(), (64, 1024)) == "torch"
    with torch.no_grad():
        assert auto.pick("layernorm", x, (64, 1024)) == "triton"  # nothing recorded: the forward's
    auto.clear()


def test_routed_calls_are_training_calls_when_any_tensor_argument_requires_grad():
    from xrt.pytorch import routing

    x, w = torch.randn(4, 8), torch.randn(8)
    assert routing._layer_norm_measured((x, (8,), w), {})[2] is False
    w.requires_grad_()  # the input does not, the weight does: autograd records the call
    assert routing._layer_norm_measured((x, (8,), w), {}) == ("layernorm", (4, 8), True)
    with torch.no_grad():
        assert routing._layer_norm_measured((x, (8,), w), {})[2] is False
    q = torch.randn(1, 2, 16, 64)
    assert routing._sdpa_measured((q, q, q.requires_grad_()), {"is_causal": True}) == (
        "attention", (1, 2, 16, 64, 1), True)


def test_auto_policy_installs_only_the_ops_a_table_can_route(tmp_path, monkeypatch):
    """``auto`` wraps the torch functions of an op only where this machine's table names an xrt
    provider for it; leaving the policy puts torch's own functions back."""
    import torch.nn.functional as F

    import xrt.pytorch as xp
    from xrt.pytorch import auto, routing

    (tmp_path / f"{autotable.model_key(GPU)}.json").write_text(json.dumps(TRAIN))
    monkeypatch.setenv(autotable.ENV, str(tmp_path))
    monkeypatch.setattr(auto, "gpu_name", lambda index: GPU)
    monkeypatch.setattr(auto, "devices", lambda: range(1))
    auto.clear()
    xp.clear_kernel_policy()
    before = (F.linear, F.layer_norm, F.softmax, F.scaled_dot_product_attention, torch.matmul)
    try:
        with xp.kernel_policy(matmul="auto", layernorm="auto", softmax="auto", attention="auto"):
            ops = {w.xrt_routed for w in routing.patched().values()}
            assert ops == {"layernorm", "attention"}
            assert F.linear is before[0] and F.softmax is before[2] and torch.matmul is before[4]
            assert F.layer_norm.__wrapped__ is before[1]
        assert routing.patched() == {}
        assert (F.linear, F.layer_norm, F.softmax, F.scaled_dot_product_attention, torch.matmul) == before
    finally:
        xp.clear_kernel_policy()
        auto.clear()


def test_direct_ops_auto_takes_the_table(fake_gpu, interpreter):
    import importlib

    import xrt.pytorch as xp
    from xrt.pytorch.ops import dispatch

    mm = importlib.import_module("xrt.pytorch.ops.matmul")
    attention = importlib.import_module("xrt.pytorch.ops.attention")
    xp.clear_kernel_policy()
    assert dispatch.choose("softmax", cuda(64, 1000)).name == "triton"
    assert dispatch.choose("softmax", cuda(4096, 4096)).name == "torch"  # cuda named, cannot run here
    assert dispatch.choose("softmax", cuda(8, 8)).name == "torch"  # unmeasured, nothing near
    assert dispatch.choose("layernorm", cuda(64, 1000)).name == "torch"  # no layernorm in the table
    a, b = cuda(1000, 1000, dtype=torch.bfloat16), cuda(1000, 1000, dtype=torch.bfloat16)
    assert mm.choose_provider("matmul", a, "auto", b) == "triton"
    assert mm.choose_provider("matmul", a, "auto", cuda(1000, 3000, dtype=torch.bfloat16)) == "torch"
    q = cuda(1, 16, 512, 64, dtype=torch.float16)
    assert attention._auto_runs_triton(q) and not attention._auto_runs_triton(q, is_causal=True)


def test_the_committed_tables_are_what_the_runtime_reads():
    """results/auto: each file loads, names ops and providers of their definitions, and each bucket's
    provider is the one its medians make (the margin over torch)."""
    from conftest import ROOT

    from xrt.bench.suite import parse_shape
    from xrt.kernels import defs

    files = sorted((ROOT / "results" / "auto").glob("*.json"))
    assert files
    for f in files:
        doc = json.loads(f.read_text())
        assert f.stem == autotable.model_key(doc["gpu"]) and autotable.load(f).gpu == doc["gpu"]
        for op, by_dtype in doc["ops"].items():
            for dtype, buckets in by_dtype.items():
                assert dtype in defs.get(op).dtypes
                for b, e in buckets.items():
                    assert set(e["median_s"]) <= set(defs.get(op).timed) and "torch" in e["median_s"]
                    assert e["provider"] == autotable.fastest(e["median_s"])
                    assert {autotable.bucket(parse_shape(s)) for s in e["shapes"]} == {b}


def test_auto_picks_reports_the_tables_pick_for_each_gpt_call(tmp_path, capsys):
    """scripts/auto_picks.py: each routed call of the GPT model, with the pick a planted table makes
    (measured, nearest, fallback), for inference and training (no backward measured: the forward's)."""
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("auto_picks", ROOT / "scripts" / "auto_picks.py")
    picks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(picks)
    planted = {"schema": autotable.SCHEMA, "gpu": GPU, "ops": {
        "layernorm": {"bfloat16": _medians({"8192x1024": {"torch": 10.0, "triton": 5.0}})},
        "matmul": {"bfloat16": _medians({"8192x4096x1024": {"torch": 10.0, "triton": 5.0}})}}}
    (tmp_path / "fake-gpu-x1.json").write_text(json.dumps(planted))
    assert picks.main(["--tables", str(tmp_path), "--shape", "8,1024,1024,16", "--shape", "4,1024,2048,16"]) == 0
    rows = {tuple(c.strip() for c in line.split("|")[1:3]): line for line in capsys.readouterr().out.splitlines()
            if line.startswith("| ") and "---" not in line and "shape (B" not in line}
    assert "| triton measured | triton measured |" in rows[("8, 1024, 1024, 16", "ln1, ln2 (F.layer_norm)")]
    assert "| triton measured | triton measured |" in rows[("8, 1024, 1024, 16", "qkv (F.linear)")]
    assert "| torch fallback | torch fallback |" in rows[("8, 1024, 1024, 16", "proj (F.linear)")]
    # 4096x2048: one power of two from 8192x1024 in each dim, a memory-bound op takes its winner
    assert "| triton nearest |" in rows[("4, 1024, 2048, 16", "ln1, ln2 (F.layer_norm)")]
    with pytest.raises(SystemExit) as bad:
        picks.main(["--shape", "8,1024,1000,16"])
    assert bad.value.code == 2 and "D a multiple of HEADS" in capsys.readouterr().err
    assert picks.main(["--tables", str(tmp_path / "none")]) == 2
    assert "holds no auto table" in capsys.readouterr().err


def test_auto_decides_inside_a_fullgraph_trace(tmp_path, monkeypatch, interpreter):
    """Under torch.compile a routed call decides while Dynamo traces it. The decision's Python (the
    call's suite shape, the table's measured and nearest buckets) must trace without a graph break:
    a break split the H100 model's compiled step into four graphs (inference 1.1-2.2x torch's)."""
    import torch.nn.functional as F

    import xrt.pytorch as xp
    from xrt.pytorch import auto, routing

    doc = _doc({"layernorm": {"float32": {"64x1024": "triton"}}, "layernorm_bwd": {"float32": {"64x1024": "triton"}}})
    (tmp_path / f"{autotable.model_key(GPU)}.json").write_text(json.dumps(doc))
    monkeypatch.setenv(autotable.ENV, str(tmp_path))
    monkeypatch.setattr(auto, "gpu_name", lambda index: GPU)
    monkeypatch.setattr(auto, "devices", lambda: range(1))
    monkeypatch.setattr(routing, "auto_device", lambda t: True)  # as on a GPU
    monkeypatch.setattr(auto, "device_index", lambda t: 0)
    auto.clear()
    seen = []
    real = routing.auto_provider
    monkeypatch.setattr(routing, "auto_provider", lambda *a: seen.append(real(*a)) or seen[-1])

    def f(x):
        return F.layer_norm(x, (x.shape[-1],)) * 2

    xp.clear_kernel_policy()
    try:
        with xp.kernel_policy(layernorm="auto"):
            # measured; the nearest bucket's (within one power of two); unmeasured; a training call
            for rows, grad in ((64, False), (48, False), (2, False), (64, True)):
                x = torch.randn(rows, 1024, requires_grad=grad)
                torch._dynamo.reset()
                got = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
                torch.testing.assert_close(got, F.layer_norm(x, (1024,)) * 2, rtol=1e-4, atol=1e-4)
    finally:
        xp.clear_kernel_policy()
        auto.clear()
    assert seen[0] == seen[-1] == "triton" and "torch" in seen, seen


def test_another_provider_must_beat_torch_by_its_host_cost_too():
    """A call to xrt costs the host HOST_PENALTY_S more than torch's: a provider 13 µs faster on the
    GPU at a 30 µs layernorm is not faster in a step that waits on its host; 1.5 penalties saved at
    1 ms win a forward, not a forward plus backward (charged twice)."""
    pen = autotable.HOST_PENALTY_S
    assert autotable.fastest({"torch": 30e-6, "triton": 17e-6}) == "torch"
    assert autotable.fastest({"torch": 1e-3, "triton": 1e-3 - 1.5 * pen}) == "triton"
    assert autotable.fastest({"torch": 1e-3, "triton": 1e-3 - 1.5 * pen}, calls=2) == "torch"
    # the training rule sums forward and backward and charges both calls
    doc = _doc({"layernorm": {"float32": {}}})
    doc["ops"]["layernorm"]["float32"] = _medians({"8192x1024": {"torch": 24e-6, "triton": 17e-6}})
    doc["ops"]["layernorm_bwd"] = {"float32": _medians({"8192x1024": {"torch": 200e-6, "triton": 120e-6}})}
    t = autotable.Table(doc)
    assert t.pick("layernorm", "float32", (8192, 1024)) == ("torch", autotable.MEASURED)
    assert t.pick("layernorm", "float32", (8192, 1024), train=True) == ("torch", autotable.MEASURED)
    doc["ops"]["layernorm_bwd"]["float32"] = _medians({"8192x1024": {"torch": 300e-6, "triton": 120e-6}})
    assert autotable.Table(doc).pick("layernorm", "float32", (8192, 1024), train=True) == ("triton",
                                                                                        autotable.MEASURED)


def test_a_compiled_call_keeps_autos_pick_until_the_table_changes(tmp_path, monkeypatch, interpreter):
    """Under torch.compile auto's lookup runs once, as Dynamo traces, and its answer is a constant of
    the graph (no guard on each bucket it read); a new table (auto.clear) makes the call trace again."""
    import torch.nn.functional as F

    import xrt.pytorch as xp
    from xrt.pytorch import auto, routing

    def table(p: str) -> None:
        doc = _doc({"layernorm": {"float32": {"64x1024": p}}})
        (tmp_path / f"{autotable.model_key(GPU)}.json").write_text(json.dumps(doc))

    table("triton")
    monkeypatch.setenv(autotable.ENV, str(tmp_path))
    monkeypatch.setattr(auto, "gpu_name", lambda index: GPU)
    monkeypatch.setattr(auto, "devices", lambda: range(1))
    monkeypatch.setattr(routing, "auto_device", lambda t: True)
    monkeypatch.setattr(auto, "device_index", lambda t: 0)
    auto.clear()
    graphs: list[str] = []

    def backend(gm, example_inputs):
        graphs.append(gm.code)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(lambda x: F.layer_norm(x, (x.shape[-1],)) * 2, fullgraph=True, backend=backend)
    x = torch.randn(64, 1024)
    xp.clear_kernel_policy()
    try:
        with xp.kernel_policy(layernorm="auto"):
            compiled(x)
            compiled(x)
            assert len(graphs) == 1 and "xrt" in graphs[0]  # traced once, to xrt's layernorm
            table("torch")
            auto.clear()
            torch.testing.assert_close(compiled(x), F.layer_norm(x, (1024,)) * 2, rtol=1e-4, atol=1e-4)
            assert len(graphs) == 2 and "xrt" not in graphs[1]  # traced again, to torch's
    finally:
        xp.clear_kernel_policy()
        auto.clear()
        torch._dynamo.reset()
