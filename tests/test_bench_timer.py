"""The timer: the stopping rule, throttle flagging and cycle-space figures (fake NVML)."""

import math

import pytest
import torch
from fake_nvml import FakeNVML

from xrt.bench import nvml as xnvml
from xrt.bench import timer
from xrt.bench.timer import Measurement, relative_noise, should_stop

RULE = dict(target_noise=0.005, min_samples=10, min_time=0.05, max_time=1.0, max_samples=1000)


def test_no_stop_before_min_samples_or_min_time():
    quiet = [1.0] * 9
    assert should_stop(quiet, 0.5, **RULE) is None  # 9 < min_samples
    assert should_stop(quiet + [1.0], 0.01, **RULE) is None  # not enough time yet
    assert should_stop(quiet + [1.0], 0.06, **RULE) == "noise"


def test_noisy_samples_need_more_samples():
    noisy = [1.0, 1.2] * 5  # 10 samples, rel stderr ~3%
    assert relative_noise(noisy) > 0.005
    assert should_stop(noisy, 0.06, **RULE) is None
    many = [1.0, 1.2] * 400  # 800 samples: rel stderr falls as 1/sqrt(n)
    assert relative_noise(many) < 0.005
    assert should_stop(many, 0.3, **RULE) == "noise"


def test_caps_always_apply():
    noisy = [1.0, 3.0] * 5
    assert should_stop(noisy, 1.0, **RULE) == "time_cap"
    assert should_stop([1.0, 3.0] * 500, 0.1, **RULE) == "max_samples"
    assert relative_noise([1.0]) == math.inf


def test_measure_on_cpu_stops_by_rule_and_reports():
    import torch

    x = torch.randn(1000)
    m = timer.measure(lambda: x * x, "cpu", max_time=0.2, min_time=0.01)
    assert m.stopped_by in ("noise", "time_cap")
    assert m.n >= 10 and m.median_s > 0 and m.wall_s < 1.0
    if m.stopped_by == "noise":
        assert m.rel_noise < 0.005
    assert m.throttled_share == 0.0 and m.median_cycles is None  # no clocks on the CPU
    s = m.summary()
    assert s["q25_s"] <= s["median_s"] <= s["q75_s"]


def test_measure_rejects_bad_settings():
    with pytest.raises(ValueError, match="unknown timer setting"):
        timer.measure(lambda: None, "cpu", noise=0.1)
    with pytest.raises(ValueError, match="graph mode needs a CUDA device"):
        timer.measure(lambda: None, "cpu", graph=True)
    with pytest.raises(ValueError, match="cuda, xpu or cpu"):
        timer.measure(lambda: None, "meta")


def test_throttle_flags_and_cycle_space():
    # Four samples at 1980 MHz unthrottled, then four at 990 MHz under a HW thermal slowdown.
    m = Measurement(samples_s=[1e-3] * 4 + [2e-3] * 4, sm_mhz=[1980] * 4 + [990] * 4,
                    reasons=[0x1] * 4 + [0x40] * 4)
    assert m.throttled_share == 0.5  # gpu_idle (0x1) is not a slowdown; hw thermal (0x40) is
    # Time doubled, clock halved: cycles are unchanged, so the detector sees a clock drop, not code.
    assert m.cycles[0] == pytest.approx(m.cycles[-1]) == pytest.approx(1e-3 * 1980e6)
    assert xnvml.decode(0x40 | 0x4) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert xnvml.is_slowdown(0x4) and xnvml.is_slowdown(0x8) and not xnvml.is_slowdown(0x1 | 0x2 | 0x10)


def test_device_clocks_read_from_fake_nvml():
    fake = FakeNVML(sm=[1980, 1410], reasons=[0, 0x20])
    clk = xnvml.DeviceClocks(0, fake)
    a, b = clk.read(), clk.read()
    assert (a.sm_mhz, a.mem_mhz, a.throttled) == (1980, 2619, False)
    assert (b.sm_mhz, b.throttled) == (1410, True)
    assert clk.other_processes() == [4242]


def test_device_clocks_follow_the_uuid_not_the_visible_index():
    # Under CUDA_VISIBLE_DEVICES=<GPU 1>, torch calls that GPU cuda:0; NVML still calls it 1.
    fake = FakeNVML()
    assert xnvml.DeviceClocks(0, fake, uuid=FakeNVML.UUIDS[1]).handle == ("gpu", 1)
    assert xnvml.DeviceClocks(0, fake).handle == ("gpu", 0)
    # An unknown UUID reads no clocks rather than another GPU's.
    lost = xnvml.DeviceClocks(0, fake, uuid="GPU-ffffffff-0000-0000-0000-000000000000")
    assert not lost.available and lost.read().sm_mhz is None


def test_device_clocks_without_nvml_never_raise():
    class Broken(FakeNVML):
        def nvmlInit(self):
            raise OSError("no driver")

    clk = xnvml.DeviceClocks(0, Broken())
    assert not clk.available
    assert clk.read().sm_mhz is None and clk.read().reasons == 0


def test_host_time_is_back_to_back_calls_with_the_device_waits_outside():
    """A host sample: sync, N calls with nothing between them, sync; only the calls are timed."""
    import time

    clock = timer.Clock("cpu")
    clock.kind = "fake-gpu"  # a device whose synchronize is slow and recorded
    events = []

    def sync():
        events.append("sync")
        time.sleep(0.05)

    clock.sync = sync
    per_call = clock.host_batch(lambda: events.append("call"), 5)
    assert events == ["sync"] + ["call"] * 5 + ["sync"]
    assert per_call < 0.05 / 5 / 2  # neither 50 ms synchronize is inside the interval


def test_host_calls_per_sample_follow_the_sample_time_and_cap():
    import time

    clock = timer.Clock("cpu")
    assert clock.host_calls(lambda: time.sleep(1e-4), sample_time=1.0, max_calls=64) == 64  # capped
    assert clock.host_calls(lambda: time.sleep(0.004), sample_time=0.002, max_calls=64) == 1
    n = []
    clock.host_calls(lambda: n.append(1), sample_time=1.0, max_calls=8, warmup_time=0.0)
    assert len(n) >= 2  # warm-up: at least two calls (the first may compile)


def test_measure_host_on_cpu():
    import torch

    x = torch.randn(1000)
    m = timer.measure_host(lambda: x * x, "cpu", samples=7)
    assert m.n == 7 and m.stopped_by == "samples" and 1 <= m.calls_per_sample <= 64
    assert m.median_s > 0 and m.median_cycles is None and m.sm_mhz == []
    with pytest.raises(ValueError, match="unknown host-timer setting"):
        timer.measure_host(lambda: None, "cpu", calls=3)
    with pytest.raises(ValueError, match="out of range"):
        timer.measure_host(lambda: None, "cpu", samples=1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_failed_graph_capture_leaves_the_default_stream_current():
    """torch.cuda.graph never leaves its capture stream when capture_end raises: the H100 suite of
    ab670b7 ran everything after SDPA's backward (not capturable) on that stream, and CUDA C samples
    carried a host launch latency each. The timer restores the stream and says why."""
    x = torch.ones(1024, device="cuda")

    def syncs():
        (x * 2).sum().item()  # a host read: capture forbids it

    with pytest.raises(timer.GraphCaptureError, match="CUDA-graph capture failed"):
        timer.measure(syncs, "cuda", graph=True, max_samples=10)
    assert torch.cuda.current_stream().cuda_stream == 0
    m = timer.measure(lambda: x * 2, "cuda", graph=True, max_samples=10)  # capture still works after
    assert m.graph and m.n >= 2


def test_a_combination_that_leaves_a_side_stream_fails_and_the_stream_is_reset(monkeypatch):
    """measure_all's guard, with a stand-in for torch.cuda (no GPU here)."""
    import sys
    import types

    from xrt.bench import suite

    current = types.SimpleNamespace(cuda_stream=0x5A, device="cuda:0")
    default = types.SimpleNamespace(cuda_stream=0, device="cuda:0")
    made_current = []
    cuda = types.SimpleNamespace(is_initialized=lambda: True, current_stream=lambda: current,
                                 default_stream=lambda dev: default, set_stream=made_current.append)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    assert suite._stray_stream() == "it left the process on CUDA stream 0x5a, not the default stream (reset)"
    assert made_current == [default]
    current.cuda_stream = 0
    assert suite._stray_stream() is None and made_current == [default]


def test_cpu_samples_are_the_threads_cpu_time_not_the_time_it_waited():
    """On the CPU a sample leaves out the time the thread did not run (on a shared runner: other
    processes' time slices, which read as 2x, 3x a 4 ms call); here a call that sleeps 20 ms."""
    import time

    clock = timer.Clock("cpu", flush=False)
    nap = lambda: time.sleep(0.02)  # noqa: E731
    assert max(clock.batch(nap, 3)) < 0.005
    assert clock.host_batch(nap, 2) < 0.005
    spin_end = [0.0]

    def spin():  # a call that does run: 5 ms of work
        spin_end[0] = time.thread_time() + 0.005
        while time.thread_time() < spin_end[0]:
            pass

    assert min(clock.batch(spin, 2)) >= 0.005


def test_host_samples_follow_one_untimed_batch():
    """measure_host times its samples after one untimed batch of the sample's size: on the CPU the
    first batch after the warm-up read 3-9x the median, and the stored samples carried it."""
    from xrt.bench.timer import measure_host

    seen = []
    m = measure_host(lambda: seen.append(1), "cpu", samples=4, max_calls=2, warmup_time=0.0)
    calls = m.calls_per_sample
    warm = len(seen) - calls * (4 + 1)
    assert calls >= 1 and warm >= 2, (len(seen), calls)  # the warm-up's calls, then 5 batches


def test_host_case_first_round_follows_one_untimed_pair(monkeypatch):
    """The suites' host series (HostCase, not measure_host) time their first round after one untimed
    batch of the reference and one of the op: without it the first sample of a process's first
    combination read 4-6x the median on the CPU, and the demo's checklist blamed warm-up."""
    from xrt.bench import suite, timer

    log = []
    monkeypatch.setattr(timer.Clock, "host_batch", lambda self, fn, calls: log.append(fn) or 1e-6)
    case = suite.HostCase("square", "64", "float32", "torch", "default")
    assert log[:2] == [case.ref, case.fn] and len(log) == 2 + 2 * len(case.samples), len(log)
