"""``xrt explain``: the parsers on recorded tool output, the ranked comparison, the stored result,
the gate's summary, and the command's bad input and CPU-only run (NCU and the profiler skipped).

Fixtures (tests/explain_fixtures): Nsight Compute ``--csv --page details`` output of the SpeedOfLight,
LaunchStats and Occupancy sections for CUDA C ``square`` v2 (vectorized) and v1 (scalar) at 2^24
fp32 elements, in NCU's documented CSV layout (ID, Process ID, …, Section Name, Metric Name,
Metric Unit, Metric Value, then the rule columns); torch.profiler Chrome traces of one
``square[triton]`` call without and with a defensive ``.clone()``; and the real ``cuobjdump
-res-usage``, SASS (the two f32 functions, the instructions' encodings dropped) and PTX of
xrt/kernels/cuda/square.cu compiled by nvcc for sm_90.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ro, rw

from xrt.orchestrate import explain_collect
from xrt.track import explain

F = Path(__file__).resolve().parent / "explain_fixtures"
ROOT = Path(__file__).resolve().parents[1]


def ncu(name: str) -> list[dict]:
    return explain.parse_ncu_csv((F / name).read_text())


# ---------------------------------------------------------------------------------------- parsers

def test_ncu_csv_gives_each_launch_its_metrics_in_base_units():
    (k,) = ncu("ncu_square_v2.csv")  # the ==PROF== lines around the table are skipped
    assert k["name"] == "square_v2_f32" and k["grid"] == "(16384, 1, 1)" and k["block"] == "(256, 1, 1)"
    m = k["metrics"]
    assert m["duration_ns"] == pytest.approx(41280.0)  # "usecond" 41.28
    assert (m["sm_pct"], m["dram_pct"], m["memory_pct"]) == (9.43, 89.61, 89.61)
    assert (m["registers"], m["grid_size"], m["block_size"], m["threads"]) == (30, 16384, 256, 4194304)  # "16,384"
    assert (m["waves_per_sm"], m["occupancy_pct"], m["theoretical_occupancy_pct"]) == (15.52, 87.35, 100.0)
    assert m["smem_per_block_bytes"] == 0.0
    assert "L1/TEX Cache Throughput" not in json.dumps(m)  # only the metrics explain reads
    assert [r["rule"] for r in k["rules"]] == ["SOLBottleneck", "AchievedOccupancy"]
    assert k["rules"][1]["type"] == "OPT" and k["rules"][1]["speedup"] == 12.65


def test_ncu_csv_without_rule_columns_and_with_other_units():
    """Older Nsight Compute prints no rule columns; durations may be in nsecond or msecond."""
    text = (F / "ncu_square_v1.csv").read_text().splitlines()
    rows = [ln for ln in text if ln.startswith('"')]
    import csv
    import io

    table = list(csv.reader(io.StringIO("\n".join(rows))))
    out = io.StringIO()
    w = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for r in table:
        if r[0] != "ID" and r[15]:  # a rule row: older versions print rules as text, not rows
            continue
        if r[12] == "Duration":
            r[13], r[14] = "msecond", "0.04971"
        w.writerow(r[:15])
    (k,) = explain.parse_ncu_csv(out.getvalue())
    assert k["rules"] == [] and k["metrics"]["duration_ns"] == pytest.approx(49710.0)
    assert k["metrics"]["dram_pct"] == 74.02 and k["grid"] == "(65536, 1, 1)"


def test_ncu_csv_parser_refuses_text_that_is_not_the_table():
    with pytest.raises(ValueError, match="not Nsight Compute CSV"):
        explain.parse_ncu_csv("==PROF== Connected to process 1\n"
                              "==ERROR== The application returned an error code (1).\n")


def test_profiler_trace_lists_the_kernels_of_one_call_in_launch_order():
    base = explain.parse_trace((F / "trace_square_base.json").read_text())
    head = explain.parse_trace(json.loads((F / "trace_square_clone.json").read_text()))
    assert [(k["name"], k["count"]) for k in base] == [("_square_kernel", 1)]
    assert len(head) == 2 and "direct_copy_kernel_cuda" in head[0]["name"] and head[1]["name"] == "_square_kernel"
    assert head[0]["grid"] == [16384, 1, 1] and head[0]["block"] == [128, 1, 1] and head[0]["registers"] == 26
    assert head[1]["total_us"] == pytest.approx(41.2)
    assert all(k["category"] == "kernel" for k in head)  # cpu_op and cuda_runtime events are not GPU work


def test_compiled_code_parsers_on_real_tool_output():
    res = explain.parse_res_usage((F / "res_usage_square_cuda.txt").read_text())
    assert res["square_v2_f32"] == {"registers": 30, "stack": 0, "shared": 0, "local": 0}
    assert res["square_v1_f32"]["registers"] == 10 and len(res) == 6
    sass_text = (F / "square_cuda.sm_90.sass").read_text()
    assert explain.parse_sass(sass_text) == {"square_v2_f32": 384, "square_v1_f32": 32}
    ops = explain.parse_sass_memory_ops(sass_text)  # v2: 16-byte vector accesses (plus the scalar tail); v1: scalar
    assert ops["square_v2_f32"]["LDG.E.128"] == 5 and ops["square_v2_f32"]["STG.E.128"] == 5
    assert ops["square_v1_f32"] == {"LDG.E.CONSTANT": 1, "STG.E": 1}
    ptx = explain.parse_ptx((F / "square_cuda.sm_90.ptx").read_text())
    assert set(ptx) == set(res) and ptx["square_v2_f32"] > 3 * ptx["square_v1_f32"] > 0


# ---------------------------------------------------------------------------------------- comparing

def _settings(version: str) -> dict:
    return {"provider_resolved": "cuda", "space": "square.cuda", "config": {"block": 256, "version": version},
            "config_source": "default of square.cuda (xrt/kernels/spaces.py)", "env": {"XRT_DEVICE": "cuda:0"},
            "torch": "2.9.0", "triton": "3.5.0"}


def test_tuning_default_v2_to_v1_is_named_kernel_launch_registers_throughput_then_settings():
    res = explain.parse_res_usage((F / "res_usage_square_cuda.txt").read_text())
    base = {"ncu": ncu("ncu_square_v2.csv"), "settings": _settings("v2"), "compiled": res}
    head = {"ncu": ncu("ncu_square_v1.csv"), "settings": _settings("v1"), "compiled": res}
    rows = explain.compare(base, head)
    groups = [r["group"] for r in rows]
    assert groups == sorted(groups, key=explain.GROUPS.index)  # ranked: the kernel list first
    first = rows[0]
    assert (first["what"], first["base"], first["head"]) == ("kernel replaced", "square_v2_f32", "square_v1_f32")
    launch = {r["what"]: (r["base"], r["head"]) for r in rows if r["group"] == "launch configuration"}
    assert launch["grid"] == ("(16384, 1, 1)", "(65536, 1, 1)") and launch["waves per SM"] == ("15.52", "62.06")
    regs = [r for r in rows if r["group"] == "registers/spills"]
    assert regs[0]["what"] == "registers per thread" and (regs[0]["base"], regs[0]["head"]) == ("30", "10")
    thr = [r for r in rows if r["group"] == "throughput"]
    assert thr[0]["what"] == "duration (ns)" and thr[0]["change"] == "+20.4 %"
    dram = next(r for r in thr if r["what"] == "DRAM throughput %")
    assert (dram["base"], dram["head"], dram["change"]) == ("89.61", "74.02", "-17.4 %")
    assert not any(r["what"] == "memory throughput %" for r in thr)  # equal to DRAM's here: said once
    assert any(r["group"] == "ncu findings" and "TailEffect" in r["what"] for r in rows)
    assert not any("AchievedOccupancy" in r["what"] for r in rows)  # on both sides: not a change
    cfg = next(r for r in rows if r["group"] == "settings")
    assert cfg["what"] == "config" and '"version": "v1"' in cfg["head"]
    # the same compiled file on both sides: no compiled-code row
    assert not any(r["group"] == "compiled code" for r in rows)


def _compiled() -> dict:
    res = explain.parse_res_usage((F / "res_usage_square_cuda.txt").read_text())
    text = (F / "square_cuda.sm_90.sass").read_text()
    for fn, n in explain.parse_sass(text).items():
        res[fn]["sass_instructions"] = n
    for fn, ops in explain.parse_sass_memory_ops(text).items():
        res[fn]["memory_ops"] = ops
    return res


def test_without_a_gpu_the_config_selects_the_cuda_c_functions_to_compare():
    """No kernel list on a CPU host: CUDA C's <op>_<version>_<dtype> naming and the config in force
    say which compiled functions the case runs, so v2 -> v1 still shows registers and the vector
    loads gone, marked as selected by the config."""
    base = {"compiled": _compiled(), "settings": {**_settings("v2"), "dtype": "float32"}}
    head = {"compiled": _compiled(), "settings": {**_settings("v1"), "dtype": "float32"}}
    rows = explain.compare(base, head)
    by = {r["what"]: r for r in rows}
    assert by["registers (ptxas)"]["kernel"] == "square_v2_f32 → square_v1_f32 (selected by the config)"
    assert (by["registers (ptxas)"]["base"], by["registers (ptxas)"]["head"]) == ("30", "10")
    mem = by["memory instructions (SASS)"]
    assert "LDG.E.128 ×5" in mem["base"] and mem["head"] == "LDG.E.CONSTANT ×1, STG.E ×1"
    assert (by["SASS instructions"]["base"], by["SASS instructions"]["head"]) == ("384", "32")
    first = rows[0]
    assert first["group"] == "kernel list" and (first["base"], first["head"]) == ("square_v2_f32", "square_v1_f32")
    assert "not observed" in first["what"] and "config" in by


def test_defensive_clone_is_a_new_kernel_first():
    base = {"kernels": explain.parse_trace((F / "trace_square_base.json").read_text()), "settings": _settings("v2")}
    head = {"kernels": explain.parse_trace((F / "trace_square_clone.json").read_text()), "settings": _settings("v2")}
    rows = explain.compare(base, head)
    assert rows[0]["group"] == "kernel list" and rows[0]["what"] == "new kernel"
    assert "direct_copy_kernel_cuda" in rows[0]["kernel"] and rows[0]["change"] == "added"
    assert rows[0]["head"] == "1 launch(es), 27.6 us"  # what the copy costs per call
    assert rows[1]["what"] == "GPU launches per call (all kernels)" and (rows[1]["base"], rows[1]["head"]) == ("1", "2")
    assert not any(r["group"] == "settings" for r in rows)


def test_compiled_code_alone_without_a_kernel_list():
    """On the CPU: no kernel list, so every changed function is shown and marked as such."""
    a = {"k": {"registers": 32, "local": 0, "sass_instructions": 100}}
    b = {"k": {"registers": 40, "local": 16, "sass_instructions": 120}}
    rows = explain.compare({"compiled": a}, {"compiled": b})
    # new spills outrank a register increase; instruction counts come last
    assert [r["what"] for r in rows] == ["local memory / spills (B)", "registers (ptxas)", "SASS instructions"]
    assert all("not known to run" in r["kernel"] for r in rows)


def test_nothing_changed_renders_as_such_with_the_skipped_parts():
    side = {"parts": {"settings": "ok", "ncu": "skipped: no CUDA GPU visible to torch"}, "settings": _settings("v2")}
    payload = {"case": {"benchmark": "bench_ops.Square.time_op"}, "param_key": "'4096', 'float32', 'cuda', 'default'",
               "base": "a" * 40, "head": "b" * 40, "host": "h", "ncu": {"clock_control": "none"},
               "sides": {"base": side, "head": side}, "changes": explain.compare(side, side)}
    md = explain.render_markdown(payload)
    assert "Nothing that was collected differs" in md and "clock control: ` none `" in md
    assert "- ` base: ncu: skipped: no CUDA GPU visible to torch `" in md


def test_case_from_the_database_and_from_the_command_line():
    c = explain.make_case("bench_ops.LayernormBwd.time_op",
                          ["'4096x4096'", "'bfloat16'", "'triton'", "'BLOCK=128,num_warps=4'"])
    assert (c.op, c.shape, c.config) == ("layernorm_bwd", "4096x4096", "BLOCK=128,num_warps=4")
    assert c.param_key == "'4096x4096', 'bfloat16', 'triton', 'BLOCK=128,num_warps=4'"
    assert explain.make_case("bench_ops.Square.time_op", c.param_key.replace("4096x4096", "1024")).shape == "1024"
    assert explain.make_case("bench_ops.VectorAdd.time_op", "4096,float32,cuda,block=256,version=v1").config == \
        "block=256,version=v1"
    with pytest.raises(explain.ExplainError, match="op suites"):
        explain.make_case("gemm_bench.Gemm.time_op", "1,float32,torch,default")
    with pytest.raises(explain.ExplainError, match="expected shape, dtype, provider, config"):
        explain.make_case("bench_ops.Square.time_op", "4096,float32")
    with pytest.raises(explain.ExplainError, match="dtype 'int8'"):
        explain.make_case("bench_ops.Square.time_op", "4096,int8,torch,default")


def test_ncu_command_leaves_the_clocks_alone():
    cmd = explain_collect.ncu_command("ncu", ["python", "t.py"])
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert [cmd[i + 1] for i, a in enumerate(cmd) if a == "--section"] == ["SpeedOfLight", "LaunchStats", "Occupancy"]
    assert "--csv" in cmd and cmd[-2:] == ["python", "t.py"] and cmd[cmd.index("--profile-from-start") + 1] == "off"


# ---------------------------------------------------------------------------------------- stored, and the gate

def _payload(rid: str | None, head: str = "b" * 40) -> dict:
    base = {"ncu": ncu("ncu_square_v2.csv"), "settings": _settings("v2"), "parts": {"ncu": "ok"}}
    hd = {"ncu": ncu("ncu_square_v1.csv"), "settings": _settings("v1"), "parts": {"ncu": "ok"}}
    case = explain.make_case("bench_ops.Square.time_op", "16777216,float32,cuda,default")
    return {"schema": explain.SCHEMA, "case": case.__dict__, "param_key": case.param_key, "regression_id": rid,
            "machine": "h100", "ratio": 1.2, "base": "a" * 40, "head": head, "host": "gpu-host", "gpu": "H100",
            "ncu": {"clock_control": "none"}, "sides": {"base": base, "head": hd}, "changes": explain.compare(base, hd)}


def test_saved_explanation_is_replaced_not_duplicated(tmp_path):
    db = tmp_path / "x.duckdb"
    p = _payload("r1")
    rw(db, lambda con: explain.save(con, p, explain.render_markdown(p)))
    rw(db, lambda con: explain.save(con, p, "second"))
    rows = explain.stored(ro(db), regression_id="r1")
    assert len(rows) == 1 and rows[0]["markdown"] == "second" and rows[0]["machine"] == "h100"
    assert rows[0]["payload"]["changes"][0]["what"] == "kernel replaced"
    q = _payload(None)
    rw(db, lambda con: explain.save(con, q, explain.render_markdown(q)))  # ad hoc (no regression): its own row
    assert len(explain.stored(ro(db), head="b" * 40)) == 2 and explain.stored(ro(db), regression_id="nope") == []


def test_gate_summary_shows_the_stored_explanation_of_a_slower_series(tmp_path):
    from xrt.track import gate

    db = tmp_path / "x.duckdb"
    p = _payload("r1")
    rw(db, lambda con: explain.save(con, p, explain.render_markdown(p)))
    item = {"machine": "h100", "benchmark": "bench_ops.Square.time_op", "param_key": p["param_key"],
            "params": p["case"] and ["'16777216'", "'float32'", "'cuda'", "'default'"], "before": 4.1e-5,
            "after": 4.9e-5, "ratio": 1.2, "p_value": 1e-4, "z": None, "cycles_ratio": 1.2}
    assert explain.for_gate(ro(db), "b" * 40, [item]) == [explain.render_markdown(p)]
    assert explain.for_gate(ro(db), "c" * 40, [item]) == []  # another head
    v = gate.Verdict(base="a" * 40, head="b" * 40)
    v.regressions.append(item)
    md = gate.summary_markdown(v, explain.for_gate(ro(db), v.head, v.regressions))
    assert "What changed (xrt explain)" in md and "| 1 | kernel list | kernel replaced |" in md
    plain = gate.summary_markdown(v)  # nothing stored: the command that would explain the slowest case
    assert "What changed" not in plain
    assert ("` xrt explain --base aaaaaaaaaaaa --head bbbbbbbbbbbb --bench bench_ops.Square.time_op "
            "--params 16777216,float32,cuda,default `") in plain


# ---------------------------------------------------------------------------------------- the command

def xrt(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", "import sys; from xrt.cli import main; sys.exit(main())", *args],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=600)


def test_unknown_regression_id_is_one_line_and_exit_2(tmp_path):
    db = tmp_path / "x.duckdb"
    p = _payload("r1")
    rw(db, lambda con: explain.save(con, p, "x"))  # a database with the tables, and no regression
    r = xrt("explain", "deadbeef", "--db", str(db))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip().splitlines() == ["xrt explain: error: regression 'deadbeef': 0 stored regressions match "
                                             "(run `xrt regressions` first)"]


@pytest.mark.parametrize("args, says", [
    (["--base", "no-such-commit", "--head", "HEAD", "--bench", "bench_ops.Square.time_op", "--params",
      "1024,float32,torch,default"], "'no-such-commit' names no commit in"),
    (["--base", "HEAD", "--head", "HEAD", "--bench", "bench_ops.Square.time_op"], "missing --params"),
    (["abc", "--base", "HEAD"], "give REGRESSION_ID or --base/--head/--bench/--params, not both"),
    (["--base", "HEAD", "--head", "HEAD", "--bench", "Square", "--params", "1,float32,torch,default"],
     "benchmark 'Square': xrt explain takes a case of the op suites"),
])
def test_bad_input_is_one_line_and_exit_2(args, says, tmp_path):
    r = xrt("explain", *args, "--no-save", "--repo", str(ROOT))
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("xrt explain: error: ") and says in lines[0], lines


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_cpu_run_names_the_changed_tuning_default_and_skips_the_gpu_parts(tmp_path):
    """A clone whose head commit changes square's CUDA C default from v2 to v1: on this CPU host the
    settings diff names it, NCU and the profiler say why they were skipped; stored and printed."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True)
    g = lambda *a: subprocess.run(["git", "-C", str(clone), *a], check=True, capture_output=True,  # noqa: E731
                                  text=True).stdout.strip()
    spaces = clone / "xrt" / "kernels" / "spaces.py"
    text = spaces.read_text()
    assert '"square.cuda": {"block": 256, "version": "v2"}' in text
    spaces.write_text(text.replace('"square.cuda": {"block": 256, "version": "v2"}',
                                   '"square.cuda": {"block": 256, "version": "v1"}'))
    g("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qam", "square: scalar default")
    db = tmp_path / "x.duckdb"
    out = tmp_path / "out"
    r = xrt("explain", "--repo", str(clone), "--base", "HEAD~1", "--head", "HEAD", "--bench",
            "bench_ops.Square.time_op", "--params", "1024,float32,cuda,default", "--db", str(db), "--no-ncu",
            "--arch", "sm_90", "--out", str(out))
    assert r.returncode == 0, r.stderr
    payload = json.loads((out / "explain.json").read_text())
    cfg = next(c for c in payload["changes"] if c["what"] == "config")
    assert '"version": "v2"' in cfg["base"] and '"version": "v1"' in cfg["head"]
    for label in ("base", "head"):
        parts = payload["sides"][label]["parts"]
        assert parts["settings"] == "ok" and parts["ncu"] == "skipped: --no-ncu"
        assert parts["profiler"].startswith("skipped: no CUDA device")
        src = payload["sides"][label]["settings"]["xrt_source"]  # the commit's own xrt, from its worktree
        assert src.endswith(f"/wt-{label}/xrt") and not src.startswith(str(ROOT))
    assert "| settings | config |" in r.stdout and "profiler: skipped: no CUDA device" in r.stdout
    if payload["sides"]["head"]["parts"]["compiled"] == "ok":  # nvcc here: the functions the config selects
        mem = next(c for c in payload["changes"] if c["what"] == "memory instructions (SASS)")
        assert mem["kernel"] == "square_v2_f32 → square_v1_f32 (selected by the config)"
        assert "LDG.E.128" in mem["base"] and "LDG.E.128" not in mem["head"]
        sd = next(c for c in payload["changes"] if c["what"] == "SASS diff (lines)")
        assert (out / sd["change"]).is_file() and payload["changes"][-1] == sd
    else:
        assert "nvcc" in payload["sides"]["head"]["parts"]["compiled"]
    (row,) = explain.stored(ro(db), head=g("rev-parse", "HEAD"))
    assert row["regression_id"] is None and row["markdown"] == r.stdout
    assert not [w for w in g("worktree", "list").splitlines() if "xrt-explain" in w]  # worktrees removed


def test_triton_side_compiles_for_sm90_without_a_gpu(tmp_path, monkeypatch):
    """Under the CPU tests' TRITON_INTERPRET=1 the side still compiles the Triton kernel for sm_90
    (PTX, cubin, SASS): registers and instruction counts without a GPU."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    case = explain.make_case("bench_ops.Square.time_op", "4096,float32,triton,default")
    side = explain_collect.collect_side(ROOT, "HEAD", case, tmp_path, "base", use_ncu=False, arch="sm_90",
                                        log=lambda s: None)
    assert side["parts"]["compiled"] == "ok", side["parts"]
    k = side["compiled"]["_square_kernel"]
    assert k["registers"] > 0 and k["local"] == 0 and k["sass_instructions"] > 0 and k["ptx_instructions"] > 0
    assert side["settings"]["config_source"] == "default of square.triton (xrt/kernels/spaces.py)"
    assert not (tmp_path / "wt-base").exists()


def test_ncu_metrics_pair_with_the_profilers_full_kernel_names():
    """NCU names a kernel by its function's base name, the profiler by its whole signature."""
    full = ("void at::native::vectorized_elementwise_kernel<4, "
            "at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>")
    by = {"vectorized_elementwise_kernel": {"n": 1}, "elementwise_kernel": {"n": 2}, "_square_kernel": {"n": 3}}
    assert explain._ncu_for(full, by) == {"n": 1}  # the longest base name that is a whole word of the signature
    assert explain._ncu_for("_square_kernel", by) == {"n": 3} and explain._ncu_for("other", by) is None
    base = {"kernels": [{"name": full, "count": 1, "total_us": 27.0}],
            "ncu": [{"name": "vectorized_elementwise_kernel", "grid": "(1, 1, 1)", "block": "(128, 1, 1)",
                     "metrics": {"duration_ns": 100.0}, "rules": []}]}
    head = {"kernels": [{"name": full, "count": 1, "total_us": 27.0}],
            "ncu": [{"name": "vectorized_elementwise_kernel", "grid": "(2, 1, 1)", "block": "(128, 1, 1)",
                     "metrics": {"duration_ns": 150.0}, "rules": []}]}
    rows = explain.compare(base, head)
    assert [(r["group"], r["what"]) for r in rows] == [("launch configuration", "grid"),
                                                       ("throughput", "duration (ns)")]


# ---------------------------------------------------------------------------------------- with the gate's database

@pytest.fixture
def gated(tmp_path):
    """A synthetic history (xrt.track.synth) whose newest commit is 20 % slower, ingested (the ingest
    stores it as a suspected regression)."""
    np = pytest.importorskip("numpy")
    from xrt.db.ingest import ingest
    from xrt.track import synth

    repo, root, db = tmp_path / "repo", tmp_path / "results", tmp_path / "xrt.duckdb"
    commits = synth.git_history(repo, 6)
    rng = np.random.default_rng(3)
    for i, c in enumerate(commits):
        level = 60e-6 if i == len(commits) - 1 else 50e-6
        synth.write_run(root, "h100", c, synth.samples(rng, level), synth.samples(rng, 5e-6), i, sm_clock_mhz=1980)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    return repo, commits, db, synth


def test_gate_summary_file_carries_the_stored_explanation(gated, tmp_path, capsys):
    from xrt.cli import main

    repo, commits, db, synth = gated
    case = explain.make_case(synth.OP, [p[0] for p in synth.OP_PARAMS])
    p = {**_payload(None, head=commits[-1]), "case": case.__dict__, "param_key": case.param_key, "base": commits[-2]}
    rw(db, lambda con: explain.save(con, p, explain.render_markdown(p)))
    summary = tmp_path / "summary.md"
    code = main(["gate", "--db", str(db), "--repo", str(repo), "--base", commits[-2], "--head", commits[-1],
                 "--summary", str(summary)])
    assert code == 1, capsys.readouterr().out
    text = summary.read_text()
    assert "What changed (xrt explain)" in text and "| 1 | kernel list | kernel replaced |" in text
    assert text.index("What changed") > text.index("| machine | benchmark |")  # after the alert's table


def test_a_stored_regression_of_a_commit_without_xrt_is_refused_per_side(gated, tmp_path, capsys):
    """REGRESSION_ID: the case and commits come from the stored row; the synthetic repository has no
    xrt of its own, so neither side may report another checkout's code as the commit's."""
    from xrt.cli import main
    from xrt.track import regressions

    repo, commits, db, synth = gated
    params = [p[0] for p in synth.OP_PARAMS]
    item = {"machine": "h100", "benchmark": synth.OP, "param_key": ", ".join(params), "params": params,
            "before": 50e-6, "after": 60e-6, "ratio": 1.2, "p_value": 1e-4, "z": None}
    (rec,) = regressions.gate_records(commits[-2], commits[-1], [item])
    rw(db, lambda con: regressions.save(con, [rec]))  # stored as `xrt regressions` stores a step
    (rid,) = [k for k, v in regressions.stored(ro(db)).items() if v["kind"] == "regression"]
    out = tmp_path / "out"
    code = main(["explain", rid[:8], "--db", str(db), "--repo", str(repo), "--no-ncu", "--out", str(out)])
    assert code == 0
    payload = json.loads((out / "explain.json").read_text())
    assert payload["regression_id"] == rid and (payload["base"], payload["head"]) == (commits[-2], commits[-1])
    assert payload["case"]["op"] == "square" and payload["param_key"] == "'16777216', 'float32', 'triton', 'default'"
    for label in ("base", "head"):
        side = payload["sides"][label]
        assert side["parts"]["collect"].startswith("refused: the side imported xrt from")
        assert "settings" not in side and "compiled" not in side
    assert payload["changes"] == []
    (row,) = explain.stored(ro(db), regression_id=rid)
    assert "refused" in row["markdown"]


def test_sass_diff_of_the_compared_pair(tmp_path):
    """The SASS of the v2 and v1 functions (addresses and encodings dropped), diffed per pair."""
    sass = explain.split_sass((F / "square_cuda.sm_90.sass").read_text())
    assert sass["square_v1_f32"][0] == "LDC R1, c[0x0][0x28]" and len(sass["square_v1_f32"]) == 32
    for label in ("base", "head"):
        (tmp_path / label).mkdir()
        (tmp_path / label / "square.sm_90.sass").write_text((F / "square_cuda.sm_90.sass").read_text())
    diffs = explain.sass_diffs(tmp_path / "base", tmp_path / "head", [("square_v2_f32", "square_v1_f32"),
                                                                      ("square_v1_f32", "square_v1_f32")],
                               " (selected by the config)", tmp_path / "keep")
    (d,) = diffs  # the identical pair is not listed
    assert (d["base_fn"], d["head_fn"]) == ("square_v2_f32", "square_v1_f32") and d["removed"] > d["added"] > 0
    text = (tmp_path / "keep" / d["file"]).read_text()
    assert text.startswith("--- base/square_v2_f32\n+++ head/square_v1_f32\n") and "-LDG.E.128" in text
    (row,) = explain.diff_rows(diffs)
    assert row["group"] == "compiled code" and row["head"] == f"+{d['added']}" and row["change"] == d["file"]


def _h100_side(case: str, side: str) -> dict:
    d = F / "h100" / case / side
    return {"ncu": explain.parse_ncu_csv((d / "ncu.csv").read_text()),
            "kernels": explain.parse_trace((d / "trace.json").read_text()),
            "settings": json.loads((d / "settings.json").read_text())}


def test_the_h100_recordings_name_both_causes():
    """The H100 run of scripts/explain_demo.py (Nsight Compute CSVs, torch.profiler traces and the
    settings, recorded as they came): each planted regression's cause heads its table."""
    rows = explain.compare(_h100_side("clone", "base"), _h100_side("clone", "head"))
    assert rows[0]["group"] == "kernel list" and rows[0]["what"] == "new kernel" and rows[0]["change"] == "added"
    assert "Memcpy DtoD" in rows[0]["kernel"]
    assert (rows[1]["base"], rows[1]["head"]) == ("1", "2")  # GPU launches per call
    sq = {r["what"]: r for r in rows if r["kernel"] == "_square_kernel"}
    assert abs(float(sq["duration (ns)"]["change"].rstrip(" %"))) < 5  # the kernel itself did not move
    rows = explain.compare(_h100_side("scalar", "base"), _h100_side("scalar", "head"))
    assert (rows[0]["what"], rows[0]["base"], rows[0]["head"]) == ("kernel replaced", "square_v2_f32", "square_v1_f32")
    by = {r["what"]: r for r in rows}
    assert (by["grid"]["base"], by["grid"]["head"]) == ("(4224, 1, 1)", "(65536, 1, 1)")
    dram = by["DRAM throughput %"]
    assert float(dram["head"]) < float(dram["base"]) and float(by["duration (ns)"]["change"].rstrip(" %")) > 15
    assert '"version": "v1"' in by["config"]["head"]


def test_explain_names_the_sources_that_changed_for_the_series(tmp_path):
    """A host-time step (or one without a GPU) has no kernel to compare: explain names the files that
    change this series' measurements, the op's own and the shared ones, not another op's."""
    import subprocess

    from xrt.orchestrate.explain_collect import changed_sources

    repo = tmp_path / "r"
    files = {"xrt/pytorch/ops/square.py": "a\n", "xrt/pytorch/ops/softmax.py": "a\n",
             "xrt/pytorch/ops/dispatch.py": "a\n"}

    def commit(msg):
        for rel, text in files.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-qm", msg],
                       check=True)
        return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()

    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    base = commit("base")
    files.update({"xrt/pytorch/ops/square.py": "a\nb\nc\n", "xrt/pytorch/ops/softmax.py": "z\n",
                  "xrt/pytorch/ops/dispatch.py": "a\nd\n"})
    head = commit("head")
    got = {f["path"]: (f["added"], f["removed"])
           for f in changed_sources(repo, base, head, "bench_host.Square.time_host")}
    assert got == {"xrt/pytorch/ops/square.py": ("2", "0"), "xrt/pytorch/ops/dispatch.py": ("1", "0")}
    side = {"parts": {"settings": "ok"}, "settings": _settings("v2")}
    payload = {"case": {"benchmark": "bench_host.Square.time_host"},
               "param_key": "'4096', 'float32', 'torch', 'default'",
               "base": base, "head": head, "host": "h", "ncu": {"clock_control": "none"},
               "sides": {"base": side, "head": side}, "changes": [], "sources": []}
    assert "No source that this series' measurements depend on changed" in explain.render_markdown(payload)
    payload["sources"] = [{"path": "xrt/pytorch/ops/square.py", "added": "2", "removed": "0"}]
    assert "- ` xrt/pytorch/ops/square.py ` (+2 −0)" in explain.render_markdown(payload)
