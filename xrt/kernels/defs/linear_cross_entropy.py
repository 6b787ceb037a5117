"""``linear_cross_entropy``: the mean ``cross_entropy(h @ w.T, target)`` without the [tokens, vocab] logits.

A shape is (N, d, V): N tokens of d features, a vocabulary of V. The timed call is the loss's forward
and backward (provider "torch": ``F.cross_entropy(F.linear(h, w), target)`` through autograd).
"""

from xrt.kernels.opdef import OpDef, TritonKernel

DEFS = (
    OpDef("linear_cross_entropy", "mean cross_entropy(h @ w.T, target), logits chunked, gradients in the forward",
          providers=("torch", "triton"),
          shapes={"quick": ((37, 16, 100),),
                  "small": ((1024, 1024, 32768),),
                  "large": ((8192, 1024, 32768), (8192, 2048, 50304), (8192, 2048, 128256))},
          dtypes=("bfloat16",),
          dump=(TritonKernel("_lce_rows_kernel",
                             {"logits_ptr": "*T", "target_ptr": "*i64", "loss_ptr": "*fp32", "count_ptr": "*fp32",
                              "V": "i32", "row_stride": "i32", "ignore_index": "i32", "smoothing": "fp32"},
                             {"BLOCK": 4096}),)),
)
