"""``vector_add``: y = a + b elementwise."""

from xrt.kernels.opdef import VECTOR_SHAPES, OpDef, TritonKernel

DEFS = (
    OpDef("vector_add", "y = a + b elementwise", flat=True, gpucheck=True,
          shapes=VECTOR_SHAPES, dtypes=("float32", "bfloat16"),
          dump=(TritonKernel("_vector_add_kernel", {"a_ptr": "*T", "b_ptr": "*T", "y_ptr": "*T", "n": "i64"},
                             {"BLOCK_SIZE": 1024}),)),
)
