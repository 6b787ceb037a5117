"""``xp.ops.conv_bn_relu``: against nn.Conv2d + nn.BatchNorm2d + nn.ReLU in float64, inference and
training (running statistics, gradients), the fold cache, non-channels_last input, opcheck,
torch.compile, the policy and bad inputs."""

import importlib

import pytest
import torch
from conv_checks import bn_inputs, check_conv, nhwc
from kernel_checks import check

import xrt.pytorch as xp
from xrt.kernels import stats

op_module = importlib.import_module("xrt.pytorch.ops.conv_bn_relu")  # the package's name is the function


def _modules(weight, gamma, beta, mean, var, stride, padding=1):
    k, c = weight.shape[:2]
    conv = torch.nn.Conv2d(c, k, 3, stride, padding, bias=False).double()
    bn = torch.nn.BatchNorm2d(k).double()
    with torch.no_grad():
        conv.weight.copy_(weight.double())
        bn.weight.copy_(gamma)
        bn.bias.copy_(beta)
        bn.running_mean.copy_(mean)
        bn.running_var.copy_(var)
    return conv, bn


def _folded_w(weight, gamma, var, eps=1e-5):
    return weight.double() * (gamma.double() * torch.rsqrt(var.double() + eps))[:, None, None, None]


@pytest.mark.parametrize("provider", ["torch", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(1, 3, 7, 7, 8, 1), (2, 12, 5, 9, 16, 2), (1, 8, 1, 1, 4, 1)], ids=str)
def test_inference_matches_float64(interpreter, shape, dtype, provider):
    n, c, h, w, k, stride = shape
    weight, gamma, beta, mean, var = bn_inputs(c, k, dtype)
    x = nhwc(n, c, h, w, dtype)
    conv, bn = _modules(weight, gamma, beta, mean, var, stride)
    ref = torch.relu(bn.eval()(conv(x.double())))
    with torch.no_grad():
        y = xp.ops.conv_bn_relu(x, weight, gamma, beta, mean, var, stride=stride, provider=provider)
    if provider == "torch":  # torch's own ops in the dtype, on the CPU: its conv's own error
        check(y.float(), ref.float(), torch.float32 if dtype == torch.float32 else dtype, scale=ref.abs().max())
        return
    check_conv(y, ref, x, _folded_w(weight, gamma, var), stride, 1, dtype)


def test_training_matches_batchnorm2d(interpreter):
    """Batch statistics, running stats updated as nn.BatchNorm2d (unbiased var, momentum), and the
    gradients of x, weight, gamma and beta, against the modules in float64."""
    for stride, (n, c, h, w, k) in [(1, (2, 5, 6, 7, 8)), (2, (3, 4, 7, 7, 6))]:
        weight, gamma, beta, mean, var = bn_inputs(c, k, torch.float32, seed=stride)
        x = nhwc(n, c, h, w, torch.float32)
        conv, bn = _modules(weight, gamma, beta, mean, var, stride)
        bn.momentum = 0.3
        xr = x.double().requires_grad_()
        ref = torch.relu(bn.train()(conv(xr)))
        g = torch.randn_like(ref)
        ref.backward(g)
        xt = x.clone().requires_grad_()
        wt, gt, bt = (t.clone().requires_grad_() for t in (weight, gamma, beta))
        rm, rv = mean.clone(), var.clone()
        y = xp.ops.conv_bn_relu(xt, wt, gt, bt, rm, rv, training=True, momentum=0.3, stride=stride,
                                provider="triton")
        y.backward(g.float())
        scale = ref.abs().max()
        check(y, ref.float(), torch.float32, scale=scale * 10, what="y")
        check(rm, bn.running_mean.float(), torch.float32, scale=1.0, what="running_mean")
        check(rv, bn.running_var.float(), torch.float32, scale=1.0, what="running_var")
        for got, want, name in [(xt.grad, xr.grad, "dx"), (wt.grad, conv.weight.grad, "dweight"),
                                (gt.grad, bn.weight.grad, "dgamma"), (bt.grad, bn.bias.grad, "dbeta")]:
            check(got, want.float(), torch.float32, scale=want.abs().max() * 30, what=name)


def test_inference_gradients(interpreter):
    """Eval-mode BatchNorm with trainable parameters: the fold is differentiable (no cache)."""
    weight, gamma, beta, mean, var = bn_inputs(4, 6, torch.float32)
    x = nhwc(2, 4, 5, 5, torch.float32)
    conv, bn = _modules(weight, gamma, beta, mean, var, 1)
    xr = x.double().requires_grad_()
    ref = torch.relu(bn.eval()(conv(xr)))
    g = torch.randn_like(ref)
    ref.backward(g)
    xt, wt, gt = x.clone().requires_grad_(), weight.clone().requires_grad_(), gamma.clone().requires_grad_()
    y = xp.ops.conv_bn_relu(xt, wt, gt, beta, mean, var, provider="triton")
    y.backward(g.float())
    for got, want, name in [(xt.grad, xr.grad, "dx"), (wt.grad, conv.weight.grad, "dweight"),
                            (gt.grad, bn.weight.grad, "dgamma")]:
        check(got, want.float(), torch.float32, scale=want.abs().max() * 30, what=name)


def test_fold_is_cached_per_weight_version(interpreter, monkeypatch):
    monkeypatch.setenv("XRT_KERNEL_STATS", "1")
    stats.reset()
    op_module.clear_fold_cache()
    weight, gamma, beta, mean, var = bn_inputs(4, 8, torch.float32)
    x = nhwc(1, 4, 5, 5, torch.float32)

    def run():
        with torch.no_grad():
            return xp.ops.conv_bn_relu(x, weight, gamma, beta, mean, var, provider="triton")

    y0 = run()
    run()
    assert stats.snapshot("conv_bn_relu.fold") == {"conv_bn_relu.fold": 1}
    with torch.no_grad():
        gamma.mul_(2)  # an in-place update (an optimizer step) bumps the version: refolded
    y1 = run()
    assert stats.snapshot("conv_bn_relu.fold") == {"conv_bn_relu.fold": 2}
    assert not torch.allclose(y0, y1)
    conv, bn = _modules(weight, gamma, beta, mean, var, 1)
    check_conv(y1, torch.relu(bn.eval()(conv(x.double()))), x, _folded_w(weight, gamma, var), 1, 1,
               torch.float32)
    with torch.no_grad():
        mean.add_(0.5)
    run()
    assert stats.snapshot("conv_bn_relu.fold") == {"conv_bn_relu.fold": 3}
    stats.reset()


def test_non_channels_last_input_is_converted_with_a_warning(interpreter, monkeypatch):
    monkeypatch.setenv("XRT_KERNEL_STATS", "1")
    stats.reset()
    weight, gamma, beta, mean, var = bn_inputs(3, 4, torch.float32)
    x = torch.randn(1, 3, 5, 5)  # NCHW
    with pytest.warns(RuntimeWarning, match="not channels_last"):
        y = xp.ops.conv_bn_relu(x, weight, gamma, beta, mean, var, provider="triton")
    assert stats.snapshot("conv_bn_relu.converted") == {"conv_bn_relu.converted_to_channels_last": 1}
    conv, bn = _modules(weight, gamma, beta, mean, var, 1)
    check_conv(y, torch.relu(bn.eval()(conv(x.double()))), x, _folded_w(weight, gamma, var), 1, 1, torch.float32)
    stats.reset()


def test_opcheck():
    weight, gamma, beta, mean, var = bn_inputs(4, 8, torch.float32)
    w, b = op_module.fold_bn(weight, gamma, beta, mean, var, 1e-5, torch.float32, cache=False)
    x = nhwc(2, 4, 5, 5, torch.float32)
    torch.library.opcheck(op_module._infer_op, (x, w, b, 1, 1, True, "torch"))
    torch.library.opcheck(op_module._train_op, (x.requires_grad_(), weight, gamma, beta, 1e-5, 2, 1, "torch"),
                          test_utils=("test_schema", "test_faketensor", "test_aot_dispatch_static"))


def test_compile_fullgraph(interpreter):
    weight, gamma, beta, mean, var = bn_inputs(4, 8, torch.float32)
    x = nhwc(1, 4, 5, 5, torch.float32)
    f = torch.compile(lambda x: xp.ops.conv_bn_relu(x, weight, gamma, beta, mean, var, provider="triton") * 2,
                      backend="aot_eager", fullgraph=True)
    with torch.no_grad():
        want = xp.ops.conv_bn_relu(x, weight, gamma, beta, mean, var, provider="triton") * 2
        torch.testing.assert_close(f(x), want)


def test_policy_and_providers():
    from xrt.pytorch import policy

    assert policy.known_ops()["conv_bn_relu"] == ("auto", "torch", "triton", "xpu")
    weight, gamma, beta, mean, var = bn_inputs(4, 8, torch.float32)
    x = nhwc(1, 4, 5, 5, torch.float32)
    with xp.kernel_policy(conv_bn_relu="torch"), torch.no_grad():
        y = xp.ops.conv_bn_relu(x, weight, gamma, beta, mean, var)
    assert y.shape == (1, 8, 5, 5)
    with pytest.raises(ValueError, match="unknown kernel 'cuda' for op 'conv_bn_relu'"):
        xp.KernelPolicy(conv_bn_relu="cuda")


def test_bad_inputs_are_named():
    weight, gamma, beta, mean, var = bn_inputs(4, 8, torch.float32)
    x = nhwc(1, 4, 5, 5, torch.float32)
    with pytest.raises(ValueError, match=r"running_var.shape=\(7,\) must be \[K\] = \(8,\)"):
        xp.ops.conv_bn_relu(x, weight, gamma, beta, mean, var[:7])
    with pytest.raises(ValueError, match="inference .* needs running_mean and running_var"):
        xp.ops.conv_bn_relu(x, weight, gamma, beta, None, None)
    with pytest.raises(ValueError, match=r"x.dtype=torch.float16 must equal weight.dtype=torch.float32"):
        xp.ops.conv_bn_relu(x.half(), weight, gamma, beta, mean, var)
    with pytest.raises(ValueError, match=r"training needs more than one value per channel \(N \* Ho \* Wo = 1"):
        xp.ops.conv_bn_relu(nhwc(1, 4, 2, 2, torch.float32), weight, gamma, beta, mean, var, stride=2,
                            training=True)
    with pytest.raises(TypeError, match="floating tensor for x"):
        xp.ops.conv_bn_relu(x.int(), weight, gamma, beta, mean, var)
    with pytest.raises(ValueError, match="takes x as \\[N, C, H, W\\]"):
        xp.ops.conv_bn_relu(x[0], weight, gamma, beta, mean, var)


# -- GPU ------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("shape", [(64, 64, 56, 56, 64, 1), (64, 256, 14, 14, 256, 1), (8, 64, 56, 56, 128, 2),
                                   (1, 3, 7, 7, 5, 1), (1, 12, 1, 1, 16, 2)], ids=str)
def test_inference_and_training_on_gpu(shape, dtype):
    n, c, h, w, k, stride = shape
    weight, gamma, beta, mean, var = bn_inputs(c, k, torch.float32, "cuda")
    x = nhwc(n, c, h, w, dtype, "cuda")
    conv, bn = _modules(weight, gamma, beta, mean, var, stride)
    conv, bn = conv.cuda(), bn.cuda()
    with torch.no_grad():
        ref = torch.relu(bn.eval()(conv(x.double())))
        with torch.autocast("cuda", dtype=dtype):  # fp32 parameters, AMP: as a model would call it
            y = xp.ops.conv_bn_relu(x, weight, gamma, beta, mean, var, stride=stride, provider="triton")
    check_conv(y, ref, x, _folded_w(weight, gamma, var), stride, 1, dtype)
    if n * y.shape[2] * y.shape[3] == 1:
        return  # one value per channel: no batch statistics (nn.BatchNorm2d refuses it too)
    rm, rv = mean.clone(), var.clone()
    xt = x.clone().requires_grad_()
    y = xp.ops.conv_bn_relu(xt, weight.to(dtype), gamma, beta, rm, rv, training=True, stride=stride,
                            provider="triton")
    y.float().sum().backward()
    ref = torch.relu(bn.train()(conv(x.double())))
    check(y.float(), ref.float(), torch.float32 if dtype == torch.float32 else dtype,
          scale=ref.abs().max() * 4, what="train y")
    assert torch.isfinite(xt.grad).all()


def test_diag_prints_the_four_axes(interpreter, monkeypatch):
    from xrt.bench.diag import diagnose, render

    monkeypatch.setenv("XRT_FUSED_TILE_S1", "4x8")
    monkeypatch.setenv("XRT_KERNEL_STATS", "1")
    monkeypatch.setenv("XRT_DEVICE", "cpu")
    stats.reset()
    out = render(diagnose("conv_bn_relu", shape="1x12x6x6x8x1", provider="triton", warmup=1))
    assert "x (1, 12, 6, 6) channels_last (NHWC); stride 1 -> layout path direct" in out
    assert "TILE=4x8 (env XRT_FUSED_TILE_S1)" in out and "CI_STEP=64 (default)" in out
    assert "tile 4x8 on Ho x Wo 6x6: 44% of pixel lanes masked" in out and "scalar fallback" in out
    assert "first-step compilation / warm-up" in out
    assert "vectorized vs fallback launches: direct.fallback:" in out
    stats.reset()


def test_per_stride_tuned_configs_through_the_policy(interpreter):
    """A config keyed by a stride's space applies to that stride only; one keyed by the op to both;
    and the op runs with it."""
    from xrt.pytorch.ops import kernel_providers

    x = nhwc(1, 4, 5, 5, torch.float32)
    shape = (*x.shape, 8)
    pol = xp.KernelPolicy()
    pol.add_tuned("conv_bn_relu_s2.triton", {"KO_STEP": 16, "TILE": "4x8"})
    pol.add_tuned("conv_bn_relu", {"num_warps": 2})
    with xp.kernel_policy(pol):
        s1 = kernel_providers.config("conv_bn_relu", "conv_bn_relu_s1.triton", x, shape)
        s2 = kernel_providers.config("conv_bn_relu", "conv_bn_relu_s2.triton", x, shape)
        assert (s1["KO_STEP"], s1["TILE"], s1["num_warps"]) == (128, "16x8", 2)  # its default, the op's warps
        assert (s2["KO_STEP"], s2["TILE"], s2["num_warps"]) == (16, "4x8", 4)
        weight, gamma, beta, mean, var = bn_inputs(4, 8, torch.float32)
        with torch.no_grad():
            y = xp.ops.conv_bn_relu(x, weight, gamma, beta, mean, var, stride=2, provider="triton")
    conv, bn = _modules(weight, gamma, beta, mean, var, 2)
    check_conv(y, torch.relu(bn.eval()(conv(x.double()))), x, _folded_w(weight, gamma, var), 2, 1, torch.float32)


def test_compile_training_step(interpreter):
    """Training under torch.compile: the custom op's backward and the running-stat update traced."""
    weight, gamma, beta, mean, var = bn_inputs(4, 8, torch.float32)
    x = nhwc(2, 4, 5, 5, torch.float32)

    def step(x, w, g, b, rm, rv):
        return xp.ops.conv_bn_relu(x, w, g, b, rm, rv, training=True, provider="triton").square().sum()

    runs = []
    for fn in (step, torch.compile(step, backend="aot_eager", fullgraph=True)):
        leaves = [t.clone().requires_grad_() for t in (weight, gamma, beta)]
        rm, rv = mean.clone(), var.clone()
        fn(x, *leaves, rm, rv).backward()
        runs.append([t.grad for t in leaves] + [rm, rv])
    for got, want in zip(runs[1], runs[0]):
        torch.testing.assert_close(got, want)


def test_auto_takes_the_inference_or_the_training_order(interpreter, monkeypatch):
    """``auto`` walks AUTO_ORDER for inference and AUTO_TRAINING in training (dispatch.choose's ``order``):
    on the H100 the fused op beat cuDNN in inference and lost 9x in a training step."""
    m = importlib.import_module("xrt.pytorch.ops.conv_bn_relu")
    x = nhwc(1, 4, 5, 5, torch.float32)
    monkeypatch.setitem(m.AUTO_ORDER, "cpu", ("triton", "torch"))  # as on CUDA, here where Triton interprets
    monkeypatch.setitem(m.AUTO_TRAINING, "cpu", ("torch",))
    assert m._provider(x, None) == "triton" and m._provider(x, None, training=True) == "torch"
    assert m._provider(x, "triton", training=True) == "triton"  # an explicit choice is kept
