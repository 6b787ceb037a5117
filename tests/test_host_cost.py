"""benchmarks/host_cost.py and benchmarks/compiled_host.py run on the CPU (what needs a GPU is listed as
skipped) and emit their tables."""

import json
import subprocess
import sys

from conftest import ROOT


def test_host_cost_runs_on_the_cpu_and_writes_the_table(tmp_path):
    out, md = tmp_path / "host.json", tmp_path / "host.md"
    script = ROOT / "benchmarks" / "host_cost.py"
    run = subprocess.run([sys.executable, str(script), "--device", "cpu", "--out", str(out), "--md", str(md),
                          "--calls", "20", "--repeats", "2", "--warmup", "2", "--no-compile"],
                         capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ""})
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(out.read_text())
    rows = {r["name"]: r for r in res["rows"]}
    assert res["device"] == "cpu" and res["calls"] == 20 and res["repeats"] == 2
    assert res["xrt_source"] == str(ROOT)  # this checkout's xrt, not an installed one
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert res["commit"] == head.stdout.strip() and res["commit"][:12] in md.read_text()  # the code measured
    # What runs on the CPU is measured: every repeat a figure, the median reported.
    for name in ("x * x", 'xp.ops.square(x, provider="torch")', "torch.softmax(x, -1)", "F.layer_norm",
                 "F.layer_norm fwd+bwd", 'xp.ops.square(x, provider="torch") [XRT_TUNED]'):
        r = rows[name]
        assert r["host_us"] > 0 and len(r["samples_us"]) == 2, r
    # Targets are judged against the row they name, in the same run.
    torch_row = rows['xp.ops.square(x, provider="torch")']
    assert torch_row["reference_us"] == rows["x * x"]["host_us"]
    assert torch_row["limit_us"] == rows["x * x"]["host_us"] + 5.0
    # measured in turns with its reference, judged on the median of the per-repeat differences
    diffs = sorted(a - b for a, b in zip(torch_row["samples_us"], rows["x * x"]["samples_us"]))
    assert torch_row["paired_diff_us"] == round(sum(diffs) / 2, 3)  # the median of two
    assert torch_row["met"] == (torch_row["paired_diff_us"] <= 5.0)
    tuned = rows['xp.ops.square(x, provider="torch") [XRT_TUNED]']
    assert tuned["reference"] == 'xp.ops.square(x, provider="torch")' and tuned["met"] in (True, False)
    ratios = sorted(a / b for a, b in zip(tuned["samples_us"], torch_row["samples_us"]))
    assert tuned["paired_ratio"] == round(sum(ratios) / 2, 4) and tuned["met"] == (tuned["paired_ratio"] <= 1.05)
    assert "paired_diff_us" not in rows["x * x"] and "paired_ratio" not in rows["x * x"]
    # What needs a GPU is there, skipped, with the reason; never dropped.
    for name in ("_square_kernel[grid](...) (bare launch)", 'xp.ops.square(x, provider="triton")',
                 'xp.ops.square(x, provider="cuda")', 'xp.ops.fused_layernorm(..., provider="cuda") fwd+bwd'):
        assert rows[name]["host_us"] is None and rows[name]["skipped"], rows[name]
    assert "CUDA GPU" in rows['xp.ops.square(x, provider="triton")']["skipped"]
    assert rows["torch.compile(x * x)"]["skipped"] == "--no-compile"
    assert len(res["do_bench"]) == 8 and all(r["skipped"] == "do_bench needs a CUDA GPU" for r in res["do_bench"])
    table = md.read_text()
    assert table in run.stdout
    assert "| group | call | host µs / call |" in table and '`xp.ops.square(x, provider="torch")`' in table
    assert "skipped: do_bench needs a CUDA GPU" in table
    # what the host's timing depends on: its clock source and the cost of a clock read
    assert res["host"]["monotonic_ns"] > 0 and res["host"]["cpus"] >= 1
    assert f"monotonic_ns {res['host']['monotonic_ns']}" in table


def test_compiled_host_runs_on_the_cpu_and_writes_the_table(tmp_path):
    """benchmarks/compiled_host.py --quick on the CPU: torch's rows and the torch provider's are
    measured under torch.compile, the Triton rows are listed as skipped with the reason."""
    out, md = tmp_path / "compiled.json", tmp_path / "compiled.md"
    script = ROOT / "benchmarks" / "compiled_host.py"
    run = subprocess.run([sys.executable, str(script), "--device", "cpu", "--quick", "--backend", "aot_eager",
                          "--out", str(out), "--md", str(md)],
                         capture_output=True, text=True, timeout=600, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": ""})
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(out.read_text())
    rows = {r["name"]: r for r in res["rows"]}
    assert res["device"] == "cpu" and res["calls"] == 20 and res["repeats"] == 2 and res["backend"] == "aot_eager"
    for group in ("square [4096] fp32", "softmax [64, 1024] bf16", "layernorm [64, 1024] bf16",
                  "layernorm fwd+bwd [64, 1024] bf16"):
        for name in (f"torch: {group}", f'xrt provider="torch": {group}'):
            assert rows[name]["host_us"] > 0 and len(rows[name]["samples_us"]) == 2, rows[name]
        twin = rows[f"xrt triton_op: {group}"]
        assert twin["host_us"] is None and "CUDA GPU" in twin["skipped"], twin
        assert twin["target"] == f"<= torch: {group} + 10 µs"
    assert md.read_text() in run.stdout and "| group | call | host µs / call |" in md.read_text()


def test_compiled_host_only_names_groups_and_refuses_one_that_matches_none(tmp_path):
    """--only keeps the groups whose name contains the text (the table says how Inductor launched
    the kernels); a text no group contains is one line on stderr and exit 2, nothing written."""
    out = tmp_path / "c.json"
    script = ROOT / "benchmarks" / "compiled_host.py"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ""}
    run = subprocess.run([sys.executable, str(script), "--device", "cpu", "--quick", "--backend", "eager",
                          "--only", "square", "--out", str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads(out.read_text())
    assert {r["group"] for r in res["rows"]} == {"square [4096] fp32"} and res["static_user_launch"] is False
    assert "static launch of user-defined Triton kernels off" in run.stdout
    out.unlink()
    run = subprocess.run([sys.executable, str(script), "--device", "cpu", "--quick", "--only", "gelu",
                          "--out", str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 2 and "--only 'gelu': no group's name contains it" in run.stderr and not out.exists()
