"""Cheap dispatch (issue #14): the direct eager path, the cached Triton handles, prepared CUDA C
launches, and the memoized tuned configs. Behaviour only, never timings."""

import pytest
import torch
import torch.nn.functional as F

import xrt.pytorch as xp
from xrt.kernels import checks
from xrt.pytorch import policy as pol
from xrt.pytorch.ops import dispatch

pytestmark = pytest.mark.usefixtures("no_kernel_policy")


# -- the route an op call takes ----------------------------------------------------------------

def test_route_is_direct_only_in_plain_eager():
    x = torch.randn(4)
    assert dispatch.route(x) == dispatch.DIRECT
    assert dispatch.route(x.requires_grad_()) == dispatch.DIRECT_GRAD
    with torch.no_grad():
        assert dispatch.route(x) == dispatch.DIRECT
    assert dispatch.route(torch.nn.Parameter(torch.randn(3)), None) == dispatch.DIRECT_GRAD
    with torch.device("cpu"):  # a torch-function mode
        assert dispatch.route(torch.randn(3)) == dispatch.OP
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        assert dispatch.route(torch.empty(3)) == dispatch.OP

    class Sub(torch.Tensor):
        pass

    assert dispatch.route(torch.randn(3).as_subclass(Sub)) == dispatch.OP
    seen = []
    torch.func.vmap(lambda t: seen.append(dispatch.route(t)) or t)(torch.randn(2, 3))
    assert seen == [dispatch.OP]
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():  # forward-mode AD: a tangent is refused (its output came back without one)
        with pytest.raises(NotImplementedError, match="no forward-mode derivative"):
            dispatch.route(fwAD.make_dual(torch.randn(3), torch.randn(3)))
        assert dispatch.route(torch.randn(3)) == dispatch.OP


def _custom_op_calls(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def spy(*args):
        calls.append(args[-1])
        return real(*args)

    monkeypatch.setattr(module, name, spy)
    return calls


def test_eager_call_skips_the_custom_op_and_matches_it(monkeypatch):
    import importlib

    sq = importlib.import_module("xrt.pytorch.ops.square")
    calls = _custom_op_calls(monkeypatch, sq, "_square_op")
    x = torch.randn(33)
    y = xp.ops.square(x, provider="torch")
    assert calls == []
    torch.testing.assert_close(y, sq._square_op(x, "torch"), rtol=0, atol=0)
    calls.clear()
    # Autograd needed: the custom op's own formula, through an autograd.Function.
    xg = x.clone().requires_grad_()
    xp.ops.square(xg, provider="torch").sum().backward()
    assert calls == []
    torch.testing.assert_close(xg.grad, 2 * x)


@pytest.mark.parametrize("op", ["square", "softmax", "vector_add", "window_sum"])
def test_eager_training_path_has_the_custom_ops_gradients(op):
    """First and second derivatives of the eager route equal the custom op's (float64, gradcheck)."""
    import importlib

    mod = importlib.import_module(f"xrt.pytorch.ops.{op}")
    custom = getattr(mod, f"_{op}_op")
    fn = getattr(xp.ops, op)
    x = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    args = (x, x.detach().clone().requires_grad_()) if op == "vector_add" else (x,)
    eager = lambda *a: fn(*a, provider="torch")
    assert type(eager(*args).grad_fn).__name__.startswith(f"Eager_{op}")
    torch.autograd.gradcheck(eager, args, atol=1e-5)
    if op != "softmax":  # softmax's backward computes in fp32, too coarse for a float64 gradgradcheck
        torch.autograd.gradgradcheck(eager, args)
    g = torch.randn(eager(*args).shape, dtype=torch.float64)
    for create_graph in (False, True):
        ours = torch.autograd.grad(eager(*args), args, g, create_graph=create_graph)
        ref = torch.autograd.grad(custom(*args, "torch"), args, g, create_graph=create_graph)
        for o, r in zip(ours, ref):
            torch.testing.assert_close(o, r)
    # Second derivatives equal too (the same formula, differentiated by autograd both ways).
    first_o = torch.autograd.grad(eager(*args), args, g, create_graph=True)
    first_r = torch.autograd.grad(custom(*args, "torch"), args, g, create_graph=True)
    assert [t.requires_grad for t in first_o] == [t.requires_grad for t in first_r]
    if any(t.requires_grad for t in first_r):  # vector_add's gradient is constant
        ours = torch.autograd.grad(sum(t.sum() for t in first_o), args, allow_unused=True)
        ref = torch.autograd.grad(sum(t.sum() for t in first_r), args, allow_unused=True)
        for o, r in zip(ours, ref):
            assert (o is None) == (r is None)
            if o is not None:
                torch.testing.assert_close(o, r)


def test_fake_tensors_go_through_the_custom_op():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(8, 5)
        assert xp.ops.square(x, provider="torch").shape == (8, 5)
        assert xp.ops.softmax(x, provider="torch").shape == (8, 5)
        assert xp.ops.fused_layernorm(x, 5, provider="torch").shape == (8, 5)


def test_profiler_range_is_recorded_on_the_direct_path():
    with xp.profile() as prof:
        xp.ops.square(torch.randn(8), provider="torch")
        xp.ops.softmax(torch.randn(2, 8), provider="torch")
        xp.ops.fused_layernorm(torch.randn(2, 8), 8, provider="torch")
        xp.ops.fused_layernorm(torch.randn(2, 8, requires_grad=True), 8, provider="torch")
    names = {e.key for e in prof.key_averages()}
    assert {"xrt::square[torch]", "xrt::softmax[torch]", "xrt::layernorm[torch]"} <= names


@pytest.mark.parametrize("provider", ["torch", "triton"])
def test_layernorm_training_path_matches_torch(provider, request):
    if provider == "triton":
        request.getfixturevalue("interpreter")
    torch.manual_seed(0)
    x = torch.randn(6, 40, dtype=torch.float64).float().requires_grad_()
    w = torch.randn(40).requires_grad_()
    b = torch.randn(40).requires_grad_()
    g = torch.randn(6, 40)
    y = xp.ops.fused_layernorm(x, 40, w, b, provider=provider)
    assert y.grad_fn is not None
    y.backward(g)
    grads = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    F.layer_norm(x, (40,), w, b).backward(g)
    for ours, ref in zip(grads, (x.grad, w.grad, b.grad)):
        torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-5)
    # The eager path is differentiable once, like the custom op: asking for more is an error.
    y = xp.ops.fused_layernorm(x, 40, w, b, provider=provider)
    (gx,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    with pytest.raises(RuntimeError):
        gx.sum().backward()


def test_layernorm_inference_path_returns_the_kernels_output():
    x = torch.randn(3, 4, 5)
    with torch.no_grad():
        y = xp.ops.fused_layernorm(x, (4, 5), provider="torch")
    torch.testing.assert_close(y, F.layer_norm(x, (4, 5)))
    assert y.grad_fn is None


# -- tuned configs through the op ---------------------------------------------------------------

def test_op_sees_every_tuned_config_change(interpreter, monkeypatch, tmp_path):
    """A config outside the tuning space is refused by the launcher: proof it was read."""
    x = torch.randn(10)
    xp.ops.square(x, provider="triton")
    bad = xp.KernelPolicy().add_tuned("square", {"BLOCK_SIZE": 3})
    xp.set_kernel_policy(bad)
    with pytest.raises(ValueError, match="BLOCK_SIZE=3"):
        xp.ops.square(x, provider="triton")
    xp.clear_kernel_policy()
    xp.ops.square(x, provider="triton")
    with xp.kernel_policy(bad):
        with pytest.raises(ValueError, match="BLOCK_SIZE=3"):
            xp.ops.square(x, provider="triton")
    xp.ops.square(x, provider="triton")
    # XRT_TUNED: set, and its file rewritten.
    monkeypatch.setattr(pol, "TUNED_RECHECK_S", 0.0)
    f = tmp_path / "t.json"
    xp.KernelPolicy().add_tuned("square.triton", {"BLOCK_SIZE": 256}).save_tuned(f)
    monkeypatch.setenv("XRT_TUNED", str(f))
    xp.ops.square(x, provider="triton")
    f.write_text('[{"op": "square.triton", "config": {"BLOCK_SIZE": 5}}]\n')
    import os

    os.utime(f, ns=(2, 2))
    with pytest.raises(ValueError, match="BLOCK_SIZE=5"):
        xp.ops.square(x, provider="triton")
    monkeypatch.delenv("XRT_TUNED")
    xp.ops.square(x, provider="triton")


def test_tuned_files_are_read_once_and_looked_up_once_per_input_key(interpreter, monkeypatch, tmp_path):
    f = tmp_path / "t.json"
    xp.KernelPolicy().add_tuned("square.triton", {"BLOCK_SIZE": 256}).save_tuned(f)
    monkeypatch.setenv("XRT_TUNED", str(f))
    loads, lookups = [], []
    real_load, real_lookup = xp.KernelPolicy.load_tuned, pol._lookup_tuned_kernel
    monkeypatch.setattr(xp.KernelPolicy, "load_tuned", lambda self, p: loads.append(p) or real_load(self, p))
    monkeypatch.setattr(pol, "_lookup_tuned_kernel", lambda *a: lookups.append(a[1:3]) or real_lookup(*a))
    x, z = torch.randn(100), torch.randn(3, 100)
    for _ in range(20):
        torch.testing.assert_close(xp.ops.square(x, provider="triton"), x * x)
        xp.ops.square(z, provider="triton")
    assert len(loads) == 1
    assert lookups == [("square", "square.triton")] * 2  # one per (device, dtype, shape) key
    xp.set_kernel_policy(square="triton")  # any policy change: looked up again, files not re-read
    xp.ops.square(x)
    assert len(lookups) == 3 and len(loads) == 1


def test_checked_configs_are_shared_and_read_only():
    a = checks.tuning("square.triton", {"BLOCK_SIZE": 256})
    assert a == {"BLOCK_SIZE": 256, "num_warps": 4}
    assert checks.tuning("square.triton", {"BLOCK_SIZE": 256}) is a
    assert checks.tuning("square.triton", a) is a
    assert checks.tuning("vector_add.triton", a) is not a  # checked for its own space
    with pytest.raises(TypeError, match="read-only"):
        a["BLOCK_SIZE"] = 512
    with pytest.raises(ValueError, match="outside the tuning space"):
        checks.tuning("square.triton", {"BLOCK_SIZE": 3})
    assert checks.tuning("square.triton", None) == {"BLOCK_SIZE": 1024, "num_warps": 4}


# -- the cached Triton handle -------------------------------------------------------------------

class _Param:
    def __init__(self, name, is_constexpr):
        self.name, self.is_constexpr = name, is_constexpr


class FakeCompiled:
    def __init__(self, log, key):
        self.log, self.key = log, key
        self.function, self.packed_metadata = f"fn{key}", "meta"

    def run(self, *a):
        self.log.append(("cached", self.key, a))

    def launch_metadata(self, grid, stream, *args):
        return {"grid": grid, "stream": stream}


class FakeKernel:
    """A stand-in for a JITFunction: ``kernel[grid](*args, **kw)`` "compiles" and launches."""

    def __init__(self):
        self.params = [_Param("x_ptr", False), _Param("y_ptr", False), _Param("n", False),
                       _Param("BLOCK", True)]
        self.log = []

    def __getitem__(self, grid):
        def run(*args, **kw):
            self.log.append(("compile", grid, args, kw))
            return FakeCompiled(self.log, len([e for e in self.log if e[0] == "compile"]))

        return run


def _launcher(device=lambda: 0):
    from xrt.kernels.triton.launch import Launcher

    k = FakeKernel()
    return k, Launcher(k, direct=True, device=device, stream=lambda d: 100 + d)


def test_launcher_reuses_the_handle_only_for_the_same_specialization():
    k, launch = _launcher()
    x = torch.zeros(64)
    y = torch.zeros(64)
    launch((4,), x, y, 64, BLOCK=16, num_warps=4)
    launch((4,), x, y, 64, BLOCK=16, num_warps=4)
    assert [e[0] for e in k.log] == ["compile", "cached"]
    # The cached call passes grid, stream, handle and the arguments then constexprs in order.
    assert k.log[1] == ("cached", 1, (4, 1, 1, 100, "fn1", "meta", None, None, None, x, y, 64, 16))
    launch((8, 2), x, y, 48, BLOCK=16, num_warps=4)  # other grid, n still divisible by 16: reused
    assert k.log[-1][0] == "cached" and k.log[-1][2][:3] == (8, 2, 1)
    before = len([e for e in k.log if e[0] == "compile"])
    variants = [
        ((4,), (x, y, 63), dict(BLOCK=16, num_warps=4)),  # n not divisible by 16
        ((4,), (x, y, 1), dict(BLOCK=16, num_warps=4)),  # n == 1
        ((4,), (x, y, 2**31 + 16), dict(BLOCK=16, num_warps=4)),  # a 64-bit n
        ((4,), (x, y, 64), dict(BLOCK=32, num_warps=4)),  # another constexpr
        ((4,), (x, y, 64), dict(BLOCK=16, num_warps=8)),  # other warps
        ((4,), (x, y, 64), dict(BLOCK=16, num_warps=4, num_stages=2)),  # other stages
        ((4,), (x.double(), y.double(), 64), dict(BLOCK=16, num_warps=4)),  # another dtype
        ((4,), (torch.zeros(65)[1:], y, 64), dict(BLOCK=16, num_warps=4)),  # a misaligned pointer
    ]
    for grid, args, kw in variants:
        launch(grid, *args, **kw)
        assert k.log[-1][0] == "compile", (args[2], kw)
        launch(grid, *args, **kw)
        assert k.log[-1][0] == "cached", (args[2], kw)
    assert len([e for e in k.log if e[0] == "compile"]) == before + len(variants)


def test_launcher_keys_on_the_device():
    dev = [0]
    k, launch = _launcher(device=lambda: dev[0])
    x = torch.zeros(16)
    launch((1,), x, x, 16, BLOCK=16, num_warps=4)
    dev[0] = 1
    launch((1,), x, x, 16, BLOCK=16, num_warps=4)
    assert [e[0] for e in k.log] == ["compile", "compile"]
    launch((1,), x, x, 16, BLOCK=16, num_warps=4)
    assert k.log[-1][:2] == ("cached", 2) and k.log[-1][2][3] == 101  # device 1's stream


def test_launcher_calls_registered_launch_hooks():
    from triton import knobs

    k, launch = _launcher()
    x = torch.zeros(16)
    launch((1,), x, x, 16, BLOCK=16, num_warps=4)
    seen = []
    hook = lambda meta: seen.append(meta)
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        launch((1,), x, x, 16, BLOCK=16, num_warps=4)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    entry = k.log[-1][2]
    assert entry[6] == {"grid": (1,), "stream": 100} and entry[7] is knobs.runtime.launch_enter_hook


def test_launcher_falls_back_where_there_is_no_handle():
    from xrt.kernels.triton.launch import Launcher

    k = FakeKernel()
    launch = Launcher(k, direct=False)
    x = torch.zeros(16)
    for _ in range(3):
        launch((1,), x, x, 16, BLOCK=16, num_warps=4)
    assert [e[0] for e in k.log] == ["compile"] * 3
    assert k.log[0][3] == {"BLOCK": 16, "num_warps": 4}
    # Constexprs not last: no direct path (the cached call could not order the arguments).
    k2 = FakeKernel()
    k2.params = [_Param("BLOCK", True), _Param("x_ptr", False)]
    assert not Launcher(k2, direct=True, device=lambda: 0).direct
    # A CPU tensor on a direct launcher (no device override): Triton's own path.
    k3 = FakeKernel()
    Launcher(k3, direct=True)((1,), x, x, 16, BLOCK=16, num_warps=4)
    Launcher(k3, direct=True)((1,), x, x, 16, BLOCK=16, num_warps=4)
    assert [e[0] for e in k3.log] == ["compile", "compile"]


def test_interpreter_kernels_take_the_normal_path(interpreter):
    import importlib

    tsq = importlib.import_module("xrt.kernels.triton.square")
    assert not tsq._launch.direct
    x = torch.randn(100)
    torch.testing.assert_close(tsq.square(x), x * x)
    torch.testing.assert_close(tsq.square(x, {"BLOCK_SIZE": 256}), x * x)


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and all(x is y or (not isinstance(x, torch.Tensor) and x == y) for x, y in zip(a, b))


def _fake_tma_kept(monkeypatch):
    """A Kept over Triton's own launcher (``CudaLauncher``, its C module not compiled) of a kernel
    with two host descriptors, a pointer and an int: ``(launch module, kept, its C launch calls,
    the descriptors encoded, the launcher)``."""
    from triton.backends.nvidia import driver as nvd

    from xrt.kernels.triton import launch as lm

    encoded = []

    def encode(arg, md):  # Triton's expansion, with a stand-in for the CUtensorMap (no driver here)
        encoded.append((arg.base, md["swizzle"]))
        return [("map", arg.base.data_ptr(), tuple(arg.shape), tuple(arg.strides), arg.padding, md["swizzle"]),
                *arg.shape, *arg.strides]

    monkeypatch.setattr(nvd, "make_tensordesc_arg", encode)
    monkeypatch.setattr(lm, "_ENCODED", {})
    passed = []
    sig = {"a_desc": "tensordesc<fp16[1, 16, 16]>", "p": "*fp16", "n": "i32", "b_desc": "tensordesc<fp16[1, 16, 16]>",
           "BLOCK": "constexpr"}
    meta = [{"swizzle": 128, "block_size": [1, 16, 16]}, {"swizzle": 64, "block_size": [1, 16, 16]}]
    run = object.__new__(nvd.CudaLauncher)  # Triton's launcher, without compiling its C module
    run.launch = nvd.wrap_handle_tensordesc(lambda *a: passed.append(a), sig, meta)
    run.num_ctas, run.global_scratch_size, run.profile_scratch_size = 1, 0, 0
    run.global_scratch_align = run.profile_scratch_align = 1
    run.launch_cooperative_grid, run.launch_pdl = "COOP", "PDL"  # told apart from each other and from None
    compiled = type("Compiled", (), {"run": run, "function": 7, "packed_metadata": "pm"})()
    launcher = type("L", (), {"epoch": 0})()
    monkeypatch.setattr(lm, "_current_device", lambda: 0)
    monkeypatch.setattr(lm, "_current_stream", lambda d: 99)
    monkeypatch.setattr(lm, "hooks_set", lambda: False)
    kept = lm.Kept(launcher, compiled, (16,), 0)
    assert kept.direct is not None
    return lm, kept, passed, encoded, run


def test_kept_kernel_passes_tritons_descriptor_expansion_and_keeps_it(monkeypatch):
    """A kept TMA kernel calls the C launcher with exactly what Triton's own launcher would pass, and
    encodes a host descriptor once per base address, shape, strides, padding and the kernel's
    metadata of it."""
    from triton.backends.nvidia import driver as nvd

    lm, kept, passed, encoded, run = _fake_tma_kept(monkeypatch)
    t, u, p = torch.zeros(1, 16, 16, dtype=torch.float16), torch.ones(1, 16, 16, dtype=torch.float16), torch.zeros(4)
    spec = ((1, 16, 16), (256, 16, 1), [1, 16, 16])
    assert kept((2, 3), lm.HostDesc(t, *spec), p, 5, lm.HostDesc(u, *spec))
    # Triton's own launch of the same call (what Kept's fallback, compiled.run(...), does)
    nvd.CudaLauncher.__call__(run, 2, 3, 1, 99, 7, "pm", None, None, None, lm.HostDesc(t, *spec), p, 5,
                              lm.HostDesc(u, *spec), 16)
    assert _same(passed[0], passed[1]) and passed[0][5:7] == ("COOP", "PDL")
    assert passed[0][13][:2] == ("map", t.data_ptr()) and passed[0][-8][-1] == 64  # b's own metadata
    del encoded[2:]  # Triton's own launch encoded both again
    for _ in range(3):
        assert kept((2, 3), lm.HostDesc(t, *spec), p, 5, lm.HostDesc(u, *spec))
    assert encoded == [(t, 128), (u, 64)] and _same(passed[-1], passed[0])  # each descriptor once
    c = torch.zeros(1, 16, 16, dtype=torch.float16)
    for d, what in ((lm.HostDesc(c, *spec), "another address"),
                    (lm.HostDesc(t, (1, 8, 16), (256, 16, 1), [1, 16, 16]), "another shape"),
                    (lm.HostDesc(t, (1, 16, 16), (512, 32, 1), [1, 16, 16]), "other strides")):
        n = len(encoded)
        kept((2, 3), d, p, 5, lm.HostDesc(u, *spec))
        assert len(encoded) == n + 1, what
        assert passed[-1][13][1:4] == (d.base.data_ptr(), tuple(d.shape), tuple(d.strides)), what
    nan = lm.HostDesc(t, *spec)
    nan.padding = "nan"
    kept((2, 3), nan, p, 5, lm.HostDesc(u, *spec))
    assert len(encoded) == 6 and passed[-1][13][4] == "nan"
    kept((2, 3), lm.HostDesc(u, *spec), p, 5, lm.HostDesc(u, *spec))  # u as a: a's metadata (swizzle 128)
    assert encoded[-1] == (u, 128) and passed[-1][13][-1] == 128 and passed[-1][-8][-1] == 64
    # A kernel without host descriptors: its launch is the C function itself (what a Site calls).
    plain = object.__new__(nvd.CudaLauncher)
    plain.launch, plain.global_scratch_size, plain.profile_scratch_size = print, 0, 0
    assert lm._direct_launch(plain) == (print, {})
    # Another launcher, or scratch memory: Triton's own launch.
    assert lm._direct_launch(type("R", (), {"launch": print, "global_scratch_size": 0,
                                            "profile_scratch_size": 0})()) is None
    run.global_scratch_size = 128
    assert lm._direct_launch(run) is None


def test_a_kept_launch_keyed_by_its_addresses_passes_what_tritons_would(monkeypatch):
    """``Kept.launch_memo``: the C launcher gets what Triton's own launch passes (a tensor as its
    address), and the whole list is kept per (addresses, stream): a repeated launch makes no
    arguments and encodes nothing; other addresses or another stream make it anew; the kept lists
    are bounded."""
    from triton.backends.nvidia import driver as nvd

    lm, kept, passed, encoded, run = _fake_tma_kept(monkeypatch)
    t, u, p = torch.zeros(1, 16, 16, dtype=torch.float16), torch.ones(1, 16, 16, dtype=torch.float16), torch.zeros(4)
    spec = ((1, 16, 16), (256, 16, 1), [1, 16, 16])
    made = []

    def args(a=t, q=p):
        made.append(1)
        return lm.HostDesc(a, *spec), q, 5, lm.HostDesc(u, *spec)

    key = (t.data_ptr(), p.data_ptr(), u.data_ptr())
    assert kept.launch_memo(key, (2, 3), args)
    nvd.CudaLauncher.__call__(run, 2, 3, 1, 99, 7, "pm", None, None, None, lm.HostDesc(t, *spec), p, 5,
                              lm.HostDesc(u, *spec), 16)
    mine, tritons = passed
    assert len(mine) == len(tritons) and sum(x is p for x in tritons) == 1
    assert all(m == (p.data_ptr() if x is p else x) for m, x in zip(mine, tritons))
    n = len(encoded)
    for _ in range(3):
        assert kept.launch_memo(key, (2, 3), args)
    assert made == [1] and len(encoded) == n and passed[-1] == mine
    t2 = torch.zeros(1, 16, 16, dtype=torch.float16)
    assert kept.launch_memo((t2.data_ptr(), p.data_ptr(), u.data_ptr()), (2, 3), lambda: args(t2))
    assert len(made) == 2 and passed[-1][13][1] == t2.data_ptr()
    monkeypatch.setattr(lm, "_current_stream", lambda d: 100)
    assert kept.launch_memo(key, (2, 3), args) and len(made) == 3 and passed[-1][3] == 100
    monkeypatch.setattr(lm, "KEPT_LAUNCHES", 3)
    assert kept.launch_memo(("another",), (2, 3), args) and len(kept.memo) == 1  # full: all dropped
    monkeypatch.setattr(lm, "hooks_set", lambda: True)  # a profiler's hooks: not launched here
    assert not kept.launch_memo(key, (2, 3), args)


# -- prepared CUDA C launches -------------------------------------------------------------------

class FakeFunction:
    def __init__(self):
        self.calls = []

    def prepared_call(self, grid, block, *args, shared_size=0):
        self.calls.append((grid, block, args, shared_size))


def test_cuda_launch_on_the_default_stream_and_beside_it(monkeypatch):
    import sys
    import types

    from xrt.kernels import cuda

    state = {"device": 0, "stream": 0, "synced": []}
    monkeypatch.setattr(torch.cuda, "current_device", lambda: state["device"])
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda i: state["stream"], raising=False)

    class Stream:
        cuda_stream = property(lambda self: state["stream"])

        def synchronize(self):
            state["synced"].append("torch")

    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: Stream())
    drv = types.SimpleNamespace(Context=types.SimpleNamespace(synchronize=lambda: state["synced"].append("ctx")))
    monkeypatch.setitem(sys.modules, "pycuda", types.SimpleNamespace(driver=drv))
    monkeypatch.setitem(sys.modules, "pycuda.driver", drv)

    class DeviceGuard:
        def __init__(self, index):
            self.index = index

        def __enter__(self):
            self.prev, state["device"] = state["device"], self.index

        def __exit__(self, *exc):
            state["device"] = self.prev

    monkeypatch.setattr(torch.cuda, "device", DeviceGuard)
    fn = FakeFunction()
    dev0 = torch.device("cuda", 0)
    cuda.launch(fn, dev0, (3, 1), (128, 1, 1), 1234, 5678, 7)
    assert fn.calls == [((3, 1), (128, 1, 1), (1234, 5678, 7), 0)] and state["synced"] == []
    state["stream"] = 77  # a side stream: waited for before, the launch waited for after
    cuda.launch(fn, dev0, (1, 1), (32, 1, 1), 1, shared=64)
    assert fn.calls[-1] == ((1, 1), (32, 1, 1), (1,), 64) and state["synced"] == ["torch", "ctx"]
    state["stream"], state["synced"] = 0, []
    seen = []
    fn.prepared_call = lambda *a, **k: seen.append(state["device"])
    cuda.launch(fn, torch.device("cuda", 1), (1, 1), (32, 1, 1), 1)  # another device: guarded
    assert seen == [1] and state["device"] == 0


# -- GPU (run on the H100 host) -----------------------------------------------------------------

@pytest.mark.gpu
def test_cached_triton_handles_are_right_for_every_specialization():
    """The second call of each variant takes the cached handle; each result is checked."""
    import importlib
    import os

    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("compiled handles exist only without TRITON_INTERPRET=1")
    tsq = importlib.import_module("xrt.kernels.triton.square")
    assert tsq._launch.direct
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for n in (1, 15, 16, 1000, 4096, 4097):
            for offset in (0, 1):
                x = (torch.randn(n + offset, device="cuda") * 3).to(dtype)[offset:]
                for cfg in ({"BLOCK_SIZE": 256, "num_warps": 2}, {"BLOCK_SIZE": 1024, "num_warps": 4}):
                    for _ in range(2):
                        torch.testing.assert_close(tsq.square(x, cfg), x * x)
    before = tsq._launch.compiles
    x = torch.randn(4096, device="cuda")
    for _ in range(5):
        tsq.square(x)
    assert tsq._launch.compiles == before  # every variant above was compiled once, then reused


@pytest.mark.gpu
def test_cached_triton_handles_on_a_side_stream_and_in_a_graph():
    x = torch.randn(1 << 16, device="cuda")
    xp.ops.square(x, provider="triton")  # compiled on the default stream
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = xp.ops.square(x, provider="triton")
    torch.cuda.current_stream().wait_stream(s)
    torch.testing.assert_close(y, x * x)
    g = xp.capture_graph(lambda t: xp.ops.square(t, provider="triton"), x)
    x.copy_(torch.randn_like(x))
    out = g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x * x)


@pytest.mark.gpu
@pytest.mark.parametrize("provider", ["triton", "cuda"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_layernorm_training_on_gpu_matches_torch(provider, dtype):
    torch.manual_seed(0)
    x = torch.randn(64, 1024, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(1024, device="cuda", dtype=dtype, requires_grad=True)
    b = torch.randn(1024, device="cuda", dtype=dtype, requires_grad=True)
    g = torch.randn(64, 1024, device="cuda", dtype=dtype)
    for _ in range(3):  # the second and third calls take the cached handles / prepared kernels
        for t in (x, w, b):
            t.grad = None
        xp.ops.fused_layernorm(x, 1024, w, b, provider=provider).backward(g)
        ours = [t.grad.float() for t in (x, w, b)]
        for t in (x, w, b):
            t.grad = None
        F.layer_norm(x.float(), (1024,), w.float(), b.float()).backward(g.float())
        ref = [t.grad.float() for t in (x, w, b)]
        tol = dict(rtol=2e-2, atol=1e-1) if dtype == torch.bfloat16 else dict(rtol=1e-3, atol=1e-3)
        for o, r in zip(ours, ref):
            torch.testing.assert_close(o, r, **tol)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["square", "softmax", "vector_add", "window_sum"])
@pytest.mark.parametrize("provider", ["triton", "cuda"])
def test_repeated_gpu_calls_stay_right(op, provider):
    """Many calls over shapes and dtypes, so cached handles meet inputs they were not built for."""
    ref = {"square": lambda t: t * t, "softmax": lambda t: torch.softmax(t.float(), -1).to(t.dtype),
           "vector_add": lambda t: t + t, "window_sum": lambda t: (t[..., :-2].float() + t[..., 1:-1].float()
                                                                   + t[..., 2:].float()).to(t.dtype)}[op]
    fn = getattr(xp.ops, op)
    for dtype in (torch.float32, torch.float16):
        for shape in ((7, 5), (64, 1024), (3, 4099), (1, 16)):
            x = torch.randn(shape, device="cuda").to(dtype)
            for _ in range(2):
                y = fn(x, x, provider=provider) if op == "vector_add" else fn(x, provider=provider)
                torch.testing.assert_close(y, ref(x), rtol=2e-3, atol=2e-3)


def test_host_grid_helpers_match_tritons():
    import triton

    from xrt.kernels.triton.launch import cdiv, next_power_of_2

    for n in [*range(0, 70), 2**20 - 1, 2**20, 2**20 + 1, 2**40 + 3]:
        assert next_power_of_2(n) == triton.next_power_of_2(n)
        for b in (1, 3, 16, 1024):
            assert cdiv(n, b) == triton.cdiv(n, b)


@pytest.mark.gpu
@pytest.mark.parametrize("provider", ["triton", "cuda"])
def test_layernorm_training_on_gpu_with_the_committed_tuned_configs(provider, monkeypatch):
    """XRT_TUNED=results/tuned: the tuner's configs reach the eager forward and backward."""
    from pathlib import Path

    tuned = Path(__file__).resolve().parents[1] / "results" / "tuned"
    if not tuned.is_dir():
        pytest.skip("no results/tuned in this checkout")
    monkeypatch.setenv("XRT_TUNED", str(tuned))
    test_layernorm_training_on_gpu_matches_torch(provider, torch.bfloat16)
