"""What to benchmark for each op: shape sets, dtypes, providers, inputs, bytes and FLOPs.

One :class:`BenchSpec` per benchmarked op, read by the asv suites (``benchmarks/``), ``xrt diag`` and
the tuner. The shape sets, dtypes, providers, tuning spaces and file stem come from the op's
definition (``xrt/kernels/defs``); this module adds what timing needs: the inputs, the call, the bytes
moved and the FLOPs. Importing it imports torch lazily (inside the callables), never at import.
Inputs are random (never zeros): zeros hide wrong loads and make some kernels take fast paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from xrt.kernels import defs
from xrt.kernels.opdef import SWITCH, Shape


@dataclass(frozen=True)
class BenchSpec:
    op: str
    # Named shape sets: "quick" is the CI profile (CPU, tiny shapes), "small" the launch-bound
    # sizes (reported with CUDA graphs), "large" the bandwidth-bound ones.
    shapes: dict[str, list[Shape]]
    dtypes: list[str]
    providers: list[str]
    make_inputs: Callable[[Shape, Any, str], tuple]  # (shape, torch dtype, device) -> args
    call: Callable[[tuple, str, dict | None], Any]  # (args, provider, config or None) -> output
    bytes_moved: Callable[[Shape, int], int]  # (shape, element size) -> bytes read + written
    flops: Callable[[Shape], int] = lambda shape: 0
    # The name of the op's kernel, launcher and op files when it is not ``op`` (layernorm_bwd lives
    # in layernorm's files): what ``xrt.bench.sources`` maps changed files by.
    module: str = ""
    # Other ops whose files change its measurements (its definition's ``uses``)
    uses: tuple[str, ...] = ()
    # provider -> tuning-space key in xrt/kernels/spaces.py (providers without one have no configs)
    spaces: dict[str, str] = field(default_factory=dict)
    # (args, provider) -> None or raise: ``runnable``'s check where the policy's own choice does not
    # apply (matmul and bmm: their policy op is the BLAS switch, whose choices are not providers)
    check: Callable[[tuple, str], None] | None = None
    # Why the suites' compiled series (the op called from a torch.compile'd function) skips this
    # spec, where its call is not one op's (a backward through autograd, a model's step); "" = it has one.
    not_compiled: str = ""

    def runnable(self, args: tuple, provider: str) -> None:
        """Raise, naming what is missing, when ``provider`` cannot run these inputs here."""
        if self.check is not None:
            self.check(args, provider)
            return
        from xrt.pytorch.ops.dispatch import choose, require

        if defs.get(self.op).policy not in ("", SWITCH):  # a backward: the policy entry is its forward's
            require(self.op, provider, args[0])
            return
        choose(self.op, args[0], provider)

    def shape_set(self, name: str) -> list[Shape]:
        if name not in self.shapes:
            raise ValueError(f"op {self.op!r} has no shape set {name!r}; it has {', '.join(self.shapes)}")
        return self.shapes[name]


SPECS: dict[str, BenchSpec] = {}


def register(spec: BenchSpec) -> BenchSpec:
    SPECS[spec.op] = spec
    return spec


def get(op: str) -> BenchSpec:
    if op not in SPECS:
        raise ValueError(f"no benchmark spec for op {op!r}; known: {', '.join(sorted(SPECS))}")
    return SPECS[op]


def numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _randn(shape: Shape, dtype: Any, device: str):
    import torch

    return torch.randn(shape, device=device, dtype=torch.float32).to(dtype)


def _spec(op: str, make_inputs: Callable, call: Callable, bytes_moved: Callable[[Shape, int], int],
          flops: Callable[[Shape], int], check: Callable[[tuple, str], None] | None = None,
          not_compiled: str = "") -> BenchSpec:
    """The spec of ``op``: its definition's shape sets, dtypes, timed providers, spaces and file
    stem (``xrt/kernels/defs``), with the callables of timing."""
    d = defs.get(op)
    return BenchSpec(op=op, module=d.module, uses=d.uses, shapes={k: list(v) for k, v in d.shapes.items()},
                     dtypes=list(d.dtypes), providers=list(d.timed), make_inputs=make_inputs, call=call,
                     bytes_moved=bytes_moved, flops=flops, spaces=d.space_keys, check=check,
                     not_compiled=not_compiled)


def _kernel_spec(op: str, make_inputs: Callable, bytes_moved: Callable[[Shape, int], int],
                 flops: Callable[[Shape], int], call: Callable | None = None,
                 check: Callable[[tuple, str], None] | None = None,
                 public: Callable[[tuple, str], Any] | None = None) -> BenchSpec:
    """square, the memory-bound kernels and GEMM: the call through :func:`_call_kernel` unless given."""
    return _spec(op, make_inputs, call or _call_kernel(op, defs.get(op).file, op, public), bytes_moved, flops, check)


def _call_square(args: tuple, provider: str, config: dict | None):
    if config is None:
        import xrt.pytorch as xp

        return xp.ops.square(*args, provider=provider)
    # An explicit tuning config goes straight to the launcher (the tuner and the suites' configs).
    if provider == "triton":
        from xrt.kernels.triton.square import square
    elif provider == "cuda":
        from xrt.kernels.cuda.square import square
    else:
        raise ValueError(f"square provider {provider!r} has no tuning configs")
    return square(*args, config)


register(_kernel_spec(
    "square",
    make_inputs=lambda shape, dtype, device: (_randn(shape, dtype, device),),
    bytes_moved=lambda shape, esize: 2 * numel(shape) * esize,  # read x, write y
    flops=lambda shape: numel(shape),
    call=_call_square,
))


# -- the memory-bound kernels: vector_add, window_sum, softmax, layernorm (fwd and bwd) ----------

def _call_kernel(op: str, module: str, fn: str, public: Callable[[tuple, str], Any] | None = None):
    """``call`` of a spec: the public op without a config (``xp.ops.<op>`` unless ``public`` is given);
    the launcher with one (suites, tuner)."""
    def call(args: tuple, provider: str, config: dict | None):
        import importlib

        if config is None or provider == "torch":
            if config is not None:
                raise ValueError(f"{op} provider 'torch' has no tuning configs")
            if public is not None:
                return public(args, provider)
            import xrt.pytorch as xp

            return getattr(xp.ops, op)(*args, provider=provider)
        kind = {"triton": "triton", "cuda": "cuda"}.get(provider)
        if kind is None:
            raise ValueError(f"{op} provider {provider!r} has no tuning configs")
        return getattr(importlib.import_module(f"xrt.kernels.{kind}.{module}"), fn)(*args, config)

    return call


def _layernorm_public(args: tuple, provider: str):
    import xrt.pytorch as xp

    x, w, b, eps = args
    return xp.ops.fused_layernorm(x, x.shape[-1], w, b, eps, provider=provider)


def _layernorm_bwd_public(args: tuple, provider: str):
    from xrt.pytorch.ops.layernorm import layernorm_bwd

    return layernorm_bwd(*args, provider)


def _ln_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    n = shape[-1]
    return (_randn(shape, dtype, device), _randn((n,), dtype, device), _randn((n,), dtype, device), 1e-5)


def _ln_bwd_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    import torch

    x = _randn(shape, dtype, device)
    xf = x.float()
    mean = xf.mean(-1)
    rstd = torch.rsqrt(xf.var(-1, unbiased=False) + 1e-5)
    return (_randn(shape, dtype, device), x, _randn((shape[-1],), dtype, device), mean, rstd)


register(_kernel_spec(
    "vector_add",
    make_inputs=lambda shape, dtype, device: (_randn(shape, dtype, device), _randn(shape, dtype, device)),
    bytes_moved=lambda shape, esize: 3 * numel(shape) * esize,  # read a and b, write y
    flops=lambda shape: numel(shape),
))
register(_kernel_spec(
    "window_sum",
    make_inputs=lambda shape, dtype, device: (_randn(shape, dtype, device),),
    # read x once, write y [..., n - 2]
    bytes_moved=lambda shape, esize: (numel(shape) + numel(shape[:-1]) * (shape[-1] - 2)) * esize,
    flops=lambda shape: 2 * numel(shape[:-1]) * (shape[-1] - 2),
))
register(_kernel_spec(
    "softmax",
    make_inputs=lambda shape, dtype, device: (_randn(shape, dtype, device),),
    bytes_moved=lambda shape, esize: 2 * numel(shape) * esize,  # read x, write y
    flops=lambda shape: 5 * numel(shape),
))
register(_kernel_spec(
    "layernorm",
    make_inputs=_ln_inputs,
    # read x, write y (weight, bias and the [M] statistics are negligible and not counted)
    bytes_moved=lambda shape, esize: 2 * numel(shape) * esize,
    flops=lambda shape: 8 * numel(shape),
    public=_layernorm_public,
))
register(_kernel_spec(
    "layernorm_bwd",
    make_inputs=_ln_bwd_inputs,
    bytes_moved=lambda shape, esize: 3 * numel(shape) * esize,  # read dy and x, write dx
    flops=lambda shape: 12 * numel(shape),
    public=_layernorm_bwd_public,
))


# -- GEMM: matmul [M, K] x [K, N] (shape (M, N, K)) and bmm [B, M, K] x [B, K, N] (shape (B, M, N, K)) --

def _gemm_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    *lead, m, n, k = shape
    return _randn((*lead, m, k), dtype, device), _randn((*lead, k, n), dtype, device)


def _gemm_check(op: str) -> Callable[[tuple, str], None]:
    def check(args: tuple, provider: str) -> None:
        from xrt.pytorch.ops.matmul import choose_provider

        choose_provider(op, args[0], provider)

    return check


def _gemm_bytes(shape: Shape, esize: int) -> int:
    *lead, m, n, k = shape
    return numel(lead) * (m * k + k * n + m * n) * esize  # read A and B once, write C


def _gemm_flops(shape: Shape) -> int:
    *lead, m, n, k = shape
    return 2 * numel(lead) * m * n * k


def _gemm_spec(op: str) -> BenchSpec:
    """matmul and bmm: the same inputs, counts and check."""
    return _kernel_spec(op, _gemm_inputs, _gemm_bytes, _gemm_flops, check=_gemm_check(op))


register(_gemm_spec("matmul"))
register(_gemm_spec("bmm"))


# -- attention, forward and backward ------------------------------------------------------------
#
# A shape is (B, H, S, D, causal): S_q = S_k = S, causal 0 or 1. Provider "torch" is PyTorch's
# scaled_dot_product_attention with its own backend choice (what fused_attention falls back to);
# "triton" is xrt's kernels. FLOPs as FlashAttention counts them (xrt/kernels/triton/attention.py flops).

def _attn_flops(shape: Shape, backward: bool = False) -> int:
    b, h, s, d, causal = shape
    f = 4 * b * h * s * s * d // (2 if causal else 1)
    return f * 5 // 2 if backward else f


def _attn_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    b, h, s, d, causal = shape
    q, k, v = (_randn((b, h, s, d), dtype, device) for _ in range(3))
    return (q, k, v, bool(causal), d ** -0.5)


def _attn_bwd_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    import torch

    from xrt.kernels.reference.attention import attention

    q, k, v, causal, scale = _attn_inputs(shape, dtype, device)
    # The forward's output and log-sum-exp, one (batch, head) at a time: the reference materialises
    # the S x S scores in fp32 (64 GiB at once for 4 x 16 heads of S = 16384, which ran out of memory).
    o, lse = torch.empty_like(q), torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            o[b, h], lse[b, h] = attention(q[b, h], k[b, h], v[b, h], causal, scale)
    return (_randn(tuple(q.shape), dtype, device), q, k, v, o, lse, causal, scale)


def _call_attention(args: tuple, provider: str, config: dict | None):
    q, k, v, causal, scale = args
    if provider == "torch":
        if config is not None:
            raise ValueError("attention provider 'torch' (SDPA) has no tuning configs")
        import torch

        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    if provider != "triton":
        raise ValueError(f"attention has no provider {provider!r} in the benchmarks (torch, triton)")
    if config is None:
        from xrt.pytorch.ops.attention import attention_op

        return attention_op(q, k, v, causal, scale, "triton")
    from xrt.kernels.triton.attention import attention

    return attention(q, k, v, causal, scale, config)


def _attn_check(op: str) -> Callable[[tuple, str], None]:
    """``runnable`` for the attention specs: their providers are ``torch`` (SDPA) and ``triton``."""
    def check(args: tuple, provider: str) -> None:
        from xrt.pytorch.ops.dispatch import require

        if provider not in ("torch", "triton"):
            raise ValueError(f"{op} has no provider {provider!r} in the benchmarks (torch, triton)")
        require(op, provider, args[0])

    return check


_SDPA_GRAPHS: dict[int, Any] = {}  # id(do) -> (q, k, v, SDPA output): the forward SDPA's backward needs


def _call_attention_bwd(args: tuple, provider: str, config: dict | None):
    do, q, k, v, o, lse, causal, scale = args
    if provider == "torch":
        if config is not None:
            raise ValueError("attention_bwd provider 'torch' (SDPA) has no tuning configs")
        import torch

        hit = _SDPA_GRAPHS.get(id(do))
        if hit is None or hit[0] is not q:
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)
            _SDPA_GRAPHS.clear()  # one graph alive at a time
            hit = _SDPA_GRAPHS[id(do)] = (q, leaves, out)
        return torch.autograd.grad(hit[2], hit[1], do, retain_graph=True)  # the backward alone
    if provider != "triton":
        raise ValueError(f"attention_bwd has no provider {provider!r} in the benchmarks (torch, triton)")
    if config is None:
        from xrt.pytorch.ops.attention import attention_bwd_op

        return attention_bwd_op(do, q, k, v, o, lse, causal, scale, "triton")
    from xrt.kernels.triton.attention import attention_bwd

    return attention_bwd(do, q, k, v, o, lse, causal, scale, config)


def _attn_spec(op: str, make_inputs: Callable, call: Callable, tensors: int, flops: Callable[[Shape], int],
               not_compiled: str = "") -> BenchSpec:
    """attention and attention_bwd: ``tensors`` [B, H, S, D] read or written, providers torch (SDPA) and triton."""
    return _spec(op, make_inputs, call,
                 lambda shape, esize: tensors * shape[0] * shape[1] * shape[2] * shape[3] * esize,
                 flops, _attn_check(op), not_compiled)


register(_attn_spec("attention", _attn_inputs, _call_attention, 4, _attn_flops))  # read q, k, v; write o
# read do, q, k, v, o; write dq, dk, dv
register(_attn_spec("attention_bwd", _attn_bwd_inputs, _call_attention_bwd, 8,
                    lambda shape: _attn_flops(shape, backward=True),
                    not_compiled="its call is the backward alone, through torch.autograd.grad on a stored graph"))


# -- fused conv3x3 + BatchNorm + ReLU, NHWC ---------------------------------------------------------
#
# A shape is (N, C, H, W, K, stride), padding 1, inference (BatchNorm folded). Provider "torch" is the
# unfused baseline (cuDNN conv, BatchNorm, ReLU); "triton" the fused kernels. The stride-1 and -2
# spaces have one set of parameter names: a config of either is checked against its stride's.

def _conv_out(shape: Shape) -> tuple[int, int]:
    from xrt.kernels.checks import conv_out

    n, c, h, w, k, s = shape
    return conv_out(h, w, s, 1)


def _conv_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    import torch

    n, c, h, w, k, stride = shape
    x = _randn((n, c, h, w), dtype, device).contiguous(memory_format=torch.channels_last)
    weight = _randn((k, c, 3, 3), dtype, device) / (3 * c ** 0.5)
    gamma = torch.rand(k, device=device) + 0.5
    var = torch.rand(k, device=device) + 0.5
    return (x, weight, gamma, _randn((k,), torch.float32, device), _randn((k,), torch.float32, device) * 0.1, var,
            stride)


def _call_conv(args: tuple, provider: str, config: dict | None):
    import torch

    x, weight, gamma, beta, mean, var, stride = args
    if config is None:
        import xrt.pytorch as xp

        with torch.no_grad():
            return xp.ops.conv_bn_relu(x, weight, gamma, beta, mean, var, stride=stride, provider=provider)
    if provider != "triton":
        raise ValueError(f"conv_bn_relu provider {provider!r} has no tuning configs")
    from xrt.kernels.triton.conv_bn_relu import conv_bias_relu
    from xrt.pytorch.ops.conv_bn_relu import fold_bn

    w, b = fold_bn(weight, gamma, beta, mean, var, 1e-5, x.dtype)  # cached: the launch alone is timed
    return conv_bias_relu(x, w, b, stride, 1, True, config)


def _conv_bytes(shape: Shape, esize: int) -> int:
    n, c, h, w, k, _ = shape
    ho, wo = _conv_out(shape)
    return (n * c * h * w + n * k * ho * wo + 9 * c * k) * esize  # read x and the weight once, write y


def _conv_flops(shape: Shape) -> int:
    n, c, h, w, k, _ = shape
    ho, wo = _conv_out(shape)
    return 2 * n * ho * wo * k * 9 * c


register(_spec("conv_bn_relu", _conv_inputs, _call_conv, _conv_bytes, _conv_flops))


# -- the CNN macro-benchmarks: a small ResNet-style CNN (xrt.pytorch.modules), CIFAR-10-shaped ------
#
# A shape is (batch, width): synthetic 3 x 32 x 32 images, channels_last, under AMP in the dtype.
# Provider "torch" runs every conv + BatchNorm + ReLU unfused (torch's modules), "triton" fused
# (xp.ops.conv_bn_relu); the rest of the model is the same torch code. CUDA only: on the CPU the
# model's dozen convolutions under the Triton interpreter take minutes, and AMP fp16 is a GPU mode.

def _cnn_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    from xrt.pytorch.modules import cnn_inputs

    return cnn_inputs(shape[0], shape[1], dtype, device)


def _cnn_call(train: bool):
    def call(args: tuple, provider: str, config: dict | None):
        if config is not None:
            raise ValueError("the CNN macro-benchmarks have no tuning configs")
        from xrt.pytorch.modules import cnn_step

        return cnn_step(args, provider, train)

    return call


def _model_check(op: str) -> Callable[[tuple, str], None]:
    def check(args: tuple, provider: str) -> None:
        import xrt.pytorch.modules  # noqa: F401  (registers the models' providers)
        from xrt.pytorch.ops.dispatch import require

        require(op, provider, args[0])

    return check


def _cnn_flops(shape: Shape, train: bool) -> int:
    from xrt.pytorch.modules import cnn_conv_flops

    return cnn_conv_flops(shape[0], shape[1]) * (3 if train else 1)


def _cnn_spec(op: str, train: bool) -> BenchSpec:
    return _spec(op, _cnn_inputs, _cnn_call(train),
                 lambda shape, esize: 0,  # a model: FLOPs only (the convolutions')
                 lambda shape: _cnn_flops(shape, train), _model_check(op),
                 "a model's step, not one op's call (compiling the model is a different measurement)")


register(_cnn_spec("cnn_infer", train=False))
register(_cnn_spec("cnn_train", train=True))


# -- the GPT-style macro-benchmarks: an unmodified model, routed by the policy (xrt.pytorch.modules) --
#
# A shape is (batch, sequence, width, heads, blocks). Provider "torch" runs the model with no policy,
# "triton" with every routed op on xrt's Triton kernels; the ``_compiled`` twins torch.compile it.
# CUDA only (bfloat16). Tokens per second are batch x sequence over the step's time.

def _gpt_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    from xrt.pytorch.modules import gpt_inputs

    return gpt_inputs(*shape, dtype, device)


def _gpt_call(op: str):
    def call(args: tuple, provider: str, config: dict | None):
        if config is not None:
            raise ValueError(f"{op} is a model's step: it has no tuning configs")
        from xrt.pytorch.modules import gpt_mode, gpt_step

        return gpt_step(args, provider, *gpt_mode(op))

    return call


def _gpt_spec(op: str) -> BenchSpec:
    train = op.startswith("gpt_train")
    return _spec(op, _gpt_inputs, _gpt_call(op), lambda shape, esize: 0,
                 lambda shape: _gpt_flops(shape, train), _model_check(op),
                 "a model's step, not one op's call (the _compiled twins time the compiled model)")


def _gpt_flops(shape: Shape, train: bool) -> int:
    from xrt.pytorch.modules import gpt_flops

    return gpt_flops(*shape, train)


for _def in defs.OPS.values():
    if _def.module == "gpt":
        register(_gpt_spec(_def.name))


# -- linear_cross_entropy: the loss's forward and backward ------------------------------------------
#
# A shape is (N, d, V). Provider "torch" is F.cross_entropy(F.linear(h, w), target) through autograd
# (the logits materialized), "triton" xp.ops.linear_cross_entropy (chunked); both timed forward +
# backward, the gradients of h and w. One token in 16 is ignored (ignore_index -100).

def _lce_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    import torch

    n, d, v = shape
    h = _randn((n, d), dtype, device).requires_grad_()
    w = (_randn((v, d), dtype, device) / d ** 0.5).requires_grad_()
    target = torch.randint(0, v, (n,), device=device)
    target[::16] = -100
    return h, w, target


def _call_lce(args: tuple, provider: str, config: dict | None):
    import torch

    h, w, target = args
    if provider == "torch":
        if config is not None:
            raise ValueError("linear_cross_entropy provider 'torch' has no tuning configs")
        loss = torch.nn.functional.cross_entropy(torch.nn.functional.linear(h, w), target)
    elif config is None:
        import xrt.pytorch as xp

        loss = xp.ops.linear_cross_entropy(h, w, target, provider=provider)
    else:
        from xrt.kernels.triton.linear_cross_entropy import linear_cross_entropy

        return linear_cross_entropy(h.detach(), w.detach(), target, -100, 0.0, True, config)
    return torch.autograd.grad(loss, (h, w))


def _lce_bytes(shape: Shape, esize: int) -> int:
    n, d, v = shape
    return (2 * n * d + 3 * v * d) * esize  # read h, w (twice); write grad_h, read + write grad_w


def _lce_flops(shape: Shape) -> int:
    n, d, v = shape
    return 3 * 2 * n * d * v  # logits, grad_h, grad_w


register(_spec("linear_cross_entropy", _lce_inputs, _call_lce, _lce_bytes, _lce_flops,
               not_compiled="its call is a forward and backward through autograd"))
# -- the fused transformer ops: add_layernorm, linear_gelu and their backwards ---------------------
# add_layernorm's shape is (M, N); linear_gelu's (M, N, K): x [M, K], weight [N, K]. Provider
# "torch" is the unfused pair each replaces, the baseline to beat.
def _add_ln_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    n = shape[-1]
    return (_randn(shape, dtype, device), _randn(shape, dtype, device), _randn((n,), dtype, device),
            _randn((n,), dtype, device), 1e-5)


def _add_ln_bwd_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    import torch

    h = _randn(shape, dtype, device)
    hf = h.float()
    mean = hf.mean(-1)
    rstd = torch.rsqrt(hf.var(-1, unbiased=False) + 1e-5)
    return (_randn(shape, dtype, device), _randn(shape, dtype, device), h, _randn((shape[-1],), dtype, device),
            mean, rstd)


def _add_ln_public(args: tuple, provider: str):
    import xrt.pytorch as xp

    x, r, w, b, eps = args
    return xp.ops.add_layernorm(x, r, x.shape[-1], w, b, eps, provider=provider)


def _add_ln_bwd_public(args: tuple, provider: str):
    from xrt.pytorch.ops.add_layernorm import add_layernorm_bwd_op

    return add_layernorm_bwd_op(*args, provider)


def _lg_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    m, n, k = shape
    # weight scaled by 1/sqrt(K): pre-activations of order one, where GELU is not linear
    return (_randn((m, k), dtype, device), _randn((n, k), dtype, device) * k ** -0.5, _randn((n,), dtype, device),
            "tanh", False)


def _lg_bwd_inputs(shape: Shape, dtype: Any, device: str) -> tuple:
    m, n, k = shape
    return (_randn((m, n), dtype, device), _randn((m, k), dtype, device), _randn((n, k), dtype, device),
            _randn((m, n), dtype, device), "tanh")


def _lg_public(args: tuple, provider: str):
    import xrt.pytorch as xp

    x, w, b, approximate, _ = args
    return xp.ops.linear_gelu(x, w, b, approximate, provider=provider)


def _lg_bwd_public(args: tuple, provider: str):
    from xrt.pytorch.ops.linear_gelu import linear_gelu_bwd_op

    return linear_gelu_bwd_op(*args, provider)


def _lg_bytes(shape: Shape, esize: int) -> int:
    m, n, k = shape
    return (m * k + n * k + m * n) * esize  # read x and weight, write y (the bias is negligible)


def _lg_bwd_bytes(shape: Shape, esize: int) -> int:
    m, n, k = shape
    # dz = dy * gelu'(z): read dy and z, write dz; dx = dz @ W and dW = dz.T @ x: read dz twice, W, x,
    # write dx and dW; dbias: read dz
    return (6 * m * n + 2 * m * k + 2 * n * k) * esize


register(_kernel_spec(
    "linear_gelu", make_inputs=_lg_inputs, bytes_moved=_lg_bytes,
    flops=lambda shape: 2 * shape[0] * shape[1] * shape[2], public=_lg_public))
register(_kernel_spec(
    "linear_gelu_bwd", make_inputs=_lg_bwd_inputs, bytes_moved=_lg_bwd_bytes,
    flops=lambda shape: 4 * shape[0] * shape[1] * shape[2], public=_lg_bwd_public))

register(_kernel_spec(
    "add_layernorm", make_inputs=_add_ln_inputs,
    bytes_moved=lambda shape, esize: 4 * numel(shape) * esize,  # read x and residual, write h and y
    flops=lambda shape: 9 * numel(shape), public=_add_ln_public))
register(_kernel_spec(
    "add_layernorm_bwd", make_inputs=_add_ln_bwd_inputs,
    bytes_moved=lambda shape, esize: 4 * numel(shape) * esize,  # read dy, dh and h, write dx
    flops=lambda shape: 13 * numel(shape), public=_add_ln_bwd_public))


# -- any other definition: a one-input op ----------------------------------------------------------
# A definition with no spec above is timed as a one-input op, like square: x random of the shape,
# the public op ``xp.ops.<op>(x)`` (a config: the kernel module's ``<op>(x, config)``), x read and an
# output of its size written. An op with other inputs or costs registers its own spec above.
def _one_input(op: str) -> BenchSpec:
    return _kernel_spec(op, make_inputs=lambda shape, dtype, device: (_randn(shape, dtype, device),),
                        bytes_moved=lambda shape, esize: 2 * numel(shape) * esize, flops=lambda shape: 0)


for _op in defs.OPS:
    if _op not in SPECS:
        register(_one_input(_op))
