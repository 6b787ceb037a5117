"""``matmul`` ([M, K] x [K, N]) and ``bmm`` ([B, M, K] x [B, K, N]): xrt's GEMM kernels.

A shape is (M, N, K), bmm's (B, M, N, K). The policy's ``matmul`` entry is PyTorch's BLAS switch
as well as the choice of these kernels (xrt.pytorch.policy); it picks bmm's provider too.
"""

from xrt.kernels.opdef import SWITCH, OpDef, TritonKernel

_DTYPES = ("bfloat16", "float32")
# The default tile (xrt/kernels/spaces.py) of the tiled kernel; the TMA kernel takes host-built
# descriptors, which a signature string cannot describe.
_GEMM = (TritonKernel(
    "_matmul_kernel",
    {"a_ptr": "*T", "b_ptr": "*T", "c_ptr": "*T", "bias_ptr": "*T", "z_ptr": "*T", **{n: "i32" for n in (
        "M", "N", "K", "stride_ab", "stride_am", "stride_ak", "stride_bb", "stride_bk", "stride_bn", "stride_cb",
        "stride_cm", "stride_cn")}},
    {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "PRECISION": "tf32", "HAS_BIAS": False, "ACT": 0,
     "STORE_Z": False},
    fp32={"BLOCK_K": 16, "PRECISION": "ieee"}),)

# A GPT-style linear's GEMMs (d = 1024, batch x seq = 8192; xrt/kernels/spaces.py LINEAR_FEATURES): the
# QKV projection (d -> 3d), the MLP's up (d -> 4d) and down (4d -> d) projections, as [M, K] x [K, N].
_LINEAR = ((8192, 3072, 1024), (8192, 4096, 1024), (8192, 1024, 4096))

_ROUTES = ("torch.nn.functional.linear", "torch.matmul", "torch.Tensor.matmul", "torch.Tensor.__matmul__", "torch.mm",
           "torch.Tensor.mm", "torch.bmm", "torch.Tensor.bmm")

DEFS = (
    OpDef("matmul", "C = A @ B", policy=SWITCH, routes=_ROUTES, batched="bmm", dtypes=_DTYPES, dump=_GEMM,
          shapes={"quick": ((16, 8, 32),), "small": ((16, 4096, 4096), (1024, 1024, 1024)),
                  "large": ((4096, 4096, 4096), (8192, 8192, 8192), (4097, 4096, 4096), *_LINEAR)}),
    OpDef("bmm", "C[b] = A[b] @ B[b]", module="matmul", policy="matmul", dtypes=_DTYPES, dump=_GEMM,
          shapes={"quick": ((2, 16, 8, 32),), "small": ((8, 256, 256, 256),),
                  "large": ((64, 512, 512, 512), (8, 2048, 2048, 2048))}),
)
