"""A routed call's provider is decided once per (op, device, dtype, shape, train flag) and policy
state, and decided again after any change of policy or of ``auto``'s table.

On the CPU ``auto`` takes a GPU's path through the seams (``routing.auto_device``,
``auto.routes``); the table's answer is a spy on ``routing.auto_provider`` that counts the lookups.
"""

import os

import pytest
import torch

import xrt.pytorch as xp
from xrt.pytorch import auto, routing
from xrt.pytorch.ops import dispatch

F = torch.nn.functional
AUTO = dict.fromkeys(("matmul", "layernorm", "softmax", "attention"), "auto")


@pytest.fixture(autouse=True)
def _clean(no_kernel_policy):
    yield
    xp.clear_kernel_policy()  # before no_kernel_policy's teardown: the wrappers must be gone now
    assert routing.patched() == {}, "a wrapper was left in torch"


@pytest.fixture
def table(monkeypatch):
    """``auto`` as on a GPU whose table names ``answer[op]`` (default torch); returns (answer, lookups)."""
    answer: dict[str, str] = {}
    lookups: list[tuple] = []

    def auto_provider(op, x, shape=None, train=None):
        lookups.append((op, tuple(shape) if shape is not None else None, train))
        return answer.get(op, "torch")

    monkeypatch.setattr(routing, "auto_device", lambda t: True)
    monkeypatch.setattr(auto, "routes", lambda ops: True)
    monkeypatch.setattr(auto, "torch_width", lambda op: -1)  # no row is torch's before the lookup
    monkeypatch.setattr(routing, "auto_provider", auto_provider)
    return answer, lookups


def _calls():
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 8), torch.randn(8, 8), torch.randn(8)
    q = torch.randn(1, 2, 4, 8)
    return {
        "linear": lambda: F.linear(x, w, b),
        "matmul": lambda: torch.matmul(x, w),
        "a @ b": lambda: x @ w,
        "bmm": lambda: torch.bmm(q[0], q[0].transpose(1, 2)),
        "layer_norm": lambda: F.layer_norm(x, (8,), w[0], b),
        "softmax": lambda: F.softmax(x, dim=-1),
        "Tensor.softmax": lambda: x.softmax(-1),
        "sdpa": lambda: F.scaled_dot_product_attention(q, q, q, is_causal=True),
    }


def test_a_repeated_routed_call_is_looked_up_once(table):
    _, lookups = table
    calls = _calls()
    want = {name: fn() for name, fn in calls.items()}  # torch's own, before any policy
    with xp.kernel_policy(**AUTO):
        for _ in range(5):
            for name, fn in calls.items():
                assert torch.equal(fn(), want[name]), name
    # one lookup per distinct key: torch.matmul and a @ b are one call form, F.softmax and
    # Tensor.softmax another; every call after the first is answered from the memo
    assert sorted(lookups) == sorted([
        ("matmul", (4, 8, 8), False), ("matmul", (4, 8, 8), False), ("bmm", (2, 4, 4, 8), False),
        ("layernorm", (4, 8), False), ("softmax", None, False), ("attention", (1, 2, 4, 8, 1), False)])


def test_the_key_holds_the_shape_and_the_train_flag(table):
    _, lookups = table
    w = torch.randn(8, 8, requires_grad=True)
    with xp.kernel_policy(**AUTO):
        for rows in (4, 4, 5, 4):
            F.linear(torch.randn(rows, 8), w)
        with torch.no_grad():
            F.linear(torch.randn(4, 8), w)
            F.linear(torch.randn(4, 8), w)
    assert lookups == [("matmul", (4, 8, 8), True), ("matmul", (5, 8, 8), True), ("matmul", (4, 8, 8), False)]


def test_calls_the_key_does_not_know_are_decided_each_time_and_still_right(table):
    _, lookups = table
    x, w = torch.randn(4, 8), torch.randn(3, 8)
    want = F.linear(x, w), F.layer_norm(x, (8,))
    with xp.kernel_policy(**AUTO):
        for _ in range(3):
            assert torch.equal(F.linear(input=x, weight=w), want[0])  # keywords: bound, not keyed
            assert torch.equal(F.layer_norm(x, [8]), want[1])  # a list: unhashable
    assert [op for op, _, _ in lookups] == ["matmul", "layernorm"] * 3


def test_a_call_that_does_not_bind_decides_nothing_for_the_calls_that_do(table):
    _, lookups = table
    q = torch.randn(1, 2, 4, 8)
    with xp.kernel_policy(**AUTO):
        with pytest.raises(TypeError):  # is_causal twice: torch's own error
            F.scaled_dot_product_attention(q, q, q, None, 0.0, True, is_causal=True)
        with pytest.raises(TypeError):  # bias twice
            F.layer_norm(q, (8,), None, None, bias=None)
        assert lookups == []  # not measured: torch's, without a key
        F.scaled_dot_product_attention(q, q, q, None, 0.0, True)
        F.layer_norm(q, (8,), None, None)
    assert [op for op, _, _ in lookups] == ["attention", "layernorm"]


def _xrt_events(fn):
    with xp.profile() as prof:
        fn()
    return {e.key for e in prof.key_averages() if e.key.startswith("xrt::") and "[" in e.key}


def test_a_policy_change_decides_again(table, interpreter):
    answer, lookups = table
    x = torch.randn(4, 8)
    ln = lambda: F.layer_norm(x, (8,))  # noqa: E731
    with xp.kernel_policy(layernorm="auto"):
        assert _xrt_events(ln) == set() and len(lookups) == 1
        answer["layernorm"] = "triton"  # the table's answer changes unannounced: the decision holds
        assert _xrt_events(ln) == set() and len(lookups) == 1
        with xp.kernel_policy(layernorm="triton"):  # an inner scope names its own choice: no lookup
            assert _xrt_events(ln) == {"xrt::layernorm[triton]"} and len(lookups) == 1
        # back in the outer policy: its kept decision (a policy entered again decides nothing again)
        assert _xrt_events(ln) == set() and len(lookups) == 1
    with xp.kernel_policy(layernorm="auto"):
        assert _xrt_events(ln) == set() and len(lookups) == 1
    with xp.kernel_policy(layernorm="auto", softmax="torch"):  # another policy: decided again, the new answer
        assert _xrt_events(ln) == {"xrt::layernorm[triton]"} and len(lookups) == 2


def test_a_new_auto_table_decides_again(table, interpreter):
    answer, lookups = table
    x = torch.randn(4, 8)
    with xp.kernel_policy(softmax="auto"):
        assert _xrt_events(lambda: x.softmax(-1)) == set()
        answer["softmax"] = "triton"
        assert _xrt_events(lambda: x.softmax(-1)) == set()  # the decision is kept
        auto.clear()  # a new table: every decision is made again
        assert _xrt_events(lambda: x.softmax(-1)) == {"xrt::softmax[triton]"}
    assert len(lookups) == 2


def test_the_global_policy_changed_on_another_thread_decides_again(table, interpreter):
    import threading

    answer, lookups = table
    x = torch.randn(4, 8)
    xp.set_kernel_policy(softmax="auto")
    assert _xrt_events(lambda: x.softmax(-1)) == set()
    changed, done = threading.Event(), threading.Event()

    def other() -> None:  # sets the global policy, and clears it (and its own routing) when told
        xp.set_kernel_policy(softmax="triton")
        changed.set()
        done.wait()
        xp.clear_kernel_policy()

    t = threading.Thread(target=other)
    t.start()
    try:
        changed.wait()
        assert _xrt_events(lambda: x.softmax(-1)) == {"xrt::softmax[triton]"} and len(lookups) == 1
    finally:
        done.set()
        t.join()


class _CountingEnviron:
    """``os.environ`` that counts the reads of one variable."""

    def __init__(self, real, name):
        self.real, self.name, self.reads = real, name, 0

    def _count(self, key):
        self.reads += key == self.name

    def get(self, key, default=None):
        self._count(key)
        return self.real.get(key, default)

    def __getitem__(self, key):
        self._count(key)
        return self.real[key]

    def __contains__(self, key):
        self._count(key)
        return key in self.real

    def __getattr__(self, attr):
        return getattr(self.real, attr)


def test_a_routed_call_reads_neither_the_environment_nor_the_providers_check_per_call(monkeypatch):
    """``triton`` on a bf16 CPU tensor cannot run (no GPU; the interpreter has no bf16): the call stays
    torch's after one check of the provider, and ``TRITON_INTERPRET`` is not read through os.environ."""
    import dataclasses

    checks = []
    real = dispatch.get("softmax", "triton")
    counted = dataclasses.replace(real, missing=lambda t: checks.append(1) or real.missing(t))
    monkeypatch.setitem(dispatch._REGISTRY["softmax"], "triton", counted)
    env = _CountingEnviron(os.environ, "TRITON_INTERPRET")
    x = torch.randn(4, 8).bfloat16()
    with xp.kernel_policy(softmax="triton"):
        monkeypatch.setattr(os, "environ", env)
        for _ in range(10):
            assert torch.equal(F.softmax(x, dim=-1), torch.softmax(x, -1))
        monkeypatch.setattr(os, "environ", env.real)
    assert len(checks) == 1 and env.reads == 0


def test_rows_no_wider_than_autos_torch_width_go_to_torch_without_a_key(table, interpreter, monkeypatch):
    """Under auto, a layer norm or softmax whose rows are no wider than every width the table gives
    to xrt (``auto.torch_width``) calls torch without making its key or looking it up; a wider one,
    or any call under a policy that names a provider, is decided as before. A new table or policy
    reads the width again."""
    answer, lookups = table
    answer.update(layernorm="triton", softmax="triton")
    widths = {"layernorm": 8, "softmax": 8}
    monkeypatch.setattr(auto, "torch_width", lambda op: widths[op])
    keys = []
    for h in (routing._layer_norm, routing._f_softmax):
        rule = routing.RULES[h]
        monkeypatch.setitem(routing.RULES, h, rule._replace(key=lambda a, k, f=rule.key: keys.append(1) or f(a, k)))
    narrow, wide = torch.randn(4, 8), torch.randn(4, 16)
    with xp.kernel_policy(layernorm="auto", softmax="auto"):
        nn_ln = torch.nn.LayerNorm(8)
        for call in (lambda: F.layer_norm(narrow, (8,)), lambda: nn_ln(narrow), lambda: F.softmax(narrow, -1),
                     lambda: narrow.softmax(-1)):
            assert _xrt_events(call) == set()
        with pytest.raises(TypeError, match="normalized_shape"):  # torch's own error, as without a policy
            F.layer_norm(narrow, 8)
        assert keys == [] and lookups == []
        assert _xrt_events(lambda: F.layer_norm(wide, (16,))) == {"xrt::layernorm[triton]"}
        assert _xrt_events(lambda: F.softmax(wide, -1)) == {"xrt::softmax[triton]"}
        assert len(keys) == 2 and len(lookups) == 2
        # several normalized dims: no width to compare, decided by the key
        assert _xrt_events(lambda: F.layer_norm(narrow.view(4, 2, 4), (2, 4))) == {"xrt::layernorm[triton]"}
        widths["layernorm"] = 4
        auto.clear()  # a new table: its width is read again
        assert _xrt_events(lambda: F.layer_norm(narrow, (8,))) == {"xrt::layernorm[triton]"}
        with xp.kernel_policy(softmax="triton"):  # a named provider: no width applies
            assert _xrt_events(lambda: F.softmax(narrow, -1)) == {"xrt::softmax[triton]"}
    torch.testing.assert_close(F.layer_norm(narrow, (8,)), torch.nn.functional.layer_norm(narrow, (8,)))


def test_under_compile_rows_below_autos_floor_trace_to_torch_without_a_lookup(table, interpreter, monkeypatch):
    """The compiled path applies the same floor: a narrow layer norm traces to torch's op without
    the decision (no lookup, none of its guards); a wide one to xrt's."""
    answer, lookups = table
    answer["layernorm"] = "triton"
    monkeypatch.setattr(auto, "torch_width", lambda op: 8)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm.code)
        return gm.forward

    torch._dynamo.reset()
    f = torch.compile(lambda t: F.layer_norm(t, (t.shape[-1],)) * 2, backend=backend, fullgraph=True)
    with xp.kernel_policy(layernorm="auto"):
        narrow, wide = torch.randn(4, 8), torch.randn(4, 16)
        torch.testing.assert_close(f(narrow), torch.nn.functional.layer_norm(narrow, (8,)) * 2)
        assert lookups == [] and "xrt" not in graphs[-1]
        torch.testing.assert_close(f(wide), torch.nn.functional.layer_norm(wide, (16,)) * 2, rtol=1e-4, atol=1e-4)
        assert lookups and {shape for _, shape, _ in lookups} == {(4, 16)} and "xrt" in graphs[-1]


@pytest.mark.parametrize("floor", [1 << 20, 4], ids=["below-autos-floor", "decided-torch"])
def test_a_layer_norm_that_stays_torchs_is_torchs_call_exactly(table, monkeypatch, floor):
    """A layer norm the policy leaves to torch, in nn.LayerNorm's call form, runs aten's layer_norm
    with the arguments and cuDNN switch F.layer_norm would pass (without F.layer_norm's Python); a
    tensor subclass, a torch-function mode, another call form, or a function another library put in
    F.layer_norm's place before the policy get the function itself. Alike for a row below auto's
    floor (torch's before any decision) and for a wider one that the table decides is torch's."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    answer, lookups = table
    monkeypatch.setattr(auto, "torch_width", lambda op: floor)
    seen = []
    real = routing._aten_layer_norm
    monkeypatch.setattr(routing, "_aten_layer_norm", lambda *a: seen.append(a[4:]) or real(*a))
    ln = torch.nn.LayerNorm(8, eps=1e-3)
    x = torch.randn(4, 8)
    want = torch.nn.functional.layer_norm(x, (8,), ln.weight, ln.bias, 1e-3)
    with xp.kernel_policy(layernorm="auto"):
        assert torch.equal(ln(x), want) and seen == [(1e-3, torch.backends.cudnn.enabled)]
        assert len(lookups) == (floor < 8)  # the wider row was decided once, then kept
        with torch.backends.cudnn.flags(enabled=not torch.backends.cudnn.enabled):
            ln(x)
        assert seen[-1] == (1e-3, not torch.backends.cudnn.enabled)
        assert torch.equal(F.layer_norm(x, (8,), eps=1e-3), torch.nn.functional.layer_norm(x, (8,), eps=1e-3))
        assert len(seen) == 2  # a keyword: F.layer_norm itself

        class Spy(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                calls.append(getattr(func, "__name__", str(func)))
                return func(*args, **(kwargs or {}))

        calls: list[str] = []
        with Spy():
            assert torch.equal(ln(x), want)
        assert "layer_norm" in calls and len(seen) == 2  # the mode saw F.layer_norm's call
        # what runs inside torch's op (a dispatch mode, a saved-tensor hook) sees torch's functions
        depths: list[int] = []

        class Watch(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                depths.append(routing._ROUTING.pause.depth)
                return func(*args, **(kwargs or {}))

        with Watch():
            ln(x)
        xg = x.clone().requires_grad_(True)
        with torch.autograd.graph.saved_tensors_hooks(lambda t: depths.append(routing._ROUTING.pause.depth) or t,
                                                      lambda t: t):
            ln(xg)
        assert len(seen) == 4 and depths and set(depths) == {1}, depths
    xp.clear_kernel_policy()
    mine = []
    theirs = torch.nn.functional.layer_norm
    monkeypatch.setattr(torch.nn.functional, "layer_norm", lambda *a, **k: mine.append(1) or theirs(*a, **k))
    with xp.kernel_policy(layernorm="auto"):
        assert torch.equal(ln(x), want) and mine == [1] and len(seen) == 4
