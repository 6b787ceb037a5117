"""``nn.Module``s built on xrt's ops, and the two models of the macro-benchmarks.

The models: a small ResNet-style CNN on xrt's fused conv (:func:`resnet_cifar`), and a GPT-style
stack of plain PyTorch blocks (:func:`gpt`) that xrt's policy routes (xrt.pytorch.routing).

:class:`ConvBNReLU` is ``nn.Conv2d(bias=False)`` + ``nn.BatchNorm2d`` + ``nn.ReLU`` with the same
parameters and buffers (a state dict loads either way), run by ``xp.ops.conv_bn_relu``: the policy's
``conv_bn_relu`` provider decides whether that is torch's three ops or the fused kernels.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from xrt.kernels import defs
from xrt.pytorch.ops import dispatch
from xrt.pytorch.ops.conv_bn_relu import conv_bn_relu


class ConvBNReLU(nn.Module):
    """3x3 conv (``stride``, padding 1, no bias) + BatchNorm + ReLU on ``[N, C, H, W]`` -> ``[N, K, Ho, Wo]``."""

    def __init__(self, c: int, k: int, stride: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, k, 3, stride, 1, bias=False)
        self.bn = nn.BatchNorm2d(k)
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bn = self.bn
        if self.training:
            bn.num_batches_tracked.add_(1)
        return conv_bn_relu(x, self.conv.weight, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.eps,
                            self.stride, 1, self.training, bn.momentum)


class Block(nn.Module):
    """Two :class:`ConvBNReLU` and a shortcut (identity, or a strided ConvBNReLU where the shape changes)."""

    def __init__(self, c: int, k: int, stride: int = 1) -> None:
        super().__init__()
        self.a = ConvBNReLU(c, k, stride)
        self.b = ConvBNReLU(k, k)
        self.short = nn.Identity() if stride == 1 and c == k else ConvBNReLU(c, k, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x)) + self.short(x)


def resnet_cifar(width: int = 32, classes: int = 10) -> nn.Module:
    """A stem and three stages (width, 2 width, 4 width channels at 32, 16, 8 pixels), pooled, linear."""
    w = width
    return nn.Sequential(ConvBNReLU(3, w), Block(w, w), Block(w, 2 * w, 2), Block(2 * w, 4 * w, 2),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, classes))


def cnn_conv_flops(batch: int, width: int) -> int:
    """Forward FLOPs of :func:`resnet_cifar`'s convolutions on 32 x 32 images (2 * MACs)."""
    w, total = width, 0
    for c, k, hw in [(3, w, 32), (w, w, 32), (w, w, 32), (w, 2 * w, 16), (2 * w, 2 * w, 16), (w, 2 * w, 16),
                     (2 * w, 4 * w, 8), (4 * w, 4 * w, 8), (2 * w, 4 * w, 8)]:
        total += 2 * batch * hw * hw * k * 9 * c
    return total


def cnn_inputs(batch: int, width: int, dtype: Any, device: str) -> tuple:
    """``(images, labels, model, optimizer, dtype)``: synthetic CIFAR-10-shaped batches, channels_last."""
    model = resnet_cifar(width).to(device).to(memory_format=torch.channels_last)
    images = torch.randn(batch, 3, 32, 32, device=device).contiguous(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (batch,), device=device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return images, labels, model, opt, dtype


def cnn_step(args: tuple, provider: str, train: bool) -> torch.Tensor:
    """One training step (forward, cross-entropy, backward, SGD) or one inference pass under AMP,
    every ConvBNReLU on ``provider`` (``torch``: unfused, ``triton``: fused)."""
    from xrt.pytorch.policy import kernel_policy

    images, labels, model, opt, dtype = args
    dev = images.device.type
    with kernel_policy(conv_bn_relu=provider), torch.autocast(dev, dtype=dtype, enabled=dev == "cuda"):
        if not train:
            model.eval()
            with torch.no_grad():
                return model(images)
        model.train()
        loss = nn.functional.cross_entropy(model(images), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def _cuda_only(missing: Any) -> Any:
    def check(x: torch.Tensor) -> str | None:
        if not x.is_cuda:
            return ("the CNN macro-benchmark runs on CUDA only (AMP, and a dozen convolutions under the "
                    "Triton interpreter take minutes on the CPU)")
        return missing(x)

    return check


for _op, _train in (("cnn_infer", False), ("cnn_train", True)):  # what the suites' availability check asks
    for _name, _missing in (("torch", dispatch.torch_missing), ("triton", dispatch.triton_missing)):
        dispatch.register(_op, _name, _cuda_only(_missing))(
                   lambda *args, _p=_name, _t=_train: cnn_step(args, _p, _t))


# -- the GPT-style model: plain PyTorch, routed by the policy ------------------------------------

class GPTBlock(nn.Module):
    """A pre-norm transformer block: causal self-attention and a 4x GELU MLP, each with a residual.
    Plain PyTorch calls only (``nn.Linear``, ``nn.LayerNorm``, ``F.scaled_dot_product_attention``)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(nn.functional.gelu(self.up(self.ln2(x))))


def gpt(d: int, heads: int, blocks: int) -> nn.Module:
    """``blocks`` :class:`GPTBlock` of width ``d`` in sequence: ``[B, S, d] -> [B, S, d]``."""
    return nn.Sequential(*[GPTBlock(d, heads) for _ in range(blocks)])


def gpt_flops(batch: int, seq: int, d: int, heads: int, blocks: int, train: bool) -> int:
    """FLOPs of one step: the GEMMs (12 d^2 per token per block) and causal attention (half of
    4 S d per token per block); a training step is three times the forward."""
    tokens = batch * seq
    fwd = blocks * (2 * tokens * 12 * d * d + 2 * tokens * seq * d)
    return fwd * (3 if train else 1)


def gpt_inputs(batch: int, seq: int, d: int, heads: int, blocks: int, dtype: Any, device: str) -> tuple:
    """``(x, model, compiled)``: a seeded model in ``dtype`` and a ``[batch, seq, d]`` input that
    requires grad; ``compiled`` holds ``torch.compile``'d models by provider (filled on use)."""
    torch.manual_seed(0)
    model = gpt(d, heads, blocks).to(device=device, dtype=dtype)
    x = torch.randn(batch, seq, d, device=device, dtype=dtype, requires_grad=True)
    return x, model, {}


def gpt_policy(provider: str) -> dict[str, str]:
    """The policy that runs the model on ``provider``: every routed op's entry (xrt/kernels/defs);
    none for torch."""
    return {} if provider == "torch" else {d.name: provider for d in defs.OPS.values() if d.routed}


def gpt_step(args: tuple, provider: str, train: bool, compiled: bool = False, fused: bool = False) -> torch.Tensor:
    """One inference pass (``no_grad``) or one training step (forward, a scalar loss, backward,
    gradients set to None) of the model under ``provider``'s policy; ``compiled`` runs the model
    ``torch.compile``'d (compiled inside the policy, once per provider); ``fused`` runs, for a
    provider other than torch, a copy of the model after ``xp.fuse`` on that provider (made once)."""
    from xrt.pytorch.policy import kernel_policy

    x, model, cache = args
    if fused and provider != "torch":
        model = cache.get(("fused", provider))
        if model is None:
            model = cache["fused", provider] = fused_copy(args[1], provider)
    with kernel_policy(**gpt_policy(provider)):
        run = model
        if compiled:
            run = cache.get((provider, fused))
            if run is None:
                # Static shapes: a suite compiles one model per shape, and Dynamo would otherwise
                # recompile the second with symbolic sizes, which the Triton GEMM's config choice
                # does not take.
                run = cache[provider, fused] = torch.compile(model, dynamic=False)
        if not train:
            with torch.no_grad():
                return run(x)
        loss = run(x).float().pow(2).mean()
        loss.backward()
    model.zero_grad(set_to_none=True)
    x.grad = None
    return loss.detach()


def fused_copy(model: nn.Module, provider: str) -> nn.Module:
    """A copy of ``model`` (the same weights) after ``xp.fuse`` on ``provider``; an error where
    nothing fused (the step would time the model unfused)."""
    import copy

    from xrt.pytorch.fusion import fuse

    twin = copy.deepcopy(model)
    if not fuse(twin, provider=provider):
        raise RuntimeError("xp.fuse found no pair to fuse in the GPT-style model")
    return twin


def _gpt_cuda_only(missing: Any) -> Any:
    def check(x: torch.Tensor) -> str | None:
        if not x.is_cuda:
            return "the GPT-style macro-benchmark runs on CUDA only (bfloat16, a model's worth of kernels)"
        return missing(x)

    return check


def gpt_mode(op: str) -> tuple[bool, bool, bool]:
    """``(train, compiled, fused)`` of a GPT macro-benchmark op (xrt/kernels/defs/gpt.py), from its name."""
    return op.startswith("gpt_train"), op.endswith("_compiled"), "_fused" in op


GPT_OPS = [d.name for d in defs.OPS.values() if d.module == "gpt"]
for _op in GPT_OPS:
    _train, _compiled, _fused = gpt_mode(_op)
    for _name, _missing in (("torch", dispatch.torch_missing), ("triton", dispatch.triton_missing)):
        dispatch.register(_op, _name, _gpt_cuda_only(_missing))(
            lambda *args, _p=_name, _t=_train, _c=_compiled, _f=_fused: gpt_step(args, _p, _t, _c, _f))
