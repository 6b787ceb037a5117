"""xrt's native (C++) ops for eager training, layernorm, linear and attention: build, load, and plans.

A training step through a Python ``autograd.Function`` pays Python in the forward and again in
autograd's backward (on the H100, a Function that does nothing cost about 80 us forward + backward
against 128 us for all of ``F.layer_norm``'s); ``csrc/layernorm.cpp`` is the same forward and
backward as a ``torch::autograd::Function`` in C++, launching the very kernels the Python path
launches (Triton's compiled handles, CUDA C's cubins) with ``cuLaunchKernel``. ``csrc/linear.cpp``
does the same for a routed ``F.linear`` on the Triton GEMM: its three TMA GEMMs, their host
descriptors encoded in C++ as Triton's launcher encodes them, and ``csrc/attention.cpp`` for a
routed SDPA on the Triton kernels (the forward's and backward's kept launches). The library follows the way
PyTorch's own C++ extensions are written (an op in ``TORCH_LIBRARY``, loaded with
``torch.ops.load_library``) but is built here with the host's C++ compiler and no CUDA toolkit,
so that it builds, and its autograd plumbing is tested, on machines without a GPU.

The library is built once per source and torch version into ``XRT_NATIVE_CACHE`` (default
``~/.cache/xrt/native``), in the background on first use: calls take the Python path until it is
ready. The background build runs in a process of its own, so that it finishes (and the next process
finds the library) even when the process that asked for it ends first, as a short script or a
benchmark's process does. ``XRT_NATIVE=0`` turns it off; ``python -m xrt.pytorch.ops.native`` builds
it ahead of time.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from xrt.kernels.launch_spec import Desc, LaunchSpec
from xrt.pytorch.ops import kernel_providers

CSRC = Path(__file__).with_name("csrc")
SOURCES = (CSRC / "layernorm.cpp", CSRC / "linear.cpp", CSRC / "attention.cpp")  # one library; each includes launch.h
HEADERS = (CSRC / "launch.h",)

# The kernels' tensors, by the names a plan's argument templates use; the order is the C++ side's.
FWD_SLOTS = ("x", "w", "b", "y", "stats")
BWD_SLOTS = ("dy", "x", "w", "stats", "dx", "part", "dwdb")
EPS = "eps"  # a template argument: the call's eps
# A linear's: the forward's, then the backward's (dX's and dW's launches)
LINEAR_FWD_SLOTS = ("x", "w", "b", "y")
LINEAR_BWD_SLOTS = ("g", "w", "x", "dx", "dw", "part")  # part: dW's fp32 partials where it splits K
# Attention's: the forward's, then the backward's (the backward plan's names)
ATTENTION_FWD_SLOTS = ("q", "k", "v", "o", "lse")
ATTENTION_BWD_SLOTS = ("do", "q", "k", "v", "o", "lse", "delta", "dq", "dk", "dv")
# Parameter kinds of csrc/launch.h's Kind
PTR, I32, I64, F32, KIND_EPS, I8, U32, U64, F64, TMA = range(10)
_INT_KINDS = {"i8": I8, "i32": I32, "i64": I64, "u32": U32, "u64": U64}

_lock = threading.Lock()
_state: dict[str, Any] = {"status": None, "why": None, "thread": None}  # status: None, "building", "ready", "off"


def enabled() -> bool:
    """``XRT_NATIVE`` (``1``, the default, or ``0``); any other value is an error that names it."""
    v = os.environ.get("XRT_NATIVE", "1")
    if v not in ("0", "1"):
        raise ValueError(f"XRT_NATIVE={v!r}: must be 0 (off) or 1 (on)")
    return v == "1"


def cache_dir() -> Path:
    d = os.environ.get("XRT_NATIVE_CACHE")
    if d:
        return Path(d)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xrt" / "native"


def _compilers() -> list[str]:
    """The C++ compilers to try, in order: ``$CXX``, then ``g++`` and ``c++`` on PATH."""
    found = [os.environ.get("CXX") or None, shutil.which("g++"), shutil.which("c++")]
    return list(dict.fromkeys(c for c in found if c))


def _commands(cxx: str, out: Path) -> tuple[list[list[str]], list[str], list[Path]]:
    """The compile command of each source (run side by side), the link command, the objects."""
    from torch.utils import cpp_extension

    inc = [f"-I{p}" for p in cpp_extension.include_paths()]
    lib = cpp_extension.library_paths()[0]
    flags = ["-O2", "-std=c++20", "-fPIC", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"]
    objects = [out.with_name(f"{out.stem}.{src.stem}.o") for src in SOURCES]
    compiles = [[cxx, *flags, *inc, "-c", str(src), "-o", str(obj)] for src, obj in zip(SOURCES, objects, strict=True)]
    link = [cxx, "-shared", *map(str, objects), "-o", str(out), f"-L{lib}", "-lc10", "-ltorch_cpu", "-ltorch",
            f"-Wl,-rpath,{lib}"]
    return compiles, link, objects


def _compile(cxx: str, out: Path) -> tuple[int, str]:
    """Compile the sources side by side and link them into ``out``: (exit status, what the compiler
    said), the first failure's."""
    compiles, link, objects = _commands(cxx, out)
    try:
        running = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in compiles]
        said = [p.communicate(timeout=600) for p in running]
        for p, (o, e) in zip(running, said, strict=True):
            if p.returncode != 0:
                return p.returncode, e or o
        done = subprocess.run(link, capture_output=True, text=True, timeout=600)
        return done.returncode, done.stderr or done.stdout
    finally:
        for obj in objects:
            obj.unlink(missing_ok=True)


# Run in a fresh interpreter on a new build: load it and make it raise. A compiler whose C++ runtime
# does not match torch's builds a library that loads but kills the process when an error crosses it
# (on the H100 host, $CXX=/opt/gcc/bin/g++ did; the system g++ did not).
_SELF_TEST = """
import sys, torch
torch.ops.load_library(sys.argv[1])
try:
    torch.ops.xrt_native.add_plan([1])
except RuntimeError as e:
    print("ok" if "spec ends before" in str(e) else f"wrong error: {e}")
"""


def library_path() -> Path:
    """Where the library for this source and torch is (or will be) cached."""
    key = hashlib.sha256()
    for source in (*SOURCES, *HEADERS):
        key.update(source.read_bytes())
    key.update(f"{torch.__version__}|{torch.version.git_version}|{torch.__file__}".encode())
    return cache_dir() / f"xrt_native-{key.hexdigest()[:16]}.so"


def build(quiet: bool = False) -> Path:
    """Build the library unless it is cached; its path. Each compiler of :func:`_compilers` is
    tried until one builds a library that passes a self-test in a fresh interpreter; raises
    ``RuntimeError`` with what each said when none does."""
    out = library_path()
    if out.exists():
        return out
    compilers = _compilers()
    if not compilers:
        raise RuntimeError("no C++ compiler ($CXX, g++ or c++ on PATH) to build xrt's native ops")
    out.parent.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"xrt: building the native ops (layernorm, linear, attention) into {out} (once per torch "
              "version)", file=sys.stderr)
    start, failures = time.monotonic(), []
    for cxx in compilers:
        tmp = out.with_name(f"{out.stem}.{os.getpid()}.{threading.get_ident()}.tmp.so")
        try:
            rc, said = _compile(cxx, tmp)
            if rc != 0:
                tail = said.strip().splitlines()[-8:]
                failures.append(f"{cxx}: exit {rc}: " + " | ".join(tail))
                continue
            test = subprocess.run([sys.executable, "-c", _SELF_TEST, str(tmp)], capture_output=True, text=True,
                                  timeout=300)
            if test.stdout.strip() != "ok":
                said = (test.stdout.strip() or test.stderr.strip().splitlines()[-1:] or [f"exit {test.returncode}"])
                failures.append(f"{cxx}: the library failed its self-test ({str(said)[:200]})")
                continue
            os.replace(tmp, out)
            if not quiet:
                print(f"xrt: native ops built with {cxx} in {time.monotonic() - start:.0f} s",
                      file=sys.stderr)
            return out
        finally:
            tmp.unlink(missing_ok=True)
    raise RuntimeError(f"building {', '.join(s.name for s in SOURCES)} failed: " + "; ".join(failures))


_ROOT = Path(__file__).resolve().parents[3]  # the folder that holds this xrt package

# The detached builder: this very xrt's build(), its failure as one line on stderr.
_BUILDER = """
import os, sys
sys.path.insert(0, sys.argv[1])
from xrt.pytorch.ops import native
try:
    import fcntl
    lock = open(native.library_path().with_suffix(".lock"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time: a later one finds the library built
except ImportError:
    pass
try:
    native.build(quiet=True)
except Exception as e:
    print(str(e) if isinstance(e, RuntimeError) else f"{type(e).__name__}: {e}", file=sys.stderr)
    sys.exit(1)
try:
    os.unlink(sys.argv[2])  # (its log: kept only where the build failed and no caller read it)
except FileNotFoundError:
    pass
"""


def build_detached(quiet: bool = False, timeout: float = 900) -> Path:
    """:func:`build` in a process of its own, in a new session, and wait for it: the library's
    path. The builder outlives this process, so a build that this process does not wait out still
    lands in the cache. Raises ``RuntimeError`` with the builder's own line where it fails."""
    pending = _spawn_builder(quiet)
    return library_path() if pending is None else _wait_builder(*pending, timeout=timeout)


def _spawn_builder(quiet: bool) -> tuple[subprocess.Popen, Path, Path] | None:
    """Start the detached builder (``None``: the library is already built)."""
    out = library_path()
    if out.exists():
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    if not quiet:
        print(f"xrt: building the native ops (layernorm, linear, attention) into {out} (once per torch version, "
              "in the background)", file=sys.stderr)
    log = out.with_name(f"{out.stem}.build-{os.getpid()}-{time.monotonic_ns()}.log")
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-c", _BUILDER, str(_ROOT), str(log)], stdin=subprocess.DEVNULL,
                                stdout=f, stderr=f, start_new_session=True)
    return proc, log, out


def _wait_builder(proc: subprocess.Popen, log: Path, out: Path, timeout: float = 900) -> Path:
    try:
        rc = proc.wait(timeout)
        said = log.read_text().strip().splitlines() if log.exists() else []
    finally:
        log.unlink(missing_ok=True)
    if rc != 0 or not out.exists():
        raise RuntimeError(said[-1] if said else f"the native op's builder exited with {rc}")
    return out


def load(quiet: bool = False, pending: tuple | None = None) -> bool:
    """Build (if needed) and load the library now; ``True`` when its ops are there. Where it
    cannot be had, :func:`why` says why. ``pending``: a detached builder that :func:`ready` started
    (:func:`_spawn_builder`), to wait for instead of building here."""
    with _lock:
        if _state["status"] == "ready":
            return True
    try:
        try:
            on = enabled()
        except ValueError as e:
            warnings.warn(f"{e}; the native ops stay off", RuntimeWarning, stacklevel=2)
            raise
        if not on:
            raise RuntimeError("XRT_NATIVE=0")
        path = _wait_builder(*pending) if pending is not None else build(quiet)
        with _lock:
            if _state["status"] != "ready":
                torch.ops.load_library(str(path))
                _state["status"], _state["why"] = "ready", None
        return True
    except (RuntimeError, OSError, ValueError, subprocess.SubprocessError) as e:
        with _lock:
            _state["status"], _state["why"] = "off", f"{type(e).__name__}: {e}"
        return False


def ready() -> bool:
    """Is the library loaded? The first call starts a build in the background (when enabled), so
    the caller takes its Python path meanwhile."""
    status = _state["status"]
    if status == "ready":
        return True
    if status is None:
        with _lock:
            if _state["status"] is None:
                _state["status"] = "building"
                pending = None
                try:  # the builder starts now, in a process of its own: it finishes even if this one ends
                    if enabled():
                        pending = _spawn_builder(quiet=False)
                except (ValueError, OSError):  # load() says why (a bad XRT_NATIVE, no cache folder)
                    pending = None
                t = _state["thread"] = threading.Thread(target=load, kwargs={"pending": pending},
                                                        name="xrt-native-build", daemon=True)
                t.start()
    return False


def wait(timeout: float | None = None) -> bool:
    """Wait for a background build started by :func:`ready`; whether the library is loaded."""
    t = _state["thread"]
    if t is not None:
        t.join(timeout)
    return _state["status"] == "ready"


def why() -> str | None:
    """Why the library is not loaded (``None`` while it is, or before anything was tried)."""
    return _state["why"]


# -- plans -----------------------------------------------------------------------------------------

current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", lambda device: 0)  # (torch's raw stream)
_OPS: dict[str, Any] = {}


def op(name: str) -> Any:
    """``torch.ops.xrt_native.<name>.default`` (looked up once: the library is loaded by then)."""
    found = _OPS.get(name)
    if found is None:
        found = _OPS[name] = getattr(torch.ops.xrt_native, name).default
    return found


class Plan(NamedTuple):
    """A signature's plan in one of the library's ops (``linear``, ``attention``): its id, the kept
    kernels its launches name (alive with it; stale with any, the forward's first), its device."""

    pid: int
    kept: tuple
    device: int

    def stale(self) -> bool:
        return any(k.stale() for k in self.kept)

    def ready(self) -> bool:
        """Can its forward launch now (no launch hooks, the plan's device current)?"""
        return self.kept[0].ready()


def kept_plan(key: tuple, make: Callable[[], Plan | bool | None]) -> Plan | None:
    """The native plan kept under ``key`` in the policy state's memo, made by ``make()`` (a
    :class:`Plan`; ``False``: none can be made; ``None``: not yet) where there is none. ``None``
    where the caller takes its Python path: no plan, or the library is not built yet (the first call
    starts its build in the background)."""
    plan = kernel_providers.kept_plan(key)
    if plan is None:
        if not ready():
            if why() is not None:
                kernel_providers.keep_plan(key, None)
            return None
        plan = make()
        if plan is None:
            return None
        kernel_providers.keep_plan(key, plan or None)
    return plan or None


_FUNCTIONS: dict[tuple[str, str, int], int] = {}


def _function(spec: LaunchSpec, device: int) -> int:
    """The CUfunction handle of ``spec``: its own, or its cubin's kernel loaded on ``device``."""
    if spec.function:
        return spec.function
    digest = hashlib.sha256(spec.cubin).hexdigest()[:20]
    key = (digest, spec.kernel, device)
    fn = _FUNCTIONS.get(key)
    if fn is None:
        path = cache_dir() / f"{digest}.cubin"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_bytes(spec.cubin)
            os.replace(tmp, path)
        with torch.cuda.device(device):
            fn = _FUNCTIONS[key] = torch.ops.xrt_native.load_function(str(path), spec.kernel)
    return fn


def encode_launch(spec: LaunchSpec, template: Sequence[Any], slots: Sequence[str], device: int) -> list[int]:
    """One launch of a plan's spec: ``[function, grid, block, shared, n, (kind, a, b) * n, d, desc * d]``.

    ``template`` holds the Python call's arguments: a slot name or ``(slot, byte offset)`` for a
    pointer, a :class:`Desc` for a host descriptor, ``"eps"``, or a constant; ``spec.types`` their
    types (``None``: not passed). A descriptor is passed as Triton's launcher expands it: its
    CUtensorMap (encoded per call from the slot's address, :func:`encode_desc`), its shape as i32, its
    strides as i64."""
    if len(template) != len(spec.types):
        raise ValueError(f"a launch template of {len(template)} arguments for a kernel call of {len(spec.types)}")
    params: list[int] = []
    descs: list[list[int]] = []
    for arg, kind in zip(template, spec.types, strict=True):
        if kind is None:
            continue
        if kind == "desc":
            if not isinstance(arg, Desc):
                raise ValueError(f"a host descriptor's argument given as {arg!r}, not a Desc")
            if len(descs) >= len(spec.descs):
                raise ValueError(f"{len(spec.descs)} descriptors' metadata for more descriptor arguments")
            params += [TMA, len(descs), 0]
            descs.append(encode_desc(arg, spec.descs[len(descs)], slots))
            params += [v for s in arg.shape for v in (I32, int(s), 0)]
            params += [v for s in arg.strides for v in (I64, int(s), 0)]
        elif kind == "ptr":
            slot, offset = (arg, 0) if isinstance(arg, str) else arg
            params += [PTR, slots.index(slot), int(offset)]
        elif arg == EPS:
            if kind != "f32":
                raise ValueError(f"eps passed as {kind}, not f32")
            params += [KIND_EPS, 0, 0]
        elif kind == "f32":
            params += [F32, struct.unpack("<I", struct.pack("<f", float(arg)))[0], 0]
        elif kind == "f64":
            params += [F64, struct.unpack("<q", struct.pack("<d", float(arg)))[0], 0]
        else:
            params += [_INT_KINDS[kind], int(arg), 0]
    params += [U64, 0, 0] * spec.null_tail
    return [_function(spec, device), *spec.grid, *spec.block, spec.shared, len(params) // 3, *params,
            len(descs), *(v for d in descs for v in d)]


def encode_desc(desc: Desc, md: dict[str, Any], slots: Sequence[str]) -> list[int]:
    """A host descriptor as csrc/launch.h reads it: ``[slot, offset, element type, swizzle, fill,
    rank, dims..., strides in bytes..., box...]``, innermost dimension first, the values Triton's
    launcher passes to ``cuTensorMapEncodeTiled`` (``make_tensordesc_arg``, ``fill_tma_descriptor``)."""
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST

    rank, block = len(desc.shape), list(md["block_size"])
    if md.get("fp4_padded") or len(desc.strides) != rank or len(block) != rank or desc.strides[-1] != 1:
        raise ValueError(f"a descriptor of shape {desc.shape}, strides {desc.strides} and block {block} "
                         "(fp4 padded, or not a row-major innermost dimension) is not encoded here")
    size = int(md["elem_size"])
    return [slots.index(desc.slot), int(desc.offset), TMA_DTYPE_DEVICE_TO_HOST[md["elem_type"]], int(md["swizzle"]), 0,
            rank, *(int(d) for d in reversed(desc.shape)), *(size * int(s) for s in reversed(desc.strides[:-1])),
            *(int(b) for b in reversed(block))]


def add_plan(m: int, n: int, groups: int, device: int, fwd: Sequence[tuple[Any, Sequence[Any]]],
             bwd: Sequence[tuple[Any, Sequence[Any]]]) -> tuple[int, list[Any]] | None:
    """Register a layernorm plan with the library: ``(id, what to keep alive)``, or ``None`` when a
    launch cannot be described yet (a site that has not launched) or at all. ``fwd`` and ``bwd``:
    ``(site, template)`` pairs, the sites having ``native()`` (``xrt.kernels.*`` plans' ``native``)."""
    spec = [m, n, groups, device]
    keep: list[Any] = []
    for launches, slots in ((fwd, FWD_SLOTS), (bwd, BWD_SLOTS)):
        spec.append(len(launches))
        for site, template in launches:
            described = site.native()
            if described is None:
                return None
            keep.append(described.keep)
            spec += encode_launch(described, template, slots, device)
    return torch.ops.xrt_native.add_plan(spec), keep


def add_linear_plan(m: int, n: int, k: int, device: int, bias: bool, parts: tuple[int, int],
                    *gemms: Sequence[tuple[LaunchSpec, Sequence[Any]]]) -> int:
    """Register a linear plan with the library (``xrt_native::linear``): its id. ``gemms``: the
    forward's launches, dX's and dW's, each ``(LaunchSpec, template)`` pairs whose templates name
    :data:`LINEAR_FWD_SLOTS` and :data:`LINEAR_BWD_SLOTS`; ``parts``: the elements of dX's and dW's
    fp32 partials (slot ``part``, allocated by the backward; 0 where that GEMM does not split K)."""
    spec = [m, n, k, device, int(bias), *(int(p) for p in parts)]
    for launches, slots in zip(gemms, (LINEAR_FWD_SLOTS, LINEAR_BWD_SLOTS, LINEAR_BWD_SLOTS), strict=True):
        spec.append(len(launches))
        for described, template in launches:
            spec += encode_launch(described, template, slots, device)
    return torch.ops.xrt_native.add_linear_plan(spec)


def add_attention_plan(shape: Sequence[int], s_k: int, device: int, heads_inside: bool,
                       strides: Sequence[Sequence[int]],
                       fwd: Sequence[tuple[LaunchSpec, Sequence[Any]]],
                       bwd: Sequence[tuple[LaunchSpec, Sequence[Any]]]) -> int:
    """Register an attention plan with the library (``xrt_native::attention``): its id. ``shape``: q's
    [B, H, S_q, D]; ``heads_inside``: the output's memory is [B, S_q, H, D]; ``strides``: those of q,
    k, v, the output and its gradient that the backward's launches were planned for (a tensor laid
    out otherwise is copied into that layout);
    ``fwd``, ``bwd``: ``(LaunchSpec, template)`` pairs naming :data:`ATTENTION_FWD_SLOTS` and
    :data:`ATTENTION_BWD_SLOTS`."""
    b, h, s_q, d = shape
    if len(strides) != 5 or any(len(st) != 4 for st in strides):
        raise ValueError(f"strides of q, k, v, out and its gradient, four each, not {strides!r}")
    spec = [b, h, s_q, s_k, d, device, int(heads_inside), *(int(x) for st in strides for x in st)]
    for launches, slots in ((fwd, ATTENTION_FWD_SLOTS), (bwd, ATTENTION_BWD_SLOTS)):
        spec.append(len(launches))
        for described, template in launches:
            spec += encode_launch(described, template, slots, device)
    return torch.ops.xrt_native.add_attention_plan(spec)


def main() -> int:
    """``python -m xrt.pytorch.ops.native``: build and load the library now, and say where it is."""
    if load():
        print(library_path())
        return 0
    print(f"xrt native ops unavailable: {why()}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
