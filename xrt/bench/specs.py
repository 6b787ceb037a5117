"""What to benchmark for each op: shape sets, dtypes, providers, inputs, bytes and FLOPs.

One :class:`BenchSpec` per op, read by the asv suites (``benchmarks/``), ``xrt diag`` and the
tuner. Importing this module imports torch lazily (inside the callables), never at import.
Inputs are random (never zeros): zeros hide wrong loads and make some kernels take fast paths.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Shape = tuple[int, ...]


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
    # provider -> tuning-space key in kernels/spaces.py (providers without one have no configs)
    spaces: dict[str, str] = field(default_factory=dict)

    def runnable(self, args: tuple, provider: str) -> None:
        """Raise, naming what is missing, when ``provider`` cannot run these inputs here."""
        from xrt.pytorch.ops._providers import choose

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


register(BenchSpec(
    op="square",
    shapes={"quick": [(4096,)], "small": [(1 << 12,), (1 << 16,)], "large": [(1 << 24,), (1 << 28,)]},
    dtypes=["float32", "bfloat16"],
    providers=["torch", "triton", "cuda"],
    make_inputs=lambda shape, dtype, device: (_randn(shape, dtype, device),),
    call=_call_square,
    bytes_moved=lambda shape, esize: 2 * numel(shape) * esize,  # read x, write y
    flops=lambda shape: numel(shape),
    spaces={"triton": "square.triton", "cuda": "square.cuda"},
))
