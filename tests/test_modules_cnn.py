"""``xrt.pytorch.modules``: ConvBNReLU against torch's three modules (fused and unfused), the CNN of
the macro-benchmarks, and its suite entries (skipped on the CPU, saying why)."""

import pytest
import torch
from kernel_checks import check

from xrt.pytorch.modules import ConvBNReLU, cnn_conv_flops, cnn_inputs, cnn_step


@pytest.mark.parametrize("stride", [1, 2])
def test_conv_bn_relu_module_matches_torch_modules(interpreter, stride):
    torch.manual_seed(stride)
    m = ConvBNReLU(5, 6, stride)
    with torch.no_grad():
        m.bn.running_var.uniform_(0.5, 2)
        m.bn.weight.uniform_(0.5, 1.5)
    ref = torch.nn.Sequential(torch.nn.Conv2d(5, 6, 3, stride, 1, bias=False), torch.nn.BatchNorm2d(6),
                              torch.nn.ReLU())
    ref[0].load_state_dict(m.conv.state_dict())
    ref[1].load_state_dict(m.bn.state_dict())
    x = torch.randn(2, 5, 7, 6).contiguous(memory_format=torch.channels_last)
    import xrt.pytorch as xp

    with xp.kernel_policy(conv_bn_relu="triton"):
        m.eval(), ref.eval()
        with torch.no_grad():
            check(m(x), ref(x), torch.float32, scale=1.0, what="eval")
        m.train(), ref.train()
        check(m(x), ref(x), torch.float32, scale=10.0, what="train")
    check(m.bn.running_var, ref[1].running_var, torch.float32, scale=1.0, what="running_var")
    assert int(m.bn.num_batches_tracked) == int(ref[1].num_batches_tracked) == 1


def test_cnn_step_runs_unfused_on_the_cpu():
    args = cnn_inputs(2, 4, torch.float32, "cpu")
    assert cnn_step(args, "torch", False).shape == (2, 10)
    loss = cnn_step(args, "torch", True)
    assert loss.ndim == 0 and torch.isfinite(loss)
    # width 1: C x K x pixels of the stem, two 32^2 convs, three 16^2 (one a shortcut), three 8^2
    assert cnn_conv_flops(1, 1) == 2 * 9 * (3 * 1024 + 2 * 1024 + (2 + 4 + 2) * 256 + (8 + 16 + 8) * 64)


def test_cnn_suites_skip_on_the_cpu_with_the_reason():
    from xrt.bench import suite

    for op in ("cnn_infer", "cnn_train"):
        with pytest.raises(NotImplementedError, match="runs on CUDA only"):
            suite._Inputs(op, "2x8", "float16", "torch", "default")


@pytest.mark.gpu
@pytest.mark.parametrize("train", [False, True])
def test_cnn_fused_and_unfused_agree_on_gpu(train):
    torch.manual_seed(0)
    args = cnn_inputs(32, 16, torch.float16, "cuda")
    model = args[2]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    a = cnn_step(args, "torch", train).float()
    model.load_state_dict(state)
    b = cnn_step(args, "triton", train).float()
    err = float((a - b).abs().max() / a.abs().max().clamp_min(1e-6))
    assert err < 5e-2, f"fused vs unfused: max error {err:.3g} of the largest |output|"
