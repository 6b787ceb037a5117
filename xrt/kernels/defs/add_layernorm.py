"""``add_layernorm`` (``xp.ops.add_layernorm``): ``h = x + residual``, ``y = layer_norm(h)`` in one
kernel, and its backward ``add_layernorm_bwd`` (the provider follows the forward's).

Both take x as [M, N]; a shape is (M, N), the pre-norm residual stream's (tokens, model width).
"""

from xrt.kernels.opdef import OpDef, TritonKernel

_DTYPES = ("bfloat16", "float16", "float32")
_SHAPES = {"quick": ((4, 1023),), "small": ((1, 1024), (32, 2048)),
           "large": ((8192, 1024), (8192, 2048), (16384, 4096), (4096, 8192))}

DEFS = (
    OpDef("add_layernorm", "residual add + LayerNorm: y and h = x + residual", providers=("torch", "triton", "xpu"),
          uses=("layernorm", "softmax"), gpucheck=True, shapes=_SHAPES, dtypes=_DTYPES,
          dump=(TritonKernel("_add_layernorm_fwd_kernel",
                             {"x_ptr": "*T", "r_ptr": "*T", "w_ptr": "*T", "b_ptr": "*T", "h_ptr": "*T",
                              "y_ptr": "*T", "mean_ptr": "*fp32", "rstd_ptr": "*fp32", "M": "i32", "N": "i32",
                              "eps": "fp32"},
                             {"ROWS": 1, "BLOCK": 2048}),)),
    OpDef("add_layernorm_bwd", "residual add + LayerNorm backward: dx (= dresidual), dweight, dbias",
          module="add_layernorm", policy="add_layernorm", providers=("torch", "triton", "xpu"),
          uses=("layernorm", "softmax"), gpucheck=True, shapes=_SHAPES, dtypes=_DTYPES,
          dump=(TritonKernel("_add_layernorm_bwd_kernel",
                             {"dy_ptr": "*T", "dh_ptr": "*T", "h_ptr": "*T", "w_ptr": "*T", "mean_ptr": "*fp32",
                              "rstd_ptr": "*fp32", "dx_ptr": "*T", "dw_part_ptr": "*fp32", "db_part_ptr": "*fp32",
                              "part_off": "i32", "M": "i32", "N": "i32", "rows_per_program": "i32"},
                             {"HAS_DH": True, "BLOCK": 2048}),)),
)
