"""``xp.fuse(model)``: a model's module pairs that xrt has one fused op for, run as that op.

The policy's routing (:mod:`xrt.pytorch.routing`) sends single torch calls to xrt's kernels; a fusion
spans two calls, which no single call sees. So, as Liger-Kernel patches a model's modules, ``fuse``
rewrites forwards: for each module of the model (itself included) it traces the forward once with
``torch.fx``, every child module kept as one opaque call, finds the pairs below in that graph and
gives that one module instance a forward generated from the rewritten graph. Nothing else changes:
the same module objects, parameters and ``state_dict``; the class and other instances keep their
own forward; :func:`unfuse` restores it.

What it recognises, between a module's direct children and its own operations:

* ``nn.Linear`` whose only use is ``nn.GELU`` or ``F.gelu`` (either ``approximate``) ->
  :func:`xrt.pytorch.ops.linear_gelu` (bias and GELU in the GEMM's epilogue);
* ``a + b`` (two tensors, ``+`` or ``torch.add`` without ``alpha``) fed to ``nn.LayerNorm``, the
  sum possibly used elsewhere too (the pre-norm block's residual stream) ->
  :func:`xrt.pytorch.ops.add_layernorm`, its ``h`` standing in for the sum everywhere.

What it leaves alone: forwards with a conditional (``if``, ``and`` / ``or``, ``assert``, a conditional
expression), whose branch a traced graph would fix at the value it had when fused (``self.training``,
an optional argument); modules whose forward ``torch.fx`` cannot trace (control flow on tensor
values, unpacking a shape: an attention module, typically); their children are still visited;
subclasses of Linear / LayerNorm / GELU that override ``forward``; a Linear whose output is used
twice; pairs split across two modules' forwards (the add that ends block i and ``ln_1`` of block
i + 1). At run time a recognised pair that the fused op cannot take exactly as torch would
(operands of other shapes or dtypes, broadcasting, torch autocast on) runs unfused.
The fused ops' providers follow the policy (``add_layernorm=``, ``linear_gelu=``) unless
``provider`` is given. The other torch calls of a fused forward stay routable: ``torch.fx`` keeps a
function by object (``F.scaled_dot_product_attention`` as ``torch._C._nn.scaled_dot_product_attention``,
which the policy does not replace), so a routed one is looked up when the forward runs
(:func:`xrt.pytorch.routing.late`). A fused forward reads the module's non-tensor attributes (a scale, a head
count) as they were when fused, and methods it calls are traced through, their conditionals
included. A deep copy of a fused model stays fused; one unpickled (``torch.load`` of the whole
module) runs its class's forward again, and ``fuse`` fuses it anew.
"""

from __future__ import annotations

import dis
import operator
import types
from typing import Any

import torch
import torch.fx as fx
from torch import nn

from xrt.pytorch import policy, routing
from xrt.pytorch.ops.add_layernorm import add_layernorm
from xrt.pytorch.ops.linear_gelu import linear_gelu

F = nn.functional
_GELU_FNS = (F.gelu, torch._C._nn.gelu)
_ADDS = (operator.add, torch.add)
_MARK = "_xrt_fused"  # the instance attribute that lists what a fused module's forward fuses
_FILE = "<xrt.fuse"  # how the generated forwards' code objects are named


class _Shallow(fx.Tracer):
    """Every child module is a leaf: the graph is the module's own forward, calls to children opaque."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return True


def _plain(m: Any, cls: type) -> bool:
    """``m`` is ``cls`` or a subclass that keeps its forward (the op computes what that forward does)."""
    return isinstance(m, cls) and type(m).forward is cls.forward


def _fused_linear_gelu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, approximate: str,
                       provider: str | None) -> torch.Tensor:
    if (x.dtype != weight.dtype or (bias is not None and bias.dtype != x.dtype) or x.device != weight.device
            or torch.is_autocast_enabled(x.device.type)):
        return F.gelu(F.linear(x, weight, bias), approximate=approximate)
    return linear_gelu(x, weight, bias, approximate, provider=provider)


def _fused_add_layernorm(a: torch.Tensor, b: torch.Tensor, shape: tuple[int, ...], weight: torch.Tensor | None,
                         bias: torch.Tensor | None, eps: float, provider: str | None):
    if (not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor) or a.shape != b.shape
            or a.dtype != b.dtype or not a.is_floating_point() or a.device != b.device
            or any(t is not None and t.dtype != a.dtype for t in (weight, bias))
            or torch.is_autocast_enabled(a.device.type)):
        h = a + b
        return F.layer_norm(h, shape, weight, bias, eps), h
    return add_layernorm(a, b, shape, weight, bias, eps, provider=provider)


def _attr(graph: fx.Graph, target: str, value: Any) -> fx.Node | None:
    return graph.get_attr(target) if value is not None else None


def _linear_gelu_pairs(module: nn.Module, graph: fx.Graph, provider: str | None) -> list[str]:
    found = []
    for lin in list(graph.nodes):
        if lin.op != "call_module" or not _plain(module.get_submodule(lin.target), nn.Linear):
            continue
        if len(lin.users) != 1 or len(lin.args) != 1 or lin.kwargs:
            continue
        act = next(iter(lin.users))
        if act.op == "call_module" and _plain(module.get_submodule(act.target), nn.GELU) and act.args == (lin,):
            approximate, what = module.get_submodule(act.target).approximate, act.target
        elif act.op == "call_function" and act.target in _GELU_FNS and act.args[:1] == (lin,) and len(act.args) == 1:
            approximate, what = act.kwargs.get("approximate", "none"), "F.gelu"
            if set(act.kwargs) - {"approximate"}:
                continue
        else:
            continue
        linear = module.get_submodule(lin.target)
        with graph.inserting_before(act):
            w = graph.get_attr(f"{lin.target}.weight")
            b = _attr(graph, f"{lin.target}.bias", linear.bias)
            fused = graph.call_function(_fused_linear_gelu, (lin.args[0], w, b, approximate, provider))
        act.replace_all_uses_with(fused)
        graph.erase_node(act)
        graph.erase_node(lin)
        found.append(f"linear_gelu({lin.target}, {what})")
    return found


def _add_layernorm_pairs(module: nn.Module, graph: fx.Graph, provider: str | None) -> list[str]:
    found = []
    for add in list(graph.nodes):
        if add.op != "call_function" or add.target not in _ADDS or add.kwargs or len(add.args) != 2:
            continue
        if not all(isinstance(a, fx.Node) for a in add.args):
            continue
        norms = [u for u in add.users if u.op == "call_module" and u.args == (add,) and not u.kwargs
                 and _plain(module.get_submodule(u.target), nn.LayerNorm)]
        if not norms:
            continue
        ln_node = norms[0]
        ln = module.get_submodule(ln_node.target)
        with graph.inserting_before(add.next):
            w = _attr(graph, f"{ln_node.target}.weight", ln.weight)
            b = _attr(graph, f"{ln_node.target}.bias", ln.bias)
            fused = graph.call_function(_fused_add_layernorm, (*add.args, tuple(ln.normalized_shape), w, b,
                                                               float(ln.eps), provider))
            y = graph.call_function(operator.getitem, (fused, 0))
            h = graph.call_function(operator.getitem, (fused, 1))
        ln_node.replace_all_uses_with(y)
        graph.erase_node(ln_node)
        add.replace_all_uses_with(h)
        graph.erase_node(add)
        found.append(f"add_layernorm(+, {ln_node.target})")
    return found


def branches(fn: Any) -> bool:
    """Does ``fn``'s own code hold a conditional jump (``if``, ``and`` / ``or``, ``assert``, ``x if c else
    y``)? A traced graph keeps one side of it; loops over a fixed container are kept as unrolled."""
    code = getattr(fn, "__code__", None)
    return code is None or any("_IF_" in i.opname for i in dis.get_instructions(code))


def _fuse_one(module: nn.Module, provider: str | None) -> list[str]:
    """Rewrite ``module``'s forward where its graph has a pair; what it fused (empty: left alone)."""
    if branches(type(module).forward):
        return []
    try:
        graph = _Shallow().trace(module)
    except Exception:  # noqa: BLE001  (any forward fx cannot trace is left as it is)
        return []
    found = _linear_gelu_pairs(module, graph, provider) + _add_layernorm_pairs(module, graph, provider)
    if not found:
        return []
    for node in graph.nodes:  # the torch functions the policy routes, looked up when called, as the model did
        if node.op == "call_function":
            node.target = routing.late(node.target)
    graph.lint()
    code = graph.python_code(root_module="self")
    scope = dict(code.globals)
    exec(compile(code.src, f"{_FILE} {type(module).__name__}>", "exec"), scope)  # noqa: S102
    object.__setattr__(module, "forward", types.MethodType(scope["forward"], module))
    object.__setattr__(module, _MARK, tuple(found))
    return found


def fused(module: nn.Module) -> bool:
    """Does ``module`` run a forward that :func:`fuse` generated? (Unpickling binds the class's
    forward instead: pickle keeps a bound method by its name.)"""
    code = getattr(getattr(module.__dict__.get("forward"), "__func__", None), "__code__", None)
    return code is not None and code.co_filename.startswith(_FILE)


def fuse(model: nn.Module, *, provider: str | None = None) -> list[str]:
    """Run ``model``'s recognised module pairs (see the module docstring) as xrt's fused ops.

    Args:
        model: any ``nn.Module``; every module in it (itself included) is looked at once.
        provider: the fused ops' provider (``"triton"``, ...); ``None`` follows the policy.

    Returns:
        What was fused, one line a pair: ``"blocks.0: add_layernorm(+, ln_2)"``. Calling it again
        finds nothing new (fused modules are skipped).

    >>> block = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 4))
    >>> fuse(block)
    [': linear_gelu(0, 1)']
    """
    if provider is not None:  # a ValueError naming the choices now, rather than at the first call
        policy.resolve("add_layernorm", provider)
        policy.resolve("linear_gelu", provider)
    done = []
    for name, module in model.named_modules():
        if fused(module) or not any(True for _ in module.children()):
            continue
        done += [f"{name}: {what}" for what in _fuse_one(module, provider)]
    return done


def unfuse(model: nn.Module) -> int:
    """Give every module that :func:`fuse` rewrote its class's forward again; how many it restored."""
    n = 0
    for module in model.modules():
        if _MARK in module.__dict__:  # fuse set both (an unpickled module: the class's forward, bound)
            n += fused(module)
            module.__dict__.pop("forward", None)
            del module.__dict__[_MARK]
    return n
