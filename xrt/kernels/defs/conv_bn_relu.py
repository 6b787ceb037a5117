"""``conv_bn_relu``: conv3x3 + BatchNorm + ReLU on NHWC, fused (no CUDA C); and the CNN built of it.

A shape is (N, C, H, W, K, stride), padding 1, inference (BatchNorm folded). Provider "torch" is the
unfused baseline (cuDNN conv, BatchNorm, ReLU). Each stride has its own tuning space
(``conv_bn_relu_s1.triton``, ``conv_bn_relu_s2.triton``); the suites and the tuner take stride 1's.
``cnn_infer`` and ``cnn_train`` time a small ResNet-style CNN (xrt.pytorch.modules), shape (batch,
width), CIFAR-10-shaped images under AMP: every conv + BatchNorm + ReLU unfused ("torch") or fused.
"""

from xrt.kernels.opdef import OpDef, TritonKernel

_PREC = {"PRECISION": "tf32"}
_FP32 = {"PRECISION": "ieee"}
_I32 = "i32"
# The fused conv's three kernels at a 128-pixel tile, 64 + 64 channel steps, 16-byte vectors.
_DUMP = (
    TritonKernel("_conv3x3_direct_kernel",
                 {"x_ptr": "*T", "w_ptr": "*T", "b_ptr": "*fp32", "y_ptr": "*T",
                  **{n: _I32 for n in ("H", "W", "CV", "K", "Ho", "Wo", "tiles_h", "tiles_w")}},
                 {"STRIDE": 1, "PAD": 1, "TH": 8, "TW": 16, "BLOCK_N": 64, "BLOCK_K": 64, "VEC": 8, "HAS_BIAS": True,
                  "RELU": True, **_PREC}, fp32=_FP32),
    TritonKernel("_im2row_kernel",
                 {"x_ptr": "*T", "a_ptr": "*T", **{n: _I32 for n in ("M", "H", "W", "CV", "Ho", "Wo")}},
                 {"STRIDE": 2, "PAD": 1, "BLOCK_M": 64, "BLOCK_C": 64, "VEC": 8}),
    TritonKernel("_gemm_bias_relu_kernel",
                 {"a_ptr": "*T", "w_ptr": "*T", "b_ptr": "*fp32", "y_ptr": "*T", "M": _I32, "K": _I32, "Kk": _I32},
                 {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "HAS_BIAS": True, "RELU": True, **_PREC}, fp32=_FP32),
)
_CNN = {"quick": ((2, 8),), "small": ((32, 32),), "large": ((256, 64),)}

DEFS = (
    OpDef("conv_bn_relu", "relu(batchnorm(conv3x3(x))), NHWC, BatchNorm folded",
          providers=("torch", "triton", "xpu"), spaces={"triton": "conv_bn_relu_s1.triton"},
          shapes={"quick": ((1, 8, 6, 6, 8, 1),),
                  "small": ((1, 64, 56, 56, 64, 1), (8, 128, 28, 28, 128, 2)),
                  "large": ((64, 64, 56, 56, 64, 1), (64, 256, 14, 14, 256, 1), (64, 64, 56, 56, 128, 2),
                            (64, 128, 28, 28, 256, 2), (64, 256, 14, 14, 512, 2))},
          dtypes=("float16", "float32"), dump=_DUMP),
    OpDef("cnn_infer", "a small CNN's inference step", module="conv_bn_relu", providers=("torch", "triton"),
          policy="conv_bn_relu", spaces={}, shapes=_CNN, dtypes=("float16",), model=True,
          step_items="images", step_dims=(0,)),
    OpDef("cnn_train", "a small CNN's training step", module="conv_bn_relu", providers=("torch", "triton"),
          policy="conv_bn_relu", spaces={}, shapes=_CNN, dtypes=("float16",), model=True,
          step_items="images", step_dims=(0,)),
)
