"""The side-by-side benchmarks' rows: a wrong result or a failure is a row, never the end of the run."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from conftest import ROOT

from xrt.bench import sidebyside


def test_rows_check_before_they_time_and_record_failures(capsys):
    ref = torch.tensor([1.0, -2.0, 4.0])
    wrong = sidebyside.run_row("g", "3", "xrt v1", lambda: ref + 0.5, ref, max_time=0.1, tol=1e-2, flops=6.0)
    assert wrong["error"] == "wrong result: err 0.125 > 0.01" and "ms" not in wrong and wrong["flops"] == 6.0

    def boom():
        raise RuntimeError("out of resource: shared memory\nmore")

    failed = sidebyside.run_row("g", "3", "xrt v2", boom, ref, max_time=0.1)
    assert failed["error"] == "RuntimeError: out of resource: shared memory" and "ms" not in failed
    assert "Traceback" in capsys.readouterr().err  # the whole failure is on stderr
    assert sidebyside.config_label(None) == "default"
    assert sidebyside.config_label({"BLOCK": 64, "warps": 4}) == "BLOCK=64,warps=4"
    assert sidebyside.fmt(None, ".3f") == "" and sidebyside.fmt(0.12345, ".3f") == "0.123"
    assert sidebyside.tflops(2e12, 1000.0) == 2.0


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU host the benchmarks run")
def test_the_gpu_benchmarks_say_they_need_a_gpu(tmp_path):
    for bench in ("gemm_bench", "conv_bench", "attention_bench", "model_bench", "compiled_twin_ab",
                  "attention_layout_ab", "eager_host_split", "step_kernels", "linear_host"):
        out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{bench}.py"), "--out", str(tmp_path / "x")],
                             capture_output=True, text=True)
        assert out.returncode == 2 and out.stderr.strip() == f"{bench} needs a CUDA GPU", (bench, out.stderr)


def test_run_main_saves_the_rows_with_the_runs_meta(tmp_path, monkeypatch, capsys):
    """A GPU benchmark's main: its rows from ``measure(args)``, under the run's meta, as JSON and
    markdown; the GPU's answers planted."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Planted GPU")
    out, md = tmp_path / "r.json", tmp_path / "r.md"
    seen = []

    def measure(args):
        seen.append(args.quick)
        return [{"x": 1}]

    rc = sidebyside.run_main("bench", "Doc.", ["--out", str(out), "--md", str(md), "--quick"], ROOT, measure,
                             lambda rows, meta: f"| {meta['gpu']} | {len(rows)} |\n")
    saved = json.loads(out.read_text())
    assert rc == 0 and seen == [True] and saved["rows"] == [{"x": 1}]
    assert saved["meta"]["gpu"] == "Planted GPU" and saved["meta"]["commit"] == sidebyside.commit_of(ROOT)
    assert md.read_text() == "| Planted GPU | 1 |\n"
    # A script's own flags: off unless given (model_bench's --eager)
    flags = [("--eager", "eager variants only")]
    got = []
    for argv in ([], ["--eager"]):
        sidebyside.run_main("bench", "Doc.", ["--out", str(out), *argv], ROOT, lambda a: got.append(a.eager) or [],
                            lambda rows, meta: "", flags=flags)
    assert got == [False, True]


def test_cells_and_save(tmp_path, capsys):
    """The table cells every side-by-side benchmark writes, and its outputs."""
    summary = {"met": True, "ratio": 0.912, "default_ratio": 0.85, "summary": True}
    assert sidebyside.cells(summary) == ("**met**", "0.912 (default 0.850)", "")
    assert sidebyside.cells({"met": False, "ratio": None, "error": "OutOfResources: smem"}) == (
        "not met", "", "OutOfResources: smem")
    assert sidebyside.cells({"err": 1.5e-3}) == ("", "", "0.0015")
    out, md = tmp_path / "new" / "r.json", tmp_path / "r.md"
    sidebyside.save({"rows": [1]}, "| a |\n", out, md)
    assert json.loads(out.read_text()) == {"rows": [1]} and md.read_text() == "| a |\n"
    assert "| a |" in capsys.readouterr().out


def test_gemm_linear_bench_picks_a_shared_buckets_entry_by_total_time():
    """Two GEMMs in one fine bucket (768 -> 2304 and 768 -> 3072's weight gradients): the entry is
    the config with the least time over both, not the winner of either one; a config not timed on
    both is not a candidate."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gemm_linear_bench", ROOT / "benchmarks" / "gemm_linear_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    a, b, c = ({"BLOCK_M": 128}, {"BLOCK_M": 64}, {"BLOCK_M": 32})

    def row(shape, cfg, ms):
        return {"group": "tn", "shape": shape, "impl": "x", "config": cfg, "ms": ms, "ratio": 0.05 / ms}

    rows = [row("2304x768x8192", a, 0.08), row("3072x768x8192", a, 0.08),  # a: 0.16 in all
            row("2304x768x8192", b, 0.05), row("3072x768x8192", b, 0.09),  # b: 0.14, no shape's fastest
            row("2304x768x8192", c, 0.04),  # c: timed on one only
            *({"group": "tn", "shape": sh, "summary": True} for sh in ("2304x768x8192", "3072x768x8192"))]
    table = bench.bucket_winners(rows)
    assert list(table) == [("tn", 3072, 768, 8192)]
    entry = table[("tn", 3072, 768, 8192)]
    assert entry["config"] == b and entry["shape"] == "3072x768x8192" and entry["ratio"] == 0.05 / 0.09


def test_gemm_linear_bench_runs_on_the_cpu(interpreter, tmp_path, capsys):
    """benchmarks/gemm_linear_bench.py --quick --device cpu: every layout of every tiny linear is a
    checked, timed row beside torch's, with its summary and the winners' table."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gemm_linear_bench", ROOT / "benchmarks" / "gemm_linear_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out, md = tmp_path / "linear.json", tmp_path / "linear.md"
    assert bench.main(["--quick", "--device", "cpu", "--out", str(out), "--md", str(md)]) == 0
    result = json.loads(out.read_text())
    summaries = [r for r in result["rows"] if r.get("summary")]
    shapes = len(bench.CPU_ROWS) * len(bench.CPU_FEATURES)
    assert len(summaries) == result["gemms"] == 3 * shapes
    assert sorted({r["group"] for r in summaries}) == ["nn", "nt", "tn"]
    timed = [r for r in result["rows"] if not r.get("summary")]
    assert len(timed) == 2 * 3 * shapes  # torch and the default config, each GEMM
    assert all(r.get("ms", 0) > 0 and "error" not in r and r["err"] < 1e-4 for r in timed), timed
    assert all(r["ratio"] > 0 and r["config"] for r in summaries)
    assert {tuple(e["key"]) for e in result["table"]} == {tuple(r["key"]) for r in summaries}
    assert "| tn |" in md.read_text() and "Winners by (layout, M, N, K fine bucket" in md.read_text()
    capsys.readouterr()
    if not torch.cuda.is_available():
        assert bench.main(["--out", str(out)]) == 2
        assert "needs a CUDA GPU" in capsys.readouterr().err


def test_attention_bench_times_sdpa_outside_the_policy(interpreter, no_kernel_policy, monkeypatch):
    """benchmarks/attention_bench.py's compare: xrt's calls run under the policy, SDPA's never. Under a
    policy naming attention's provider a model's own SDPA call is routed to xrt, and the baseline
    would be xrt against itself (every ratio 1.00)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("attention_bench", ROOT / "benchmarks" / "attention_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)

    def inputs(s, d, grad=False):
        g = torch.Generator().manual_seed(s + d)
        ts = [torch.randn(1, 2, s, d, generator=g, dtype=torch.float16) for _ in range(4)]
        return [t.requires_grad_() for t in ts[:3]] + [ts[3]] if grad else ts

    timed = []

    def device_ms(fn, **kw):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            fn()
        timed.append(sorted({e.name for e in prof.events()}))
        return 1.0

    monkeypatch.setattr(bench, "_inputs", inputs)
    monkeypatch.setattr(bench, "device_ms", device_ms)
    monkeypatch.setattr(bench, "sdpa_backend", lambda *a: "cpu")
    rows = bench.compare(17, 64, True, None, None)
    assert [r["pass"] for r in rows] == ["fwd", "bwd"]

    def ran(names):  # xrt's op (its eager backward is an autograd.Function) or aten's SDPA
        return ("xrt" if any(n.startswith("xrt::") or "EagerAttention" in n for n in names) else "") + \
            ("sdpa" if any("scaled_dot_product" in n for n in names) else "")

    # in the order timed: xrt's forward, SDPA's, xrt's backward, SDPA's
    assert [ran(names) for names in timed] == ["xrt", "sdpa", "xrt", "sdpa"], timed


def test_paired_quads_cancel_a_drifting_host(monkeypatch):
    """``paired``: a host that slows down 2.6-fold over the run moves both sides of a quad alike, so
    the ratio stays the true one (1.25); timed one after the other, the two would differ by far more."""
    import time

    clock = [0.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])

    def work(ms):
        def fn():
            clock[0] += ms * 1e-3 * (1.0 + clock[0] / 0.1)  # 1x at the start, 2.6x at the end
        return fn

    r = sidebyside.paired(work(1.0), work(1.25), quads=5, block_s=0.004)
    assert r["calls_per_block"] == 4 and len(r["ratios"]) == 5
    assert all(abs(x - 1.25) < 0.02 for x in r["ratios"]), r["ratios"]
    assert abs(r["ratio"] - 1.25) < 0.01 and r["ms"] > r["base_ms"] > 1.0


def test_busy_time_counts_the_devices_events_only():
    """The GPU's busy time is the union of the device events (kernels, copies): not the host ops that
    launched them, not a record_function range marked on the device (it spans its kernels and the gaps
    between them), and two kernels that overlap count once."""
    from types import SimpleNamespace

    dt = torch.autograd.DeviceType

    def ev(kind, a, b, note=False):
        return SimpleNamespace(device_type=kind, time_range=SimpleNamespace(start=a, end=b), is_user_annotation=note)

    events = [ev(dt.CPU, 0.0, 100.0),  # aten::addmm on the host
              ev(dt.CUDA, 10.0, 50.0), ev(dt.CUDA, 60.0, 110.0),  # two kernels, 90 µs
              ev(dt.CUDA, 5.0, 120.0, note=True),  # xrt::matmul[triton] marked on the device: 115 µs
              ev(dt.CUDA, 100.0, 110.0)]  # a kernel on another stream, inside the second
    assert sidebyside.busy_us(events) == 90.0
    if not torch.cuda.is_available():
        assert sidebyside.device_busy_ms(lambda: None) is None  # no GPU: it cannot say, and says so


def test_commit_of_names_head_and_nothing_outside_a_checkout(tmp_path):
    """The commit a benchmark's results name: HEAD's short hash, and "" where there is no git checkout."""
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert sidebyside.commit_of(ROOT) == head and head
    assert sidebyside.commit_of(tmp_path) == ""
