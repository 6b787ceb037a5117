"""``attention`` (``xp.ops.fused_attention``) and its backward ``attention_bwd``: FlashAttention-style
Triton kernels beside PyTorch's scaled_dot_product_attention (provider "torch").

A shape is (B, H, S, D, causal): S_q = S_k = S, causal 0 or 1. The policy's ``attention`` entry is
PyTorch's SDPA-backend switch as well as the choice of these kernels (xrt.pytorch.policy).
"""

from xrt.kernels.opdef import MODEL_ATTENTION, SWITCH, OpDef, with_large

_PROVIDERS = ("torch", "triton")
_DTYPES = ("bfloat16", "float16")
# quick: one tiny case for the CPU profile (the Triton rows run in the interpreter, fp16 only).
_SHAPES = {"quick": ((1, 1, 16, 64, 0),),
           "small": ((1, 16, 512, 64, 0), (1, 16, 512, 128, 1)),
           "large": ((4, 16, 4096, 128, 0), (4, 16, 4096, 128, 1), (4, 16, 4096, 64, 0), (4, 16, 16384, 128, 1))}
_SHAPES = with_large(_SHAPES, MODEL_ATTENTION)  # and the GPT models' causal attention

DEFS = (
    OpDef("attention", "softmax(q k^T * scale) v, causal or not", providers=_PROVIDERS, policy=SWITCH,
          routes=("torch.nn.functional.scaled_dot_product_attention",),
          shapes=_SHAPES, dtypes=_DTYPES),
    OpDef("attention_bwd", "attention's dq, dk, dv", module="attention", providers=_PROVIDERS,
          policy="attention", shapes=_SHAPES, dtypes=_DTYPES),
)
