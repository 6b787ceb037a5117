"""``nn.Module``s built on xrt's ops, and the small ResNet-style CNN of the macro-benchmarks.

:class:`ConvBNReLU` is ``nn.Conv2d(bias=False)`` + ``nn.BatchNorm2d`` + ``nn.ReLU`` with the same
parameters and buffers (a state dict loads either way), run by ``xp.ops.conv_bn_relu``: the policy's
``conv_bn_relu`` provider decides whether that is torch's three ops or the fused kernels.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

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
