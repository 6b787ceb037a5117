"""``linear_gelu`` (``xp.ops.linear_gelu``): ``gelu(x @ weight.T + bias)``, bias and GELU in the GEMM's
epilogue (xrt's Triton GEMM), and its backward ``linear_gelu_bwd`` (the provider follows the forward's).

A shape is (M, N, K): x [M, K], weight [N, K]; the GPT MLP's up-projection is (tokens, 4d, d).
"""

from dataclasses import replace

from xrt.kernels.defs.matmul import _GEMM
from xrt.kernels.opdef import OpDef, TritonKernel

_DTYPES = ("bfloat16", "float16", "float32")
_SHAPES = {"quick": ((16, 24, 32),), "small": ((16, 4096, 1024), (256, 4096, 1024)),
           "large": ((8192, 4096, 1024), (8192, 8192, 2048))}

DEFS = (
    OpDef("linear_gelu", "gelu(x @ weight.T + bias), bias and GELU in the GEMM epilogue",
          providers=("torch", "triton", "xpu"), uses=("matmul",), shapes=_SHAPES, dtypes=_DTYPES,
          # the GEMM with its epilogue on: bias, tanh GELU, the pre-activation stored
          dump=(replace(_GEMM[0], constexprs={**_GEMM[0].constexprs, "HAS_BIAS": True, "ACT": 1, "STORE_Z": True}),)),
    OpDef("linear_gelu_bwd", "linear_gelu backward from the saved pre-activation: dx, dweight, dbias",
          module="linear_gelu", policy="linear_gelu", providers=("torch", "triton", "xpu"), uses=("matmul",),
          shapes=_SHAPES, dtypes=_DTYPES,
          dump=(TritonKernel("_gelu_grad_kernel", {"dy_ptr": "*T", "z_ptr": "*T", "dz_ptr": "*T", "n": "i64"},
                             {"ACT": 1, "BLOCK_SIZE": 1024}),)),
)
