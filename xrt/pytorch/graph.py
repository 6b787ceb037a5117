"""CUDA-graph capture: warm up on a side stream, capture once, replay many times.

    g = capture_graph(step, static_x)       # warm-up + capture
    static_x.copy_(new_batch); g.replay()   # launch the whole step with one call
    g.output                                # the captured call's (static) output
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class CUDAGraphWrapper:
    """Holds one captured CUDA graph. Replay before :meth:`capture` is an error."""

    def __init__(self, warmup_iters: int = 3, pool: Any = None) -> None:
        if warmup_iters < 1:
            raise ValueError(f"warmup_iters={warmup_iters} must be at least 1 (capture needs a warm-up run)")
        self.warmup_iters = warmup_iters
        self.pool = pool
        self._graph: Any = None
        self.output: Any = None

    @property
    def captured(self) -> bool:
        return self._graph is not None

    def capture(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> CUDAGraphWrapper:
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA-graph capture needs a CUDA device; torch sees none on this machine")
        for a in list(args) + list(kwargs.values()):
            if isinstance(a, torch.Tensor) and a.device.type != "cuda":
                raise ValueError(f"CUDA-graph capture needs CUDA tensors; got one on {a.device}")
        # Warm-up on a side stream: lazy initialisation (cuBLAS handles, Triton compiles,
        # allocator growth) must happen before capture, and not on the capturing stream.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup_iters):
                fn(*args, **kwargs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            self.output = fn(*args, **kwargs)
        self._graph = graph
        return self

    def replay(self) -> Any:
        if self._graph is None:
            raise RuntimeError("graph replay before capture: call capture(fn, *args) first")
        self._graph.replay()
        return self.output


def capture_graph(fn: Callable[..., Any], *args: Any, warmup_iters: int = 3, pool: Any = None,
                  **kwargs: Any) -> CUDAGraphWrapper:
    """Capture ``fn(*args, **kwargs)`` into a CUDA graph; returns the wrapper to replay it."""
    with torch.profiler.record_function("xrt::capture_graph"):
        return CUDAGraphWrapper(warmup_iters, pool).capture(fn, *args, **kwargs)
