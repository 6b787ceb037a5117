"""Raw CUDA C kernels, compiled at first use through pycuda, running in torch's CUDA context.

pycuda shares torch's primary context (``pycuda.autoprimaryctx``), so kernels take tensors'
device pointers directly and run on torch's current stream.
"""

from __future__ import annotations

import functools
from typing import Any

from xrt.kernels import cuda_source
from xrt.kernels.launch_spec import LaunchSpec

INSTALL_HINT = "pip install -e '.[cuda]' in an xpuruntime checkout (builds pycuda from source; needs the CUDA toolkit)"


_MISSING: list[str | None] = []


def missing() -> str | None:
    """Why CUDA C kernels cannot run here, or ``None`` when they can (asked once a process)."""
    if not _MISSING:
        _MISSING.append(_missing())
    return _MISSING[0]


def _missing() -> str | None:
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
def cubin(name: str, arch: str, defines: tuple[tuple[str, Any], ...] = ()) -> bytes:
    """``cuda/<name>.cu`` (with its headers: :func:`xrt.kernels.cuda_source`) compiled for ``arch``
    (``sm_90``) with ``defines`` (``(("XRT_BM", 128),)`` -> ``-DXRT_BM=128``: the compile-time
    parameters of a config), once per process (and cached on disk by pycuda)."""
    from pycuda.compiler import compile

    return compile(cuda_source(f"{name}.cu"), no_extern_c=True, arch=arch,
                   options=["-O3", "--use_fast_math", "-std=c++17", *(f"-D{k}={v}" for k, v in defines)])


@functools.cache
def module(name: str, arch: str, defines: tuple[tuple[str, Any], ...] = ()) -> Any:
    """:func:`cubin`, loaded once per process into torch's primary context."""
    import pycuda.autoprimaryctx  # noqa: F401  (torch's primary context, not a new one)
    from pycuda.driver import module_from_buffer

    return module_from_buffer(cubin(name, arch, defines))


def function(name: str, kernel: str, device_index: int, defines: tuple[tuple[str, Any], ...] = ()) -> Any:
    import torch

    major, minor = torch.cuda.get_device_capability(device_index)
    return module(name, f"sm_{major}{minor}", defines).get_function(kernel)


@functools.cache
def prepared(name: str, kernel: str, device_index: int, arg_types: str,
             defines: tuple[tuple[str, Any], ...] = ()) -> Any:
    """Kernel ``kernel`` of ``cuda/<name>.cu`` for a device, prepared once for its argument types
    (pycuda struct codes: ``P`` a pointer, ``q`` int64, ``i`` int32, ``f`` float32), so a launch
    packs its arguments with one ``struct.pack`` instead of marshalling each one. ``defines``: see
    :func:`module`."""
    fn = function(name, kernel, device_index, defines)
    fn.prepare(arg_types)
    fn.xrt_source = (name, kernel, device_index, defines)  # for Site.native
    return fn


def launch(fn: Any, device: Any, grid: tuple[int, ...], block: tuple[int, int, int], *args: Any,
           shared: int = 0) -> None:
    """``fn.prepared_call`` on ``device`` (a CUDA ``torch.device``), ordered with torch's work.

    On torch's default stream (the legacy stream, which pycuda launches on) that is the launch
    alone; on another stream see :class:`on_torch_stream`. Pointers are plain ints
    (``tensor.data_ptr()``).
    """
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    if torch.cuda.current_device() != index:
        with torch.cuda.device(index):
            launch(fn, device, grid, block, *args, shared=shared)
        return
    if torch._C._cuda_getCurrentRawStream(index) == 0:
        fn.prepared_call(grid, block, *args, shared_size=shared)
        return
    with on_torch_stream():
        fn.prepared_call(grid, block, *args, shared_size=shared)


class Site:
    """One launch of a prepared kernel with a fixed grid and block for a fixed device:
    ``Site(fn, device, grid, block)(*args)``. On that device and torch's default stream (the usual
    case) a call packs the arguments and launches, nothing else; anywhere else it takes
    :func:`launch`, which switches device or orders the launch with torch's stream."""

    __slots__ = ("fn", "device", "index", "grid", "block", "fmt", "go", "current", "stream")

    def __init__(self, fn: Any, device: Any, grid: tuple[int, ...], block: tuple[int, int, int]) -> None:
        import torch

        self.fn, self.device, self.grid, self.block = fn, device, grid, block
        self.index = device.index if device.index is not None else torch.cuda.current_device()
        self.fmt = fn.arg_format
        self.go = fn._launch_kernel  # what prepared_call ends in, without its per-call argument handling
        self.current, self.stream = torch._C._cuda_getDevice, torch._C._cuda_getCurrentRawStream

    def __call__(self, *args: Any) -> None:
        if self.current() == self.index and self.stream(self.index) == 0:
            self.go(self.grid, self.block, _pack(self.fmt, *args), 0, None)
        else:
            launch(self.fn, self.device, self.grid, self.block, *args)


    def native(self) -> LaunchSpec | None:
        """This launch as :class:`~xrt.kernels.launch_spec.LaunchSpec` describes it (the kernel's
        cubin and name, its grid and block, a type per argument), or ``None`` for a kernel that
        :func:`prepared` did not make or an argument type outside ``launch_spec.TYPES``."""
        src = getattr(self.fn, "xrt_source", None)
        types = tuple(_STRUCT_TYPES.get(c, "?") for c in self.fmt)
        if src is None or "?" in types:
            return None
        import torch

        name, kernel, index, defines = src
        major, minor = torch.cuda.get_device_capability(index)
        grid = (*self.grid, 1, 1)[:3]
        return LaunchSpec(0, grid, self.block, 0, types, cubin=cubin(name, f"sm_{major}{minor}", defines),
                          kernel=kernel)


# pycuda's struct codes (prepared argument types) -> launch_spec.TYPES
_STRUCT_TYPES = {"P": "ptr", "q": "i64", "i": "i32", "Q": "u64", "I": "u32", "f": "f32", "d": "f64", "b": "i8"}


def _pack(fmt: str, *args: Any) -> Any:
    global _pack
    from pycuda._pvt_struct import pack

    _pack = pack  # bound at the first launch (pycuda is imported by then)
    return pack(fmt, *args)


_SMS: dict[int, int] = {}


def sm_count(device: Any) -> int:
    """Multiprocessors of a CUDA ``torch.device`` (cached: launchers size grids by it every call)."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    sms = _SMS.get(index)
    if sms is None:
        sms = _SMS[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return sms


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
