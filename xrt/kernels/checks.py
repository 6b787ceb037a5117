"""Argument checks and output buffers that an op's launchers share (Triton, CUDA C, the op layer).

Every launcher is a public entry point (the ops call them, and so do the tuner and the suites with
explicit configs), so each checks its inputs; the checks and messages live here once.
"""

from __future__ import annotations

from typing import Any

import torch

from xrt.kernels import spaces


def same(op: str, a: torch.Tensor, b: torch.Tensor, an: str = "a", bn: str = "b") -> None:
    """``a`` and ``b`` have one shape, dtype and device."""
    if a.shape != b.shape:
        raise ValueError(f"{op}: {an}.shape={tuple(a.shape)} must equal {bn}.shape={tuple(b.shape)}")
    if a.dtype != b.dtype:
        raise ValueError(f"{op}: {an}.dtype={a.dtype} must equal {bn}.dtype={b.dtype}")
    if a.device != b.device:
        raise ValueError(f"{op}: {an} is on {a.device} but {bn} is on {b.device}")


def window_width(x: torch.Tensor) -> int:
    """``x.shape[-1]`` of a ``window_sum`` input, which needs at least the 3 the window spans."""
    n = x.shape[-1] if x.dim() else 0
    if n < 3:
        raise ValueError(f"window_sum needs x.shape[-1] >= 3, got x.shape={tuple(x.shape)}")
    return n


def prepare(space: str, config: dict[str, Any] | None, *inputs: torch.Tensor,
            shape: tuple[int, ...] | None = None) -> tuple[Tuning, list[torch.Tensor], torch.Tensor]:
    """A launcher's start: the config of ``space`` checked (:func:`tuning`), the inputs made contiguous, and
    the output, contiguous, of ``shape`` (the first input's unless given) in the first input's dtype and device."""
    cfg = tuning(space, config)
    inputs_c = [t.contiguous() for t in inputs]
    x = inputs_c[0]
    return cfg, inputs_c, torch.empty_like(x) if shape is None else x.new_empty(shape)


def rows_and_vectors(x: torch.Tensor, **vectors: torch.Tensor | None) -> tuple[int, int]:
    """``(M, N)`` of a row kernel's ``x`` ``[M, N]``; each named vector (``weight=w``) must be ``[N]``."""
    if x.dim() != 2:
        raise ValueError(f"layernorm kernels take x as [M, N]; got x.shape={tuple(x.shape)}")
    m, n = x.shape
    for name, t in vectors.items():
        if t is not None and tuple(t.shape) != (n,):
            raise ValueError(f"x.shape[-1]={n} must equal {name}.shape[0]; got {name}.shape={tuple(t.shape)}")
    return m, n


def gemm(op: str, a: torch.Tensor, b: torch.Tensor, rank: int) -> None:
    """``a`` [M, K] and ``b`` [K, N] (``rank`` 2), or [B, M, K] and [B, K, N] (``rank`` 3), of one
    dtype on one device."""
    for name, t in (("a", a), ("b", b)):
        if t.dim() != rank:
            want = "[M, K] x [K, N]" if rank == 2 else "[B, M, K] x [B, K, N]"
            raise ValueError(f"{op} takes {want}; got {name}.shape={tuple(t.shape)} ({t.dim()}-D)")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"{op}: a.shape[-1]={a.shape[-1]} must equal b.shape[-2]={b.shape[-2]} "
                         f"(a.shape={tuple(a.shape)}, b.shape={tuple(b.shape)})")
    if rank == 3 and a.shape[0] != b.shape[0]:
        raise ValueError(f"{op}: a.shape[0]={a.shape[0]} must equal b.shape[0]={b.shape[0]} (the batch)")
    if a.dtype != b.dtype:
        raise ValueError(f"{op}: a.dtype={a.dtype} must equal b.dtype={b.dtype}")
    if a.device != b.device:
        raise ValueError(f"{op}: a is on {a.device} but b is on {b.device}")


def gemm_output(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """The ``[B, M, N]`` output of ``a`` [B, M, K] x ``b`` [B, K, N] (a's dtype and device), and
    whether it is already the answer: empty, or ``K = 0`` (zeros), so that no kernel need run."""
    batch, m, k = a.shape
    c = torch.empty((batch, m, b.shape[2]), dtype=a.dtype, device=a.device)
    if c.numel() == 0:
        return c, True
    if k == 0:
        return c.zero_(), True
    return c, False


def layernorm_bwd_buffers(x: torch.Tensor, w: torch.Tensor, groups: int) -> tuple:
    """What the layernorm backward writes: ``(dx, partials, dweight+dbias, dweight, dbias)``, the
    partials one fp32 ``[2, groups, N]`` buffer, dweight and dbias the rows of one ``[2, N]`` one."""
    n = w.numel()
    dx = torch.empty_like(x)
    part = torch.empty((2, groups, n), dtype=torch.float32, device=x.device)
    dwdb = torch.empty((2, n), dtype=w.dtype, device=w.device)
    return (dx, part, dwdb, *dwdb.unbind(0))


def layernorm_outputs(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
    """Contiguous ``x, weight, bias`` and the forward's empty ``y`` (x's dtype) and fp32 ``mean, rstd``."""
    x, weight, bias = x.contiguous(), weight.contiguous(), bias.contiguous()
    m = x.shape[0]
    y = torch.empty_like(x)
    mean = torch.empty(m, dtype=torch.float32, device=x.device)
    rstd = torch.empty(m, dtype=torch.float32, device=x.device)
    return x, weight, bias, y, mean, rstd


class Tuning(dict):
    """A config checked against its tuning space and filled from the defaults; read-only, since
    one object is shared by every call that asked for it (``dict(cfg)`` makes an editable copy)."""

    __slots__ = ("space", "is_default")  # is_default: checked from no config (the space's defaults)

    def _read_only(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"a checked {self.space} config is read-only; edit a copy: dict(config)")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _read_only


def size_hint(v: Any) -> int:
    """A size as an int for choosing a config. Under ``torch.compile(dynamic=True)`` sizes are SymInts:
    they cannot key a table, and comparing them adds guards. Their hint (the example's size) picks
    the config once for the graph, without a guard; any config is correct for any size."""
    if type(v) is int:  # eager calls: no cost on the launch path
        return v
    if isinstance(v, torch.SymInt):
        from torch.fx.experimental import symbolic_shapes as ss

        hint = getattr(ss, "optimization_hint", None) or ss.hint_int  # its name before torch 2.12
        return int(hint(v, fallback=4096))
    return int(v)


_TUNINGS: dict[Any, Tuning] = {}


def tuning(space: str, config: dict[str, Any] | None = None) -> Tuning:
    """``spaces.check(space, config)``, once per distinct config: a :class:`Tuning` checked for
    ``space`` passes straight through, others are checked (and the result kept)."""
    if type(config) is Tuning and config.space == space:
        return config
    try:
        key = (space, tuple(sorted(config.items())) if config else ())
        hit = _TUNINGS.get(key)
    except TypeError:  # an unhashable value: check it every time
        key, hit = None, None
    if hit is None:
        hit = Tuning(spaces.check(space, dict(config) if config else {}))
        hit.space, hit.is_default = space, not config
        if key is not None:
            if len(_TUNINGS) > 4096:
                _TUNINGS.clear()
            _TUNINGS[key] = hit
    return hit


def effective_config(space: str, bound: int, config: dict[str, Any] | None) -> Tuning:
    """``config`` checked; the default (``None``, or the defaults the op passes when no tuned config
    applies) is the problem's own default (``spaces.SHAPE_DEFAULTS`` by ``bound``: a skinny GEMM's M,
    attention's head dim). A config asked for is kept as it is."""
    cfg = tuning(space, config)
    if cfg.is_default:
        return tuning(space, spaces.default_for(space, bound))
    return cfg


CONV_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def conv3x3(op: str, x: torch.Tensor, weight: torch.Tensor, stride: int, padding: int,
            layout: str = "KCRS") -> tuple[int, int]:
    """``(Ho, Wo)`` of a 3x3 convolution of ``x`` [N, C, H, W] by ``weight`` ([K, C, 3, 3], torch's
    layout, or ``layout="RSCK"``: [3, 3, C, K], the kernels'), of one floating dtype on one device."""
    if x.dim() != 4:
        raise ValueError(f"{op} takes x as [N, C, H, W]; got x.shape={tuple(x.shape)} ({x.dim()}-D)")
    if layout == "RSCK":
        ok, c_w = weight.dim() == 4 and tuple(weight.shape[:2]) == (3, 3), weight.shape[2] if weight.dim() == 4 else -1
        want = "[3, 3, C, K]"
    else:
        ok, c_w = weight.dim() == 4 and tuple(weight.shape[2:]) == (3, 3), weight.shape[1] if weight.dim() == 4 else -1
        want = "[K, C, 3, 3]"
    if not ok:
        raise ValueError(f"{op} takes a 3x3 weight {want}; got weight.shape={tuple(weight.shape)}")
    if c_w != x.shape[1]:
        raise ValueError(f"{op}: x.shape[1]={x.shape[1]} (C) must equal the weight's input channels {c_w} "
                         f"(weight.shape={tuple(weight.shape)})")
    if x.dtype != weight.dtype:
        raise ValueError(f"{op}: x.dtype={x.dtype} must equal weight.dtype={weight.dtype}")
    if x.dtype not in CONV_DTYPES:
        raise ValueError(f"{op}: dtype {x.dtype} is not supported; supported: {', '.join(map(str, CONV_DTYPES))}")
    if x.device != weight.device:
        raise ValueError(f"{op}: x is on {x.device} but weight is on {weight.device}")
    if type(stride) is not int or stride not in (1, 2):
        raise ValueError(f"{op}: stride={stride!r} must be 1 or 2")
    if type(padding) is not int or not 0 <= padding <= 2:
        raise ValueError(f"{op}: padding={padding!r} must be 0, 1 or 2")
    ho, wo = conv_out(x.shape[2], x.shape[3], stride, padding)
    if ho < 1 or wo < 1:
        raise ValueError(f"{op}: x.shape={tuple(x.shape)} with padding={padding} is smaller than the 3x3 kernel")
    return ho, wo


def conv_out(h: int, w: int, stride: int, padding: int) -> tuple[int, int]:
    """``(Ho, Wo)`` of a 3x3 convolution of an ``h x w`` image."""
    return (h + 2 * padding - 3) // stride + 1, (w + 2 * padding - 3) // stride + 1


def channel_vectors(op: str, k: int, **vectors: torch.Tensor | None) -> None:
    """Each named per-channel vector (``bn_weight=g``) is ``[K]``."""
    for name, t in vectors.items():
        if t is not None and tuple(t.shape) != (k,):
            raise ValueError(f"{op}: {name}.shape={tuple(t.shape)} must be [K] = ({k},), the output channels")
