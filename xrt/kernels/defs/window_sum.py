"""``window_sum``: y[..., i] = x[..., i] + x[..., i + 1] + x[..., i + 2] over the last dim."""

from xrt.kernels.opdef import OpDef, TritonKernel

DEFS = (
    OpDef("window_sum", "sums of three neighbours over the last dim", gpucheck=True,
          shapes={"quick": ((4, 1023),), "small": ((1, 4096), (16, 4096)), "large": ((16384, 8192), (1, 1 << 28))},
          dtypes=("float32", "bfloat16"),
          dump=(TritonKernel("_window_sum_kernel", {"x_ptr": "*T", "y_ptr": "*T", "n": "i32"},
                             {"BLOCK_SIZE": 2048}),)),
)
