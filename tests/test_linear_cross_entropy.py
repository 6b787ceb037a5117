"""``linear_cross_entropy``: loss and both gradients against float64 torch, chunks, ignored tokens, the
custom op, the model helper and the side-by-side benchmark."""

import dataclasses
import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import ROOT
from kernel_checks import poisoned_outputs

import xrt.pytorch as xp
from xrt.kernels.triton import linear_cross_entropy as lce_triton
from xrt.pytorch.ops import dispatch
from xrt.pytorch.ops.linear_cross_entropy import linear_cross_entropy_op


def _inputs(n, d, v, dtype, device="cpu", ignored=(3, 10), seed=0):
    """Fresh random h [n, d], w [v, d] (logits of order 1), target [n] with some rows ignored."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g).to(device=device, dtype=dtype)
    w = (torch.randn(v, d, generator=g) / d ** 0.5 * 2).to(device=device, dtype=dtype)
    t = torch.randint(0, v, (n,), generator=g)
    t[[i for i in ignored if i < n]] = -100
    return h, w, t.to(device)


def _torch_grads(h, w, t, dtype, smoothing=0.0):
    """Loss and gradients of torch's two calls, with h and w in ``dtype``."""
    hh, ww = h.to(dtype).requires_grad_(), w.to(dtype).requires_grad_()
    loss = F.cross_entropy(F.linear(hh, ww), t, label_smoothing=smoothing)
    return (loss.detach(), *torch.autograd.grad(loss, (hh, ww)))


def _xrt_grads(h, w, t, provider, smoothing=0.0):
    hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss = xp.ops.linear_cross_entropy(hh, ww, t, provider=provider, label_smoothing=smoothing)
    return (loss, *torch.autograd.grad(loss, (hh, ww)))


def _errors(got, ref):
    """Each of loss, grad_h, grad_w: max |x - ref| / max |ref| (ref in float64)."""
    return [float((a.detach().double() - b).abs().max() / b.abs().max()) for a, b in zip(got, ref)]


def _check_against_float64(got, h, w, t, dtype, smoothing=0.0):
    """Each error at most twice torch's own at ``dtype``, or a few of the dtype's roundings."""
    ref = _torch_grads(h, w, t, torch.float64, smoothing)
    mine = _errors(got, ref)
    theirs = _errors(_torch_grads(h, w, t, dtype, smoothing), ref)
    floor = {torch.float32: 1e-5, torch.float16: 4e-3}[dtype]
    for what, e, e_t in zip(("loss", "grad_h", "grad_w"), mine, theirs):
        assert e <= max(2 * e_t, floor), f"{what}: error {e:.3g} against torch's {e_t:.3g} (floor {floor})"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
@pytest.mark.parametrize("shape", [(37, 16, 100), (9, 8, 4099)], ids=str)
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_triton_against_float64_several_chunks(interpreter, monkeypatch, dtype, shape, smoothing):
    """The public op with autograd, the automatic chunk lowered so that 37 tokens take 5 chunks (the last
    one partial); V = 4099 takes two steps of the row kernel's vocabulary loop."""
    monkeypatch.setattr(lce_triton, "MIN_CHUNK", 8)
    h, w, t = _inputs(*shape, dtype)
    assert lce_triton.chunk_rows(shape[0], shape[2], shape[1], "auto") < shape[0]
    with poisoned_outputs():
        got = _xrt_grads(h, w, t, "triton", smoothing)
    _check_against_float64(got, h, w, t, dtype, smoothing)


@pytest.mark.parametrize("chunk", [1, 5, 37, 64])
def test_launcher_chunk_sizes_agree(interpreter, chunk):
    """Any chunk size, one token a chunk to all of them in one, gives the same loss and gradients."""
    h, w, t = _inputs(37, 16, 100, torch.float32)
    loss, gh, gw = lce_triton.linear_cross_entropy(h, w, t, -100, 0.0, True, chunk=chunk)
    _check_against_float64((loss, gh, gw), h, w, t, torch.float32)


def test_ignored_tokens_have_no_gradient_and_leave_the_mean(interpreter):
    h, w, t = _inputs(12, 8, 50, torch.float32, ignored=(0, 5, 11))
    loss, gh, gw = lce_triton.linear_cross_entropy(h, w, t, -100, 0.0, True, chunk=4)
    assert torch.equal(gh[[0, 5, 11]], torch.zeros(3, 8))
    assert gh[[1, 2]].abs().sum() > 0
    keep = t != -100  # the mean is over the 9 kept tokens only
    torch.testing.assert_close(loss, F.cross_entropy(h[keep] @ w.T, t[keep]), rtol=1e-5, atol=1e-6)
    # another ignore_index: -100 is then a class index out of range, so use a real class as the ignored one
    t2 = torch.where(keep, t, 7)
    loss7, _, _ = lce_triton.linear_cross_entropy(h, w, t2, 7, 0.0, False)
    torch.testing.assert_close(loss7, F.cross_entropy(h @ w.T, t2, ignore_index=7), rtol=1e-5, atol=1e-6)


def test_every_token_ignored_gives_nan_as_torch(interpreter):
    h, w, _ = _inputs(4, 8, 20, torch.float32)
    t = torch.full((4,), -100)
    loss, gh, gw = lce_triton.linear_cross_entropy(h, w, t, -100, 0.0, True)
    assert torch.isnan(loss) and torch.isnan(F.cross_entropy(h @ w.T, t))
    assert torch.equal(gh, torch.zeros_like(gh)) and torch.equal(gw, torch.zeros_like(gw))
    with poisoned_outputs():  # no token at all: the same, grad_w written though no chunk ran
        loss, gh, gw = lce_triton.linear_cross_entropy(h[:0], w, t[:0], -100, 0.0, True)
    assert loss.shape == () and torch.isnan(loss) and gh.shape == (0, 8) and torch.equal(gw, torch.zeros_like(w))


@pytest.mark.parametrize("smoothing", [0.0, 0.25])
def test_torch_reference_is_torchs_loss_in_float64(smoothing):
    h, w, t = _inputs(23, 8, 31, torch.float64)
    loss, gh, gw = dispatch.get("linear_cross_entropy", "torch").fn(h, w, t, -100, smoothing, True)
    ref = _torch_grads(h, w, t, torch.float64, smoothing)
    for got, want in zip((loss, gh, gw), ref):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-14)


def test_backward_scales_by_the_loss_gradient_and_accumulates(interpreter):
    h, w, t = _inputs(10, 8, 40, torch.float32)
    for provider in ("torch", "triton"):
        hh, ww = h.clone().requires_grad_(), w.clone().requires_grad_()
        (3.0 * xp.ops.linear_cross_entropy(hh, ww, t, provider=provider)).backward()
        _, gh, gw = _torch_grads(h, w, t, torch.float64)
        torch.testing.assert_close(hh.grad.double(), 3 * gh, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(ww.grad.double(), 3 * gw, rtol=1e-5, atol=1e-7)


def test_no_grad_computes_the_loss_only(interpreter, monkeypatch):
    h, w, t = _inputs(10, 8, 40, torch.float32)
    seen = []
    real = dispatch.get("linear_cross_entropy", "triton")
    spy = dataclasses.replace(real, fn=lambda *a: seen.append(a[5]) or real.fn(*a))
    monkeypatch.setitem(dispatch._REGISTRY["linear_cross_entropy"], "triton", spy)
    with torch.no_grad():
        loss = xp.ops.linear_cross_entropy(h, w, t, provider="triton")
    assert seen == [False]  # no gradient GEMMs without a backward to come
    torch.testing.assert_close(loss, F.cross_entropy(h @ w.T, t), rtol=1e-5, atol=1e-6)


def test_autocast_casts_h_and_weight_as_f_linear_does():
    h, w, t = _inputs(12, 8, 40, torch.float32)
    ww = w.clone().requires_grad_()
    with torch.autocast("cpu", torch.bfloat16):
        got = xp.ops.linear_cross_entropy(h, ww, t, provider="torch")
        want = F.cross_entropy(F.linear(h, w), t)
    assert got.dtype == want.dtype == torch.float32  # F.cross_entropy runs in float32 under autocast
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)  # both from bfloat16 logits
    got.backward()
    assert ww.grad.dtype == torch.float32  # through the cast, to the float32 parameter


def test_leading_dims_and_auto():
    """h [B, S, d] with target [B, S]; auto on the CPU is the torch provider."""
    h, w, t = _inputs(12, 8, 40, torch.float32)
    got = xp.ops.linear_cross_entropy(h.view(3, 4, 8), w, t.view(3, 4))
    torch.testing.assert_close(got, F.cross_entropy(h @ w.T, t), rtol=1e-5, atol=1e-6)


def test_opcheck_and_compile(interpreter):
    h, w, t = _inputs(6, 8, 20, torch.float32)
    h.requires_grad_()
    result = torch.library.opcheck(linear_cross_entropy_op, (h, w, t, -100, 0.1, True, "torch"))
    assert set(result.values()) == {"SUCCESS"}, result
    result = torch.library.opcheck(linear_cross_entropy_op, (h, w, t, -100, 0.0, True, "triton"),
                                   test_utils=("test_schema", "test_faketensor", "test_autograd_registration"))
    assert set(result.values()) == {"SUCCESS"}, result
    f = torch.compile(lambda a, b: xp.ops.linear_cross_entropy(a, b, t, provider="torch") * 2,
                      backend="aot_eager", fullgraph=True)
    hh, ww = h.detach().clone().requires_grad_(), w.clone().requires_grad_()
    f(hh, ww).backward()
    _, gh, gw = _torch_grads(h.detach(), w, t, torch.float64)
    torch.testing.assert_close(hh.grad.double(), 2 * gh, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(ww.grad.double(), 2 * gw, rtol=1e-5, atol=1e-7)


def test_profiler_names_the_provider(interpreter):
    h, w, t = _inputs(6, 8, 20, torch.float32)
    with torch.profiler.profile() as prof:
        xp.ops.linear_cross_entropy(h.requires_grad_(), w, t, provider="triton")
    assert "xrt::linear_cross_entropy[triton]" in {e.name for e in prof.events()}


@pytest.mark.parametrize("call, message", [
    (lambda h, w, t: xp.ops.linear_cross_entropy(h, w, t[:-1]),
     r"target.shape=\(9,\) must be h's leading shape \(10,\)"),
    (lambda h, w, t: xp.ops.linear_cross_entropy(h, w[:, :-1], t), r"h.shape\[1\]=8 must equal weight.shape\[1\]=7"),
    (lambda h, w, t: xp.ops.linear_cross_entropy(h, w, t.int()), r"target.dtype=torch.int32 must be torch.int64"),
    (lambda h, w, t: xp.ops.linear_cross_entropy(h, w.double(), t), r"h.dtype=torch.float32 must equal weight.dtype"),
    (lambda h, w, t: xp.ops.linear_cross_entropy(h, w, t, label_smoothing=1.5), r"label_smoothing=1.5 must be in"),
    (lambda h, w, t: xp.linear_cross_entropy(h, torch.nn.Linear(8, 40), t), r"lm_head has a bias \(shape \(40,\)\)"),
], ids=["target", "d", "int32", "dtypes", "smoothing", "bias"])
def test_bad_inputs_are_named(call, message):
    h, w, t = _inputs(10, 8, 40, torch.float32)
    with pytest.raises(ValueError, match=message):
        call(h, w, t)


def test_model_helper_and_module(interpreter):
    """``xp.linear_cross_entropy(h, lm_head, labels)`` in place of ``F.cross_entropy(lm_head(h), labels)``,
    a causal LM's shifted labels included; the head's weight gets torch's gradient."""
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 40, bias=False)
    h = torch.randn(2, 6, 8)
    labels = torch.randint(0, 40, (2, 6))
    labels[0, 2] = -100
    ref = F.cross_entropy(head(h[:, :-1]).flatten(0, 1), labels[:, 1:].flatten())
    ref.backward()
    want = head.weight.grad.clone()
    head.weight.grad = None
    for provider in ("torch", "triton"):
        got = xp.linear_cross_entropy(h[:, :-1], head, labels[:, 1:], provider=provider)
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
        got.backward()
        torch.testing.assert_close(head.weight.grad, want, rtol=1e-5, atol=1e-7)
        head.weight.grad = None
    module = xp.LinearCrossEntropy(head, label_smoothing=0.1)
    torch.testing.assert_close(module(h, labels), F.cross_entropy(head(h).flatten(0, 1), labels.flatten(),
                                                                  label_smoothing=0.1), rtol=1e-5, atol=1e-6)


def test_flce_bench_runs_on_the_cpu(tmp_path):
    """``benchmarks/flce_bench.py --quick --device cpu``: torch's row and xrt's, in agreement."""
    out = tmp_path / "flce.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "flce_bench.py"), "--quick", "--device", "cpu",
                        "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [row["impl"] for row in rows] == ["torch", "xrt default"]
    assert all("error" not in row and row["ms"] > 0 for row in rows)
    assert rows[1]["err"] < 1e-5 and "| xrt default |" in r.stdout


# -- on the GPU (bf16, the target shapes' memory) ---------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("chunk", [None, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_on_gpu_against_float64(dtype, chunk):
    h, w, t = _inputs(300, 64, 5003, dtype, "cuda", ignored=range(0, 300, 7))
    if chunk is None:
        got = _xrt_grads(h, w, t, "auto")
    else:
        got = lce_triton.linear_cross_entropy(h, w, t, -100, 0.0, True, chunk=chunk)
    ref = _torch_grads(h, w, t, torch.float64)
    mine, theirs = _errors(got, ref), _errors(_torch_grads(h, w, t, dtype), ref)
    for what, e, e_t in zip(("loss", "grad_h", "grad_w"), mine, theirs):
        assert e <= max(2 * e_t, 1e-2), f"{what}: error {e:.3g} against torch's {e_t:.3g}"


@pytest.mark.gpu
def test_on_gpu_peak_memory_below_torchs():
    """Forward + backward at N 4096, d 1024, V 32768, bf16: at most 0.7x torch's peak beyond the inputs."""
    h, w, t = _inputs(4096, 1024, 32768, torch.bfloat16, "cuda")
    h.requires_grad_()
    w.requires_grad_()

    def peak(fn):
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        grads = torch.autograd.grad(fn(), (h, w))
        torch.cuda.synchronize()
        del grads
        return torch.cuda.max_memory_allocated() - before

    base = peak(lambda: F.cross_entropy(F.linear(h, w), t))
    mine = peak(lambda: xp.ops.linear_cross_entropy(h, w, t, provider="triton"))
    assert mine <= 0.7 * base, (mine / 2**20, base / 2**20)
