"""``fused_attention`` forward and backward against float64 and SDPA; fallbacks; policy routing.

The bound (flash-attention's test style): the kernel's worst error against float64 is at most 2x
SDPA's own worst error at the same precision, plus a small floor. On the CPU the kernels run in
Triton's interpreter, fp16 only (numpy has no bfloat16), with tiny blocks so that every loop
region (whole blocks, the causal diagonal, a ragged end) runs on tiny shapes.
"""

import warnings
import zlib

import pytest
import torch
from kernel_checks import poisoned_outputs, within_twice_their_error

import xrt.pytorch as xp
from xrt.kernels import spaces
from xrt.pytorch.ops import attention as attention_module
from xrt.pytorch.ops.attention import attention_bwd_op, attention_op

F = torch.nn.functional
SMALL_FWD = {"BLOCK_M": 16, "BLOCK_N": 16}
SMALL_BWD = {"BLOCK_M1": 16, "BLOCK_N1": 16, "BLOCK_M2": 16, "BLOCK_N2": 16}
# the pointer kernels with every option off (the defaults turn TMA, causal pairs and the fused delta on)
POINTER_BWD = {**SMALL_BWD, "tma": False, "causal_pairs": False, "fuse_delta": False}
FLOOR = 1e-4  # absolute: SDPA's error can be 0 where ours is one rounding (S_k = 1)


def _policy(fwd=None, bwd=None, **choices):
    pol = xp.KernelPolicy(**choices)
    if fwd:
        pol.add_tuned("attention.triton", fwd)
    if bwd:
        pol.add_tuned("attention_bwd.triton", bwd)
    return pol


def _run(fn, q, k, v, do):
    ts = [t.clone().requires_grad_() for t in (q, k, v)]
    o = fn(*ts)
    o.backward(do.to(o.dtype))
    return [o.detach()] + [t.grad for t in ts]


def _inputs(shape_q, s_k, dtype, device, d=64):
    b, h, s_q = shape_q
    # Seeded by the case: the same inputs whatever runs before (an xdist worker's order drew a case
    # where SDPA's own fp32 error was so small that 2x it was under the interpreter's).
    torch.manual_seed(zlib.crc32(repr((b, h, s_q, s_k, str(dtype), d)).encode()))
    q = torch.randn(b, h, s_q, d, device=device).to(dtype)
    k = torch.randn(b, h, s_k, d, device=device).to(dtype)
    v = torch.randn(b, h, s_k, d, device=device).to(dtype)
    do = torch.randn(b, h, s_q, d, device=device).to(dtype)
    return q, k, v, do


def _check_against_sdpa(q, k, v, do, causal, provider="triton", policy=None):
    """out, dq, dk, dv of fused_attention within 2x SDPA's error against float64."""
    def mine(a, b, c):
        return xp.ops.fused_attention(a, b, c, is_causal=causal, provider=provider)

    def sdpa(a, b, c):
        return F.scaled_dot_product_attention(a, b, c, is_causal=causal)

    with poisoned_outputs(), xp.kernel_policy(policy or xp.KernelPolicy()):
        got = _run(mine, q, k, v, do)
    theirs = _run(sdpa, q, k, v, do)
    ref = _run(sdpa, q.double(), k.double(), v.double(), do.double())
    assert all(g.dtype == q.dtype for g in got)
    within_twice_their_error(("out", "dq", "dk", "dv"), got, theirs, ref, FLOOR)


# (B, H, S_q), S_k: S = 1, 17, non-multiples of the block, S_q != S_k both ways.
CPU_SHAPES = [((1, 2, 1), 1), ((1, 2, 17), 17), ((2, 1, 37), 37), ((1, 2, 37), 20), ((1, 2, 20), 45)]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape_q,s_k", CPU_SHAPES, ids=str)
def test_triton_under_interpreter(interpreter, shape_q, s_k, causal):
    q, k, v, do = _inputs(shape_q, s_k, torch.float16, "cpu")
    _check_against_sdpa(q, k, v, do, causal, policy=_policy(SMALL_FWD, SMALL_BWD))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_default_config_under_interpreter(interpreter, causal):
    """The default blocks (forward 128 queries x 64 keys, backward 64 x 64): a ragged 130 spans several."""
    q, k, v, do = _inputs((1, 1, 130), 130, torch.float16, "cpu")
    _check_against_sdpa(q, k, v, do, causal)


def test_strided_inputs_and_lse(interpreter):
    """[B, S, H, D] viewed as [B, H, S, D] is read in place and gives the same result, laid out as
    q: [B, S, H, D] in memory, so the model's ``o.transpose(1, 2).reshape(B, S, H * D)`` is a view,
    also from the kept launch plan; contiguous inputs give a contiguous output. The saved lse is the
    rows' natural-log log-sum-exp."""
    from xrt.kernels.triton.attention import attention, attention_planned

    base = torch.randn(3, 1, 19, 2, 64).half()  # q, k, v stacked, [B, S, H, D] each
    q, k, v = (base[i].transpose(1, 2) for i in range(3))
    assert not q.is_contiguous()
    o, lse = attention(q, k, v, True, 0.125, SMALL_FWD)
    o2, lse2 = attention(q.contiguous(), k.contiguous(), v.contiguous(), True, 0.125, SMALL_FWD)
    assert torch.equal(o, o2) and torch.equal(lse, lse2)
    assert o2.is_contiguous() and o.transpose(1, 2).is_contiguous() and not o.is_contiguous()
    assert o.transpose(1, 2).reshape(1, 19, 128).data_ptr() == o.data_ptr()
    from xrt.kernels.reference.attention import attention as reference

    assert reference(q, k, v, True, 0.125)[0].stride() == o.stride()  # the torch provider's, as the op's fake
    plan = attention_planned(q, k, v, True, 0.125, SMALL_FWD)[2]
    if plan is not None:  # (a plan only on CUDA)
        assert plan(q, k, v)[0].stride() == o.stride()
    s = (q.double() @ k.double().transpose(-1, -2)) * 0.125
    s = s.masked_fill(~torch.ones(19, 19, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), rtol=0, atol=1e-5)


def test_torch_reference_matches_float64():
    from xrt.kernels.reference.attention import attention, attention_bwd

    q, k, v, do = _inputs((1, 2, 9), 13, torch.float64, "cpu", d=8)
    for causal in (False, True):
        o, lse = attention(q, k, v, causal, 0.3)
        qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
        want = F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=0.3)
        want.backward(do)
        torch.testing.assert_close(o, want.detach())
        for got, t in zip(attention_bwd(do, q, k, v, o, lse, causal, 0.3), (qs, ks, vs)):
            torch.testing.assert_close(got, t.grad, rtol=1e-5, atol=1e-5)  # lse is saved in fp32


@pytest.fixture
def fresh_warnings(monkeypatch):
    """Fallback warnings start unsaid, and auto treats the CPU tensors as it would CUDA ones."""
    monkeypatch.setattr(attention_module, "_WARNED", set())
    monkeypatch.setattr(attention_module, "_auto_runs_triton", lambda q, is_causal=False: True)


@pytest.mark.parametrize("case", ["mask", "dropout", "head_dim_59"])
def test_auto_falls_back_to_sdpa_with_one_warning(fresh_warnings, case):
    d = 59 if case == "head_dim_59" else 64
    q, k, v, _ = _inputs((1, 2, 7), 7, torch.float16, "cpu", d=d)
    kw = {"attn_mask": torch.ones(7, 7, dtype=torch.bool).tril()} if case == "mask" else {}
    if case == "dropout":
        kw["dropout_p"] = 0.25
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(2):
            torch.manual_seed(0)
            got = xp.ops.fused_attention(q, k, v, provider="auto", **kw)
    torch.manual_seed(0)
    want = F.scaled_dot_product_attention(q, k, v, **kw)
    assert torch.equal(got, want)
    msgs = [str(w.message) for w in seen if "fused_attention" in str(w.message)]
    assert len(msgs) == 1, msgs
    assert {"mask": "attn_mask", "dropout": "dropout_p=0.25", "head_dim_59": "head_dim=59"}[case] in msgs[0]


@pytest.mark.parametrize("case,match", [("mask", "attn_mask"), ("dropout", "dropout_p=0.5"),
                                        ("head_dim_59", "head_dim=59"), ("float32", "query.dtype=torch.float32"),
                                        ("scale", "scale=-0.5"),
                                        ("bfloat16", "cannot compute in bfloat16")])
def test_forced_triton_raises_naming_the_value(interpreter, case, match):
    d = 59 if case == "head_dim_59" else 64
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}.get(case, torch.float16)
    q, k, v, _ = _inputs((1, 1, 5), 5, dtype, "cpu", d=d)
    kw = {"attn_mask": torch.ones(5, 5, dtype=torch.bool)} if case == "mask" else {}
    if case == "dropout":
        kw["dropout_p"] = 0.5
    if case == "scale":
        kw["scale"] = -0.5
    with pytest.raises(ValueError, match=match):
        xp.ops.fused_attention(q, k, v, provider="triton", **kw)
    with xp.kernel_policy(attention="triton"), pytest.raises(ValueError, match=match):
        xp.ops.fused_attention(q, k, v, **kw)


def test_policy_routing(monkeypatch):
    """triton -> xrt's kernels; torch and SDPA backend names -> SDPA; auto on the CPU -> SDPA. The
    backend names flip PyTorch's switches, triton / torch / auto leave them as they were."""
    q, k, v, _ = _inputs((1, 1, 5), 5, torch.float16, "cpu")
    flags = ("flash", "mem_efficient", "math")
    before = {f: getattr(torch.backends.cuda, f"{f}_sdp_enabled")() for f in flags}
    xp.clear_kernel_policy()
    try:
        assert attention_module.choose(q, k, v) == "torch"  # nothing set: auto, and auto on the CPU is SDPA
        for choice in ("triton", "torch", "auto"):
            with xp.kernel_policy(attention=choice):
                assert {f: getattr(torch.backends.cuda, f"{f}_sdp_enabled")() for f in flags} == before
                if choice == "triton" and not _interpreting():
                    continue
                assert attention_module.choose(q, k, v) == ("triton" if choice == "triton" else "torch")
        with xp.kernel_policy(attention="math"):
            assert attention_module.choose(q, k, v) == "math"
            assert torch.backends.cuda.math_sdp_enabled() and not torch.backends.cuda.flash_sdp_enabled()
            assert torch.equal(xp.ops.fused_attention(q, k, v), F.scaled_dot_product_attention(q, k, v))
            assert attention_module.choose(q, k, v, provider="torch") == "torch"  # the call's provider wins
        xp.set_kernel_policy(attention="flash_v2")
        assert attention_module.choose(q, k, v) == "flash_v2" and not torch.backends.cuda.math_sdp_enabled()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.MATH):  # an explicit backend name runs SDPA with that backend only
            want = F.scaled_dot_product_attention(q, k, v)
        assert torch.equal(xp.ops.fused_attention(q, k, v, provider="math"), want)
    finally:
        xp.clear_kernel_policy()
    assert {f: getattr(torch.backends.cuda, f"{f}_sdp_enabled")() for f in flags} == before
    with pytest.raises(ValueError, match="'flash_v3'"):
        xp.ops.fused_attention(q, k, v, provider="flash_v3")


def _interpreting():
    import os

    return os.environ.get("TRITON_INTERPRET") == "1"


def test_opcheck():
    q, k, v, do = _inputs((1, 2, 6), 9, torch.float32, "cpu", d=8)
    q.requires_grad_()
    result = torch.library.opcheck(attention_op, (q, k, v, True, 0.3, "torch"))
    assert set(result.values()) == {"SUCCESS"}, result
    o, lse = attention_op(q.detach(), k, v, True, 0.3, "torch")
    result = torch.library.opcheck(attention_bwd_op, (do, q.detach(), k, v, o, lse, True, 0.3, "torch"))
    assert set(result.values()) == {"SUCCESS"}, result


def test_opcheck_heads_inside_rows():
    """The fake output follows q's layout as the real one does (torch.compile plans its buffers by it)."""
    base = torch.randn(3, 1, 6, 2, 8)  # q, k, v stacked, [B, S, H, D] each
    q, k, v = (base[i].transpose(1, 2) for i in range(3))
    result = torch.library.opcheck(attention_op, (q, k, v, True, 0.3, "torch"))
    assert set(result.values()) == {"SUCCESS"}, result
    assert attention_op(q, k, v, True, 0.3, "torch")[0].transpose(1, 2).is_contiguous()


def test_opcheck_triton(interpreter):
    q, k, v, do = _inputs((1, 1, 17), 17, torch.float16, "cpu")
    o, lse = attention_op(q, k, v, False, 0.125, "triton")
    result = torch.library.opcheck(attention_bwd_op, (do, q, k, v, o, lse, False, 0.125, "triton"),
                                   test_utils=("test_schema", "test_faketensor"))
    assert set(result.values()) == {"SUCCESS"}, result


def test_compile_fullgraph(interpreter):
    """torch.compile(fullgraph=True) traces the custom op (forward and backward) without a break."""
    q, k, v, do = _inputs((1, 1, 17), 17, torch.float16, "cpu")
    f = torch.compile(lambda a, b, c: xp.ops.fused_attention(a, b, c, is_causal=True, provider="triton"),
                      backend="aot_eager", fullgraph=True)
    got = _run(f, q, k, v, do)
    want = _run(lambda a, b, c: xp.ops.fused_attention(a, b, c, is_causal=True, provider="triton"), q, k, v, do)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_tma_and_pointer_forwards_agree(interpreter, monkeypatch, causal):
    """Inputs TMA can describe take the TMA kernel (config ``tma``): contiguous ones and a model's
    [B, S, H, D] layout seen per head (rank-4 descriptors); a base not 16-byte aligned and
    ``tma=False`` take the pointer kernel: the same values, ragged blocks included (TMA's
    zero-filled reads, clipped stores)."""
    from xrt.kernels.triton import attention as attention_kernels

    ran = []
    for name in ("_fwd", "_fwd_tma"):
        real = getattr(attention_kernels, name)
        monkeypatch.setattr(attention_kernels, name,
                            lambda *a, _r=real, _n=name, **kw: (ran.append(_n), _r(*a, **kw))[1])
    q, k, v, _ = _inputs((2, 2, 37), 45, torch.float16, "cpu")
    o1, l1 = attention_kernels.attention(q, k, v, causal, 0.125, SMALL_FWD)
    o2, l2 = attention_kernels.attention(q, k, v, causal, 0.125, {**SMALL_FWD, "tma": False})
    o3, l3 = attention_kernels.attention(q.transpose(1, 2).contiguous().transpose(1, 2), k, v, causal, 0.125, SMALL_FWD)
    shifted = torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape).copy_(q)  # 2 bytes past aligned
    o4, l4 = attention_kernels.attention(shifted, k, v, causal, 0.125, SMALL_FWD)
    assert ran == ["_fwd_tma", "_fwd", "_fwd_tma", "_fwd"]
    assert torch.equal(o1, o2) and torch.equal(l1, l2) and torch.equal(o1, o3) and torch.equal(o1, o4)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=causal, scale=0.125)
    assert (o1.double() - want).abs().max() < 2e-3


def test_a_size_one_dimension_with_any_stride_takes_tma(interpreter, monkeypatch):
    """A size-1 dimension's stride is never used, so one that TMA could not take (2 bytes: a batch
    of one cut from a larger view) is described as a contiguous tensor's: the TMA kernel runs and
    gives the contiguous copy's bits."""
    from xrt.kernels.triton import attention as attention_kernels

    ran = []
    real = attention_kernels._fwd_tma
    monkeypatch.setattr(attention_kernels, "_fwd_tma", lambda *a, **kw: (ran.append("_fwd_tma"), real(*a, **kw))[1])
    q, k, v, _ = _inputs((1, 2, 37), 45, torch.float16, "cpu")
    odd = torch.as_strided(q.contiguous(), q.shape, (1, *q.stride()[1:]))  # batch stride 1: never stepped
    assert torch.equal(odd, q) and odd.stride(0) == 1
    got, _ = attention_kernels.attention(odd, k, v, True, 0.125, SMALL_FWD)
    want, _ = attention_kernels.attention(q.contiguous(), k, v, True, 0.125, SMALL_FWD)
    assert ran == ["_fwd_tma", "_fwd_tma"] and torch.equal(got, want)


@pytest.mark.parametrize("shape_q,s_k", [((2, 3, 1), 1), ((1, 2, 37), 45), ((2, 1, 64), 64), ((1, 2, 130), 100)],
                         ids=str)
def test_program_orders_agree(interpreter, shape_q, s_k):
    """A causal forward's program orders (config ``order``: one head's blocks side by side, every
    head's longest first, a block and its mirror) give the same bits, TMA and pointer kernels alike:
    odd and even counts of query blocks, a ragged last block, S_q != S_k."""
    from xrt.kernels.triton import attention as attention_kernels

    q, k, v, _ = _inputs(shape_q, s_k, torch.float16, "cpu")
    got = [attention_kernels.attention(q, k, v, True, 0.125, {**SMALL_FWD, "tma": tma, "order": order})
           for tma in (True, False) for order in (0, 1, 2)]
    for o, lse in got[1:]:
        assert torch.equal(o, got[0][0]) and torch.equal(lse, got[0][1])
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True, scale=0.125)
    assert (got[0][0].double() - want).abs().max() < 2e-3


BWD_VARIANTS = [{"tma": True}, {"causal_pairs": True}, {"fuse_delta": True},
                {"tma": True, "causal_pairs": True, "fuse_delta": True},
                {"num_warps2": 8, "num_stages2": 1}, {"tma": True, "num_warps2": 4, "num_stages2": 3}]
BWD_SHAPES = [((1, 2, 1), 1), ((1, 2, 17), 17), ((2, 1, 33), 33), ((1, 2, 33), 17), ((1, 2, 17), 33)]


def _count_bwd_launches(monkeypatch):
    from xrt.kernels.triton import attention as attention_kernels

    ran = []
    for name in ("_pre", "_dkdv", "_dkdv_tma", "_dq", "_dq_tma"):
        real = getattr(attention_kernels, name)
        monkeypatch.setattr(attention_kernels, name,
                            lambda *a, _r=real, _n=name, **kw: (ran.append(_n), _r(*a, **kw))[1])
    return ran


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape_q,s_k", BWD_SHAPES, ids=str)
def test_backward_variants_equal_the_pointer_backward(interpreter, monkeypatch, shape_q, s_k, causal):
    """Causal pairs, the fused delta and the dQ kernel's own warps / stages give their kernels'
    dq, dk, dv bit for bit (same steps, same order of accumulation); the TMA kernels give the
    pointer kernels' bit for bit without causality, and within one fp16 rounding under it (the TMA
    dK/dV kernel adds the causal diagonal after the whole blocks). Each runs the kernels it says:
    TMA for contiguous inputs, the preprocess only without fuse_delta."""
    from xrt.kernels.triton import attention as attention_kernels

    q, k, v, do = _inputs(shape_q, s_k, torch.float16, "cpu")
    o, lse = attention_kernels.attention(q, k, v, causal, 0.125, SMALL_FWD)
    want = attention_kernels.attention_bwd(do, q, k, v, o, lse, causal, 0.125, POINTER_BWD)
    want_tma = attention_kernels.attention_bwd(do, q, k, v, o, lse, causal, 0.125, {**POINTER_BWD, "tma": True})
    for name, g, w in zip(("dq", "dk", "dv"), want_tma, want):
        if causal:
            torch.testing.assert_close(g, w, rtol=2e-3, atol=2e-3, msg=name)
        else:
            assert torch.equal(g, w), name
    ran = _count_bwd_launches(monkeypatch)
    for extra in BWD_VARIANTS:
        ran.clear()
        got = attention_kernels.attention_bwd(do, q, k, v, o, lse, causal, 0.125, {**POINTER_BWD, **extra})
        for name, g, w in zip(("dq", "dk", "dv"), got, want_tma if extra.get("tma") else want):
            assert torch.equal(g, w), (name, extra)
        tma = "_tma" if extra.get("tma") else ""
        kernels = ["_dq" + tma, "_dkdv" + tma] if extra.get("fuse_delta") else ["_pre", "_dkdv" + tma, "_dq" + tma]
        assert ran == kernels, extra


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape_q,s_k", BWD_SHAPES, ids=str)
def test_tma_backward_against_float64(interpreter, shape_q, s_k, causal):
    """Through the op, the TMA backward with causal pairs and the fused delta within 2x SDPA's error."""
    q, k, v, do = _inputs(shape_q, s_k, torch.float16, "cpu")
    bwd = {**SMALL_BWD, "tma": True, "causal_pairs": True, "fuse_delta": True}
    _check_against_sdpa(q, k, v, do, causal, policy=_policy(SMALL_FWD, bwd))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_tma_backward_head_dim_128_and_mixed_blocks(interpreter, causal):
    """hd128, and blocks that differ between the two kernels (32-key dK/dV programs stepping 16
    queries, 16-query dQ programs stepping 32 keys), odd block counts under causal pairs."""
    q, k, v, do = _inputs((1, 1, 47), 47, torch.float16, "cpu", d=128)
    bwd = {"BLOCK_M1": 16, "BLOCK_N1": 32, "BLOCK_M2": 16, "BLOCK_N2": 32, "tma": True, "causal_pairs": True}
    _check_against_sdpa(q, k, v, do, causal, policy=_policy(SMALL_FWD, bwd))


def test_tma_backward_takes_strided_inputs_and_pointer_kernels_for_unaligned_ones(interpreter, monkeypatch):
    """A model's [B, S, H, D] views (q, k, v and dO) take the TMA kernels (rank-4 descriptors); a
    q whose base is not 16-byte aligned takes the pointer kernels. Each gives the result of the
    contiguous copies through TMA (within one fp16 rounding: causal)."""
    from xrt.kernels.triton import attention as attention_kernels

    base = torch.randn(4, 1, 19, 2, 64).half()  # q, k, v, do stacked, [B, S, H, D] each
    q, k, v, do = (base[i].transpose(1, 2) for i in range(4))
    o, lse = attention_kernels.attention(q, k, v, True, 0.125, SMALL_FWD)
    ran = _count_bwd_launches(monkeypatch)
    cfg = {**POINTER_BWD, "tma": True}
    got = attention_kernels.attention_bwd(do, q, k, v, o, lse, True, 0.125, cfg)
    assert ran == ["_pre", "_dkdv_tma", "_dq_tma"]
    ran.clear()
    shifted = torch.empty(q.numel() + 1, dtype=q.dtype)[1:].view(q.shape).copy_(q)
    unaligned = attention_kernels.attention_bwd(do, shifted, k, v, o, lse, True, 0.125, cfg)
    assert ran == ["_pre", "_dkdv", "_dq"]
    ran.clear()
    want = attention_kernels.attention_bwd(do.contiguous(), q.contiguous(), k.contiguous(), v.contiguous(), o, lse,
                                           True, 0.125, cfg)
    assert ran == ["_pre", "_dkdv_tma", "_dq_tma"]
    for g, u, w in zip(got, unaligned, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
        torch.testing.assert_close(u, w, rtol=2e-3, atol=2e-3)


def test_backward_space_keys():
    """Every backward key the launcher reads is in the space with its default; values outside the
    space are refused; the dQ kernel's warps / stages equal to the dK/dV kernel's are pruned as
    duplicates of "same"."""
    key = "attention_bwd.triton"
    s, dflt = spaces.space(key), spaces.default(key)
    assert {"tma", "num_warps2", "num_stages2", "causal_pairs", "fuse_delta"} <= set(s)
    # the H100 sweep's best in every case (docs/kernels.md)
    assert {n: dflt[n] for n in ("tma", "num_warps2", "num_stages2", "causal_pairs", "fuse_delta")} == {
        "tma": True, "num_warps2": "same", "num_stages2": "same", "causal_pairs": True, "fuse_delta": True}
    for name in ("tma", "causal_pairs", "fuse_delta"):
        assert s[name] == [False, True]
        assert spaces.check(key, {name: True})[name] is True
    for name, bad in (("tma", "yes"), ("num_warps2", 2), ("num_stages2", 0), ("causal_pairs", 1.5),
                      ("fuse_delta", None)):
        with pytest.raises(ValueError, match=name):
            spaces.check(key, {name: bad})
    assert spaces.check(key, {"num_warps2": 8, "num_stages2": 3})["num_warps2"] == 8
    limits = spaces.Problem((4, 16, 4096, 128), 2, spaces.Limits())
    assert spaces.why_dropped(key, spaces.check(key, {"num_warps2": 4}), limits)  # num_warps is 4
    assert spaces.why_dropped(key, spaces.check(key, {"num_stages2": 2}), limits)  # num_stages is 2
    assert spaces.why_dropped(key, spaces.check(key, {"num_warps2": 8, "num_stages2": 3}), limits) is None
    assert spaces.why_dropped(key, spaces.default(key), limits) is None


def test_forward_space_rules_read_the_shape():
    """A shape is (B, H, S, D, causal): shared memory from the head dim D, and the program order
    only under causality (a forward without it takes order 0 whatever the config says)."""
    key = "attention.triton"
    h100 = spaces.Limits(max_shared_memory_per_block=232448)
    big = spaces.check(key, {"BLOCK_M": 128, "BLOCK_N": 128, "num_stages": 5})  # (128 + 5 * 256) * D * 2 bytes
    assert spaces.why_dropped(key, big, spaces.Problem((8, 16, 1024, 128, 1), 2, h100))
    assert spaces.why_dropped(key, big, spaces.Problem((8, 16, 1024, 32, 1), 2, h100)) is None
    ordered = spaces.check(key, {"order": 2})
    assert spaces.why_dropped(key, ordered, spaces.Problem((8, 16, 1024, 64, 0), 2, h100))
    assert spaces.why_dropped(key, ordered, spaces.Problem((8, 16, 1024, 64, 1), 2, h100)) is None


def test_spaces_hold_the_defaults():
    for key in ("attention.triton", "attention_bwd.triton"):
        assert spaces.check(key, {}) == spaces.default(key)
    assert True in spaces.space("attention.triton")["warp_specialize"]


# -- GPU ----------------------------------------------------------------------------------------

GPU_SHAPES = [((1, 2, 1), 1), ((2, 3, 17), 17), ((2, 2, 1000), 1000), ((1, 2, 300), 777), ((1, 2, 777), 300),
              ((1, 2, 4097), 4097)]


@pytest.mark.gpu
def test_the_kept_plan_lays_the_output_out_as_q():
    """The eager op's kept launch plan (``ForwardPlan``) allocates the output as its first call did: a
    model's q, k, v viewed per head out of one [B, S, 3, H, D] projection give a [B, S, H, D] output in
    memory on every call (the transpose back a view), with the values of contiguous inputs."""
    from xrt.kernels.triton.attention import attention_planned

    base = torch.randn(2, 300, 3, 4, 64, device="cuda", dtype=torch.float16)
    q, k, v = base.permute(2, 0, 3, 1, 4)
    o1, _, plan = attention_planned(q, k, v, True, 0.125)
    assert plan is not None and plan.heads_inside
    o2, _ = plan(q, k, v)
    want = F.scaled_dot_product_attention(q.contiguous(), k.contiguous(), v.contiguous(), is_causal=True, scale=0.125)
    for o in (o1, o2):
        assert o.transpose(1, 2).is_contiguous() and o.stride() == o1.stride()
        torch.testing.assert_close(o, want, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("shape_q,s_k", GPU_SHAPES, ids=str)
def test_on_gpu(shape_q, s_k, causal, dtype, d):
    q, k, v, do = _inputs(shape_q, s_k, dtype, "cuda", d=d)
    _check_against_sdpa(q, k, v, do, causal)


@pytest.mark.gpu
@pytest.mark.parametrize("cfg", [{"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2},
                                 {"BLOCK_M": 128, "BLOCK_N": 128, "num_warps": 8, "num_stages": 3},
                                 {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3,
                                  "warp_specialize": True},
                                 {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "order": 1},
                                 {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "order": 2},
                                 {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3, "order": 2,
                                  "tma": False}], ids=str)
def test_configs_on_gpu(cfg):
    q, k, v, do = _inputs((1, 2, 1000), 1000, torch.bfloat16, "cuda", d=128)
    bwd = {"BLOCK_M1": 64, "BLOCK_N1": 64, "BLOCK_M2": 64, "BLOCK_N2": 64, "num_warps": 4, "num_stages": 2}
    _check_against_sdpa(q, k, v, do, True, policy=_policy(cfg, bwd))


@pytest.mark.gpu
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("bwd", [{"tma": True}, {"tma": True, "causal_pairs": True, "fuse_delta": True},
                                 {"causal_pairs": True, "fuse_delta": True, "num_warps2": 8, "num_stages2": 3},
                                 {"BLOCK_M1": 32, "BLOCK_N1": 128, "BLOCK_M2": 128, "BLOCK_N2": 32, "num_warps": 8,
                                  "num_stages": 2, "tma": True, "num_stages2": 3}], ids=str)
def test_backward_variants_on_gpu(bwd, causal, d):
    """The backward's TMA kernels, causal pairs and fused delta against float64, ragged S_q != S_k."""
    q, k, v, do = _inputs((2, 2, 1000), 777, torch.bfloat16, "cuda", d=d)
    _check_against_sdpa(q, k, v, do, causal, policy=_policy(None, bwd))


@pytest.mark.gpu
def test_auto_and_transposed_on_gpu(monkeypatch):
    """auto runs the Triton kernels where the measured table names them (here: made to), on transposed inputs."""
    from xrt.pytorch import auto

    monkeypatch.setattr(auto, "pick", lambda op, x, shape: "triton")
    base = torch.randn(3, 2, 333, 4, 128, device="cuda", dtype=torch.bfloat16)  # [B, S, H, D] each
    q, k, v = (base[i].transpose(1, 2) for i in range(3))
    assert attention_module.choose(q, k, v) == "triton"
    do = torch.randn_like(q)
    _check_against_sdpa(q, k, v, do, True, provider="auto")


def test_bench_specs_call_both_providers(interpreter):
    """The asv specs: SDPA and xrt's kernels agree on the quick shape; FLOPs as FlashAttention counts."""
    from xrt.bench import specs

    shape = specs.get("attention").shape_set("quick")[0]
    assert specs.get("attention").flops((4, 16, 4096, 128, 1)) == 4 * 4 * 16 * 4096 ** 2 * 128 // 2
    assert specs.get("attention_bwd").flops(shape) == specs.get("attention").flops(shape) * 5 // 2
    for op in ("attention", "attention_bwd"):
        spec = specs.get(op)
        args = spec.make_inputs(shape, torch.float16, "cpu")
        for p in ("torch", "triton"):
            spec.runnable(args, p)
        outs = [spec.call(args, p, None) for p in ("torch", "triton")]
        outs = [o if isinstance(o, (tuple, list)) else (o,) for o in outs]
        for a, b in zip(*outs):
            torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)


def test_the_op_runs_each_head_dims_own_default(interpreter, monkeypatch):
    """Through the public op (which passes the space's defaults when nothing is tuned) the forward
    takes its head dim's default: 128 x 64 blocks at hd64, 128 x 128 at hd128 (the H100 sweep). On
    the H100 the op ran hd64 at 128 x 128, 0.76x SDPA instead of 0.96x, before this held."""
    from xrt.kernels.triton import attention as attention_kernels

    blocks = []
    real = attention_kernels._fwd_tma
    monkeypatch.setattr(attention_kernels, "_fwd_tma", lambda *a, **kw: (blocks.append((kw["BLOCK_M"], kw["BLOCK_N"])),
                                                                         real(*a, **kw))[1])
    for d in (64, 128):
        q, k, v, _ = _inputs((1, 1, 8), 8, torch.float16, "cpu", d=d)
        xp.ops.fused_attention(q, k, v, provider="triton")
    assert blocks == [(128, 64), (128, 128)]
    assert (attention_kernels.attention(q, k, v, False, 0.1, {"BLOCK_N": 64})[0].shape == q.shape
            and blocks[-1] == (128, 64))


def test_the_forward_takes_the_model_shape_table(interpreter, monkeypatch):
    """Where nothing is tuned or asked for, the forward takes the table of the model's shapes
    (spaces.ATTENTION_FWD_TABLE, by head dim, mask and S bucket), else its head dim's default; a
    config asked for is kept. Through the public op at S 300 causal (the 512 bucket: 128 x 64 blocks,
    a block and its mirror a program), the output matches torch's."""
    from xrt.kernels.triton import attention as attention_kernels

    def blocks(d, causal, s, config=None):
        q = torch.empty(1, 1, s, d, dtype=torch.float16)
        cfg = attention_kernels.forward_config(q, causal, config)
        return cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["tma"]

    assert blocks(64, True, 1000) == (64, 64, True) == blocks(64, True, 2048)
    assert blocks(64, True, 4096) == (64, 128, True) == blocks(64, False, 3000)
    assert blocks(64, True, 300) == (128, 64, True)
    assert attention_kernels.forward_config(torch.empty(1, 1, 1000, 64), True, None)["order"] == 2
    assert blocks(64, False, 1024) == (128, 64, True)  # no entry: hd 64's default
    assert blocks(128, False, 4096) == (128, 128, True)  # no entry: hd 128's default
    assert blocks(64, True, 100) == (128, 64, True) == blocks(64, True, 8192)  # outside the table
    assert blocks(64, True, 1000, {"BLOCK_M": 32, "BLOCK_N": 32})[:2] == (32, 32)
    launched = []
    real = attention_kernels._fwd_tma
    monkeypatch.setattr(attention_kernels, "_fwd_tma",
                        lambda grid, *a, **kw: (launched.append((grid, kw["BLOCK_M"], kw["BLOCK_N"], kw["ORDER"])),
                                                real(grid, *a, **kw))[1])
    q, k, v, _ = _inputs((1, 1, 300), 300, torch.float16, "cpu", d=64)
    out = xp.ops.fused_attention(q, k, v, is_causal=True, provider="triton")
    assert launched == [((2, 1), 128, 64, 2)]  # 3 query blocks: (2, 0) and (1) a program
    ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)


def test_bwd_sweep_candidates_are_in_the_space():
    """benchmarks/attention_bench.py --bwd-sweep: at most 24 distinct configs a case, each valid in
    ``attention_bwd.triton``, the first the default (the reference of the differences), TMA on and
    off, causal pairs only in the causal case."""
    import importlib.util

    from conftest import ROOT

    spec = importlib.util.spec_from_file_location("attention_bench", ROOT / "benchmarks" / "attention_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    key = "attention_bwd.triton"
    _BWD_FIRST = bench._BWD_BASES[0]
    for (_d, causal), cfgs in bench.BWD_CANDIDATES.items():
        assert 0 < len(cfgs) <= 24
        full = [spaces.check(key, c) for c in cfgs]
        assert len({tuple(sorted(c.items())) for c in full}) == len(cfgs)
        assert full[0] == spaces.check(key, {**_BWD_FIRST, "tma": False, "causal_pairs": False, "fuse_delta": False})
        if not causal:  # causal pairs change nothing here: the default is there with them off
            assert spaces.check(key, {**spaces.default(key), "causal_pairs": False}) in full
        else:
            assert spaces.default(key) in full
        assert {c["tma"] for c in full} == {False, True}
        assert any(c["causal_pairs"] for c in full) == causal


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["contiguous", "qkv_view"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_repeated_calls_take_the_kept_plan_on_gpu(causal, layout, monkeypatch):
    """A routed SDPA's repeated calls of one signature go straight to the kept forward launch: the
    second call's output is the first's, new data of the same signature and an unaligned view with
    the same strides still match SDPA, a profiler still sees the op, and training steps through the
    same path give the same gradients as the first step."""
    from torch.profiler import ProfilerActivity, profile

    from xrt.pytorch import policy

    def plans():  # the plans made in this test (a policy entered again keeps its earlier ones)
        memo = policy.tuned_state().memo
        return [v for k, v in memo.items() if isinstance(k, tuple) and k and k[0] == "attention-plan"
                and k not in earlier]

    from xrt.kernels.triton import attention as kernels

    made, used = [], []  # backward plans made, and backward calls that took a kept plan
    planned, call = kernels.attention_bwd_planned, kernels.BackwardPlan.__call__
    monkeypatch.setattr(kernels, "attention_bwd_planned", lambda *a: made.append(1) or planned(*a))
    monkeypatch.setattr(kernels.BackwardPlan, "__call__", lambda self, *a: used.append(1) or call(self, *a))
    q, k, v, do = _inputs((2, 4, 256), 256, torch.bfloat16, "cuda", d=64)
    if layout == "qkv_view":  # a model's q, k, v: views of one projection (the TMA kernel's plan, rank 4)
        q, k, v = torch.randn(2, 256, 3, 4, 64, device="cuda", dtype=torch.bfloat16).permute(2, 0, 3, 1, 4)
    with xp.kernel_policy(attention="triton"):
        earlier = set(policy.tuned_state().memo)
        with torch.no_grad():
            first = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            assert len(plans()) == 1 and plans()[0]
            again = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            assert torch.equal(first, again)
            buf = torch.randn(q.untyped_storage().nbytes() // 2 + 1, device="cuda", dtype=torch.bfloat16)
            skew = buf[1:].as_strided(q.shape, q.stride())  # same shape and strides, not 16-byte aligned
            q2 = torch.randn(q.untyped_storage().nbytes() // 2, device="cuda", dtype=torch.bfloat16).as_strided(
                q.shape, q.stride())
            for a in (q2, skew):
                got = F.scaled_dot_product_attention(a, k, v, is_causal=causal)
                ref = F.scaled_dot_product_attention(a.double(), k.double(), v.double(), is_causal=causal)
                err = (got.double() - ref).abs().max().item()
                assert err <= 2e-2, err
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            assert "xrt::attention[triton]" in {e.name for e in prof.events()}
        grads = []
        for _ in range(2):
            a, b, c = (t.detach().requires_grad_() for t in (q, k, v))
            F.scaled_dot_product_attention(a, b, c, is_causal=causal).backward(do)
            grads.append((a.grad, b.grad, c.grad))
        # The backward's kept plan (in the memo of the thread autograd ran it on; an earlier test's
        # call of this signature may have made it): made at most once, and taken by the second step.
        assert len(made) <= 1 and len(used) >= 1, (made, used)
    for x, y in zip(*grads):
        assert torch.equal(x, y)
    _check_against_sdpa(q, k, v, do, causal)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["default", "pointer_unfused"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_kept_backward_plan_repeats_the_backward_on_gpu(causal, variant):
    """The backward's launch plan (``BackwardPlan``) gives what the unplanned backward gives, on the
    data it was made with and on new data of the same signature, for the TMA kernels with delta fused
    into the dQ kernel (the default) and for the pointer kernels after the preprocess kernel; a
    gradient that is not 16-byte aligned is refused (``None``), not launched."""
    from xrt.kernels import spaces
    from xrt.kernels.triton.attention import attention, attention_bwd, attention_bwd_planned

    key = "attention_bwd.triton"
    cfg = spaces.default(key) if variant == "default" else {**spaces.default(key), "tma": False, "fuse_delta": False}
    qkv = torch.randn(2, 256, 3, 4, 64, device="cuda", dtype=torch.bfloat16)
    q, k, v = qkv.permute(2, 0, 3, 1, 4)  # a model's views of one projection
    do = torch.randn(2, 256, 4, 64, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    o, lse = attention(q, k, v, causal, 0.125)
    want = attention_bwd(do, q, k, v, o, lse, causal, 0.125, cfg)
    *got, plan = attention_bwd_planned(do, q, k, v, o, lse, causal, 0.125, cfg)
    assert plan is not None and not plan.stale()
    assert len(plan.launches) == (2 if variant == "default" else 3)
    assert (plan.layouts is not None) == (variant == "default")
    for a, b in zip(got, want):
        assert torch.equal(a, b)
    for a, b in zip(plan(do, q, k, v, o, lse), want):
        assert torch.equal(a, b)
    qkv.normal_()
    do2 = torch.randn_like(do)
    o2, lse2 = attention(q, k, v, causal, 0.125)
    want2 = attention_bwd(do2, q, k, v, o2, lse2, causal, 0.125, cfg)
    for a, b in zip(plan(do2, q, k, v, o2, lse2), want2):
        assert torch.equal(a, b)
    buf = torch.empty(do.untyped_storage().nbytes() // 2 + 8, device="cuda", dtype=torch.bfloat16)
    skew = buf[1:].as_strided(do.shape, do.stride())
    assert plan(skew, q, k, v, o, lse) is None


@pytest.mark.parametrize("provider", [None, "torch", "math"])
def test_nested_tensors_still_go_to_sdpa(provider):
    """A nested query has no shape to key a repeated call by: the call goes to SDPA as before."""
    q = torch.nested.nested_tensor([torch.randn(2, 5, 64), torch.randn(2, 7, 64)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = xp.ops.fused_attention(q, q, q, provider=provider)
    assert y.is_nested
    for got, one in zip(y.unbind(), q.unbind()):
        torch.testing.assert_close(got, F.scaled_dot_product_attention(one, one, one))


def test_forward_ad_through_sdpa_keeps_its_tangent():
    """Under forward-mode AD a call that goes to SDPA returns SDPA's tangent (xrt's kernels have none)."""
    import torch.autograd.forward_ad as fwAD

    q, t = torch.randn(1, 2, 5, 64), torch.randn(1, 2, 5, 64)
    with fwAD.dual_level():
        y = xp.ops.fused_attention(fwAD.make_dual(q, t), q, q, provider="math")
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            want = F.scaled_dot_product_attention(fwAD.make_dual(q, t), q, q)
        torch.testing.assert_close(fwAD.unpack_dual(y).tangent, fwAD.unpack_dual(want).tangent)


@pytest.mark.gpu
def test_a_repeated_call_keeps_auto_s_training_and_inference_choices_apart_on_gpu(monkeypatch):
    """auto's table has training and inference rows: a repeated call of one signature goes where its
    own kind of call went (here: Triton when autograd records it, SDPA when it does not)."""
    monkeypatch.setattr(attention_module, "_auto_runs_triton", lambda q, causal=False: torch.is_grad_enabled()
                        and q.requires_grad)
    sdpa_calls = []
    real = attention_module._sdpa
    monkeypatch.setattr(attention_module, "_sdpa", lambda *a: sdpa_calls.append(1) or real(*a))
    q = torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    with xp.kernel_policy(attention="auto"):
        for _ in range(2):
            y = xp.ops.fused_attention(q, q, q, is_causal=True)
            assert y.grad_fn is not None and "Eager" in type(y.grad_fn).__name__
            with torch.no_grad():
                before = len(sdpa_calls)
                xp.ops.fused_attention(q, q, q, is_causal=True)
                assert len(sdpa_calls) == before + 1
