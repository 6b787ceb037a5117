"""``benchmarks/fusion_bench.py --sweep`` (benchmarks/fusion_sweep.py) on the interpreter: the
config grid, each config's error against float64, the winners and the table."""

import pytest
import torch

from benchmarks import fusion_bench, fusion_sweep


def test_configs_start_with_the_defaults():
    got = fusion_sweep.configs({"rows": (1, 2), "num_warps": (4, 8)})
    assert got[0] == {"rows": "auto", "num_warps": "auto"} and fusion_sweep.label(got[0]) == "default"
    assert len(got) == 5 and {"rows": 2, "num_warps": 8} in got
    assert fusion_sweep.label(got[-1]) == "rows=2,num_warps=8"


def test_add_layernorm_sweep_rows(interpreter):
    rows: list[dict] = []
    t = fusion_sweep.Timers("cpu")
    fusion_sweep.add_layernorm_sweep(rows, 5, 24, torch.float32, "cpu", t, fusion_bench.emit,
                                     fusion_sweep.QUICK_GRID)
    assert [r["part"] for r in rows] == ["fwd"] * 3 + ["bwd"] * 3
    for r in rows:
        assert "error" not in r, r
        assert r["err"] < 1e-5, r  # y (forward) and dx (backward) against float64
        assert r["e2e_ms"] > 0 and r["host_ms"] > 0 and r["device_ms"] is None
    winners = fusion_sweep.best(rows)
    assert [(w["part"], w["shape"], w["by"]) for w in winners] == [("fwd", "5x24", "e2e_ms"), ("bwd", "5x24", "e2e_ms")]
    for w in winners:
        assert w["ms"] == min(r["e2e_ms"] for r in rows if r["part"] == w["part"])
    md = fusion_sweep.markdown(rows, winners, {"dtype": "fp32", "device": "cpu", "torch": "t", "commit": "c",
                                               "date": "d"})
    assert md.count("\n| fwd | add_layernorm | 5x24 |") == 3 and "| bwd | 5x24 |" in md


def test_a_failing_config_is_a_row():
    rows: list[dict] = []

    def boom():
        raise ValueError("num_warps=3 is not in the space\nmore")

    fusion_bench.emit(rows, {"part": "fwd", "config": "x"}, boom)
    assert rows == [{"part": "fwd", "config": "x", "error": "ValueError: num_warps=3 is not in the space"}]


def test_the_grid_is_in_the_tuning_spaces():
    """Every config of the sweep is one the spaces accept (else the sweep's rows are errors), the
    values "auto" picks at the bench widths included."""
    from xrt.kernels import spaces

    for space, grid in (("add_layernorm.triton", fusion_sweep.FWD_GRID),
                        ("add_layernorm_bwd.triton", fusion_sweep.BWD_GRID)):
        for cfg in fusion_sweep.configs(grid):
            assert spaces.check(space, cfg)
    for cfg in fusion_sweep.LG_GRID[1:]:
        assert spaces.check("linear_gelu.triton", cfg)


def test_linear_gelu_sweep_rows(interpreter):
    """The epilogue sweep: the GEMM with its bias alone on each tile, then torch's pair and each tile
    for each GELU without and with z, every output within fp32 rounding of float64; one winner per
    variant (the fastest of its rows), torch's rows left out."""
    rows: list[dict] = []
    fusion_sweep.linear_gelu_sweep(rows, 33, 16, torch.float32, "cpu", fusion_sweep.Timers("cpu"),
                                   fusion_bench.emit, fusion_sweep.LG_QUICK_GRID)
    tile = "128x256,stages=3"
    assert [(r["variant"], r["config"]) for r in rows] == [("gemm+bias", tile)] + [
        v for a in ("none", "tanh") for v in [(f"torch {a}", "reference")] + [
            (f"{a}{z}", c) for z in ("", "+z") for c in ("default", tile)]]
    for r in rows:
        assert "error" not in r, r
        assert r["err"] < 1e-5 and r["e2e_ms"] > 0 and r["shape"] == "33x64x16", r
    winners = fusion_sweep.best(rows)
    assert [w["variant"] for w in winners] == ["gemm+bias", "none", "none+z", "tanh", "tanh+z"]
    for w in winners:
        mine = [r for r in rows if r["variant"] == w["variant"]]
        assert w["ms"] == min(r["e2e_ms"] for r in mine) and w["best"] in [r["config"] for r in mine]


def test_op_rows(interpreter):
    """torch, the fused op and (add_layernorm) its general path, forward and train, each timed."""
    rows: list[dict] = []
    fusion_sweep.op_rows(rows, 4, 8, torch.float32, "cpu", fusion_sweep.Timers("cpu"), fusion_bench.emit)
    assert [(r["group"], r["variant"], r["phase"]) for r in rows] == [
        (g, v, p) for g, vs in (("add_layernorm", ("torch", "xrt", "xrt general path")),
                                ("linear_gelu", ("torch", "xrt"))) for v in vs for p in ("fwd", "train")]
    for r in rows:
        assert "error" not in r, r
        assert r["e2e_ms"] > 0 and r["host_ms"] > 0


def test_device_time_leaves_out_the_ops_own_range(monkeypatch):
    """An op's record_function range, marked on the device's timeline, spans its kernels: the device
    time per call counts the kernels once, not the range too (which doubled the op rows' times)."""
    import contextlib
    from types import SimpleNamespace

    import torch.profiler

    dt = torch.autograd.DeviceType

    def ev(name, kind, us, note=False):
        return SimpleNamespace(name=name, device_type=kind, is_user_annotation=note,
                               time_range=SimpleNamespace(elapsed_us=lambda: us))

    calls = fusion_sweep.PROFILED_CALLS
    events = [ev("xrt::linear_gelu[triton]", dt.CPU, 50.0 * calls), ev("_matmul_tma_kernel", dt.CUDA, 140.0 * calls),
              ev("xrt::linear_gelu[triton]", dt.CUDA, 141.0 * calls, note=True)]
    monkeypatch.setattr(torch.profiler, "profile", lambda **_: contextlib.nullcontext(SimpleNamespace(
        events=lambda: events)))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    ms, kernels = fusion_sweep.Timers("cuda").device(lambda: None)
    assert list(kernels) == ["_matmul_tma_kernel"] and ms == pytest.approx(0.14)
