"""``gpt_infer`` and ``gpt_train``: an unmodified GPT-style model, on torch's kernels or routed to xrt's.

The model is plain PyTorch (xrt.pytorch.modules.gpt): pre-norm blocks of ``nn.LayerNorm``,
``nn.Linear``, causal ``F.scaled_dot_product_attention`` and a GELU MLP; nothing in it names xrt.
Provider "torch" runs it with no policy; "triton" runs it under a policy that routes its linear,
layernorm, softmax and attention calls to xrt's Triton kernels (xrt.pytorch.routing). A shape is
(batch, sequence, width, heads, blocks). The ``_compiled`` twins run the model ``torch.compile``'d
(compiled inside the policy). The ``_fused`` ops run a copy of the model after ``xp.fuse`` (residual
add + LayerNorm and Linear + GELU as one op each, xrt.pytorch.fusion) on "triton", the model as
written on "torch". The model reads the routed ops' files (and the fused ops' for ``_fused``), so a
change to any of them re-measures it (``uses``).
"""

from xrt.kernels.opdef import MODEL_SHAPES, OpDef

# Two of the GPT-style shapes the model benchmark measures (benchmarks/model_bench.py).
_GPT = {"quick": ((2, 16, 32, 2, 1),), "small": (MODEL_SHAPES[0],), "large": (MODEL_SHAPES[1],)}
_USES = ("matmul", "layernorm", "softmax", "attention")
_FUSED_USES = (*_USES, "add_layernorm", "linear_gelu")
_FUSED = "through xp.fuse"

DEFS = tuple(
    OpDef(name, doc, module="gpt", providers=("torch", "triton"), policy="matmul", spaces={}, shapes=_GPT,
          dtypes=("bfloat16",), model=True, uses=_FUSED_USES if "_fused" in name else _USES,
          step_items="tokens", step_dims=(0, 1))  # a step's tokens: batch x sequence
    for name, doc in (("gpt_infer", "a GPT-style model's inference step"),
                      ("gpt_train", "a GPT-style model's training step (forward and backward)"),
                      ("gpt_infer_compiled", "a GPT-style model's inference step, torch.compile'd"),
                      ("gpt_train_compiled", "a GPT-style model's training step, torch.compile'd"),
                      ("gpt_infer_fused", f"a GPT-style model's inference step, {_FUSED}"),
                      ("gpt_train_fused", f"a GPT-style model's training step, {_FUSED}"),
                      ("gpt_infer_fused_compiled", f"a GPT-style model's inference step, {_FUSED}, torch.compile'd"),
                      ("gpt_train_fused_compiled", f"a GPT-style model's training step, {_FUSED}, torch.compile'd")))
