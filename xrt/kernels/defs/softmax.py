"""``softmax``: softmax over the last dim, one row a program."""

from xrt.kernels.opdef import ROW_SHAPES, OpDef, TritonKernel

DEFS = (
    OpDef("softmax", "softmax over the last dim", gpucheck=True,
          routes=("torch.nn.functional.softmax", "torch.softmax", "torch.Tensor.softmax"),
          shapes=ROW_SHAPES, dtypes=("bfloat16", "float32"),
          dump=(TritonKernel("_softmax_kernel", {"x_ptr": "*T", "y_ptr": "*T", "M": "i32", "N": "i32"},
                             {"ROWS": 1, "BLOCK": 4096}),)),
)
