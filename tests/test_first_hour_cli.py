"""The CLI lines a new user reads in the first hour: aligned columns, loads people can read, the
machine an explanation was collected on, and ``xrt gate`` resolving ``HEAD~1`` like ``xrt explain``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from xrt.track import diag, explain


def test_kernels_list_columns_stay_in_line_past_a_long_op_name():
    from xrt.commands.kernels import columns

    rows = [("square", "triton", "ok"), ("conv_bn_relu_train", "cuda", "unavailable: no CUDA device"),
            ("layernorm", "torch", "ok")]
    lines = columns(rows).splitlines()
    assert len(lines) == 3
    # the provider and the status start at one column on every line, one space after the widest cell
    assert {ln.index(prov) for ln, (_, prov, _) in zip(lines, rows)} == {len("conv_bn_relu_train") + 1}
    assert {ln.index(st) for ln, (_, _, st) in zip(lines, rows)} == {len("conv_bn_relu_train") + 1 + 7}
    assert all(not ln.endswith(" ") for ln in lines)


def test_kernels_list_prints_aligned_columns(capsys):
    pytest.importorskip("torch")
    from xrt.cli import main

    assert main(["kernels", "list"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines()[1:] if ln.strip()]
    assert any(ln.startswith("conv_bn_relu_train ") for ln in lines)
    # the status (ok / unavailable) starts at one offset on every line
    starts = {max(ln.find(" ok"), ln.find(" unavailable")) for ln in lines}
    assert len(starts) == 1, lines


def test_the_cpu_load_check_prints_two_decimals():
    rec = SimpleNamespace(kind="regression", benchmark="bench_ops.Square.time_op", param_key="'4096'",
                          params=["'4096'"], machine="vm-cpu", before=1e-5, after=1.2e-5, ratio=1.2, p_value=1e-4,
                          commit="b" * 40, previous_commit="a" * 40, cycles_ratio=None)
    facts = {"cpu_load": {"load_per_core": 0.1234567}}
    checks = diag._checklist(rec, {"facts": facts}, {"facts": {"cpu_load": {"load_per_core": 1.32763671875}}}, {}, {})
    (load,) = [c for c in checks if c.name == "CPU load"]
    assert load.detail == "load per core 0.12 -> 1.33"
    checks = diag._checklist(rec, {}, {"facts": {"cpu_load": {"load_per_core": 0.5}}}, {}, {})
    (load,) = [c for c in checks if c.name == "CPU load"]
    assert load.detail == "load per core not recorded -> 0.50"


def test_explain_names_the_machine_it_was_collected_on():
    payload = {"case": {"benchmark": "bench_ops.Square.time_op"}, "param_key": "'4096'", "base": "a" * 40,
               "head": "b" * 40, "host": "vm", "collected_on": "vm-nvidia-h100-80gb-hbm3-0",
               "ncu": {"clock_control": "none"}}
    assert "collected on vm-nvidia-h100-80gb-hbm3-0" in explain.render_markdown(payload)
    del payload["collected_on"]  # an explanation stored before the machine's name was recorded
    assert "collected on host vm;" in explain.render_markdown(payload)


def test_explain_collect_records_the_database_machine_name():
    pytest.importorskip("torch")
    from xrt.bench.machine import machine_name
    from xrt.device import default_device
    from xrt.orchestrate import explain_collect

    assert explain_collect._machine() == machine_name(default_device())


@pytest.fixture(scope="module")
def stepped(tmp_path_factory):
    """3 commits of one machine, the newest 1.31x slower, ingested (the demo's shape)."""
    np = pytest.importorskip("numpy")
    pytest.importorskip("duckdb")
    from xrt.cli import main
    from xrt.track import synth

    tmp = tmp_path_factory.mktemp("gate")
    repo, root = tmp / "repo", tmp / "results"
    commits = synth.git_history(repo, 3)
    rng = np.random.default_rng(5)
    for i, c in enumerate(commits):
        synth.write_run(root, "vm-cpu", c, synth.samples(rng, 50e-6 * (1.31 if i == 2 else 1.0)),
                        synth.samples(rng, 5e-6), i)
    db = tmp / "xrt.duckdb"
    assert main(["db", "ingest", str(root), "--db", str(db), "--repo", str(repo)]) == 0
    return repo, db, commits


def test_gate_resolves_head_1_in_the_checkout_here_without_repo(stepped, monkeypatch, capsys):
    from xrt.cli import main
    from xrt.track import synth

    repo, db, commits = stepped
    monkeypatch.chdir(repo)
    capsys.readouterr()
    assert main(["gate", "--db", str(db), "--base", "HEAD~1", "--head", "HEAD", "--no-history"]) == 1
    assert f"REGRESSION {synth.OP}" in capsys.readouterr().out
    # a hash prefix still resolves in the database, wherever the command runs
    monkeypatch.chdir(db.parent)
    assert main(["gate", "--db", str(db), "--base", commits[1][:8], "--head", commits[2][:8], "--no-history"]) == 1
    capsys.readouterr()
    # a name that is neither: one line naming it, exit 2
    assert main(["gate", "--db", str(db), "--base", "nope~3", "--head", "HEAD", "--no-history"]) == 2
    err = capsys.readouterr()
    assert "'nope~3'" in err.out + err.err and "Traceback" not in err.out + err.err
