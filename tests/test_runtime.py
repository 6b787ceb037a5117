"""autocast, the graph wrapper, the profiler, the allocator, device discovery."""

import json
import os

import pytest
import torch

import xrt.pytorch as xp
from xrt import device as xdev


def test_autocast_on_cpu_casts_torch_ops_and_sets_the_hint():
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    assert xp.get_precision_hint() is None
    with xp.autocast(torch.bfloat16, device_type="cpu"):
        assert xp.get_precision_hint() is torch.bfloat16
        assert (a @ b).dtype is torch.bfloat16  # torch.autocast really is on
        assert xp.ops.square(a, provider="torch").dtype is torch.bfloat16  # xrt ops read the hint
        with xp.autocast(torch.bfloat16, enabled=False, device_type="cpu"):
            assert xp.get_precision_hint() is None
            assert (a @ b).dtype is torch.float32
    assert xp.get_precision_hint() is None
    assert xp.ops.square(a).dtype is torch.float32


def test_autocast_defaults_to_this_machines_device():
    with xp.autocast(torch.bfloat16):
        kind = "cuda" if torch.cuda.is_available() else "cpu"
        assert torch.is_autocast_enabled(kind)


def test_autocast_rejects_bad_arguments():
    with pytest.raises(ValueError, match="torch.float16 or torch.bfloat16, got torch.float64"):
        with xp.autocast(torch.float64):
            pass
    with pytest.raises(ValueError, match="device_type must be"):
        with xp.autocast(torch.float16, device_type="tpu"):
            pass


def test_graph_replay_before_capture_is_an_error():
    g = xp.CUDAGraphWrapper()
    assert not g.captured
    with pytest.raises(RuntimeError, match="graph replay before capture"):
        g.replay()
    with pytest.raises(ValueError, match="warmup_iters=0"):
        xp.CUDAGraphWrapper(warmup_iters=0)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_graph_capture_without_cuda_is_a_clear_error():
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        xp.capture_graph(xp.ops.square, torch.randn(4))


@pytest.mark.gpu
@pytest.mark.parametrize("provider", ["torch", "triton"])
def test_graph_capture_and_replay_square(provider):
    x = torch.randn(1 << 20, device="cuda")
    g = xp.capture_graph(lambda t: xp.ops.square(t, provider=provider), x)
    x.copy_(torch.randn_like(x))  # new data into the static input
    out = g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, x * x)


def test_profile_writes_a_chrome_trace_with_the_xrt_range(tmp_path):
    trace = tmp_path / "sub" / "trace.json"
    with xp.profile(export_chrome_trace=trace) as prof:
        xp.ops.square(torch.randn(1024), provider="torch")
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e.get("name") for e in events}
    assert "xrt::square[torch]" in names and "xrt::profile" in names
    assert "xrt::square[torch]" in prof.table  # the key-averages table
    with pytest.raises(ValueError, match="is a directory"):
        with xp.profile(export_chrome_trace=tmp_path):
            pass


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a machine without CUDA")
def test_allocator_without_cuda_is_a_clear_error():
    with pytest.raises(RuntimeError, match="no CUDA device"):
        xp.set_allocator(True)


@pytest.mark.gpu
def test_allocator_expandable_segments_change_reserved_memory():
    from benchmarks.bench_allocator import fragmenting_workload

    xp.set_allocator(True)
    try:
        assert xp.allocator_settings() == {"expandable_segments": True}
        expandable = fragmenting_workload()
    finally:
        xp.reset_allocator()
    assert xp.allocator_settings() == {"expandable_segments": False}
    default = fragmenting_workload()
    # About the same live bytes in both runs (expandable segments round to 2 MiB pages); the mode
    # changes what is reserved around them: far less with expandable segments.
    assert abs(expandable["peak_allocated"] - default["peak_allocated"]) < 0.05 * default["peak_allocated"]
    assert expandable["peak_reserved"] < 0.5 * default["peak_reserved"]


class FakeNVML:
    NVML_CLOCK_SM, NVML_CLOCK_MEM = 1, 2

    def __init__(self, fail_init=False):
        self.fail_init, self.shutdowns = fail_init, 0

    def nvmlInit(self):
        if self.fail_init:
            raise OSError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("h", i)

    def nvmlDeviceGetClockInfo(self, h, which):
        return {1: 1980, 2: 2619}[which]

    def nvmlDeviceGetMaxClockInfo(self, h, which):
        return {1: 1980, 2: 2619}[which]

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return 700000

    def nvmlSystemGetDriverVersion(self):
        return b"580.159.04"


def test_nvml_facts_from_a_fake_nvml():
    nv = FakeNVML()
    facts = xdev.nvml_facts(0, nv)
    assert facts == {"sm_clock_mhz": 1980, "mem_clock_mhz": 2619, "max_sm_clock_mhz": 1980,
                     "max_mem_clock_mhz": 2619, "power_limit_w": 700.0, "driver": "580.159.04"}
    assert nv.shutdowns == 1
    assert xdev.nvml_facts(0, FakeNVML(fail_init=True)) == {}


def test_device_discovery_and_summary(monkeypatch):
    devices = xdev.discover()
    assert devices[-1].kind == "cpu" and devices[-1].torch == torch.__version__
    assert xdev.default_device().kind == ("cuda" if torch.cuda.is_available() else "cpu")
    monkeypatch.setenv("XRT_DEVICE", "cuda:7")
    with pytest.raises(ValueError, match="XRT_DEVICE='cuda:7' is not on this machine"):
        xdev.default_device()
    h100 = xdev.DeviceInfo(kind="cuda", index=1, name="NVIDIA H100 80GB HBM3", compute_capability="9.0",
                           sm_count=132, l2_bytes=50 * 2**20)
    assert h100.model_key == "nvidia-h100-80gb-hbm3" and h100.arch_key == "sm_90"
    assert h100.torch_device == "cuda:1"
    assert "132 SMs" in h100.summary() and "L2 50 MiB" in h100.summary()


def test_discovery_without_gpu_nodes_imports_no_torch_and_agrees():
    """On a Linux machine with no GPU device node, discovery answers the CPU without importing torch
    (seconds of every command); the answer is the one torch's own look gives. ``XRT_DEVICE=cpu``
    answers so anywhere."""
    import subprocess
    import sys

    code = ("import sys, json, dataclasses; from xrt import device as d; as_dict = dataclasses.asdict; "
            "named = d.default_device(); named_alone = 'torch' not in sys.modules; "
            "fast = d.discover(); fast_alone = 'torch' not in sys.modules; import torch; "
            "print(json.dumps([named_alone, fast_alone, as_dict(named), [as_dict(x) for x in fast], "
            "[as_dict(x) for x in d.discover()]]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "XRT_DEVICE": "cpu"})
    named_alone, fast_alone, named, fast, full = json.loads(out.stdout)
    assert named_alone and named == full[-1]  # XRT_DEVICE=cpu: the CPU as torch's look describes it
    if xdev._no_gpu_nodes():  # no node: the CPU alone, the same facts, no torch
        assert fast_alone and fast == full

@pytest.mark.gpu
def test_cuda_device_facts():
    d = xdev.discover()[0]
    assert d.kind == "cuda" and d.sm_count > 0 and d.l2_bytes > 0 and d.compute_capability
    assert d.max_sm_clock_mhz and d.driver  # from NVML
