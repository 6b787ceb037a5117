"""``layernorm`` (``xp.ops.fused_layernorm``) and its backward ``layernorm_bwd``: one kernel each way.

Both take x as [M, N]; the backward's provider is the forward's (the policy names ``layernorm``).
"""

from xrt.kernels.opdef import MODEL_ROWS, ROW_SHAPES, OpDef, TritonKernel, with_large

_DTYPES = ("bfloat16", "float16", "float32")
_SHAPES = with_large(ROW_SHAPES, MODEL_ROWS)  # and the GPT models' rows (8192 x 768, 1024, 2048)

DEFS = (
    OpDef("layernorm", "LayerNorm forward: y, and the rows' mean and rstd", gpucheck=True,
          routes=("torch.nn.functional.layer_norm", "torch.layer_norm"),
          shapes=_SHAPES, dtypes=_DTYPES,
          dump=(TritonKernel("_layernorm_fwd_kernel",
                             {"x_ptr": "*T", "w_ptr": "*T", "b_ptr": "*T", "y_ptr": "*T", "mean_ptr": "*fp32",
                              "rstd_ptr": "*fp32", "rstd_off": "i32", "M": "i32", "N": "i32", "eps": "fp32"},
                             {"STATS": True, "ROWS": 1, "BLOCK": 4096}),)),
    OpDef("layernorm_bwd", "LayerNorm backward: dx, dweight, dbias", module="layernorm", policy="layernorm",
          gpucheck=True, shapes=_SHAPES, dtypes=_DTYPES,
          dump=(TritonKernel("_layernorm_bwd_kernel",
                             {"dy_ptr": "*T", "x_ptr": "*T", "w_ptr": "*T", "mean_ptr": "*fp32", "rstd_ptr": "*fp32",
                              "dx_ptr": "*T", "dw_part_ptr": "*fp32", "db_part_ptr": "*fp32", "rstd_off": "i32",
                              "part_off": "i32", "M": "i32", "N": "i32", "rows_per_program": "i32"},
                             {"BLOCK": 4096}),)),
)
