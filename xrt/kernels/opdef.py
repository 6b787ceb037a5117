"""What an op's definition holds: :class:`OpDef`, and :class:`TritonKernel` for ``xrt kernels dump``.

Each op is defined once, in ``xrt/kernels/defs/<op>.py``; :mod:`xrt.kernels.defs` collects the
definitions. The policy's op list, gpucheck's ops, ``xrt kernels``, the benchmark specs, the tuner's
help and the changed-file map of ``xrt bench run --changed-only`` read them. Stdlib only, no
imports at all: the CLI builds its parsers from these without torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

Shape = tuple[int, ...]

# Every provider name an op may have; the policy's choices for a provider op are ``auto`` plus its own.
PROVIDERS = ("torch", "triton", "cuda", "xpu")
# ``OpDef.policy`` of an op whose policy entry is one of PyTorch's own switches (xrt.pytorch.policy
# registers those with the functions that flip them).
SWITCH = "switch"

# The shape sets the elementwise ops (flat tensors) and the row kernels ([M, N], one row a program)
# are timed on. "quick" is the CI profile (CPU, tiny shapes), "small" the launch-bound sizes
# (reported with CUDA graphs), "large" the bandwidth-bound ones.
VECTOR_SHAPES: Mapping[str, tuple[Shape, ...]] = {
    "quick": ((4096,),), "small": ((1 << 12,), (1 << 16,)), "large": ((1 << 24,), (1 << 28,))}
ROW_SHAPES: Mapping[str, tuple[Shape, ...]] = {
    "quick": ((4, 1023),), "small": ((1, 4096), (32, 4096)),
    "large": ((16384, 4096), (8192, 8192), (4096, 16384), (2048, 32768))}

# The GPT-style models the model suites and benchmarks/model_bench.py run: (batch, sequence, width,
# heads, blocks). Their layernorm and attention calls are timed in those ops' "large" sets too, so
# that ``auto`` decides a model's calls from measurements (rule 1 of xrt/kernels/autotable.py), not
# from a neighbouring bucket.
MODEL_SHAPES: tuple[Shape, ...] = ((8, 1024, 1024, 16, 4), (4, 2048, 2048, 16, 4), (16, 512, 768, 12, 4))
MODEL_ROWS: tuple[Shape, ...] = tuple((b * s, d) for b, s, d, _, _ in MODEL_SHAPES)  # a layernorm's [rows, width]
MODEL_ATTENTION: tuple[Shape, ...] = tuple((b, h, s, d // h, 1) for b, s, d, h, _ in MODEL_SHAPES)  # causal


def with_large(shapes: Mapping[str, tuple[Shape, ...]], more: tuple[Shape, ...]) -> dict[str, tuple[Shape, ...]]:
    """``shapes`` with ``more`` added to its "large" set (those already there kept once)."""
    large = shapes["large"] + tuple(s for s in more if s not in shapes["large"])
    return {**shapes, "large": large}

# ``xrt kernels dump --dtype``: the Triton pointer type a ``"*T"`` argument takes.
POINTER = {"float32": "*fp32", "float16": "*fp16", "bfloat16": "*bf16"}


@dataclass(frozen=True)
class TritonKernel:
    """One ``@triton.jit`` kernel of the op's ``xrt/kernels/triton/<file>.py`` that ``xrt kernels dump``
    compiles: its name, each runtime argument's Triton type in order (``"*T"``: a pointer to the
    dtype asked for), one representative set of constexprs, and those that differ in float32."""

    fn: str
    signature: Mapping[str, str]
    constexprs: Mapping[str, Any]
    fp32: Mapping[str, Any] = field(default_factory=dict)

    def types(self, dtype: str) -> dict[str, str]:
        """The signature for ``dtype`` (``"bfloat16"``): each ``"*T"`` its pointer type."""
        return {k: POINTER[dtype] if v == "*T" else v for k, v in self.signature.items()}

    def constants(self, dtype: str) -> dict[str, Any]:
        return {**self.constexprs, **(self.fp32 if dtype == "float32" else {})}


@dataclass(frozen=True)
class OpDef:
    """One op, as every layer above the kernels knows it.

    ``name`` is the key everywhere: the policy (``square=triton``), the dispatch registry, the
    tuning spaces' prefix (``square.triton``), the suites' class (``bench_ops.Square``: stored in
    users' databases, never renamed) and the tuner's files (``results/tuned/square.triton-...``).
    """

    name: str
    doc: str  # one line: what it computes
    # The stem of its files (xrt/kernels/{reference,triton,cuda}/<file>.*, xrt/pytorch/ops/<file>.py)
    # when it is not ``name``: layernorm_bwd lives in layernorm's files. Each file defines a
    # function named ``name``: the reference, the Triton and the CUDA C launchers.
    module: str = ""
    # Its providers, torch first. "xpu" runs the Triton kernel on Intel GPUs; the suites time the rest.
    providers: tuple[str, ...] = PROVIDERS
    # Whose policy entry picks its provider: "" its own (a provider op, choices auto + providers),
    # SWITCH (its own entry is a PyTorch switch, xrt.pytorch.policy), or another op's name (the
    # backward follows the forward: layernorm_bwd follows layernorm).
    policy: str = ""
    # provider -> tuning-space key of xrt/kernels/spaces.py; None: "<name>.<provider>" for each timed
    # provider but torch.
    spaces: Mapping[str, str] | None = None
    # What the suites time (xrt.bench.specs adds the inputs, the call, bytes and FLOPs): named shape
    # sets and dtypes. No shapes: not benchmarked on its own.
    shapes: Mapping[str, tuple[Shape, ...]] = field(default_factory=dict)
    dtypes: tuple[str, ...] = ()
    gpucheck: bool = False  # memory-bound: timed by default by ``python -m xrt.bench.gpucheck``
    flat: bool = False  # its kernels see a flat tensor: tuned configs are bucketed by (numel,)
    model: bool = False  # a model's step (xrt.pytorch.modules), not one op: no entry in `xrt kernels list`
    # What one step of a model processes, for its throughput: the noun ("tokens", "images") and the
    # shape entries whose product counts them (a GPT's (batch, sequence, ...): (0, 1), batch x sequence).
    # The suites record the count with each time; the dashboard shows count / time ("tokens/s").
    step_items: str = ""
    step_dims: tuple[int, ...] = ()
    dump: tuple[TritonKernel, ...] = ()  # what `xrt kernels dump OP` compiles
    # Other ops whose files change this op's measurements (linear_gelu runs matmul's GEMM, a model's
    # step runs the ops the policy routes): ``xrt bench run --changed-only`` re-measures it when any of
    # their own files change.
    uses: tuple[str, ...] = ()
    # The torch functions of a model (``"torch.nn.functional.linear"``, ``"torch.Tensor.__matmul__"``)
    # that go to its xrt providers when the policy names one (xrt.pytorch.routing wraps them).
    routes: tuple[str, ...] = ()
    # The op ``auto`` looks up for a routed call's batched form (matmul's 3-d calls: bmm).
    batched: str = ""

    @property
    def routed(self) -> bool:
        """A model's own torch calls of it are routed (it has ``routes``)."""
        return bool(self.routes)

    def items_per_step(self, shape: Shape) -> int | None:
        """How many ``step_items`` one step at ``shape`` processes; None for an op without them."""
        if not self.step_items:
            return None
        n = 1
        for i in self.step_dims:
            n *= int(shape[i])
        return n

    @property
    def file(self) -> str:
        """The stem of its files (``module``, else ``name``)."""
        return self.module or self.name

    @property
    def timed(self) -> tuple[str, ...]:
        """The providers the suites time: all but xpu (its Triton kernel is the triton row's)."""
        return tuple(p for p in self.providers if p != "xpu")

    @property
    def space_keys(self) -> dict[str, str]:
        """provider -> tuning-space key (see ``spaces``)."""
        if self.spaces is not None:
            return dict(self.spaces)
        return {p: f"{self.name}.{p}" for p in self.timed if p != "torch"}

    @property
    def policy_op(self) -> str:
        """The policy entry that picks its provider."""
        return self.name if self.policy in ("", SWITCH) else self.policy
