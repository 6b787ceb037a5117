"""The timer: device-side, L2 flushed, warmed up by time, adaptive sample count, clocks per sample.

    from xrt.bench.timer import measure
    m = measure(lambda: xp.ops.square(x), device="cuda:0")
    m.median_s, m.rel_noise, m.throttled_share, m.median_cycles

How one sample is taken (nvbench's "cold" measurement, batched):
1. the L2 is flushed by zeroing a buffer twice the device's L2 (sized from its properties);
2. a start event, the call, an end event are queued; samples are queued in batches and the
   stream synchronised once per batch, so the GPU is not left idle between samples;
3. after each batch NVML gives the SM / memory clock and the clocks-event (throttle) reasons,
   which every sample of the batch carries.

Stopping rule: at least ``min_samples`` samples and ``min_time`` seconds of sampling, then stop
as soon as the relative standard error of the mean falls under ``target_noise`` (default 0.5%);
stop anyway at ``max_time`` (or ``max_samples``). ``graph=True`` captures ``calls_per_sample``
calls in a CUDA graph and times its replay, for kernels so short that launches dominate.
On the CPU the clock is the calling thread's CPU time (:data:`CPU_CLOCK`, ``time.thread_time``)
and there is no flush: on a shared CPU runner a sample's wall time also holds the time the
scheduler gave other processes (a 4 ms call read 2.2x, 3.3x its cost in whole time slices at a load
of 6 on 2 cores), which is not the code's cost; the thread's CPU time leaves it out. It counts the
calling thread only: an op that runs on a pool of threads is undercounted (the quick profile's tiny
shapes run on the caller's thread).

Host time (:func:`measure_host`) is the other figure of a call: what it costs the *caller*. A
sample is the wall time (on the CPU the thread's CPU time, as above) of ``calls`` back-to-back
calls divided by ``calls``; the device is
synchronised before the first call and after the last, both outside the interval, and nothing in
between waits for it (no flush, no events, no synchronize). ``calls`` (1 to ``max_calls``, 64)
is chosen from the warm-up so that one sample takes about ``sample_time`` (0.25 ms) of wall time
with the device work included, which also keeps a sample's launches far below the depth of the
launch queue, where a launch would block. A fixed number of samples (``samples``, 50) is taken.
docs/timing.md ("Host time") defines it and names the series.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from xrt.bench.nvml import ClockSample, DeviceClocks
from xrt.device import cuda_uuid

CPU_CLOCK = time.thread_time  # the clock of samples on the CPU (module docstring)

# Short samples (0.25 ms): a sample that the OS scheduler interrupts carries the whole pause in its
# mean, and the shorter the sample the fewer are hit, so the median stays the undisturbed cost. On
# a loaded 2-core CPU runner, 2 ms samples read 130-150 µs for a 47 µs call; 0.25 ms ones 48-54 µs.
HOST_HOLD_MAX_S = 0.002  # the longest a host sample holds the GPU before its calls (Clock.host_batch)
HOST_DEFAULTS = {"samples": 50, "sample_time": 0.00025, "max_calls": 64, "warmup_time": 0.03}

DEFAULTS = {
    "target_noise": 0.005,
    "min_samples": 10,
    "max_samples": 10_000,
    "warmup_time": 0.03,
    "min_time": 0.05,
    "max_time": 0.4,
}


@dataclass
class Measurement:
    """Per-call device times of one benchmark configuration, with the clocks they ran at."""

    samples_s: list[float]
    sm_mhz: list[int | None] = field(default_factory=list)
    mem_mhz: list[int | None] = field(default_factory=list)
    reasons: list[int] = field(default_factory=list)
    device: str = "cpu"
    warmup_runs: int = 0
    stopped_by: str = ""  # "noise" | "time_cap" | "max_samples"
    wall_s: float = 0.0
    graph: bool = False
    calls_per_sample: int = 1
    l2_flush_bytes: int = 0

    @property
    def n(self) -> int:
        return len(self.samples_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples_s)

    @property
    def mean_s(self) -> float:
        return statistics.fmean(self.samples_s)

    @property
    def stdev_s(self) -> float:
        return statistics.stdev(self.samples_s) if self.n > 1 else 0.0

    @property
    def rel_noise(self) -> float:
        """Relative standard error of the mean: what the stopping rule drives under its target."""
        return relative_noise(self.samples_s)

    @property
    def quartiles_s(self) -> tuple[float, float]:
        if self.n < 2:
            return (self.samples_s[0], self.samples_s[0])
        q = statistics.quantiles(self.samples_s, n=4)
        return (q[0], q[2])

    @property
    def throttled_share(self) -> float:
        """Share of samples taken while a power / thermal / hardware slowdown was active."""
        from xrt.bench.nvml import is_slowdown

        return sum(map(is_slowdown, self.reasons)) / len(self.reasons) if self.reasons else 0.0

    @property
    def cycles(self) -> list[float | None]:
        """Per-sample cycle counts: time × SM clock. A clock drop moves time, not cycles."""
        return [t * mhz * 1e6 if mhz else None for t, mhz in zip(self.samples_s, self.sm_mhz)]

    @property
    def median_cycles(self) -> float | None:
        c = [x for x in self.cycles if x is not None]
        return statistics.median(c) if c else None

    @property
    def median_sm_mhz(self) -> float | None:
        c = [x for x in self.sm_mhz if x]
        return statistics.median(c) if c else None

    def summary(self) -> dict[str, Any]:
        q25, q75 = self.quartiles_s
        return {
            "median_s": self.median_s, "mean_s": self.mean_s, "stdev_s": self.stdev_s, "q25_s": q25,
            "q75_s": q75, "n": self.n, "rel_noise": self.rel_noise, "stopped_by": self.stopped_by,
            "throttled_share": self.throttled_share, "median_sm_mhz": self.median_sm_mhz,
            "median_cycles": self.median_cycles, "wall_s": self.wall_s, "graph": self.graph,
            "calls_per_sample": self.calls_per_sample, "warmup_runs": self.warmup_runs,
        }

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), **self.summary()}


def relative_noise(samples: list[float]) -> float:
    n = len(samples)
    if n < 2:
        return math.inf
    mean = statistics.fmean(samples)
    return statistics.stdev(samples) / math.sqrt(n) / mean if mean > 0 else math.inf


def should_stop(samples: list[float], elapsed: float, *, target_noise: float, min_samples: int,
                min_time: float, max_time: float, max_samples: int) -> str | None:
    """The stopping rule, on its own so it can be tested: why to stop now, or ``None``."""
    if len(samples) >= max_samples:
        return "max_samples"
    if elapsed >= max_time and len(samples) >= min(min_samples, 2):
        return "time_cap"
    if len(samples) < min_samples or elapsed < min_time:
        return None
    return "noise" if relative_noise(samples) < target_noise else None


class Clock:
    """Device-side timing of a batch of calls: CUDA / XPU events, or perf_counter on the CPU."""

    def __init__(self, device: str, nvml: Any = None, flush: bool = True) -> None:
        import torch

        self.device = torch.device(device)
        self.kind = self.device.type
        self.flush_buf = None
        self.clocks = None
        self.spin = None  # torch.cuda._sleep: holds the GPU while the CPU queues a batch
        self.enqueue_s = 100e-6  # CPU time to queue one sample; calibrate() measures it
        self.host_hold_s = HOST_HOLD_MAX_S  # how long host_batch holds the GPU: 2x the last batch's host time
        self.cycles_per_s = 2.0e9
        if self.kind == "cuda":
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            self.device = torch.device("cuda", index)
            l2 = torch.cuda.get_device_properties(index).L2_cache_size
            if flush:
                self.flush_buf = torch.empty(2 * l2, dtype=torch.int8, device=self.device)
            self.clocks = DeviceClocks(index, nvml, uuid=cuda_uuid(index))
            self.events = torch.cuda.Event
            self.sync = torch.cuda.synchronize
            self.spin = torch.cuda._sleep
            clock_khz = getattr(torch.cuda.get_device_properties(index), "clock_rate", 0)
            if clock_khz:
                self.cycles_per_s = clock_khz * 1e3
        elif self.kind == "xpu":
            if flush:  # torch.xpu does not report the L2 size; Triton's XPU backend uses 256 MiB
                self.flush_buf = torch.empty(256 * 2**20, dtype=torch.int8, device=self.device)
            self.events = torch.xpu.Event
            self.sync = torch.xpu.synchronize
        elif self.kind != "cpu":
            raise ValueError(f"the timer runs on cuda, xpu or cpu devices, not {device!r}")

    def calibrate(self, fn: Callable[[], Any], count: int = 8) -> None:
        """Measure the CPU time it takes to queue one sample (flush, events, call)."""
        if self.kind == "cpu":
            return
        self.sync()
        saved, self.spin = self.spin, None
        t0 = time.perf_counter()
        self.batch(fn, count)  # includes one synchronize: an upper bound on queueing, which is safe
        self.enqueue_s = (time.perf_counter() - t0) / count
        self.spin = saved

    def read_clocks(self) -> ClockSample:
        return self.clocks.read() if self.clocks is not None else ClockSample(None, None, 0)

    def batch(self, fn: Callable[[], Any], count: int) -> list[float]:
        """Seconds of device time for each of ``count`` calls of ``fn``."""
        if self.kind == "cpu":
            out, tick = [], CPU_CLOCK
            for _ in range(count):
                t0 = tick()
                fn()
                out.append(tick() - t0)
            return out
        if self.spin is not None:
            # Without this, the GPU outruns the CPU: it reaches the start event before the call is
            # queued, and the CPU's launch latency lands inside the measured interval. Spinning
            # first (nvbench's blocking kernel, in its simplest form) lets the CPU queue the whole
            # batch ahead of the GPU, so each start event is followed at once by its kernel.
            self.spin(int((count * self.enqueue_s * 1.5 + 20e-6) * self.cycles_per_s))
        pairs = []
        for _ in range(count):
            if self.flush_buf is not None:
                self.flush_buf.zero_()
            start, end = self.events(enable_timing=True), self.events(enable_timing=True)
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        pairs[-1][1].synchronize()
        return [s.elapsed_time(e) / 1e3 for s, e in pairs]

    def host_batch(self, fn: Callable[[], Any], calls: int) -> float:
        """Host seconds per call of ``calls`` back-to-back calls (synchronised before and after, untimed).

        On a CUDA GPU the batch is queued behind a sleep kernel that holds the GPU for about twice the
        batch's last host time (nvbench's blocking kernel): every call is then queued while the GPU is
        busy, whatever its shape, so the sample is host work only. Without it, a call of a large shape
        met a GPU that was idle or still running the previous call, depending on the process: its
        host time moved 1.3-1.9x between two processes of the same code on an H100."""
        if self.kind != "cpu":
            self.sync()
            if self.spin is not None:
                self.spin(int(self.host_hold_s * self.cycles_per_s))
        tick = CPU_CLOCK if self.kind == "cpu" else time.perf_counter
        t0 = tick()
        for _ in range(calls):
            fn()
        t = tick() - t0
        if self.kind != "cpu":
            self.sync()
            self.host_hold_s = min(HOST_HOLD_MAX_S, 2 * t + 20e-6)
        return t / calls

    def host_calls(self, fn: Callable[[], Any], sample_time: float, max_calls: int,
                   warmup_time: float = 0.0) -> int:
        """Calls per host sample: about ``sample_time`` of wall time each, device work included.

        Warms up by time first (at least two calls: the first may compile). The estimate is the
        fastest call with a synchronize, an upper bound of both its host and its device time.
        """
        t_end = time.perf_counter() + warmup_time
        best, n = math.inf, 0
        while True:
            n += 1
            t0 = time.perf_counter()
            fn()
            if self.kind != "cpu":
                self.sync()
            best = min(best, time.perf_counter() - t0)
            if n >= 2 and time.perf_counter() >= t_end:
                break
        return max(1, min(max_calls, int(sample_time / max(best, 1e-9))))


class GraphCaptureError(RuntimeError):
    """``fn`` cannot be captured in a CUDA graph (it synchronises, or calls what capture forbids)."""


def graphed(fn: Callable[[], Any], calls: int, device: Any) -> Callable[[], Any]:
    """``calls`` calls of ``fn`` captured in one CUDA graph: its replay.

    A capture that fails raises :class:`GraphCaptureError` and leaves the process as it was. (When
    ``capture_end`` raises, ``torch.cuda.graph`` never leaves its capture stream: everything after
    ran on it, and pycuda's launches, which go to the legacy stream, were then ordered by a host
    synchronisation, so each CUDA C sample carried a launch's host latency: 28 µs and more for a
    4 µs kernel in the H100 suite of ab670b7.)
    """
    import torch

    home = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)
    side.wait_stream(home)
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    home.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
    except Exception as e:
        torch.cuda.set_stream(home)
        try:
            torch.cuda.synchronize(device)
        except Exception:  # noqa: BLE001 - the capture's own error is the one to report
            pass
        raise GraphCaptureError(f"CUDA-graph capture failed: {type(e).__name__}: {str(e).splitlines()[0]}") from e
    return graph.replay


def measure(fn: Callable[[], Any], device: str = "cpu", *, graph: bool = False, calls_per_sample: int = 20,
            flush_l2: bool = True, nvml: Any = None, **rule: float) -> Measurement:
    """Time ``fn()`` on ``device`` until the stopping rule (module docstring) says stop.

    ``rule`` overrides :data:`DEFAULTS` (``target_noise``, ``min_samples``, ``max_samples``,
    ``warmup_time``, ``min_time``, ``max_time``).
    """
    unknown = set(rule) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"unknown timer setting(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    cfg = {**DEFAULTS, **rule}
    if cfg["target_noise"] <= 0 or cfg["min_samples"] < 2 or cfg["max_time"] <= 0:
        raise ValueError(f"timer settings out of range: {cfg}")
    clock = Clock(device, nvml=nvml, flush=flush_l2)
    if graph:
        if clock.kind != "cuda":
            raise ValueError(f"graph mode needs a CUDA device, got {device!r}")
        target, per = graphed(fn, calls_per_sample, clock.device), calls_per_sample
    else:
        target, per = fn, 1
    t_start = time.perf_counter()
    warm = 0
    while True:  # warm-up by time: the first call also compiles
        clock.batch(target, 1)
        warm += 1
        if time.perf_counter() - t_start >= cfg["warmup_time"]:
            break
    clock.calibrate(target)
    m = Measurement(samples_s=[], device=str(clock.device), warmup_runs=warm, graph=graph,
                    calls_per_sample=per,
                    l2_flush_bytes=0 if clock.flush_buf is None else clock.flush_buf.numel())
    t0 = time.perf_counter()
    batch = 1
    while True:
        times = clock.batch(target, batch)
        c = clock.read_clocks()
        m.samples_s += [t / per for t in times]
        m.sm_mhz += [c.sm_mhz] * len(times)
        m.mem_mhz += [c.mem_mhz] * len(times)
        m.reasons += [c.reasons] * len(times)
        why = should_stop(m.samples_s, time.perf_counter() - t0, target_noise=cfg["target_noise"],
                          min_samples=cfg["min_samples"], min_time=cfg["min_time"], max_time=cfg["max_time"],
                          max_samples=cfg["max_samples"])
        if why:
            m.stopped_by = why
            break
        batch = min(batch * 2, 16)
    m.wall_s = time.perf_counter() - t_start
    return m


def measure_host(fn: Callable[[], Any], device: str = "cpu", **settings: float) -> Measurement:
    """Host seconds per call of ``fn()`` on ``device`` (module docstring: "Host time").

    ``settings`` override :data:`HOST_DEFAULTS` (``samples``, ``sample_time``, ``max_calls``,
    ``warmup_time``). The result's ``samples_s`` are host seconds per call, one per sample of
    ``calls_per_sample`` calls; there are no clocks (host time does not follow the GPU's clock).
    """
    unknown = set(settings) - set(HOST_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown host-timer setting(s) {sorted(unknown)}; known: {sorted(HOST_DEFAULTS)}")
    cfg = {**HOST_DEFAULTS, **settings}
    if cfg["samples"] < 2 or cfg["max_calls"] < 1 or cfg["sample_time"] <= 0:
        raise ValueError(f"host-timer settings out of range: {cfg}")
    clock = Clock(device, flush=False)
    t_start = time.perf_counter()
    calls = clock.host_calls(fn, cfg["sample_time"], int(cfg["max_calls"]), cfg["warmup_time"])
    # One batch untimed first: the warm-up times single calls, and the first batch after it still read
    # 3-9x the median on the CPU (every run of a demo's host series), which is the batch's, not the code's.
    clock.host_batch(fn, calls)
    m = Measurement(samples_s=[clock.host_batch(fn, calls) for _ in range(int(cfg["samples"]))],
                    device=str(clock.device), calls_per_sample=calls, stopped_by="samples")
    m.wall_s = time.perf_counter() - t_start
    return m
