"""Glue between asv and the timer: asv's ``time_`` benchmarks with a device-time ``timer``.

Why ``time_`` with a custom timer rather than ``track_``: a ``track_`` benchmark hands asv one
number per run, so asv has no samples, no confidence interval, and ``asv compare`` /
``asv continuous`` can only apply a bare factor. A ``time_`` benchmark whose ``timer`` reads a
*device-time clock* gives asv one device-timed sample per call, so asv's own statistics
(samples, quartiles, 99% CI, the Mann-Whitney test in ``asv compare``) are about kernel time,
not about Python and launch overhead.

How it fits together, per parameter combination (op × shape × dtype × provider × config):

* ``setup`` builds (once per process, then cached: asv re-runs setup before every sample) a
  :class:`Case`: random inputs on the device, the call, and a pilot :func:`~xrt.bench.timer.measure`
  whose adaptive stopping rule sets asv's ``repeat`` to the sample count that reaches the noise
  target; asv then takes exactly that many samples;
* each call of the ``time_`` method flushes the L2, times one call with device events and adds
  the time to :data:`DEVICE_CLOCK`, which asv's ``timer`` reads (``number = 1``);
* every sample's SM / memory clock and throttle reasons, the bytes and FLOPs, and the pilot's
  summary go to a sidecar file in ``$XRT_SIDECAR_DIR`` (set by ``xrt bench run``), which the
  database ingests beside asv's results.

The host series (:func:`make_host_suite`, ``benchmarks/bench_host.py``) is the same glue around
:func:`~xrt.bench.timer.measure_host`: ``bench_host.<Op>.time_host``, same params as
``bench_ops.<Op>.time_op``, each asv sample the host seconds per call of a few back-to-back calls
(docs/timing.md, "Host time").
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from xrt.bench import specs

MAX_ASV_SAMPLES = 300
HOST_SAMPLES = 50  # samples of the host series (each one of ``calls_per_sample`` back-to-back calls)
# ... fewer where a call is slow (Triton's CPU interpreter: ms a call): asv stops after HOST_MAX_TIME
# seconds of sampling once it has HOST_MIN_SAMPLES (the gate needs 5 a side).
HOST_MIN_SAMPLES = 10
HOST_MAX_TIME = 0.5
DEVICE_CLOCK = [0.0]  # seconds of device time measured so far in this process
HOST_CLOCK = [0.0]  # host seconds per call measured so far in this process


def device_timer() -> float:
    """asv's ``timer``: the device-time clock (advanced only by :meth:`Case.sample`)."""
    return DEVICE_CLOCK[0]


def host_timer() -> float:
    """asv's ``timer`` of the host series: advanced only by :meth:`HostCase.sample`."""
    return HOST_CLOCK[0]


def preload() -> None:
    """Import, in asv's forkserver, what every benchmark process would otherwise import for itself.

    asv forks one process per benchmark x parameter combination from a server that imported the
    suites. The first call of an xrt op (a ``torch.library`` custom op) imports ``torch._dynamo``:
    2-3 s per process on a CPU runner, more than the measurement itself. Imported here once, every
    forked process starts with it. None of these imports touches a device, so CUDA is first
    initialised in the forked processes (verified on CPU builds of torch only, see docs/timing.md).
    """
    try:
        import torch  # noqa: F401
        import torch._dynamo  # noqa: F401
    except ImportError:  # pragma: no cover - the suites need torch to run, not to be listed
        return
    import xrt.pytorch  # noqa: F401


def profile() -> str:
    """``quick`` (CI: CPU, tiny shapes) or ``full``; from ``XRT_BENCH_PROFILE``, read at import."""
    value = os.environ.get("XRT_BENCH_PROFILE", "full")
    if value not in ("quick", "full"):
        raise ValueError(f"XRT_BENCH_PROFILE={value!r}: choose quick or full")
    return value


def shape_key(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def parse_shape(key: str) -> tuple[int, ...]:
    if not re.fullmatch(r"\d+(x\d+)*", key):
        raise ValueError(f"shape {key!r} must look like 4096 or 4096x4096")
    return tuple(int(d) for d in key.split("x"))


def config_key(config: dict[str, Any] | None) -> str:
    return "default" if not config else ",".join(f"{k}={v}" for k, v in sorted(config.items()))


def parse_config(key: str) -> dict[str, Any] | None:
    if key == "default":
        return None
    out: dict[str, Any] = {}
    for item in key.split(","):
        name, _, value = item.partition("=")
        out[name] = int(value) if value.lstrip("-").isdigit() else value
    return out


def params_for(op: str, prof: str | None = None) -> tuple[list[list[str]], list[str]]:
    """asv ``params`` and ``param_names`` for one op under a profile."""
    spec = specs.get(op)
    prof = prof or profile()
    sets = ["quick"] if prof == "quick" else [s for s in ("small", "large") if s in spec.shapes]
    shapes = [shape_key(s) for name in sets for s in spec.shape_set(name)]
    providers = spec.providers if prof == "full" else [p for p in spec.providers if p != "cuda"]
    # The tuner's configs are GPU-specific: the full (GPU) profile times them, the CPU smoke profile not.
    configs = ["default"] + (tuned_configs(op) if prof == "full" else [])
    return [shapes, spec.dtypes, providers, configs], ["shape", "dtype", "provider", "config"]


def tuned_configs(op: str) -> list[str]:
    """The tuner's top-K configs for ``op`` (``$XRT_TUNED_DIR/<op>.json``), as config keys."""
    path = Path(os.environ.get("XRT_TUNED_DIR", "results/tuned")) / f"{op}.json"
    if not path.is_file():
        return []
    from xrt.kernels import spaces

    rows = json.loads(path.read_text())
    defaults = [spaces.default(k) for k in spaces.SPACES if k.split(".", 1)[0] == op]
    # The default may rank among the top K: it is timed already, as "default".
    return sorted({config_key(r["config"]) for r in rows if r.get("config") and r["config"] not in defaults})


_CASES: dict[tuple, Case] = {}
_HOST_CASES: dict[tuple, HostCase] = {}


class _Inputs:
    """One parameter combination's inputs and call, loaded (compiled) once: what both series time."""

    def __init__(self, op: str, shape: str, dtype: str, provider: str, config: str) -> None:
        import torch

        from xrt.device import default_device
        from xrt.pytorch.ops import providers

        self.spec = specs.get(op)
        self.params = [shape, dtype, provider, config]
        self.dev = default_device()
        self.shape = parse_shape(shape)
        self.dtype = getattr(torch, dtype)
        cfg = parse_config(config)
        if cfg is not None and provider not in self.spec.spaces:
            raise NotImplementedError(f"provider {provider} has no tuning configs")
        if cfg is not None:
            from xrt.kernels import spaces

            space = self.spec.spaces[provider]
            if not set(cfg) <= set(spaces.space(space)):  # the tuner's file holds every provider's configs
                raise NotImplementedError(f"config {config} is not one of {space}'s")
            spaces.check(space, cfg)
        self.args = self.spec.make_inputs(self.shape, self.dtype, self.dev.torch_device)
        prov = providers(op).get(provider)
        why = "not registered" if prov is None else prov.missing(self.args[0])
        if why:
            raise NotImplementedError(f"{op}[{provider}] cannot run here: {why}")  # asv: skipped
        self.fn = lambda: self.spec.call(self.args, provider, cfg)
        self.fn()  # compile / load now, outside any timing
        self.samples: list[float] = []
        self._written = -1
        self.expected = 10

    def record(self, benchmark: str) -> dict[str, Any]:
        raise NotImplementedError

    def write_sidecar(self, benchmark: str) -> None:
        out = os.environ.get("XRT_SIDECAR_DIR")
        if not out or self._written == len(self.samples):
            return
        path = Path(out)
        path.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", benchmark + "-" + "-".join(self.params))
        tmp = path / (name + ".tmp")
        tmp.write_text(json.dumps(self.record(benchmark)))
        os.replace(tmp, path / (name + ".json"))
        self._written = len(self.samples)


class Case(_Inputs):
    """One parameter combination's device-time series, set up once per process."""

    def __init__(self, op: str, shape: str, dtype: str, provider: str, config: str) -> None:
        from xrt.bench import timer

        super().__init__(op, shape, dtype, provider, config)
        device = self.dev.torch_device
        # Small shapes run in CUDA-graph mode, except CUDA C: pycuda's launches cannot be captured.
        self.graph = (self.dev.kind == "cuda" and provider != "cuda"
                      and shape in {shape_key(s) for s in self.spec.shapes.get("small", [])})
        self.pilot = timer.measure(self.fn, device, graph=self.graph)
        self.clock = timer._Clock(device)
        self.target, self.per = self.fn, 1
        if self.graph:
            self.target, self.per = timer._graphed(self.fn, self.pilot.calls_per_sample, self.clock.device), \
                self.pilot.calls_per_sample
        self.clock.calibrate(self.target)
        self.sm_mhz: list[int | None] = []
        self.mem_mhz: list[int | None] = []
        self.reasons: list[int] = []

    def sample(self) -> None:
        t = self.clock.batch(self.target, 1)[0] / self.per
        c = self.clock.read_clocks()
        self.samples.append(t)
        self.sm_mhz.append(c.sm_mhz)
        self.mem_mhz.append(c.mem_mhz)
        self.reasons.append(c.reasons)
        DEVICE_CLOCK[0] += t

    def record(self, benchmark: str) -> dict[str, Any]:
        from xrt.bench.nvml import is_slowdown

        esize = self.args[0].element_size()
        n = len(self.reasons)
        return {
            "benchmark": benchmark,
            "params": [repr(p) for p in self.params],
            "op": self.spec.op,
            "series": "device",
            "bytes": self.spec.bytes_moved(self.shape, esize),
            "flops": self.spec.flops(self.shape),
            "graph": self.graph,
            "calls_per_sample": self.per,
            "samples_s": self.samples,
            "sm_mhz": self.sm_mhz,
            "mem_mhz": self.mem_mhz,
            "reasons": self.reasons,
            "throttled_share": (sum(map(is_slowdown, self.reasons)) / n) if n else 0.0,
            "cycles": [t * m * 1e6 if m else None for t, m in zip(self.samples, self.sm_mhz)],
            "pilot": self.pilot.summary(),
            "xrt_source": _xrt_source(),
        }


class HostCase(_Inputs):
    """One parameter combination's host-time series (:func:`xrt.bench.timer.measure_host`'s samples)."""

    def __init__(self, op: str, shape: str, dtype: str, provider: str, config: str) -> None:
        from xrt.bench import timer

        super().__init__(op, shape, dtype, provider, config)
        self.clock = timer._Clock(self.dev.torch_device, flush=False)
        cfg = timer.HOST_DEFAULTS
        self.calls = self.clock.host_calls(self.fn, cfg["sample_time"], cfg["max_calls"], cfg["warmup_time"])
        self.expected = HOST_MIN_SAMPLES  # the sidecar is (re)written from here on

    def sample(self) -> None:
        t = self.clock.host_batch(self.fn, self.calls)
        self.samples.append(t)
        HOST_CLOCK[0] += t

    def record(self, benchmark: str) -> dict[str, Any]:
        # No bytes, FLOPs or clocks: host time is not moved by the GPU's clock, and bandwidth from
        # it means nothing. ``cycles`` is given, all None, so that nothing derives cycles for this
        # series from the run's SM clock (the gate would then read a host slowdown that coincides
        # with a clock drop as a clock change).
        return {
            "benchmark": benchmark,
            "params": [repr(p) for p in self.params],
            "op": self.spec.op,
            "series": "host",
            "calls_per_sample": self.calls,
            "samples_s": self.samples,
            "cycles": [None] * len(self.samples),
            "xrt_source": _xrt_source(),
        }


def _xrt_source() -> str:
    """The checkout this process's xrt and kernels come from (the runner checks it is the commit's)."""
    import xrt
    import xrt.kernels

    here = os.path.dirname(os.path.dirname(os.path.abspath(xrt.__file__)))
    kernels = os.path.dirname(os.path.dirname(os.path.abspath(xrt.kernels.__file__)))
    return here if here == kernels else f"{here} (kernels from {kernels})"


def case(op: str, *params: str) -> Case:
    key = (op, *params)
    if key not in _CASES:
        _CASES[key] = Case(op, *params)
    return _CASES[key]


def host_case(op: str, *params: str) -> HostCase:
    key = (op, *params)
    if key not in _HOST_CASES:
        _HOST_CASES[key] = HostCase(op, *params)
    return _HOST_CASES[key]


def make_suite(op: str, class_name: str, module: str) -> type:
    """An asv benchmark class for ``op`` (see the module docstring)."""
    params, names = params_for(op)
    bench_name = f"{module}.{class_name}.time_op"

    class Suite:
        timer = staticmethod(device_timer)
        number = 1
        warmup_time = 0.0  # the Case warmed up already
        rounds = 1
        min_run_count = 1
        repeat = (10, 2000, 30.0)
        timeout = 300

        def setup(self, *p: str) -> None:
            c = case(op, *p)
            # asv takes as many samples as the stopping rule needed (capped: asv re-runs setup
            # and teardown around every sample, which costs wall time, not accuracy).
            c.expected = min(MAX_ASV_SAMPLES, max(10, c.pilot.n))
            self.repeat = (c.expected, c.expected, 30.0)

        def teardown(self, *p: str) -> None:
            c = _CASES.get((op, *p))
            if c is not None and len(c.samples) >= c.expected:  # asv's last teardown of this case
                c.write_sidecar(bench_name)

        def time_op(self, *p: str) -> None:
            _CASES[(op, *p)].sample()

    Suite.params, Suite.param_names = params, names
    Suite.__name__ = Suite.__qualname__ = class_name
    Suite.__doc__ = f"{op}: device time per call (asv samples are single device-timed calls)."
    return Suite


def make_host_suite(op: str, class_name: str, module: str) -> type:
    """The host-time twin of :func:`make_suite`: ``<module>.<class_name>.time_host``, same params.

    Each asv sample is the host seconds per call of one :meth:`HostCase.sample` (``calls_per_sample``
    back-to-back calls, no device wait inside; docs/timing.md, "Host time").
    """
    params, names = params_for(op)
    bench_name = f"{module}.{class_name}.time_host"

    class Suite:
        timer = staticmethod(host_timer)
        number = 1
        warmup_time = 0.0  # the HostCase warmed up already
        rounds = 1
        min_run_count = 1
        repeat = (HOST_MIN_SAMPLES, HOST_SAMPLES, HOST_MAX_TIME)
        timeout = 300

        def setup(self, *p: str) -> None:
            host_case(op, *p)

        def teardown(self, *p: str) -> None:
            # asv may stop anywhere from HOST_MIN_SAMPLES on: the sidecar follows each new sample.
            c = _HOST_CASES.get((op, *p))
            if c is not None and len(c.samples) >= c.expected:
                c.write_sidecar(bench_name)

        def time_host(self, *p: str) -> None:
            _HOST_CASES[(op, *p)].sample()

    Suite.params, Suite.param_names = params, names
    Suite.__name__ = Suite.__qualname__ = class_name
    Suite.__doc__ = f"{op}: host time per call (asv samples are host seconds per call, back-to-back calls)."
    return Suite
