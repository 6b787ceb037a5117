"""xrt's custom ops. Each is a ``torch.library`` custom op with providers chosen by the policy."""

import sys

from xrt.pytorch.ops.add_layernorm import add_layernorm
from xrt.pytorch.ops.attention import fused_attention
from xrt.pytorch.ops.conv_bn_relu import conv_bn_relu
from xrt.pytorch.ops.dispatch import providers
from xrt.pytorch.ops.layernorm import fused_layernorm
from xrt.pytorch.ops.linear_cross_entropy import linear_cross_entropy
from xrt.pytorch.ops.linear_gelu import linear_gelu
from xrt.pytorch.ops.matmul import bmm, matmul
from xrt.pytorch.ops.softmax import softmax
from xrt.pytorch.ops.square import square
from xrt.pytorch.ops.vector_add import vector_add
from xrt.pytorch.ops.window_sum import window_sum


def _load_other_ops() -> list[str]:
    """Import the op module (``xrt/pytorch/ops/<file>.py``) of every definition file not imported
    above, and export its public function of the op's name: a new op needs no line here."""
    import importlib
    import importlib.util

    from xrt.kernels import defs

    out = []
    for module in defs.MODULES:
        name = f"{__name__}.{module}"
        if name in sys.modules or importlib.util.find_spec(name) is None:
            continue
        loaded = importlib.import_module(name)
        for d in defs.OPS.values():
            fn = getattr(loaded, d.name, None)
            if d.file == module and callable(fn):  # (it replaces the submodule's binding of that name)
                globals()[d.name] = fn
                out.append(d.name)
    return out


__all__ = ["add_layernorm", "bmm", "conv_bn_relu", "fused_attention", "fused_layernorm", "linear_cross_entropy",
           "linear_gelu", "matmul", "providers", "softmax", "square", "vector_add", "window_sum"]
__all__ += _load_other_ops()
