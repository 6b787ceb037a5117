"""Launch a ``@triton.jit`` kernel through its cached compiled handle.

``kernel[grid](*args, **meta)`` in Triton 3.x binds the arguments, computes the specialization
key and looks the kernel up on every call: tens of microseconds of Python for a kernel that runs
for a few. :class:`Launcher` does that once per distinct key and then calls the
``CompiledKernel``'s launcher directly, the way ``JITFunction.run`` does after its lookup
(Triton 3.6: ``kernel.run(grid_x, grid_y, grid_z, stream, function, packed_metadata,
launch_metadata, enter_hook, exit_hook, *all_args)``).

The key holds everything that picks another compiled kernel: the device, ``num_warps``,
``num_stages``, every constexpr, and for each runtime argument what Triton specializes it on
(a tensor's dtype and whether its address is 16-byte aligned; an integer's equality to 1,
divisibility by 16 and 32/64-bit range; the type of anything else). It is finer than Triton's own
key, never coarser, so a cached handle is only reused where Triton would reuse it.

Where there is no compiled handle -- Triton's CPU interpreter (``TRITON_INTERPRET=1``), a kernel
whose constexprs are not its last parameters -- every call takes ``kernel[grid](...)``. Launch
hooks (``triton.knobs.runtime.launch_enter_hook``, e.g. a profiler) are honoured: with any hook
registered the cached path builds the launch metadata and calls them as Triton does.
Triton settings read at compile time (``TRITON_DEBUG`` and the like) are read once; a process
that flips them after a kernel's first launch calls :meth:`Launcher.clear`.

:class:`Site` goes one step further for an op's hot path: a launch whose grid, warps, constexprs
and scalar arguments its owner (a plan made once per input signature) has fixed, so that a call
only checks that the tensors are 16-byte aligned and calls the compiled kernel's C launcher.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import triton
import triton.language as tl
from triton import knobs
from triton.tools.tensor_descriptor import TensorDescriptor

from xrt.kernels.launch_spec import LaunchSpec

_LAUNCHERS: list[Launcher] = []
_RUNTIME = knobs.runtime
_Chain = getattr(knobs, "HookChain", type(None))  # Triton 3.6's hooks: an (empty) chain unless one is set
_Tensor = torch.Tensor


def cdiv(a: int, b: int) -> int:
    """``triton.cdiv`` for host code: Triton 3.6's is a constexpr function whose call wrapper costs
    microseconds on every launch."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """``triton.next_power_of_2`` for host code (0 for 0, 1 for 1), without its call wrapper."""
    return n if n <= 1 else 1 << (n - 1).bit_length()


def _spec(a: Any) -> Any:
    """What Triton's specialization of argument ``a`` depends on (or finer)."""
    if isinstance(a, torch.Tensor):
        return (a.dtype, a.data_ptr() % 16 == 0)
    t = type(a)
    if t is TensorDescriptor:  # Triton keys a host descriptor on its dtype and block (and padding)
        return (t, a.base.dtype, tuple(a.block_shape), a.padding)
    if t is bool:
        return (bool, a)
    if t is int:
        return (int, a == 1, a % 16 == 0, -(2**31) <= a < 2**31, a < 2**63)
    if t is float:
        return float
    if a is None:
        return None
    return (t, a)  # anything else: keyed by its value (hashable, or the key raises and we fall back)


def traced(t: Any) -> bool:
    """Is ``t`` a trace's tensor (``torch.compile``, ``make_fx``): fake, or functional over a fake one?"""
    return t.__class__ is not torch.Tensor and t.__class__.__name__ in ("FakeTensor", "FunctionalTensor")


_COMPILE_ONLY = [False]


def compile_only(on: bool = True) -> None:
    """From now on every :class:`Launcher` compiles what it is asked to launch and runs nothing
    (Triton's ``warmup``; the interpreter, which has nothing to compile, still runs): the tuner's
    compile workers, which share a GPU with a process that is timing. Outputs are left unwritten."""
    _COMPILE_ONLY[0] = on


class Launcher:
    """``Launcher(kernel)(grid, *args, num_warps=4, **constexprs)`` == ``kernel[grid](*args, ...)``."""

    def __init__(self, kernel: Any, *, direct: bool | None = None,
                 device: Callable[[], int] | None = None, stream: Callable[[int], int] | None = None,
                 scratch: tuple[str, ...] = ()) -> None:
        self.kernel = kernel
        # A kernel that makes TMA descriptors on the device (``tl.make_tensor_descriptor``) needs
        # Triton's scratch memory: ``scratch`` names its arguments that must be 16-byte aligned.
        self.scratch = scratch
        self.cache: dict[Any, Any] = {}
        self._device, self._stream = device, stream
        self.constexprs: tuple[str, ...] = ()
        self.nargs = 0
        if direct is None:
            from triton.runtime.jit import JITFunction

            direct = isinstance(kernel, JITFunction)  # not the interpreter's InterpretedFunction
        params = getattr(kernel, "params", None)
        if direct and params is not None:
            flags = [bool(p.is_constexpr) for p in params]
            # The cached call passes the runtime arguments, then the constexprs, in signature order.
            if flags != sorted(flags):
                direct = False
            self.constexprs = tuple(p.name for p in params if p.is_constexpr)
            self.nargs = len(params) - len(self.constexprs)
        self.direct = bool(direct)
        self.compiles = 0  # first launches that went through kernel[grid] (tests read it)
        self.epoch = 0  # bumped by clear(): a Site's kept kernel is then stale
        self._jit: Any = None  # the kernel as a JITFunction, for traces (see jit)
        _LAUNCHERS.append(self)

    def clear(self) -> None:
        self.cache.clear()
        self.epoch += 1

    def __call__(self, grid: Sequence[int], *args: Any, num_warps: int = 4, num_stages: int | None = None,
                 **constexprs: Any) -> None:
        if _COMPILE_ONLY[0]:
            self._warm(grid, args, num_warps, num_stages, constexprs)
            return
        if self.scratch:
            set_allocator()  # Triton keeps it per thread: the cached launch needs it too
        a0 = args[0] if args else None
        if a0.__class__ is TensorDescriptor:  # a TMA kernel's first argument: its tensor decides
            a0 = a0.base
        if a0.__class__ is not _Tensor and isinstance(a0, _Tensor):  # fake or functional: a trace records it
            self._traced(grid, args, num_warps, num_stages, constexprs)
            return
        if (not self.direct or len(args) != self.nargs or len(constexprs) != len(self.constexprs)
                or not (isinstance(a0, torch.Tensor) and (a0.is_cuda or self._device is not None))):
            # The cached path speaks CUDA (torch's current device and stream); XPU and the
            # interpreter take Triton's own.
            self._slow(grid, args, num_warps, num_stages, constexprs)
            return
        device = self._device() if self._device is not None else _current_device()
        try:
            meta, key = self.key(device, args, num_warps, num_stages, constexprs)
            compiled = self.cache.get(key)
        except (KeyError, TypeError):  # a constexpr name it does not have, an unhashable argument
            self._slow(grid, args, num_warps, num_stages, constexprs)
            return
        if compiled is None:
            compiled = self._slow(grid, args, num_warps, num_stages, constexprs)
            if compiled is not None:
                if hasattr(compiled, "result"):  # Triton's async compile mode hands back a future
                    compiled = compiled.result()
                self.cache[key] = compiled
            return
        stream = self._stream(device) if self._stream is not None else _current_stream(device)
        g1 = grid[1] if len(grid) > 1 else 1
        g2 = grid[2] if len(grid) > 2 else 1
        enter, leave = _RUNTIME.launch_enter_hook, _RUNTIME.launch_exit_hook
        if enter is not None or leave is not None:
            enter, leave = _hooks()
        if enter is None and leave is None:
            compiled.run(grid[0], g1, g2, stream, compiled.function, compiled.packed_metadata, None, None, None,
                         *args, *meta)
        else:
            full = (*args, *meta)
            launch_metadata = compiled.launch_metadata(tuple(grid), stream, *full)
            compiled.run(grid[0], g1, g2, stream, compiled.function, compiled.packed_metadata, launch_metadata,
                         enter, leave, *full)

    def key(self, device: int, args: tuple, num_warps: int, num_stages: int | None,
            constexprs: dict[str, Any]) -> tuple[tuple, tuple]:
        """``(constexpr values, cache key)`` of a launch; KeyError / TypeError where it has none."""
        meta = tuple([constexprs[n] for n in self.constexprs])
        return meta, (device, num_warps, num_stages, meta,
                      *[(a.dtype, a.data_ptr() % 16 == 0) if isinstance(a, _Tensor) else _spec(a) for a in args])

    def _warm(self, grid: Sequence[int], args: tuple, num_warps: int, num_stages: int | None,
              constexprs: dict[str, Any]) -> Any:
        warmup = getattr(self.kernel, "warmup", None)
        if warmup is None:  # the interpreter compiles nothing: it runs
            return self._slow(grid, args, num_warps, num_stages, constexprs)
        kw = dict(constexprs)
        kw["num_warps"] = num_warps
        if num_stages is not None:
            kw["num_stages"] = num_stages
        self.compiles += 1
        return warmup(*args, grid=tuple(grid), **kw)  # not kept: a Site must never launch it

    def _traced(self, grid: Sequence[int], args: tuple, num_warps: int, num_stages: int | None,
                constexprs: dict[str, Any]) -> None:
        """The launch as ``torch.library.wrap_triton`` records it: the call of a ``triton_op`` traced
        by ``torch.compile`` (or run on fake tensors), whose graph then launches the kernel itself."""
        from torch.library import wrap_triton

        kw = dict(constexprs)
        kw["num_warps"] = num_warps
        if num_stages is not None:
            kw["num_stages"] = num_stages
        wrap_triton(self.jit())[tuple(grid)](*args, **kw)

    def jit(self) -> Any:
        """The kernel as a ``JITFunction``; under the interpreter, where ``@triton.jit`` gives an
        ``InterpretedFunction`` that a trace cannot record, a ``JITFunction`` of the same source,
        made once, for traces only (what it records cannot launch on a CPU anyway)."""
        if self._jit is None:
            self._jit = jit_twin(self.kernel)
            if self.scratch and self._jit is self.kernel:
                self._jit = _ScratchTwin(self.kernel.fn, self.scratch)
        return self._jit

    def _slow(self, grid: Sequence[int], args: tuple, num_warps: int, num_stages: int | None,
              constexprs: dict[str, Any]) -> Any:
        kw = dict(constexprs)
        kw["num_warps"] = num_warps
        if num_stages is not None:
            kw["num_stages"] = num_stages
        self.compiles += 1
        return self.kernel[tuple(grid)](*args, **kw)


def _scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    return torch.empty(size, dtype=torch.int8, device="cuda")


def set_allocator() -> None:
    """Give Triton torch's allocator for kernels that need scratch memory, in this thread (Triton
    keeps it per thread and context), as Inductor does before each launch."""
    triton.set_allocator(_scratch)


class Site:
    """One launch of ``launcher`` whose grid, ``num_warps``, ``num_stages``, constexprs and scalar
    arguments never change: ``Site(launcher, grid, n_tensors, num_warps=4, **constexprs)(*args)``.

    ``args`` are ``n_tensors`` tensors, then the scalars. The owner guarantees that the scalars
    (and the tensors' dtypes) are those of every earlier call: a plan made per input signature
    fixes them. A call then costs the alignment check and the C launcher: the Launcher's key is
    computed once, at the first call, whose compiled kernel the site keeps. Anything else (a
    misaligned tensor, another current device, launch hooks, a kernel with scratch memory, the
    interpreter) goes through :class:`Launcher` as usual.
    """

    __slots__ = ("launcher", "grid", "n", "num_warps", "num_stages", "constexprs", "fast", "epoch")

    def __init__(self, launcher: Launcher, grid: Sequence[int], n_tensors: int, *, num_warps: int = 4,
                 num_stages: int | None = None, **constexprs: Any) -> None:
        self.launcher, self.n = launcher, n_tensors
        self.grid = (grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1)
        self.num_warps, self.num_stages, self.constexprs = num_warps, num_stages, constexprs
        self.fast: Any = None  # (device, C launch, function, coop, pdl, packed metadata, constexpr values, compiled)
        self.epoch = launcher.epoch

    def __call__(self, *args: Any) -> None:
        f = self.fast
        enter, leave = _RUNTIME.launch_enter_hook, _RUNTIME.launch_exit_hook
        if (f is not None and self.epoch == self.launcher.epoch
                and (enter is None or (enter.__class__ is _Chain and not enter.calls))
                and (leave is None or (leave.__class__ is _Chain and not leave.calls))):
            # Pointers as ints: the C launcher then neither calls data_ptr() nor asks the driver
            # about each one (the plan's first launch, through the Launcher, was checked).
            ptrs = [a.data_ptr() for a in args[:self.n]]
            p = 0
            for q in ptrs:
                p |= q
            device = _current_device()
            if not p & 15 and device == f[0]:
                g = self.grid
                f[1](g[0], g[1], g[2], _current_stream(device), f[2], f[3], f[4], None, None, f[5], None, None, None,
                     *ptrs, *args[self.n:], *f[6])
                return
        self.launcher(self.grid, *args, num_warps=self.num_warps, num_stages=self.num_stages, **self.constexprs)
        if f is None or self.epoch != self.launcher.epoch:
            self.epoch = self.launcher.epoch
            self.fast = self._fast(args)

    def _fast(self, args: tuple) -> Any:
        """The compiled kernel the Launcher keeps for these arguments, unpacked for a direct call;
        ``None`` where there is none (or it needs scratch memory, or a tensor was not aligned)."""
        if not args or not isinstance(args[0], _Tensor) or not args[0].is_cuda:
            return None
        if any(a.data_ptr() % 16 for a in args[:self.n]):
            return None
        kept = Kept.of(self.launcher, args, self.num_warps, self.num_stages, self.constexprs)
        if kept is None:
            return None
        if kept.direct is None or kept.direct[1]:  # (a site's arguments are pointers, no host descriptor)
            return None
        compiled, run = kept.compiled, kept.compiled.run
        return (kept.device, kept.direct[0], compiled.function, run.launch_cooperative_grid, run.launch_pdl,
                compiled.packed_metadata, kept.meta, compiled)

    def native(self) -> LaunchSpec | None:
        """This launch as :class:`~xrt.kernels.launch_spec.LaunchSpec` describes it, for a launcher
        outside Python: ``None`` until the site has launched once through its cached path, after a
        :meth:`Launcher.clear`, or where the kernel needs what a plain ``cuLaunchKernel`` does not
        give (clusters, cooperative or programmatic-dependent launches, a parameter type outside
        ``launch_spec.TYPES``). Types cover the call's arguments; its constexprs must be the
        kernel's (Triton passes them to its launcher, which drops them)."""
        f = self.fast
        if f is None or self.epoch != self.launcher.epoch or f[3] or f[4]:
            return None
        compiled = f[7]
        metadata, src = getattr(compiled, "metadata", None), getattr(compiled, "src", None)
        signature = getattr(src, "signature", None)
        if metadata is None or not isinstance(signature, dict) or getattr(metadata, "num_ctas", 1) != 1:
            return None
        kinds = [_triton_type(t) if isinstance(t, str) else "?" for t in signature.values()]
        nargs = len(kinds) - len(f[6])
        if "?" in kinds or nargs < 0 or any(k is not None for k in kinds[nargs:]):
            return None
        # Triton 3.6's kernels take two more pointers, the global and profile scratch buffers
        # (null here: a site with scratch memory never gets a fast path).
        return LaunchSpec(int(compiled.function), self.grid, (32 * int(metadata.num_warps), 1, 1),
                          int(metadata.shared), tuple(kinds[:nargs]), keep=compiled, null_tail=2)


_TWINS: dict[int, Any] = {}


def jit_twin(kernel: Any) -> Any:
    """``kernel`` as a ``JITFunction``: itself, or for the interpreter's ``InterpretedFunction`` a
    ``JITFunction`` of the same code whose globals name the twins of the ``@triton.jit`` helpers it
    calls (Triton's JIT refuses to reference an ``InterpretedFunction``)."""
    import types

    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(kernel, InterpretedFunction):
        return kernel
    twin = _TWINS.get(id(kernel))
    if twin is None:
        fn = kernel.fn
        scope = dict(fn.__globals__)
        for name in fn.__code__.co_names:
            if isinstance(scope.get(name), InterpretedFunction):
                scope[name] = jit_twin(scope[name])
        copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
        copy.__module__, copy.__qualname__, copy.__doc__ = fn.__module__, fn.__qualname__, fn.__doc__
        copy.__annotations__, copy.__kwdefaults__ = dict(fn.__annotations__), fn.__kwdefaults__  # the constexprs
        twin = _TWINS[id(kernel)] = _InterpretedTwin(copy, kernel)
    return twin


def _twin_class() -> type:
    from triton.runtime.jit import JITFunction

    class InterpretedTwin(JITFunction):
        """A ``JITFunction`` for traces that runs, when a traced graph launches it on the CPU, as
        the interpreter's kernel it was made from."""

        def __init__(self, fn: Any, interpreted: Any) -> None:
            super().__init__(fn)
            self.interpreted = interpreted

        def run(self, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
            return self.interpreted.run(*args, grid=grid, warmup=warmup, **kwargs)

    return InterpretedTwin


def _scratch_twin_class() -> type:
    from triton.runtime.jit import JITFunction

    class ScratchTwin(JITFunction):
        """The ``JITFunction`` a trace records for a kernel that needs scratch memory: when the
        graph launches it outside Inductor (``aot_eager``, a backward on autograd's thread), it
        checks that its tensors are 16-byte aligned and gives Triton torch's allocator first.
        Inductor compiles it from its source and launches it with its own allocator."""

        def __init__(self, fn: Any, aligned: tuple[str, ...]) -> None:
            super().__init__(fn)
            self.aligned = aligned

        def run(self, *args: Any, **kwargs: Any) -> Any:
            # Inductor copies a misaligned input; another backend hands it over as it is, and a
            # descriptor on a base that is not 16-byte aligned faults on the device.
            for name, a in (*zip(self.arg_names, args), *kwargs.items()):
                if name in self.aligned and isinstance(a, torch.Tensor) and a.data_ptr() % 16:
                    raise ValueError(f"{self.fn.__name__}: argument {name} is not 16-byte aligned (address "
                                     f"{a.data_ptr():#x}); this compiled graph's TMA kernel needs aligned "
                                     "tensors (Inductor copies a misaligned input; this backend does not)")
            set_allocator()
            return super().run(*args, **kwargs)

    return ScratchTwin


def _ScratchTwin(fn: Any, aligned: tuple[str, ...]) -> Any:
    global _ScratchTwin
    _ScratchTwin = _scratch_twin_class()
    return _ScratchTwin(fn, aligned)


def _InterpretedTwin(fn: Any, interpreted: Any) -> Any:
    global _InterpretedTwin
    _InterpretedTwin = _twin_class()
    return _InterpretedTwin(fn, interpreted)


def _triton_type(t: str) -> str | None:
    """Triton's signature type -> a ``launch_spec.TYPES`` name, ``None`` (a constexpr) or ``"?"``
    (one a native launch does not pack: tensor descriptors, 16-bit scalars)."""
    if t.startswith("*"):
        return "ptr"
    if t == "constexpr":
        return None
    return {"i1": "i8", "i8": "i8", "i32": "i32", "i64": "i64", "u32": "u32", "u64": "u64", "fp32": "f32",
            "f32": "f32", "fp64": "f64"}.get(t, "?")


class Kept:
    """The compiled kernel a :class:`Launcher` keeps for one launch signature, called without the
    Launcher's key: for an owner that keys its own plan on everything the signature depends on (a
    GEMM's shapes, strides, dtype and config), so that a later call with that plan has it. Unlike
    :class:`Site`, the arguments may be host TMA descriptors and the grid is the call's.
    ``Kept.of(...)`` after a launch; ``kept(grid, *args)`` is False where it cannot launch (hooks
    set, another device, a cleared Launcher, compile-only): then launch as usual.

    Host descriptors: Triton's launcher encodes each one (``fill_tma_descriptor``) on every launch.
    A kept kernel calls the C launcher itself with each encoding kept (:func:`_encoded`): a model's
    steps hand the same addresses back (weights, and activations from the caching allocator), so
    most launches encode nothing."""

    __slots__ = ("launcher", "compiled", "meta", "device", "epoch", "direct", "memo")

    def __init__(self, launcher: Launcher, compiled: Any, meta: tuple, device: int) -> None:
        self.launcher, self.compiled, self.meta, self.device = launcher, compiled, meta, device
        self.epoch = launcher.epoch
        self.direct = _direct_launch(compiled.run)  # (C launch, {argument index: (metadata, its key)})
        self.memo: dict[tuple, list] = {}  # (pointers, stream) -> the C launcher's whole argument list

    @classmethod
    def of(cls, launcher: Launcher, args: tuple, num_warps: int, num_stages: int | None,
           constexprs: dict[str, Any]) -> Kept | None:
        """What ``launcher`` keeps for this launch (after it ran once), or None (nothing kept:
        the interpreter, Triton's own path, an argument with no key)."""
        if not launcher.direct or launcher._device is not None or launcher._stream is not None:
            return None
        device = _current_device()
        try:
            meta, key = launcher.key(device, args, num_warps, num_stages, constexprs)
        except (KeyError, TypeError):
            return None
        compiled = launcher.cache.get(key)
        if compiled is None or not hasattr(compiled, "run"):
            return None
        return cls(launcher, compiled, meta, device)

    def ready(self) -> bool:
        """Can it launch now (what ``__call__`` checks first)? An owner asks before it allocates."""
        return not (self.epoch != self.launcher.epoch or _COMPILE_ONLY[0] or hooks_set()
                    or _current_device() != self.device)

    def stale(self) -> bool:
        """Was its Launcher cleared since (then it never launches again: make it anew)?"""
        return self.epoch != self.launcher.epoch

    def __call__(self, grid: Sequence[int], *args: Any) -> bool:
        if not self.ready():
            return False
        stream = _current_stream(self.device)
        if self.direct is None:
            c = self.compiled
            gx, gy, gz = _grid3(grid)
            c.run(gx, gy, gz, stream, c.function, c.packed_metadata, None, None, None, *args, *self.meta)
            return True
        self.direct[0](*self._arguments(grid, stream, args, addresses=False))
        return True

    def launch_memo(self, pointers: tuple[int, ...], grid: Sequence[int], make_args: Callable[[], tuple]) -> bool:
        """Launch as ``self(grid, *make_args())`` does, for an owner whose launches differ only in
        the addresses ``pointers`` of every tensor the arguments hold or describe (its plan fixed
        the rest). The C launcher's whole argument list is kept per (pointers, stream), tensors
        as their addresses: a model's steps hand the same addresses back, and such a launch makes no
        descriptor and reads no tensor. False where it cannot launch now (as ``__call__``)."""
        if not self.ready():
            return False
        if self.direct is None:
            return self(grid, *make_args())
        stream = _current_stream(self.device)
        key = (pointers, stream)
        final = self.memo.get(key)
        if final is None:
            final = self._arguments(grid, stream, make_args(), addresses=True)
            if len(self.memo) >= KEPT_LAUNCHES:
                self.memo.clear()
            self.memo[key] = final
        self.direct[0](*final)
        return True

    def native(self, grid: Sequence[int]) -> LaunchSpec | None:
        """This kernel's launch on ``grid`` as :class:`~xrt.kernels.launch_spec.LaunchSpec` describes
        it, host descriptors included (type ``"desc"``, their metadata in ``descs``), for a launcher
        outside Python (its ``keep``: this Kept, whose ``stale()`` says when it no longer holds);
        ``None`` where a plain ``cuLaunchKernel`` cannot launch it (scratch memory,
        clusters, cooperative or programmatic-dependent launches, another parameter type) or it
        can no longer launch (a cleared Launcher)."""
        if self.direct is None or self.stale():
            return None
        c = self.compiled
        run, metadata, src = c.run, getattr(c, "metadata", None), getattr(c, "src", None)
        signature = getattr(src, "signature", None)
        if (run.launch_cooperative_grid or run.launch_pdl or metadata is None or not isinstance(signature, dict)
                or getattr(metadata, "num_ctas", 1) != 1):
            return None
        descs = self.direct[1]
        kinds, metas = [], []
        for i, t in enumerate(signature.values()):
            if isinstance(t, str) and t.startswith("tensordesc"):
                md = descs.get(i, (None,))[0]
                if not isinstance(md, dict):  # (not lowered to a CUtensorMap)
                    return None
                kinds.append("desc")
                metas.append(md)
            else:
                kinds.append(_triton_type(t) if isinstance(t, str) else "?")
        nargs = len(kinds) - len(self.meta)
        if "?" in kinds or nargs < 0 or any(k is not None for k in kinds[nargs:]):
            return None
        num_warps, _, shared = c.packed_metadata
        return LaunchSpec(int(c.function), _grid3(grid), (32 * int(num_warps), 1, 1), int(shared),
                          tuple(kinds[:nargs]), keep=self, null_tail=2, descs=tuple(metas))

    def _arguments(self, grid: Sequence[int], stream: int, args: tuple, addresses: bool) -> list:
        """The C launcher's arguments for a direct launch: the header (grid, stream, function,
        cooperative, PDL, two scratch pointers, packed metadata, launch metadata, two hooks), each
        argument (a host descriptor as Triton expands it, :func:`_encoded`), the constexprs' tail.
        ``addresses``: tensors as their addresses (a list kept past the call holds no tensor)."""
        c = self.compiled
        run = c.run
        descs = self.direct[1]
        final = [*_grid3(grid), stream, c.function, run.launch_cooperative_grid, run.launch_pdl, None, None,
                 c.packed_metadata, None, None, None]
        for i, a in enumerate(args):
            md = descs.get(i)
            if md is not None:
                final.extend(_encoded(a, *md))
            else:
                final.append(a)
        if addresses:
            final = [e.data_ptr() if isinstance(e, torch.Tensor) else e for e in final]
        final.extend(self.meta)
        return final


def _grid3(grid: Sequence[int]) -> tuple[int, int, int]:
    return grid[0], grid[1] if len(grid) > 1 else 1, grid[2] if len(grid) > 2 else 1


KEPT_LAUNCHES = 64  # argument lists a Kept keeps (beyond: all dropped, made again)
DESCRIPTORS = 4096  # encoded host descriptors kept, all kernels together (beyond: all dropped, made again)
_ENCODED: dict[tuple, list] = {}


def _encoded(d: Any, md: Any, md_key: str) -> list:
    """Host descriptor ``d`` as Triton's C launcher takes it (its own expansion), kept per what the
    encoding depends on: the base address, shape and strides, and the kernel's metadata of it (block,
    swizzle, element type; ``md_key``). A model reuses its addresses step after step. Without
    metadata Triton passes the tensor itself: nothing is kept (it would keep the tensor alive)."""
    if md is None:
        return _encode(d, md)
    key = (d.base.data_ptr(), tuple(d.shape), tuple(d.strides), d.padding, md_key)
    hit = _ENCODED.get(key)
    if hit is None:
        if len(_ENCODED) >= DESCRIPTORS:
            _ENCODED.clear()
        hit = _ENCODED[key] = _encode(d, md)
    return hit


def _encode(d: Any, md: Any) -> list:
    """Triton's expansion of a host descriptor for its C launcher (its CUtensorMap, shape, strides)."""
    from triton.backends.nvidia.driver import make_tensordesc_arg

    return make_tensordesc_arg(d, md)


def _md_key(md: Any) -> str:
    """What a descriptor's encoding reads of the kernel's metadata of it (a dict of the compiled
    kernel's, or None), as a key: its text, whatever its values' types."""
    return repr(sorted(md.items())) if isinstance(md, dict) else repr(md)


def _direct_launch(run: Any) -> tuple[Callable, dict[int, tuple[Any, str]]] | None:
    """(the C launch function, {kernel argument index: its host descriptor's metadata and
    :func:`_md_key`}) of a compiled kernel's launcher ``run``: the launch itself where the kernel
    takes no host descriptor (``{}``), else read from the wrapper that expands them (Triton 3.6's
    ``wrap_handle_tensordesc``). None where the launcher is another or needs scratch memory (then
    ``compiled.run`` launches, as Triton does). What :class:`Site` and :class:`Kept` call."""
    try:
        from triton.backends.nvidia import driver as nvd
    except ImportError:
        return None
    # the header Kept.__call__ writes: grid, stream, function, cooperative, PDL, two scratch
    # pointers, packed metadata, launch metadata, two hooks
    if not isinstance(run, nvd.CudaLauncher) or getattr(nvd, "_BASE_ARGS_FORMAT", None) != "iiiKKppOOOOOO":
        return None
    wrapper = getattr(run, "launch", None)
    if wrapper is None or getattr(run, "global_scratch_size", 1) or getattr(run, "profile_scratch_size", 1):
        return None
    code = getattr(wrapper, "__code__", None)
    if code is None:  # no host descriptor: the C function itself
        return wrapper, {}
    if wrapper.__closure__ is None:
        return None
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in wrapper.__closure__)))
    launch, indices, metas = cells.get("launcher"), cells.get("tensordesc_indices"), cells.get("tensordesc_meta")
    if not (callable(launch) and isinstance(indices, set) and isinstance(metas, list) and len(metas) == len(indices)):
        return None
    return launch, {i: (md, _md_key(md)) for i, md in zip(sorted(indices), metas)}


class HostDesc:
    """A host TMA descriptor as Triton's launcher reads it (``base``, ``shape``, ``strides``,
    ``block_shape``, ``padding``), made without ``TensorDescriptor``'s checks (microseconds a
    launch): for a :class:`Kept` launch whose plan checked this layout with a real one once."""

    __slots__ = ("base", "shape", "strides", "block_shape", "padding")

    def __init__(self, base: torch.Tensor, shape: Sequence[int], strides: Sequence[int],
                 block_shape: Sequence[int]) -> None:
        self.base, self.shape, self.strides, self.block_shape, self.padding = base, shape, strides, block_shape, "zero"


def _current_device() -> int:
    # What Triton's driver answers (torch.cuda.current_device), without its lazy-init check: the
    # cached path runs only for CUDA tensors, so CUDA is initialised.
    return torch._C._cuda_getDevice()


def _current_stream(device: int) -> int:
    return torch._C._cuda_getCurrentRawStream(device)  # Triton's driver.get_current_stream, for torch


def hooks_set() -> bool:
    """Are Triton launch hooks set (anything but an empty chain)? A launcher that does not call
    them must not run then."""
    enter, leave = _RUNTIME.launch_enter_hook, _RUNTIME.launch_exit_hook
    return ((enter is not None and not (enter.__class__ is _Chain and not enter.calls))
            or (leave is not None and not (leave.__class__ is _Chain and not leave.calls)))


def _hooks() -> tuple[Any, Any]:
    """Triton's launch hooks, or ``None`` for an empty chain (the launcher then skips them)."""
    enter, leave = _RUNTIME.launch_enter_hook, _RUNTIME.launch_exit_hook
    if enter is not None and not getattr(enter, "calls", True):
        enter = None
    if leave is not None and not getattr(leave, "calls", True):
        leave = None
    return enter, leave


@triton.jit
def flat_block(n, BLOCK_SIZE: tl.constexpr):
    """A flat elementwise kernel's block: this program's ``BLOCK_SIZE`` offsets (64-bit) and which are
    below ``n`` (``square``, ``vector_add``)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    return offs, offs < n
