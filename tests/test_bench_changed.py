"""`xrt bench run --changed-only`: which ops a change touches (xrt/bench/sources.py, the one home of
op -> source files), what the runner measures and what it carries forward, and that it says so."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

from xrt.bench import runner, sources
from xrt.device import DeviceInfo

GPT_FUSED = {"gpt_infer_fused", "gpt_infer_fused_compiled", "gpt_train_fused", "gpt_train_fused_compiled"}
GPT = {"gpt_infer", "gpt_infer_compiled", "gpt_train", "gpt_train_compiled"} | GPT_FUSED  # models of the routed ops
ADD_LN = {"add_layernorm", "add_layernorm_bwd"}  # uses layernorm's and softmax's kernels
LIN_GELU = {"linear_gelu", "linear_gelu_bwd"}  # uses matmul's GEMM
OPS = sorted({"attention", "attention_bwd", "bmm", "cnn_infer", "cnn_train", "conv_bn_relu", "layernorm",
              "layernorm_bwd", "linear_cross_entropy", "matmul", "softmax", "square", "vector_add", "window_sum"}
             | GPT | ADD_LN | LIN_GELU)


def test_units_are_the_specs_ops_and_the_allocator():
    assert sources.units() == OPS + ["allocator"]


@pytest.mark.parametrize("changed,want", [
    (["docs/timing.md", "tests/test_x.py", "xrt/track/gate.py", "xrt/orchestrate/bisect.py", "README.md"], set()),
    (["xrt/kernels/triton/square.py"], {"square"}),
    # an op's own files, and those of the ops that use it (OpDef.uses: the fused ops, the model)
    (["xrt/kernels/cuda/layernorm.cu"], {"layernorm", "layernorm_bwd"} | ADD_LN | GPT),
    (["xrt/kernels/triton/matmul.py"], {"matmul", "bmm"} | LIN_GELU | GPT),  # one file, two ops (BenchSpec.module)
    (["xrt/kernels/triton/linear_gelu.py"], LIN_GELU | GPT_FUSED),  # the fused model uses it
    (["xrt/kernels/reference/layernorm.py"], {"layernorm", "layernorm_bwd"} | ADD_LN | GPT),
    (["xrt/kernels/triton/softmax.py"], {"softmax"} | ADD_LN | GPT),  # row_warps
    (["xrt/kernels/triton/attention.py"], {"attention", "attention_bwd"} | GPT),
    (["xrt/pytorch/ops/softmax.py", "xrt/kernels/reference/window_sum.py"], {"softmax", "window_sum"} | ADD_LN | GPT),
    (["xrt/kernels/defs/softmax.py"], {"softmax"} | ADD_LN | GPT),
    (["xrt/kernels/defs/gpt.py"], GPT),
    # a commit from before the kernels moved into the package: the same ops from the old paths
    (["kernels/triton/square.py"], {"square"}),
    (["kernels/cuda/layernorm.cu"], {"layernorm", "layernorm_bwd"} | ADD_LN | GPT),
    (["kernels/defs/softmax.py", "kernels/reference/window_sum.py"], {"softmax", "window_sum"} | ADD_LN | GPT),
    (["kernels/triton/launch.py"], set(OPS) | {"allocator"}),
    # the move itself (git diff --no-renames: deleted at the old path, added at the new): the ops it moves
    (["kernels/triton/square.py", "xrt/kernels/triton/square.py"], {"square"}),
    (["results/tuned/vector_add.json"], {"vector_add"}),
    (["xrt/pytorch/allocator.py"], {"allocator"}),
    (["xrt/bench/timer.py"], set(OPS) | {"allocator"}),  # the timer: every unit
    (["xrt/bench/specs.py"], set(OPS) | {"allocator"}),
    (["xrt/kernels/triton/launch.py"], set(OPS) | {"allocator"}),  # shared launch code
    (["something/new.py"], set(OPS) | {"allocator"}),  # unknown: re-measure, never carry
])
def test_affected(changed, want):
    assert set(sources.affected(changed)) == want


def test_own_files_exist_in_the_tree_and_a_bad_unit_is_named():
    for u in sources.units():
        existing = [p for p in sources.own_files(u) if (ROOT / p).is_file()]
        assert existing, u  # a mapping that names no real file would carry everything
    with pytest.raises(ValueError, match="no benchmarked unit 'sqaure'"):
        sources.own_files("sqaure")


def test_bench_selection_and_regex():
    assert sources.units_matching("Square") == ["square"]
    assert sources.units_matching("bench_allocator") == ["allocator"]
    assert sources.units_matching(None) == sources.units()
    with pytest.raises(ValueError, match=r"--bench '\(': not a regular expression"):
        sources.units_matching("(")
    rx = re.compile(sources.bench_regex(["square", "allocator"]))
    assert rx.search("bench_ops.Square.time_op") and rx.search("bench_host.Square.time_host")
    assert rx.search("bench_allocator.AllocatorFragmentation.track_peak_reserved")
    assert not rx.search("bench_ops.Softmax.time_op") and not rx.search("bench_ops.SquareX.time_op")
    both = re.compile(sources.bench_regex(["square", "softmax"], "time_op"))
    assert both.search("bench_ops.Square.time_op") and not both.search("bench_host.Square.time_host")
    assert sources.unit_of_benchmark("bench_host.LayernormBwd.time_host") == "layernorm_bwd"
    assert sources.unit_of_benchmark("bench_ops.Launch.time_launch") is None
    # the series the one setup_cache measures
    assert sources.series_matching(None, ["square"]) == ["device", "host", "compiled"]
    assert sources.series_matching("Square.time_op", ["square"]) == ["device"]
    assert sources.series_matching("time_host", ["square", "softmax"]) == ["host"]


def test_runner_and_gate_take_the_mapping_from_its_one_home():
    for rel in ("xrt/bench/runner.py", "xrt/track/gate.py"):
        src = (ROOT / rel).read_text()
        assert "from xrt.bench import sources" in src or "from xrt.bench.sources import" in src, rel
        assert "kernels/triton/" not in src, rel


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x",
           "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


def _commit(repo: Path, path: str, text: str) -> str:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", f"change {path}")
    return _git(repo, "rev-parse", "HEAD")


def test_plan_carries_unchanged_units_from_where_they_were_measured(tmp_path):
    repo, results = tmp_path / "repo", tmp_path / "results"
    repo.mkdir()
    _git(repo, "init", "-q")
    a = _commit(repo, "xrt/kernels/triton/square.py", "a")
    b = _commit(repo, "docs/x.md", "b")
    c = _commit(repo, "xrt/kernels/cuda/square.cu", "c")
    # nothing measured yet: every unit, and it says why
    measure, carried, note = runner.plan_changed(repo, results, "m1", b, sources.units())
    assert measure == sources.units() and carried == {} and "no earlier commit measured on m1" in note
    (results / "m1").mkdir(parents=True)
    (results / "m1" / f"{a[:8]}-existing-py.json").write_text("{}")
    measure, carried, note = runner.plan_changed(repo, results, "m1", b, sources.units())
    assert measure == [] and set(carried) == set(sources.units()) and carried["square"] == {"from": a, "since": a}
    runner.write_carried(results, "m1", b, carried)
    # c changes square's CUDA kernel: square is measured; the rest carry a's measurement through b's record
    measure, carried, note = runner.plan_changed(repo, results, "m1", c, sources.units())
    assert measure == ["square"] and carried["softmax"] == {"from": a, "since": b}, note
    assert f"since {b[:10]}" in note and "measuring square" in note
    # another machine has its own history
    assert runner.plan_changed(repo, results, "m2", c, sources.units())[0] == sources.units()
    # the root commit has no parent: measured, not carried
    assert runner.plan_changed(repo, results, "m1", a, sources.units())[1] == {}


def test_a_bad_carried_record_is_named(tmp_path):
    (tmp_path / "m1").mkdir()
    h = "ab" * 20
    (tmp_path / "m1" / f"{h}.carried").write_text('{"carried": 1}')
    with pytest.raises(runner.BenchError, match=rf"m1/{h}.carried: not a carried-forward record"):
        runner.read_carried(tmp_path, "m1", h)


def test_changed_only_run_of_a_docs_commit_runs_nothing_and_records_the_carry(tmp_path, monkeypatch):
    """Through runner.run: the commit after a measured one changes only docs, so no asv process starts."""
    from test_bench_suite import clone_repo

    clone = clone_repo(ROOT, tmp_path / "repo")
    monkeypatch.setenv("HOME", str(tmp_path))  # asv keeps its machine file in ~
    cpu = DeviceInfo(kind="cpu", index=0, name="cpu", host="node-a")
    monkeypatch.setattr(runner, "targets", lambda all_gpus, device: [runner.Target(cpu, runner.pin_env(cpu))])
    base = _git(clone, "rev-parse", "HEAD")
    head = _commit(clone, "docs/changed-only-note.md", "only docs")
    results = tmp_path / "results"
    (results / "node-a-cpu").mkdir(parents=True)
    (results / "node-a-cpu" / f"{base[:8]}-existing-py.json").write_text("{}")  # base: measured before
    monkeypatch.setattr(runner, "_asv_cmd", lambda *a: pytest.fail("asv must not run"))
    lines = []
    summary = runner.run(clone, [head], results, changed_only=True, log=lines.append)
    state = summary["commits"][0]["machines"]["node-a-cpu"]
    assert state["status"] == "carried forward" and state["measured"] == [] and set(state["carried"]) == set(
        sources.units())
    assert any(f"since {base[:10]}" in ln and "measuring nothing" in ln for ln in lines), lines
    rec = json.loads((results / "node-a-cpu" / f"{head}.carried").read_text())
    assert rec["carried"]["square"] == {"from": base, "since": base, "reason": "sources unchanged"}


def test_asv_config_of_a_run_does_not_need_a_main_branch(tmp_path):
    """`xrt bench run` in a clone without `main`: asv resolved the configured branches and stopped."""
    (tmp_path / "asv.conf.json").write_text((ROOT / "asv.conf.json").read_text())
    cpu = DeviceInfo(kind="cpu", index=0, name="cpu", host="node-a")
    config, out = runner._asv_config(tmp_path, runner.Target(cpu, runner.pin_env(cpu)))
    conf = json.loads(config.read_text())
    assert conf["branches"] == ["HEAD"] and out == tmp_path / ".xrt-results-node-a-cpu"


def test_allocator_suite_skips_on_the_cpu_target_without_torch(monkeypatch):
    from benchmarks.bench_allocator import AllocatorFragmentation

    monkeypatch.setenv("XRT_DEVICE", "cpu")
    with pytest.raises(NotImplementedError, match=r"needs a CUDA device \(XRT_DEVICE=cpu\)"):
        AllocatorFragmentation().setup(False)
