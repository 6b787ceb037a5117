"""Glue between asv and the timer: asv's ``time_`` benchmarks with a device-time ``timer``.

Why ``time_`` with a custom timer rather than ``track_``: a ``track_`` benchmark hands asv one
number per run, so asv has no samples, no confidence interval, and ``asv compare`` /
``asv continuous`` can only apply a bare factor. A ``time_`` benchmark whose ``timer`` reads a
*device-time clock* gives asv one device-timed sample per call, so asv's own statistics
(samples, quartiles, 99% CI, the Mann-Whitney test in ``asv compare``) are about kernel time,
not about Python and launch overhead.

How it fits together (docs/timing.md, "Suite cost", says why it is built this way):

* one ``setup_cache``, shared by every class of ``bench_ops`` and ``bench_host`` (asv keys it by its
  definition and runs it once, in one process, before the first of them), measures *every*
  parameter combination (op x shape x dtype x provider x config) of both series with
  :func:`measure_all`: inputs built once per op, shape and dtype, each combination loaded
  (compiled) and measured once per series by :func:`~xrt.bench.timer.measure` (its adaptive
  stopping rule, L2 flush, batched device events, clocks per sample) or by the host timer, its
  sidecar written. Imports, the CUDA context and Triton's cache are paid once per run, not once
  per combination;
* asv then runs, as always, one process per combination; its ``setup`` arms that combination's
  measured samples (or skips it: ``NotImplementedError``, or fails it: the measuring error) and
  sets ``repeat`` to their count; each call of the ``time_`` method adds the next sample to
  :data:`DEVICE_CLOCK`, which asv's ``timer`` reads (``number = 1``, no warm-up). asv's result file
  thus holds exactly the timer's samples, and the ``.xrt`` sidecar (``$XRT_SIDECAR_DIR``, set by
  ``xrt bench run``) the same samples with each one's SM / memory clock and throttle reasons, the
  bytes and FLOPs (a model's step: the tokens or images it processes), and the measurement's summary.

The host series (:func:`make_host_suite`, ``benchmarks/bench_host.py``) is the same glue around
:func:`~xrt.bench.timer.measure_host`: ``bench_host.<Op>.time_host``, same params as
``bench_ops.<Op>.time_op``, each asv sample the host seconds per call of a few back-to-back calls
(docs/timing.md, "Host time"), measured in the same ``setup_cache`` and replayed to asv the same way.
The compiled series (:func:`make_compiled_suite`, ``benchmarks/bench_compiled.py``,
``bench_compiled.<Op>.time_compiled``) is the host series of the op called from a
``torch.compile``'d function (:class:`CompiledCase`). :data:`SERIES` names the three.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from xrt import device_env
from xrt.bench import specs, suite_env
from xrt.kernels import defs

MAX_ASV_SAMPLES = 300  # the timer's sample cap for a suite case (asv result files hold every sample)
MIN_SAMPLES = 10  # at least this many a case (the gate tests 8 a side)
# asv's version of the suites' benchmarks: 2 = measured once in setup_cache (issue #15); before, a
# hash of the suite code.
SUITE_VERSION = "xrt-suite-2"
# The quick (CPU) profile's: its samples are the thread's CPU time, taken in rounds (xrt.bench.timer,
# measure_all), since xrt-suite-2 wall time in one go; the gate does not compare across the change.
CPU_SUITE_VERSION = "xrt-suite-3-cpu"
CACHE_TIMEOUT = 3600  # seconds for the setup_cache: every combination of every selected op and series
HOST_SAMPLES = 50  # samples of the host series (each one of ``calls_per_sample`` back-to-back calls)
# ... fewer where a call is slow (Triton's CPU interpreter: ms a call): asv stops after HOST_MAX_TIME
# seconds of sampling once it has HOST_MIN_SAMPLES (the gate needs 5 a side).
HOST_MIN_SAMPLES = 10
HOST_MAX_TIME = 0.5
# On the CPU every combination is measured in this many rounds, in turn (:func:`measure_all`): its
# samples then span the run, not the few milliseconds one round takes, and a burst of load on a
# shared runner slows one round, not the whole series (docs/regressions.md, "The gate on a noisy runner").
CPU_ROUNDS = 5
CPU_SPAN = 5.0  # ... spread over at least this many seconds (a round waits for its share, if need be)


def cpu_span() -> float:
    """:data:`CPU_SPAN`, or ``XRT_CPU_SPAN`` seconds where set (the test suite sets 0 for the tests
    that check what a run records, not how noisy it is; those that judge noise keep the default)."""
    raw = os.environ.get("XRT_CPU_SPAN")
    if raw is None:
        return CPU_SPAN
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"XRT_CPU_SPAN={raw!r}: give the seconds a CPU run's rounds span, 0 or more")
    return value
DEVICE_CLOCK = [0.0]  # seconds of device time measured so far in this process
HOST_CLOCK = [0.0]  # host seconds per call measured so far in this process


def device_timer() -> float:
    """asv's ``timer``: the device-time clock (advanced only by :meth:`Case.sample`)."""
    return DEVICE_CLOCK[0]


def host_timer() -> float:
    """asv's ``timer`` of the host series: advanced only by :meth:`HostCase.sample`."""
    return HOST_CLOCK[0]


def measured_on_cpu() -> bool:
    """Whether this process's suites measure on the CPU (thread CPU time, in rounds): ``XRT_DEVICE``
    (which ``xrt bench run`` sets per target) says ``cpu``; unset (plain ``asv run``), when the machine
    has no NVIDIA GPU. The asv version follows it, not the profile: a GPU run with ``--quick`` still
    takes device times in one round."""
    kind = device_env.requested_kind()
    if kind:
        return kind == "cpu"
    gpus = "/proc/driver/nvidia/gpus"
    return not (os.path.isdir(gpus) and os.listdir(gpus))


def profile() -> str:
    """``quick`` (CI: CPU, tiny shapes) or ``full``; from ``XRT_BENCH_PROFILE``, read at import.

    Unset (plain ``asv run``): ``full`` where the machine has an NVIDIA GPU (its driver lists one
    under /proc/driver/nvidia/gpus: no torch import needed to list the suites), else ``quick``.
    ``xrt bench run`` always sets it.
    """
    value = os.environ.get(suite_env.PROFILE)
    if value is None:
        gpus = "/proc/driver/nvidia/gpus"
        return "full" if os.path.isdir(gpus) and os.listdir(gpus) else "quick"
    if value not in ("quick", "full"):
        raise ValueError(f"{suite_env.PROFILE}={value!r}: choose quick or full")
    return value


def shape_key(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def parse_shape(key: str) -> tuple[int, ...]:
    if not re.fullmatch(r"\d+(x\d+)*", key):
        raise ValueError(f"shape {key!r} must look like 4096 or 4096x4096")
    return tuple(int(d) for d in key.split("x"))


def config_key(config: dict[str, Any] | None) -> str:
    return "default" if not config else ",".join(f"{k}={v}" for k, v in sorted(config.items()))


_BOOLS = {"True": True, "False": False}


def parse_config(key: str) -> dict[str, Any] | None:
    if key == "default":
        return None
    out: dict[str, Any] = {}
    for item in key.split(","):
        name, _, value = item.partition("=")
        # config_key writes a boolean knob (EPILOGUE_SUBTILE, warp_specialize, tma) as True / False
        out[name] = int(value) if value.lstrip("-").isdigit() else _BOOLS.get(value, value)
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


def tuned_dir() -> Path:
    """Where the tuner's files are: ``$XRT_TUNED_DIR`` (an absolute path), else ``results/tuned`` of
    the checkout this xrt is imported from.

    Never relative to the working directory: asv imports the suites in several processes that run
    in different folders (discovery and ``setup_cache`` in temporary ones, the forkserver in the
    folder asv was started from), and every one of them must see the same parameter grid. asv runs
    a combination by its *index* in the grid it discovered; a process that saw more configs put
    other combinations' samples under that index (the H100 run of 7d96618 lost 40 of 54
    ``LayernormBwd`` combinations and filed small-shape times under large shapes that way).
    """
    value = os.environ.get("XRT_TUNED_DIR")
    if value is None or not value.strip():
        import xrt

        return Path(xrt.__file__).resolve().parents[1] / "results" / "tuned"
    path = Path(value)
    if not path.is_absolute():
        raise ValueError(f"XRT_TUNED_DIR={value!r}: give an absolute path (the suites are imported "
                         "from several working directories)")
    return path


def tuned_configs(op: str) -> list[str]:
    """The tuner's top-K configs for ``op`` (``<tuned_dir()>/<op>.json``), as config keys."""
    path = tuned_dir() / f"{op}.json"
    if not path.is_file():
        return []
    from xrt.kernels import spaces

    rows = json.loads(path.read_text())
    defaults = [spaces.default(k) for k in spaces.SPACES if k.split(".", 1)[0] == op]
    # The default may rank among the top K: it is timed already, as "default".
    return sorted({config_key(r["config"]) for r in rows if r.get("config") and r["config"] not in defaults})


_REPLAY: dict[tuple, list[float]] = {}  # (benchmark, op, *params): the samples still to hand to asv
GRID = "grid"  # measure_all's entry (GRID, op): the op's parameter grid as the measuring process saw it


class _Inputs:
    """One parameter combination's inputs and call, loaded (compiled) once: what both series time.

    ``inputs`` (optional) are the (shape, dtype)'s inputs built already for another provider or
    config: a class's measuring process builds them once per shape and dtype.
    """

    def __init__(self, op: str, shape: str, dtype: str, provider: str, config: str,
                 inputs: tuple | None = None) -> None:
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
        self.args = inputs if inputs is not None else make_inputs(op, shape, dtype)
        prov = providers(op).get(provider)
        why = "not registered" if prov is None else prov.missing(self.args[0])
        if why:
            raise NotImplementedError(f"{op}[{provider}] cannot run here: {why}")  # asv: skipped
        self.fn = self.make_fn(provider, cfg)
        self.fn()  # compile / load now, outside any timing
        self.samples: list[float] = []

    def make_fn(self, provider: str, cfg: dict | None):
        """The call both series time: the op on this combination's inputs (``self.args``, which
        a later round replaces with new buffers)."""
        return lambda: self.spec.call(self.args, provider, cfg)

    def record(self, benchmark: str) -> dict[str, Any]:
        raise NotImplementedError

    def write_sidecar(self, benchmark: str) -> None:
        out = os.environ.get(suite_env.SIDECAR_DIR)
        if not out:
            return
        path = Path(out)
        path.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.=-]+", "_", benchmark + "-" + "-".join(self.params))
        tmp = path / (name + ".tmp")
        tmp.write_text(json.dumps(self.record(benchmark)))
        os.replace(tmp, path / (name + ".json"))


def in_graph(op: str, shape: str, provider: str, kind: str) -> bool:
    """Whether the device series times this combination as CUDA-graph replays: a kernel's small
    (launch-bound) shapes on CUDA, so the time is the kernels' own. Not CUDA C (pycuda's launches
    cannot be captured), and never a model's step: its time is a user's step, the launches between
    its kernels included (a user's model does not run as one graph)."""
    spec = specs.get(op)
    return (kind == "cuda" and provider != "cuda" and not defs.get(op).model
            and shape in {shape_key(s) for s in spec.shapes.get("small", [])})


def make_inputs(op: str, shape: str, dtype: str) -> tuple:
    """The spec's random inputs for one shape and dtype, on this process's device."""
    import torch

    from xrt.device import default_device

    return specs.get(op).make_inputs(parse_shape(shape), getattr(torch, dtype), default_device().torch_device)


class Case(_Inputs):
    """One parameter combination's device-time series: the timer's measurement, taken once.

    The samples are :func:`xrt.bench.timer.measure`'s (its stopping rule, capped at
    :data:`MAX_ASV_SAMPLES`, topped up to :data:`MIN_SAMPLES`): asv gets exactly these, the sidecar
    too, with each sample's clocks. With ``rounds`` > 1 (the CPU: :func:`rounds_for`) the
    constructor takes the first of that many rounds, each with its share of the cap and of the
    timer's time limits; :meth:`more` takes another; :meth:`finish` (always called) ends the series.
    """

    def __init__(self, op: str, shape: str, dtype: str, provider: str, config: str,
                 inputs: tuple | None = None, rounds: int = 1) -> None:
        from xrt.bench import timer

        super().__init__(op, shape, dtype, provider, config, inputs)
        device = self.dev.torch_device
        self.graph = in_graph(op, shape, provider, self.dev.kind)
        self.graph_error = None
        self.rule = {"max_samples": MAX_ASV_SAMPLES} if rounds <= 1 else {
            "max_samples": -(-MAX_ASV_SAMPLES // rounds), "min_time": timer.DEFAULTS["min_time"] / rounds,
            "max_time": timer.DEFAULTS["max_time"] / rounds}
        try:
            m = timer.measure(self.fn, device, graph=self.graph, **self.rule)
        except timer.GraphCaptureError as e:  # this call cannot be captured: timed call by call
            self.graph, self.graph_error = False, str(e)
            m = timer.measure(self.fn, device, graph=False, **self.rule)
        self.measurement = m
        self.per = m.calls_per_sample
        # On the CPU, "device time" is the thread's CPU time, which a busy host moves like host time:
        # each round's samples get the reference call's CPU time of that round beside them.
        self.ref_samples: list[float] | None = [] if self.dev.kind == "cpu" else None
        self._reference(m.n)

    def _reference(self, n: int) -> None:
        """Beside the ``n`` samples just taken: the median of a few samples of the reference call."""
        if self.ref_samples is None or n <= 0:
            return
        import statistics

        from xrt.bench import timer

        ref, calls = reference_call(self.dev.torch_device, "host")
        clock = timer.Clock(self.dev.torch_device, flush=False)
        self.ref_samples += [statistics.median(clock.host_batch(ref, calls) for _ in range(5))] * n

    def more(self) -> None:
        """One more round of the timer's samples (its own warm-up and stopping rule), appended."""
        from xrt.bench import timer

        r = timer.measure(self.fn, self.dev.torch_device, graph=self.graph, **self.rule)
        self._reference(r.n)
        m = self.measurement
        m.samples_s += r.samples_s
        m.sm_mhz += r.sm_mhz
        m.mem_mhz += r.mem_mhz
        m.reasons += r.reasons
        m.warmup_runs += r.warmup_runs
        m.wall_s += r.wall_s
        m.stopped_by = r.stopped_by

    def finish(self) -> None:
        """Top up to :data:`MIN_SAMPLES`, cap at :data:`MAX_ASV_SAMPLES`: the samples asv gets."""
        from xrt.bench import timer

        m, device = self.measurement, self.dev.torch_device
        if m.n < MIN_SAMPLES:  # the time cap stopped it early (a slow call): the gate needs more a side
            clock = timer.Clock(device)
            target = timer.graphed(self.fn, self.per, clock.device) if self.graph else self.fn
            clock.calibrate(target)
            topped = m.n
            while m.n < MIN_SAMPLES:
                t = clock.batch(target, 1)[0] / self.per
                c = clock.read_clocks()
                m.samples_s.append(t)
                m.sm_mhz.append(c.sm_mhz)
                m.mem_mhz.append(c.mem_mhz)
                m.reasons.append(c.reasons)
            self._reference(m.n - topped)
        k = MAX_ASV_SAMPLES  # the last batch may overshoot the cap
        self.samples = list(m.samples_s[:k])
        if self.ref_samples is not None:
            self.ref_samples = self.ref_samples[:k]
        self.sm_mhz, self.mem_mhz, self.reasons = list(m.sm_mhz[:k]), list(m.mem_mhz[:k]), list(m.reasons[:k])

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
            # a model's step: the tokens or images it processes (its definition's step_items), for throughput
            "items": defs.get(self.spec.op).items_per_step(self.shape),
            "item_unit": defs.get(self.spec.op).step_items or None,
            "graph": self.graph,
            "graph_error": self.graph_error,  # why a small shape was not timed in graph mode
            "calls_per_sample": self.per,
            "samples_s": self.samples,
            "sm_mhz": self.sm_mhz,
            "mem_mhz": self.mem_mhz,
            "reasons": self.reasons,
            "throttled_share": (sum(map(is_slowdown, self.reasons)) / n) if n else 0.0,
            "cycles": [t * m * 1e6 if m else None for t, m in zip(self.samples, self.sm_mhz)],
            **({"ref_samples_s": self.ref_samples, "reference": REFERENCE_DOC["host"] + " (CPU time, a round's median)"}
               if self.ref_samples is not None else {}),
            "pilot": self.measurement.summary(),  # the measurement's summary (the name files already use)
            "xrt_source": _xrt_source(),
        }


class HostCase(_Inputs):
    """One parameter combination's host-time series: samples of ``calls`` back-to-back calls each.

    With ``rounds`` > 1 (the CPU: :func:`rounds_for`) the constructor takes the first of that many
    rounds, each with its share of :data:`HOST_SAMPLES` and :data:`HOST_MAX_TIME`; :meth:`more`
    takes another."""

    def __init__(self, op: str, shape: str, dtype: str, provider: str, config: str,
                 inputs: tuple | None = None, rounds: int = 1) -> None:
        from xrt.bench import timer

        super().__init__(op, shape, dtype, provider, config, inputs)
        self.clock = timer.Clock(self.dev.torch_device, flush=False)
        cfg = timer.HOST_DEFAULTS
        self.calls = self.clock.host_calls(self.fn, cfg["sample_time"], cfg["max_calls"], cfg["warmup_time"])
        self.ref, self.ref_calls = reference_call(self.dev.torch_device, self.series)
        self.ref_samples: list[float] = []
        self.rounds = max(1, rounds)
        self.more()

    def more(self) -> None:
        """One round: its share of :data:`HOST_SAMPLES`, or fewer where a call is slow: it stops after
        its share of :data:`HOST_MAX_TIME` seconds once it has its share of :data:`HOST_MIN_SAMPLES`
        (what asv's repeat = (min, max, time) did before)."""
        import time

        r, n = self.rounds, len(self.samples)
        want = min(HOST_SAMPLES, n + -(-HOST_SAMPLES // r))
        least = min(HOST_MIN_SAMPLES, n + -(-HOST_MIN_SAMPLES // r))
        if n:
            self.fn()  # a later round: one untimed call first (other combinations ran in between)
        else:  # the first round: one untimed pair first. The warm-up times single calls of the op
            # alone, and the first timed batch after it read 4-6x the median on the CPU (the first
            # combination of every process: the demo's planted series, whose checklist blamed warm-up).
            self.clock.host_batch(self.ref, self.ref_calls)
            self.clock.host_batch(self.fn, self.calls)
        t0 = time.perf_counter()
        while len(self.samples) < want:
            self.sample()
            if len(self.samples) >= least and time.perf_counter() - t0 > HOST_MAX_TIME / r:
                break

    def finish(self) -> None:
        """Nothing to top up: every round takes its share of :data:`HOST_MIN_SAMPLES`."""

    series = "host"

    def sample(self) -> None:
        """One sample of the op, and in turn with it one of the reference call (the pair the gate
        judges: a slower or faster host moves both)."""
        self.ref_samples.append(self.clock.host_batch(self.ref, self.ref_calls))
        self.samples.append(self.clock.host_batch(self.fn, self.calls))

    def record(self, benchmark: str) -> dict[str, Any]:
        # No bytes, FLOPs or clocks: host time is not moved by the GPU's clock, and bandwidth from
        # it means nothing. ``cycles`` is given, all None, so that nothing derives cycles for this
        # series from the run's SM clock (the gate would then read a host slowdown that coincides
        # with a clock drop as a clock change).
        return {
            "benchmark": benchmark,
            "params": [repr(p) for p in self.params],
            "op": self.spec.op,
            "series": self.series,
            "calls_per_sample": self.calls,
            "samples_s": self.samples,
            "ref_samples_s": self.ref_samples,
            "reference": REFERENCE_DOC[self.series],
            "cycles": [None] * len(self.samples),
            "xrt_source": _xrt_source(),
        }


class CompiledCase(HostCase):
    """The host time of the op called from a ``torch.compile``'d function (``fullgraph=True``,
    static shapes, the default backend): what a call costs the caller in a compiled model, where
    the op is a custom op in the graph (its guards, the compiled wrapper, the op's own dispatch).

    Measured like :class:`HostCase` (back-to-back calls, no device wait), after the compile (not
    timed). Only at the default config: the tuning configs are launcher arguments, not what the
    compiled call's cost depends on. Each combination compiles its own function (its own code
    object, named after the combination), so no combination's guards are checked on another's
    calls and dynamo's recompile limit per function is never reached. A spec whose call is not an
    op's (:attr:`~xrt.bench.specs.BenchSpec.not_compiled` says why) is skipped; where a spec's call
    does not compile to one graph, the combination fails with dynamo's reason."""

    def __init__(self, op: str, shape: str, dtype: str, provider: str, config: str,
                 inputs: tuple | None = None, rounds: int = 1) -> None:
        spec = specs.get(op)
        if spec.not_compiled:
            raise NotImplementedError(f"{op} has no compiled series: {spec.not_compiled}")
        if config != "default":
            raise NotImplementedError("the compiled series is measured at the default config only")
        self.label = f"{op}_{shape}_{dtype}_{provider}"
        super().__init__(op, shape, dtype, provider, config, inputs, rounds)

    def make_fn(self, provider: str, cfg: dict | None):
        import types

        import torch

        spec = self.spec

        def call(*args):
            return spec.call(args, provider, cfg)

        name = "compiled_" + re.sub(r"\W", "_", self.label)
        code = call.__code__.replace(co_name=name, co_qualname=name)  # a code object of its own
        fn = types.FunctionType(code, call.__globals__, name, None, call.__closure__)
        compiled = torch.compile(fn, fullgraph=True, dynamic=False)
        return lambda: compiled(*self.args)

    series = "compiled"


# The reference call of each host series: what every op's host sample is paired with. A plain torch
# op on a 16-element tensor: Python, the dispatcher and a launch, like an op's call, and never bound
# by device time. Under torch.compile the same op from a compiled function (guards and the compiled
# wrapper, like the compiled series). It does not change with xrt's code, so op / reference moves
# with the op alone, while a host that got slower moves both (docs/timing.md, "Host time").
REFERENCE_DOC = {"host": "torch.add(x, 1) on 16 elements",
                 "compiled": "torch.compile(fullgraph) of x + 1 on 16 elements"}
_REFERENCES: dict[tuple, tuple] = {}


def reference_call(device: Any, series: str) -> tuple[Any, int]:
    """(the reference call of ``series`` on ``device``, its calls per sample), built once a process."""
    key = (str(device), series)
    if key not in _REFERENCES:
        import torch

        from xrt.bench import timer

        x = torch.randn(16, device=device)
        if series == "compiled":
            def xrt_reference_plus_one(t):
                return t + 1

            compiled = torch.compile(xrt_reference_plus_one, fullgraph=True, dynamic=False)

            def fn():
                return compiled(x)
        else:
            def fn():
                return torch.add(x, 1)
        cfg = timer.HOST_DEFAULTS
        calls = timer.Clock(device, flush=False).host_calls(fn, cfg["sample_time"], cfg["max_calls"],
                                                            cfg["warmup_time"])
        _REFERENCES[key] = (fn, calls)
    return _REFERENCES[key]


def _xrt_source() -> str:
    """The checkout this process's xrt and kernels come from (the runner checks it is the commit's)."""
    import xrt
    import xrt.kernels

    here = os.path.dirname(os.path.dirname(os.path.abspath(xrt.__file__)))
    # <checkout>/xrt/kernels/__init__.py: the checkout is three levels up
    kernels = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(xrt.kernels.__file__))))
    return here if here == kernels else f"{here} (kernels from {kernels})"


# series -> (asv module, method): an op's three series share its class name and params (param_key).
# "compiled" is the host time of the op called from a torch.compile'd function (CompiledCase).
SERIES = {"device": ("bench_ops", "time_op"), "host": ("bench_host", "time_host"),
          "compiled": ("bench_compiled", "time_compiled")}


def series_of(benchmark: str) -> tuple[str, str] | None:
    """``(series, class)`` of an op suite's benchmark (``bench_host.Square.time_host`` ->
    ``("host", "Square")``), or None for any other benchmark."""
    parts = benchmark.split(".")
    if len(parts) != 3:
        return None
    for ser, (module, method) in SERIES.items():
        if parts[0] == module and parts[2] == method:
            return ser, parts[1]
    return None


def twins(benchmark: str) -> dict[str, str]:
    """Every series' benchmark name of the op ``benchmark`` measures, by series (itself included;
    same params, so a ``param_key`` names the same combination in each), or ``{}`` for a benchmark
    that is not one of the op suites'."""
    found = series_of(benchmark)
    if found is None:
        return {}
    return {ser: f"{module}.{found[1]}.{method}" for ser, (module, method) in SERIES.items()}


def selected_ops() -> list[str]:
    """The ops whose combinations the ``setup_cache`` measures: ``$XRT_BENCH_OPS`` or all.

    ``xrt bench run`` sets it to the ops its ``--bench`` / ``--changed-only`` selection runs (there
    is one cache for every class of both suite modules: asv runs it once). Plain ``asv run`` leaves
    it unset: every op is measured, whatever ``-b`` selects.
    """
    value = os.environ.get(suite_env.OPS)
    if value is None or value.strip() in ("", "all"):
        return sorted(specs.SPECS)
    if value.strip() == "none":  # only the allocator suite runs
        return []
    ops = [o.strip() for o in value.split(",") if o.strip()]
    unknown = [o for o in ops if o not in specs.SPECS]
    if unknown:
        raise ValueError(f"{suite_env.OPS}={value!r}: no benchmark spec for {', '.join(unknown)}; "
                         f"known: {', '.join(sorted(specs.SPECS))}")
    return ops


def selected_series() -> list[str]:
    """``$XRT_BENCH_SERIES`` (``device``, ``host`` or both, comma-separated; set by ``xrt bench run``
    from ``--bench``) or both."""
    value = os.environ.get(suite_env.SERIES)
    if value is None or not value.strip():
        return list(SERIES)
    series = [x.strip() for x in value.split(",") if x.strip()]
    unknown = [x for x in series if x not in SERIES]
    if unknown:
        raise ValueError(f"{suite_env.SERIES}={value!r}: no series {', '.join(unknown)}; known: {', '.join(SERIES)}")
    return series


def selected_pairs() -> set[tuple[str, str]] | None:
    """``$XRT_BENCH_PAIRS`` (``series:op``, comma-separated; set by ``xrt bench run`` from ``--bench``):
    of the selected ops and series, the combinations measured; None (unset or empty): all."""
    value = os.environ.get(suite_env.PAIRS, "").strip()
    if not value:
        return None
    pairs = {tuple(x.strip().split(":", 1)) for x in value.split(",") if x.strip()}
    bad = sorted(":".join(p) for p in pairs if len(p) != 2 or p[0] not in SERIES)
    if bad:
        raise ValueError(f"{suite_env.PAIRS}={value!r}: not series:op ({', '.join(bad)}); series: {', '.join(SERIES)}")
    return pairs


def class_name(op: str) -> str:
    """The asv class of an op in ``benchmarks/bench_ops.py`` and ``bench_host.py``: square_sum -> SquareSum."""
    return "".join(part.capitalize() for part in op.split("_"))


def rounds_for(kind: str) -> int:
    """Rounds a run measures each combination in: :data:`CPU_ROUNDS` on the CPU, else 1."""
    return CPU_ROUNDS if kind == "cpu" else 1


def measure_all(ops: list[str], series: list[str] | None = None, prof: str | None = None,
                log=None, rounds: int | None = None, span: float | None = None,
                pairs: set[tuple[str, str]] | None = None) -> dict[tuple, dict[str, Any]]:
    """Measure every combination of ``ops`` in this process: what the suites' ``setup_cache`` returns.

    Inputs are built once per op, shape and dtype (and dropped before the next) and serve every
    series; each combination is loaded and measured once per series (``device``: :class:`Case`,
    ``host``: :class:`HostCase`, ``compiled``: :class:`CompiledCase`), its sidecar written. Returns,
    per ``(series, op, *params)``, ``{"samples": [...]}``, ``{"skip": why}`` (asv: skipped, as a
    ``NotImplementedError`` in setup was) or ``{"error": what}`` (asv: that combination failed; the
    others still run), and per ``(GRID, op)`` ``{"params": grid}``, the op's grid as this process saw
    it. Progress goes to stderr, one line a combination and series. ``pairs``: only these
    (series, op) of ``series`` x ``ops`` (:func:`selected_pairs`; None: all).

    ``rounds`` (default :func:`rounds_for` the device): with more than one, every combination is
    measured that many times in turn, each time with its share of the samples, and its samples are
    the rounds' together: a series' samples then span the whole run instead of a few milliseconds
    of it, so a burst of load on a shared CPU slows one round of them, not all (docs/regressions.md,
    "The gate on a noisy runner"). Each round builds the inputs anew: in one process a bfloat16
    series read 1.4-1.6x its usual best for every sample (the f32 ones did not), so what a run
    measures depends on where its buffers lie too, not only on the load.
    """
    import time

    log = log or _progress_log
    series = list(SERIES) if series is None else series
    kinds = {"device": Case, "host": HostCase, "compiled": CompiledCase}
    grids = {op: params_for(op, prof)[0] for op in ops}
    combos = [(op, *p) for op in ops for p in itertools.product(*grids[op])]
    per_op = {op: [s for s in series if pairs is None or (s, op) in pairs] for op in ops}
    if rounds is None:
        from xrt.device import default_device

        rounds = rounds_for(default_device().kind) if combos else 1
    span = (cpu_span() if rounds > 1 else 0.0) if span is None else span
    # Each op's grid as this process saw it: every replaying process checks it sees the same one.
    out: dict[tuple, dict[str, Any]] = {(GRID, op): {"params": grids[op]} for op in ops}
    inputs_key, inputs = None, None
    cases: dict[tuple, _Inputs] = {}  # combinations measured so far, in order
    early: dict[tuple, str] = {}  # progress lines of combinations skipped or failed before the last round
    t_all = time.perf_counter()
    n = sum(len(per_op[c[0]]) for c in combos)
    for r in range(rounds):
        if r:  # each round starts no earlier than its share of the span
            time.sleep(max(0.0, t_all + r * span / rounds - time.perf_counter()))
        i, inputs_key = 0, None
        for op, *p in combos:
            for ser in per_op[op]:
                i += 1
                t0 = time.perf_counter()
                module, method = SERIES[ser]
                bench_name = f"{module}.{class_name(op)}.{method}"
                key = (ser, op, *p)
                if r and key not in cases:
                    if r == rounds - 1 and key in early:
                        log(early.pop(key))
                    continue  # skipped or failed in an earlier round
                try:
                    if inputs_key != (op, *p[:2]):
                        inputs_key, inputs = (op, *p[:2]), None
                        inputs = make_inputs(op, *p[:2])
                    if r:
                        cases[key].args = inputs  # new buffers each round (their addresses matter too)
                        cases[key].more()
                    else:
                        cases[key] = kinds[ser](op, *p, inputs=inputs, rounds=rounds)
                    if r == rounds - 1:
                        c = cases.pop(key)  # done: its inputs may go
                        c.finish()
                        c.write_sidecar(bench_name)
                        out[key] = {"samples": list(c.samples)}
                        what = f"{len(c.samples)} samples" + (f" ({rounds} rounds)" if rounds > 1 else "")
                    else:
                        what = ""
                except NotImplementedError as e:
                    cases.pop(key, None)
                    out[key] = {"skip": str(e)}
                    what = "skipped"
                except Exception as e:  # noqa: BLE001 - one combination's failure must not take the others down
                    cases.pop(key, None)
                    out[key] = {"error": f"{type(e).__name__}: {e}"}
                    what = f"FAILED: {type(e).__name__}: {e}"
                stray = _stray_stream()
                if stray:  # what it left would skew every combination after it: this one fails instead
                    cases.pop(key, None)
                    out[key] = {"error": stray}
                    what = f"FAILED: {stray}"
                if key in out:  # one line a combination, in their order, in the last round
                    line = f"[suite {i}/{n}] {ser} {op} {' '.join(p)}: {what} in {time.perf_counter() - t0:.2f} s"
                    if r == rounds - 1:
                        log(early.pop(key, line))
                    else:
                        early[key] = line
                elif key in early:
                    log(early.pop(key))
        if r < rounds - 1:  # the combinations' lines come with the last round
            log(f"[suite] round {r + 1} of {rounds} done at {time.perf_counter() - t_all:.1f} s")
    log(f"[suite] {n} combinations ({len(ops)} op(s), series {', '.join(series)}) in "
        f"{time.perf_counter() - t_all:.1f} s" + (f", {rounds} rounds" if rounds > 1 else ""))
    return out


def _stray_stream() -> str | None:
    """Whether the combination just measured left the process on a CUDA stream other than the
    default; if so, the default is made current again and the reason returned."""
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    stream = torch.cuda.current_stream()
    if stream.cuda_stream == 0:
        return None
    torch.cuda.set_stream(torch.cuda.default_stream(stream.device))
    return f"it left the process on CUDA stream {stream.cuda_stream:#x}, not the default stream (reset)"


def _progress_log(line: str) -> None:
    """stderr, and ``$XRT_PROGRESS_FILE`` when set: asv keeps setup_cache's output until it ends, so
    ``xrt bench run`` follows this file to show the run's progress as it goes."""
    import sys

    print(line, file=sys.stderr, flush=True)
    path = os.environ.get(suite_env.PROGRESS_FILE)
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def _setup_cache(self) -> dict:
    """Every class of the op suites (``bench_ops``, ``bench_host``, ``bench_compiled``) has this one
    ``setup_cache``: asv keys it by its definition (module and line), so it runs once, in one
    process, for every module."""
    return measure_all(selected_ops(), selected_series(), pairs=selected_pairs())


_setup_cache.timeout = CACHE_TIMEOUT


def _replay_setup(cache: dict, key: tuple, what: str, params: list[list[str]]) -> int:
    """asv's ``setup`` of a measured combination: skip, fail, or arm its samples; the sample count.

    ``params`` is the grid of the class asv runs: it must be the one the measuring process saw
    (asv addresses combinations by their index in the grid), else this combination fails, naming
    the difference, rather than hand asv another combination's samples.
    """
    grid = cache.get((GRID, key[1]), {}).get("params")
    if grid is not None and grid != params:
        diff = [f"{name}: {sorted(set(a) ^ set(b))}" for name, a, b in
                zip(("shape", "dtype", "provider", "config"), grid, params) if a != b]
        raise RuntimeError(f"{what}: this process's parameter grid differs from the one measured "
                           f"({'; '.join(diff) or 'order'}); the suites must see the same grid in every process")
    entry = cache.get(key)
    if entry is None:
        raise RuntimeError(f"{what} {' '.join(key[2:])}: not measured by the suites' setup_cache "
                           f"({suite_env.OPS}={os.environ.get(suite_env.OPS, '')!r}, "
                           f"{suite_env.SERIES}={os.environ.get(suite_env.SERIES, '')!r}, "
                           f"{suite_env.PAIRS}={os.environ.get(suite_env.PAIRS, '')!r} leave it out)")
    if "skip" in entry:
        raise NotImplementedError(entry["skip"])
    if "error" in entry:
        raise RuntimeError(entry["error"])
    if (what, *key) not in _REPLAY:  # asv runs setup again before every sample: arm once
        _REPLAY[(what, *key)] = list(reversed(entry["samples"]))
    return len(entry["samples"])


def make_suite(op: str, class_name: str, module: str) -> type:
    """An asv benchmark class for ``op`` (see the module docstring)."""
    return _suite(op, class_name, module, "device", (MIN_SAMPLES, MAX_ASV_SAMPLES),
                  f"{op}: device time per call (asv samples are single device-timed calls).")


def make_host_suite(op: str, class_name: str, module: str) -> type:
    """The host-time twin of :func:`make_suite`: ``<module>.<class_name>.time_host``, same params.

    Each asv sample is the host seconds per call of one :meth:`HostCase.sample` (``calls_per_sample``
    back-to-back calls, no device wait inside; docs/timing.md, "Host time").
    """
    return _suite(op, class_name, module, "host", (HOST_MIN_SAMPLES, HOST_SAMPLES),
                  f"{op}: host time per call (asv samples are host seconds per call, back-to-back calls).")


def make_compiled_suite(op: str, class_name: str, module: str) -> type:
    """The compiled twin: ``<module>.<class_name>.time_compiled``, same params; each asv sample the
    host seconds per call of the op called from a ``torch.compile``'d function (:class:`CompiledCase`)."""
    return _suite(op, class_name, module, "compiled", (HOST_MIN_SAMPLES, HOST_SAMPLES),
                  f"{op}: host time per call under torch.compile (asv samples are host seconds per call).")


def _suite(op: str, class_name: str, module: str, kind: str, samples: tuple[int, int], doc: str) -> type:
    """The class of :func:`make_suite` (``kind`` "device": ``time_op``, the device clock), of
    :func:`make_host_suite` ("host": ``time_host``, the host clock) or of :func:`make_compiled_suite`
    ("compiled": ``time_compiled``, the host clock): it replays what ``setup_cache`` measured."""
    params, names = params_for(op)
    method = SERIES[kind][1]
    clock = DEVICE_CLOCK if kind == "device" else HOST_CLOCK
    bench_name = f"{module}.{class_name}.{method}"

    class Suite:
        timer = staticmethod(device_timer if kind == "device" else host_timer)
        # asv's benchmark version (else a hash of this code): results of different versions are not
        # compared by `asv compare`. Bump it when what a sample means changes, not for refactors.
        version = CPU_SUITE_VERSION if measured_on_cpu() else SUITE_VERSION
        number = 1
        warmup_time = 0.0  # measured already: nothing to warm
        rounds = 1
        min_run_count = 1
        repeat = (*samples, 30.0)
        timeout = 300

        def setup(self, cache: dict, *p: str) -> None:
            n = _replay_setup(cache, (kind, op, *p), bench_name, params)
            self.repeat = (n, n, 30.0)  # asv takes exactly the measured samples

    def replay(self, cache: dict, *p: str) -> None:
        clock[0] += _REPLAY[(bench_name, kind, op, *p)].pop()

    replay.__name__, replay.__qualname__ = method, f"{class_name}.{method}"
    setattr(Suite, method, replay)
    # One function for every class of both modules (one process: imports, CUDA context, inputs and
    # Triton's cache paid once).
    Suite.setup_cache = _setup_cache
    Suite.params, Suite.param_names = params, names
    Suite.__name__ = Suite.__qualname__ = class_name
    Suite.__doc__ = doc
    return Suite
