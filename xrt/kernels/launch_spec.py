"""A compiled kernel's launch, described for a launcher outside Python.

Both kernel families can describe a launch whose grid, block and scalar arguments a plan has fixed
(``Site.native()`` of :mod:`xrt.kernels.triton.launch` and of :mod:`xrt.kernels.cuda`): which
function, how it is launched, and the type of each of the arguments the Python call passes (in
the call's order; ``None`` for one the kernel does not take, such as a Triton constexpr; ``"desc"``
for a host TMA descriptor, which Triton's launcher expands into its CUtensorMap, shape and strides).
The native ops (``xrt.pytorch.ops.native``) pack their parameters from that.
"""

from __future__ import annotations

from typing import Any, NamedTuple

# The parameter types a native launch packs, by name: a device pointer, integers, floats.
TYPES = ("ptr", "i8", "i32", "i64", "u32", "u64", "f32", "f64")


class LaunchSpec(NamedTuple):
    function: int  # a CUfunction handle, or 0 where ``cubin`` and ``kernel`` name it instead
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared: int  # dynamic shared memory, bytes
    types: tuple[str | None, ...]  # per argument of the Python call: one of TYPES, or None (not passed)
    keep: Any = None  # what must stay alive for ``function`` to stay loaded (the compiled kernel)
    cubin: bytes = b""
    kernel: str = ""
    null_tail: int = 0  # parameters after the call's: null pointers (Triton's scratch buffers)
    descs: tuple = ()  # per "desc" argument, in order: the compiled kernel's metadata of it (swizzle, block, ...)


class Desc(NamedTuple):
    """A host TMA descriptor in a launch template: the tensor at slot ``slot`` (plus ``offset``
    bytes) seen as ``shape`` with ``strides`` (elements; the last stride 1), as the Python call's
    ``TensorDescriptor`` describes it. Its block, swizzle and element type are the compiled kernel's."""

    slot: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0
