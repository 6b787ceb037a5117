"""The fused conv3x3 kernels (direct implicit GEMM, im2row + GEMM) against float64: Triton under the
CPU interpreter on tiny shapes, the GPU shapes on the GPU; the plan, the knobs and the stats."""

import pytest
import torch
from conv_checks import check_conv, nhwc
from kernel_checks import poisoned_outputs

from xrt.kernels import spaces, stats
from xrt.kernels.reference.conv_bn_relu import conv_bias_relu as reference

# (N, C, H, W, K, stride): C not a multiple of the vector width (3, 5, 12), H and W of 1, 7 and odd,
# batch 1, K below one KO_STEP and above it, stride 2 on odd and even sizes.
TINY = [(1, 3, 1, 1, 4, 1), (2, 5, 7, 7, 6, 1), (1, 16, 5, 9, 20, 1), (1, 12, 7, 7, 3, 2), (2, 8, 6, 5, 16, 2),
        (1, 16, 1, 7, 8, 2)]


def _run(shape, dtype, path, bias=True, relu=True, padding=1, config=None):
    from xrt.kernels.triton.conv_bn_relu import conv_bias_relu

    n, c, h, w, k, stride = shape
    x = nhwc(n, c, h, w, dtype)
    wt = (torch.randn(3, 3, c, k) / (3 * c ** 0.5)).to(dtype)
    b = torch.randn(k) if bias else None
    with poisoned_outputs():
        y = conv_bias_relu(x, wt, b, stride, padding, relu, {"path": path, **(config or {})})
    ref = reference(x.double(), wt.double(), None if b is None else b.double(), stride, padding, relu)
    check_conv(y, ref, x, wt.permute(3, 2, 0, 1), stride, padding, dtype, what=f"{shape} {path}")


@pytest.mark.parametrize("path", ["direct", "im2row"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("shape", TINY, ids=str)
def test_triton_conv_under_interpreter(interpreter, shape, dtype, path):
    _run(shape, dtype, path)


@pytest.mark.parametrize("padding", [0, 2])
def test_padding_no_bias_no_relu(interpreter, padding):
    _run((1, 4, 6, 5, 8, 1), torch.float32, "direct", bias=False, relu=False, padding=padding)
    _run((1, 4, 6, 5, 8, 2), torch.float32, "im2row", bias=False, relu=False, padding=padding)


def test_explicit_tiles_and_steps(interpreter):
    """Several channel steps (C > CI_STEP), several output-channel programs, a half tile."""
    cfg = {"TILE": "4x8", "CI_STEP": 16, "KO_STEP": 16, "HALF_TILE": True}
    _run((1, 33, 3, 9, 20, 1), torch.float32, "direct", config=cfg)
    _run((1, 33, 5, 9, 20, 2), torch.float32, "im2row", config=cfg)


def test_vectorized_and_fallback_are_counted(interpreter, monkeypatch):
    monkeypatch.setenv("XRT_KERNEL_STATS", "1")
    stats.reset()
    _run((1, 16, 3, 3, 8, 1), torch.float32, "direct")  # C = 16: a multiple of VEC 8
    _run((1, 12, 3, 3, 8, 1), torch.float32, "direct")  # C = 12: the fallback
    _run((1, 12, 4, 4, 8, 2), torch.float32, "im2row", config={"VEC": 4})  # 12 % 4 == 0
    assert stats.snapshot("conv_bn_relu.") == {"conv_bn_relu.direct.fallback": 1, "conv_bn_relu.direct.vec": 1,
                                               "conv_bn_relu.im2row.vec": 1}
    monkeypatch.delenv("XRT_KERNEL_STATS")
    _run((1, 16, 3, 3, 8, 1), torch.float32, "direct")
    assert sum(stats.snapshot("conv_bn_relu.").values()) == 3  # off: nothing counted
    stats.reset()


def test_plan_paths_tiles_and_masked_lanes():
    from xrt.kernels.triton.conv_bn_relu import auto_tile, plan, resolve

    cfg, source = resolve(1)
    assert source["TILE"] == "default" and cfg["path"] == "auto"
    p = plan((64, 64, 56, 56), 64, 1, 1, 2, cfg)
    assert p["path"] == "direct" and p["BLOCK_M"] <= 128 and p["vectorized"]
    assert p["grid"][0] == 64 * p["tiles"][0] * p["tiles"][1]
    assert plan((64, 64, 56, 56), 64, 2, 1, 2, resolve(2)[0])["path"] == "im2row"
    assert p["masked_pixels"] <= 0.125  # 56 x 56: no 128-pixel tile divides it; the auto tile wastes 1/8
    assert auto_tile(8, 8) == "8x8"  # an exact fit beats a bigger tile that wastes lanes
    assert auto_tile(1, 7) in ("4x8", "4x16", "4x32")
    p = plan((1, 3, 1, 1), 4, 1, 1, 4, cfg)
    assert not p["vectorized"] and p["BLOCK_K"] == 16 and p["BLOCK_N"] == 16 and p["masked_channels"] == 0.75
    half = plan((1, 16, 64, 64), 16, 1, 1, 2, resolve(1, {"TILE": "8x16", "HALF_TILE": True})[0])
    assert (half["TH"], half["TW"]) == (4, 16)
    # fp32 at 256 pixels x 128 channels x 128 a step, 4 stages: 1 MiB of tiles, shrunk under the budget
    big = plan((8, 256, 32, 32), 256, 1, 1, 4, resolve(1, {"TILE": "16x16", "KO_STEP": 128, "CI_STEP": 128,
                                                           "num_stages": 4})[0])
    assert (big["num_stages"], big["BLOCK_K"]) == (2, 64)


def test_env_knobs_override_and_bad_values_name_the_variable(monkeypatch):
    from xrt.kernels.triton.conv_bn_relu import resolve

    monkeypatch.setenv("XRT_FUSED_LAYOUT", "direct")
    monkeypatch.setenv("XRT_FUSED_TILE_S2", "4x16")
    monkeypatch.setenv("XRT_FUSED_KO_STEP_S2", "32")
    cfg, source = resolve(2, {"KO_STEP": 128, "CI_STEP": 32})
    assert (cfg["path"], cfg["TILE"], cfg["KO_STEP"], cfg["CI_STEP"]) == ("direct", "4x16", 32, 32)
    assert source["KO_STEP"] == "env XRT_FUSED_KO_STEP_S2" and source["CI_STEP"] == "config"
    assert source["num_warps"] == "default"
    cfg1, source1 = resolve(1)
    assert cfg1["TILE"] == "auto" and source1["path"] == "env XRT_FUSED_LAYOUT"
    for var, bad in [("XRT_FUSED_LAYOUT", "nchw"), ("XRT_FUSED_TILE_S1", "9x9"), ("XRT_FUSED_KO_STEP", "48")]:
        monkeypatch.setenv(var, bad)
        with pytest.raises(ValueError, match=rf"^{var}='{bad}' is not one of [^\n]*$"):
            resolve(1)
        monkeypatch.delenv(var)


def test_bad_inputs_are_named():
    from xrt.kernels.triton.conv_bn_relu import conv_bias_relu

    x = nhwc(1, 4, 5, 5, torch.float32)
    with pytest.raises(ValueError, match=r"x.shape\[1\]=4 \(C\) must equal the weight's input channels 3"):
        conv_bias_relu(x, torch.randn(3, 3, 3, 8), None, 1, 1)
    with pytest.raises(ValueError, match="3x3 weight"):
        conv_bias_relu(x, torch.randn(5, 5, 4, 8), None, 1, 1)
    with pytest.raises(ValueError, match="stride=3 must be 1 or 2"):
        conv_bias_relu(x, torch.randn(3, 3, 4, 8), None, 3, 1)
    with pytest.raises(ValueError, match=r"bias.shape=\(7,\) must be \[K\] = \(8,\)"):
        conv_bias_relu(x, torch.randn(3, 3, 4, 8), torch.randn(7), 1, 1)
    with pytest.raises(ValueError, match="smaller than the 3x3 kernel"):
        conv_bias_relu(nhwc(1, 4, 1, 1, torch.float32), torch.randn(3, 3, 4, 8), None, 1, 0)
    with pytest.raises(ValueError, match="dtype torch.float64 is not supported"):
        conv_bias_relu(x.double(), torch.randn(3, 3, 4, 8).double(), None, 1, 1)


def test_space_defaults_are_in_their_spaces():
    for stride in (1, 2):
        key = f"conv_bn_relu_s{stride}.triton"
        assert spaces.check(key, {}) == spaces.default(key)


def test_vec_vectorizes_the_loads_of_x_on_sm90():
    """Compiled for sm_90 (no GPU needed): with C = VEC x CV the x loads are 16-byte cp.async even
    where C is not a multiple of 16; VEC = 1 (the fallback) loads x an element at a time."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    here = Path(__file__).parent
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(here.parent), env.get("PYTHONPATH", "")])
    r = subprocess.run([sys.executable, str(here / "conv_ptx.py")], capture_output=True, text=True, env=env,
                       timeout=300)
    if r.returncode and ("ptxas" in r.stderr or "LLVM" in r.stderr):
        pytest.skip(f"Triton cannot compile for sm_90 here: {r.stderr.strip().splitlines()[-1]}")
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert got["8"]["scalar_b16_loads"] == 0 and got["8"]["cp_async"] > got["1"]["cp_async"], got
    assert got["1"]["scalar_b16_loads"] > 0, got


# -- GPU ------------------------------------------------------------------------------------------

GPU_SHAPES = [(64, 64, 56, 56, 64, 1), (64, 256, 14, 14, 256, 1), (64, 64, 56, 56, 128, 2),
              (64, 128, 28, 28, 256, 2), (3, 3, 17, 31, 29, 1), (2, 12, 9, 9, 24, 2)]


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["direct", "im2row"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=str)
def test_triton_conv_on_gpu(shape, dtype, path):
    from xrt.kernels.triton.conv_bn_relu import conv_bias_relu

    n, c, h, w, k, stride = shape
    x = nhwc(n, c, h, w, dtype, "cuda")
    wt = (torch.randn(3, 3, c, k, device="cuda") / (3 * c ** 0.5)).to(dtype)
    b = torch.randn(k, device="cuda")
    y = conv_bias_relu(x, wt, b, stride, 1, True, {"path": path})
    ref = reference(x.double(), wt.double(), b.double(), stride, 1)
    check_conv(y, ref, x, wt.permute(3, 2, 0, 1), stride, 1, dtype, c=8.0 if dtype == torch.float32 else 4.0,
               what=f"{shape} {path}")
