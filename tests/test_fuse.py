"""``xp.fuse``: a plain pre-norm GPT block's add + LayerNorm and Linear + GELU pairs run as xrt's fused
ops, with the unfused model's outputs and gradients; what it does not recognise stays as it was."""

import copy
import io

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xrt.pytorch as xp
from xrt.pytorch import fusion


class Attention(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape  # unpacking a shape: fx cannot trace this module, fuse leaves it alone
        q, k, v = self.c_attn(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))


class MLP(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class FunctionalMLP(MLP):
    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, d: int, functional: bool) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = Attention(d, 2)
        self.ln_2 = nn.LayerNorm(d)
        self.mlp = FunctionalMLP(d) if functional else MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, d: int = 32, layers: int = 2) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(d, functional=i % 2 == 1) for i in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)


def _randomize(model: nn.Module) -> None:
    """LayerNorms away from ones / zeros, so that a dropped weight or bias shows."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_()


def _step(model, x, dy):
    x = x.clone().requires_grad_()
    y = model(x)
    y.backward(dy)
    return [y.detach(), x.grad] + [p.grad for p in model.parameters()]


def test_fused_gpt_matches_the_unfused_model(interpreter):
    torch.manual_seed(0)
    ref = GPT()
    _randomize(ref)
    x, dy = torch.randn(2, 8, 32), torch.randn(2, 8, 32)
    want = _step(ref.double(), x.double(), dy.double())  # float64: the truth both are measured against
    plain = copy.deepcopy(ref).half()
    fused = copy.deepcopy(ref).half()
    assert xp.fuse(fused, provider="triton") == [
        "blocks.0: add_layernorm(+, ln_2)", "blocks.0.mlp: linear_gelu(c_fc, gelu)",
        "blocks.1: add_layernorm(+, ln_2)", "blocks.1.mlp: linear_gelu(c_fc, F.gelu)"]
    base = _step(plain, x.half(), dy.half())
    with torch.profiler.profile() as prof:
        got = _step(fused, x.half(), dy.half())
    names = {e.name for e in prof.events()}
    assert {"xrt::add_layernorm[triton]", "xrt::linear_gelu[triton]"} <= names
    assert list(fused.state_dict()) == list(ref.state_dict())
    # Each fused output and gradient is as close to float64 as the unfused fp16 model's (2x its error)
    for i, (g, b, w) in enumerate(zip(got, base, want)):
        scale = w.abs().max().item() + 1e-3
        err_fused = (g.double() - w).abs().max().item() / scale
        err_torch = (b.double() - w).abs().max().item() / scale
        assert err_fused <= 2 * err_torch + 2e-3, (i, err_fused, err_torch)


def test_a_compiled_fused_gpt_launches_xrt_kernels_and_calls_no_xrt_op(interpreter, monkeypatch):
    """The fused GPT under torch.compile with xrt's kernels for the rest (``layernorm``, ``matmul``): its
    forward and backward graphs launch xrt's kernels themselves (the twins of add_layernorm, linear_gelu,
    the routed linear and layernorm), with no opaque xrt custom op and no torch GEMM or LayerNorm left;
    attention (head dim 16, which xrt's kernels do not take) stays torch's. Outputs and gradients as
    float64's."""
    from conftest import graph_keeper

    from xrt.pytorch.ops import dispatch

    monkeypatch.setattr(dispatch, "TRITON_OP_ON_CPU", True)  # CPU tensors take the twins (no Inductor)
    torch.manual_seed(0)
    ref = GPT()
    _randomize(ref)
    x, dy = torch.randn(2, 8, 32), torch.randn(2, 8, 32)
    want = _step(copy.deepcopy(ref).double(), x.double(), dy.double())
    fused = copy.deepcopy(ref)
    assert len(xp.fuse(fused, provider="triton")) == 4
    codes: list[str] = []
    torch._dynamo.reset()
    with xp.kernel_policy(layernorm="triton", matmul="triton"):
        got = _step(torch.compile(fused, backend=graph_keeper(codes), fullgraph=True), x, dy)
    forward, backward = codes
    for code in codes:
        assert "torch.ops.xrt" not in code
        for torch_op in ("aten.mm", "aten.addmm", "aten.bmm", "aten.native_layer_norm", "aten.gelu"):
            assert torch_op not in code, torch_op
    assert forward.count("triton_kernel_wrapper_functional(") == 13, forward  # 5 LayerNorms, 8 GEMMs (2 with GELU)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-4)


def test_fuse_follows_the_policy_and_unfuse_restores():
    torch.manual_seed(1)
    model = GPT(16, 1)
    x = torch.randn(2, 4, 16)
    want = model(x)
    assert len(xp.fuse(model)) == 2  # provider None: the policy's choice (torch on the CPU)
    assert xp.fuse(model) == []  # already fused
    with torch.profiler.profile() as prof:
        got = model(x)
    assert "xrt::add_layernorm[torch]" in {e.name for e in prof.events()}
    torch.testing.assert_close(got, want)
    copied = copy.deepcopy(model)  # stays fused, bound to the copy's own modules
    with torch.no_grad():
        copied.blocks[0].mlp.c_fc.bias.add_(1)
    assert fusion.fused(copied.blocks[0]) and not torch.allclose(copied(x), want)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)  # pickle binds the class's forward: fuse anew
    assert not fusion.fused(loaded.blocks[0]) and len(xp.fuse(loaded)) == 2
    assert xp.unfuse(model) == 2
    assert "forward" not in model.blocks[0].__dict__
    torch.testing.assert_close(model(x), want)


class Twice(nn.Module):
    """Nothing to fuse: the Linear's output used twice, ReLU not GELU, a LayerNorm not after an add."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)
        self.act, self.relu, self.ln = nn.GELU(), nn.ReLU(), nn.LayerNorm(8)

    def forward(self, x):
        z = self.a(x)
        return self.act(z) + z + self.relu(self.b(x)) + self.ln(x * 2)


class MyLinear(nn.Linear):
    def forward(self, x):  # a subclass with its own forward: not what linear_gelu computes
        return super().forward(x) * 2


class Branchy(Block):
    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        if self.training:  # a traced graph would keep this side only
            x = x * 2
        return x + self.mlp(self.ln_2(x))


def test_fuse_leaves_unrecognised_code_alone():
    assert xp.fuse(Twice()) == []
    assert xp.fuse(Branchy(8, False)) == ["mlp: linear_gelu(c_fc, gelu)"]  # the block itself: left alone
    assert xp.fuse(nn.Sequential(MyLinear(4, 4), nn.GELU())) == []
    assert xp.fuse(Attention(8, 2)) == []  # not traceable
    with pytest.raises(ValueError, match="'cuda'"):  # no CUDA C for the fused ops: said when fusing
        xp.fuse(MLP(8), provider="cuda")


class Broadcast(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(6)

    def forward(self, x, bias):
        h = x + bias
        return self.ln(h), h


@pytest.mark.parametrize("shape", [(6,), (3, 6)], ids=str)
def test_fused_add_falls_back_where_the_op_cannot_take_it(interpreter, shape):
    """Broadcasting (a bias row) runs the unfused pair; equal shapes the fused op."""
    m = Broadcast()
    x, bias = torch.randn(3, 6), torch.randn(shape)
    want = m(x, bias)
    assert xp.fuse(m, provider="triton") == [": add_layernorm(+, ln)"]
    for g, w in zip(m(x, bias), want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)


def test_a_fused_forward_still_routes_the_torch_functions_it_calls(interpreter):
    """A fused forward keeps the torch calls of the module's own code (here ``F.scaled_dot_product_attention``
    in xrt's GPTBlock). ``torch.fx`` records that one as ``torch._C._nn.scaled_dot_product_attention``, which
    no policy replaces: the fused model ran torch's attention under ``attention="triton"``. The call is
    now looked up when it runs, so the policy in force routes it; outside the policy it is torch's."""
    from xrt.pytorch.modules import GPTBlock

    torch.manual_seed(2)
    block = GPTBlock(64, 1).half()
    x = torch.randn(1, 16, 64).half()
    want = block(x)
    assert len(xp.fuse(block, provider="torch")) == 2  # linear_gelu(up, F.gelu), add_layernorm(+, ln2)

    def names(policy):
        with xp.kernel_policy(**policy), torch.profiler.profile() as prof:
            y = block(x)
        return y, {e.name for e in prof.events()}

    y, routed = names({"attention": "triton"})
    assert "xrt::attention[triton]" in routed, sorted(n for n in routed if n.startswith("xrt"))
    _, plain = names({})
    assert not any(n.startswith("xrt::attention") for n in plain)
    torch.testing.assert_close(y, want, rtol=2e-2, atol=2e-2)
