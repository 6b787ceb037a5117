"""Compile the direct conv kernel for sm_90 (no GPU needed) and print its global x/w load kinds as
JSON, for ``C`` given as ``VEC x CV`` with CV of unknown divisibility (C = 24, say). Run by
tests/test_kernels_conv.py in a process without TRITON_INTERPRET (the interpreter has no compiler)."""

import json
import re
import sys

import triton
from triton.backends.compiler import GPUTarget

from xrt.kernels.triton.conv_bn_relu import _conv3x3_direct_kernel

out = {}
for vec in (8, 1):
    sig = {"x_ptr": "*fp16", "w_ptr": "*fp16", "b_ptr": "*fp32", "y_ptr": "*fp16",
           **{n: "i32" for n in ("H", "W", "CV", "K", "Ho", "Wo", "tiles_h", "tiles_w")}}
    const = {"STRIDE": 1, "PAD": 1, "TH": 8, "TW": 16, "BLOCK_N": 64, "BLOCK_K": 32, "VEC": vec, "HAS_BIAS": True,
             "RELU": True, "PRECISION": "tf32"}
    names = list(sig)
    # What a launch specializes: 16-byte-aligned pointers and K a multiple of 16; CV unknown.
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in ("x_ptr", "w_ptr", "b_ptr", "y_ptr", "K")}
    src = triton.compiler.ASTSource(fn=_conv3x3_direct_kernel, signature={**sig, **{k: "constexpr" for k in const}},
                                    constexprs=const, attrs=attrs)
    ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "num_stages": 3}).asm["ptx"]
    out[vec] = {"cp_async": len(re.findall(r"cp\.async\.c[ag]\.shared\.global", ptx)),
                "scalar_b16_loads": len(re.findall(r"ld\.global(?:\.[a-z0-9:]+)*\.b16\b", ptx))}
json.dump(out, sys.stdout)
