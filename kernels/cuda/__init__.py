"""Raw CUDA C kernels, compiled at first use through pycuda, running in torch's CUDA context.

pycuda shares torch's primary context (``pycuda.autoprimaryctx``), so kernels take tensors'
device pointers directly and run on torch's current stream.
"""

from __future__ import annotations

import functools
from typing import Any

from xrt.kernels import source

INSTALL_HINT = "pip install xpuruntime[cuda] (builds pycuda from source; needs the CUDA toolkit)"


@functools.cache
def missing() -> str | None:
    """Why CUDA C kernels cannot run here, or ``None`` when they can (asked once a process)."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device is visible to torch"
    try:
        import pycuda  # noqa: F401
    except ImportError:
        return f"pycuda is not installed ({INSTALL_HINT})"
    return None


@functools.cache
def module(name: str, arch: str) -> Any:
    """Compile ``cuda/<name>.cu`` for ``arch`` (``sm_90``) once per process."""
    import pycuda.autoprimaryctx  # noqa: F401  (torch's primary context, not a new one)
    from pycuda.compiler import SourceModule

    return SourceModule(source(f"cuda/{name}.cu"), no_extern_c=True, arch=arch,
                        options=["-O3", "--use_fast_math", "-std=c++17"])


def function(name: str, kernel: str, device_index: int) -> Any:
    import torch

    major, minor = torch.cuda.get_device_capability(device_index)
    return module(name, f"sm_{major}{minor}").get_function(kernel)


class on_torch_stream:
    """Order a pycuda launch with torch's work.

    pycuda cannot adopt torch's stream handle, so its launches go to the legacy default stream
    (``stream=None``). That *is* torch's stream when torch runs on its default stream (the usual
    case, and what the benchmarks do). On any other stream, torch's work is waited for before the
    launch and the launch is waited for after it: correct, but not capturable in a CUDA graph.
    """

    def __enter__(self) -> None:
        import torch

        self._side = torch.cuda.current_stream().cuda_stream != 0
        if self._side:
            torch.cuda.current_stream().synchronize()

    def __exit__(self, *exc: object) -> None:
        if self._side:
            import pycuda.driver as drv

            drv.Context.synchronize()
