"""``square``: y = x * x, the op every layer of xrt is first proven on."""

from xrt.kernels.opdef import VECTOR_SHAPES, OpDef, TritonKernel

DEFS = (
    OpDef("square", "y = x * x elementwise", flat=True, gpucheck=True,
          shapes=VECTOR_SHAPES, dtypes=("float32", "bfloat16"),
          dump=(TritonKernel("_square_kernel", {"x_ptr": "*T", "y_ptr": "*T", "n": "i64"}, {"BLOCK_SIZE": 1024}),)),
)
