"""The GPT-style model of the macro-benchmarks (xrt.pytorch.modules.gpt): plain PyTorch routed by the
policy, its step on torch and on xrt's kernels, its suite entries and the files that re-measure it."""

import pytest
import torch

from xrt.pytorch.modules import GPT_OPS, gpt_flops, gpt_inputs, gpt_mode, gpt_policy, gpt_step


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6))


def test_the_model_names_no_xrt_op_and_its_policy_routes_every_routed_op():
    from xrt.kernels import defs

    assert gpt_policy("torch") == {}
    assert set(gpt_policy("triton")) == {d.name for d in defs.OPS.values() if d.routed}
    assert sorted(gpt_mode(op) for op in GPT_OPS) == [(t, c, f) for t in (False, True) for c in (False, True)
                                                     for f in (False, True)]


def test_flops_count_the_gemms_and_causal_attention():
    # one block, one token: 12 d^2 multiply-adds of the four linears and S d of causal attention
    assert gpt_flops(1, 1, 4, 2, 1, train=False) == 2 * 12 * 16 + 2 * 4
    assert gpt_flops(2, 8, 16, 2, 3, train=True) == 3 * gpt_flops(2, 8, 16, 2, 3, train=False)


def test_routed_step_matches_torch_and_runs_xrt_ops(interpreter):
    """The same model object, torch then routed to xrt's Triton kernels (the CPU interpreter):
    outputs and the training loss agree, the profiler names the routed xrt ops, and the step leaves
    no gradient behind."""
    args = gpt_inputs(2, 8, 16, 2, 1, torch.float32, "cpu")
    x, model, _ = args
    ref = gpt_step(args, "torch", train=False)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = gpt_step(args, "triton", train=False)
    assert _rel(out, ref) < 1e-4
    ran = {e.key for e in prof.key_averages() if e.key.startswith("xrt::")}
    assert {"xrt::matmul[triton]", "xrt::layernorm[triton]"} <= ran, ran
    assert _rel(gpt_step(args, "triton", train=True), gpt_step(args, "torch", train=True)) < 1e-4
    assert x.grad is None and all(p.grad is None for p in model.parameters())


def test_fused_step_runs_the_fused_ops_on_a_copy_and_matches_torch(interpreter):
    """A ``_fused`` step on triton runs a copy of the model after xp.fuse (made once, the same
    weights): the profiler names the fused ops, outputs and loss agree with torch's step of the model
    as written, which it leaves unfused, and neither model keeps a gradient."""
    from xrt.pytorch.fusion import fused

    args = gpt_inputs(2, 8, 16, 2, 1, torch.float32, "cpu")
    x, model, cache = args
    ref = gpt_step(args, "torch", train=False, fused=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        out = gpt_step(args, "triton", train=False, fused=True)
    assert _rel(out, ref) < 1e-4
    ran = {e.key for e in prof.key_averages() if e.key.startswith("xrt::")}
    assert {"xrt::add_layernorm[triton]", "xrt::linear_gelu[triton]"} <= ran, ran
    twin = cache["fused", "triton"]
    assert twin is not model and not any(fused(m) for m in model.modules()) and any(fused(m) for m in twin.modules())
    loss = gpt_step(args, "triton", train=True, fused=True)
    assert cache["fused", "triton"] is twin and _rel(loss, gpt_step(args, "torch", train=True, fused=True)) < 1e-4
    assert x.grad is None and all(p.grad is None for m in (model, twin) for p in m.parameters())


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU's skip: on a GPU host the GPT suites run")
def test_gpt_suites_skip_on_the_cpu_with_the_reason():
    from xrt.bench import suite

    for op in GPT_OPS:
        with pytest.raises(NotImplementedError, match="runs on CUDA only"):
            suite._Inputs(op, "2x16x32x2x1", "bfloat16", "torch", "default")


def test_a_routed_kernel_change_re_measures_the_model():
    from xrt.bench import sources

    hit = sources.affected(["xrt/kernels/triton/layernorm.py"])
    assert set(GPT_OPS) <= set(hit) and "square" not in hit
    assert not set(GPT_OPS) & set(sources.affected(["xrt/kernels/triton/square.py"]))


@pytest.mark.gpu
@pytest.mark.parametrize("op", GPT_OPS)
def test_gpt_routed_and_torch_agree_on_gpu(op):
    args = gpt_inputs(2, 256, 256, 4, 2, torch.bfloat16, "cuda")
    a = gpt_step(args, "torch", *gpt_mode(op))
    b = gpt_step(args, "triton", *gpt_mode(op))
    assert _rel(b, a) < 5e-2, f"{op}: routed vs torch: {_rel(b, a):.3g}"


def test_compiled_steps_compile_each_shape_static(monkeypatch, interpreter):
    """The suites compile one model per shape: with automatic dynamic shapes the second would be
    recompiled with symbolic sizes, which the Triton GEMM's config choice does not take (an H100 run
    failed there). Each compiled model is static, once per provider."""
    calls = []

    def compile_(model, **kw):
        calls.append(kw)
        return model

    monkeypatch.setattr(torch, "compile", compile_)
    for shape in ((1, 4), (2, 8)):
        args = gpt_inputs(shape[0], shape[1], 8, 2, 1, torch.float32, "cpu")
        gpt_step(args, "torch", train=False, compiled=True)
        gpt_step(args, "torch", train=True, compiled=True)
    assert calls == [{"dynamic": False}, {"dynamic": False}]
    gpt_step(args, "triton", train=False, compiled=True, fused=True)  # the fused copy: compiled apart
    assert len(calls) == 3 and set(args[2]) == {("torch", False), ("fused", "triton"), ("triton", True)}
