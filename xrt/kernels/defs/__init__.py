"""Every op's definition (:class:`xrt.kernels.opdef.OpDef`), one file per op: ``xrt/kernels/defs/<op>.py``
holds a ``DEFS`` tuple (a fused op's backward sits beside its forward).

Adding an op: its kernel files and its file here; every file of this package is read. Everything
that lists ops reads :data:`OPS`.
"""

from __future__ import annotations

import importlib
import pkgutil

from xrt.kernels.opdef import OpDef

# The order in which reports such as gpucheck's list the ops: these first, then any other file of
# this package by name (a new op needs no entry here).
ORDER = ("square", "vector_add", "window_sum", "softmax", "layernorm", "add_layernorm", "matmul", "linear_gelu",
         "attention", "conv_bn_relu", "linear_cross_entropy", "gpt")


def _modules() -> tuple[str, ...]:
    """The definition files of this package (their stems): those of :data:`ORDER` first, in its order."""
    found = {m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")}
    return tuple(m for m in ORDER if m in found) + tuple(sorted(found - set(ORDER)))


MODULES = _modules()


def _collect() -> dict[str, OpDef]:
    out: dict[str, OpDef] = {}
    for module in MODULES:
        for d in importlib.import_module(f"{__name__}.{module}").DEFS:
            if d.name in out:
                raise RuntimeError(f"op {d.name!r} is defined twice (xrt/kernels/defs/{module}.py)")
            out[d.name] = d
    return out


OPS: dict[str, OpDef] = _collect()  # name -> definition, in the order of MODULES


def get(name: str) -> OpDef:
    """The definition of op ``name``; a ValueError naming the known ops otherwise."""
    d = OPS.get(name)
    if d is None:
        raise ValueError(f"unknown op {name!r}; known: {', '.join(sorted(OPS))}")
    return d
