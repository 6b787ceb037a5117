"""The xrt command: help lists every sub-command, errors go to stderr with a non-zero exit."""

import json
import os
import subprocess
import sys

import pytest

from xrt.cli import COMMANDS

XRT = [sys.executable, "-m", "xrt.cli"]


def run(*args, env=None):
    return subprocess.run(XRT + list(args), capture_output=True, text=True, env=env)


def test_help_lists_every_subcommand():
    out = run("--help")
    assert out.returncode == 0
    for name, _ in COMMANDS:
        assert name in out.stdout
    for name in ("diag", "bench", "db", "regressions", "gate", "tune", "dashboard"):
        assert f"    {name}" in out.stdout


def test_unknown_subcommand_is_an_error_on_stderr():
    out = run("frobnicate")
    assert out.returncode != 0 and out.stdout == ""
    assert "invalid choice: 'frobnicate'" in out.stderr


def test_no_subcommand_prints_usage_and_fails():
    out = run()
    assert out.returncode == 2 and "usage: xrt" in out.stderr


def test_device_json_has_the_cpu():
    out = run("device", "--json")
    assert out.returncode == 0, out.stderr
    kinds = [d["kind"] for d in json.loads(out.stdout)]
    assert kinds[-1] == "cpu"


def test_bad_environment_is_a_one_line_error(monkeypatch):
    import os

    env = dict(os.environ, XRT_DEVICE="cuda:9")
    out = run("kernels", "list", env=env)
    assert out.returncode == 2
    assert out.stderr.strip() == ("xrt kernels: error: XRT_DEVICE='cuda:9' is not on this machine; "
                                  "devices here: " + ", ".join(
                                      d["kind"] if d["kind"] == "cpu" else f"{d['kind']}:{d['index']}"
                                      for d in json.loads(run("device", "--json").stdout)))


def test_a_commands_own_error_is_one_line_under_python_m():
    """`python -m xrt.cli` (how the demo and the workflows call it) runs cli.py as __main__: a command's
    CLIError (the class of xrt.cli imported by name) must still be one line and exit 2."""
    out = run("kernels", "dump", "nosuchop")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("xrt kernels: error: unknown op 'nosuchop'; known: ") and out.stderr.count("\n") == 1


def _command(func):
    """xrt.cli's parser with one command, ``lost``, that runs ``func``."""
    import argparse

    parser = argparse.ArgumentParser(prog="xrt")
    parser.add_subparsers(dest="command").add_parser("lost").set_defaults(func=func)
    return lambda: parser


def _lose_a_ctrl_c():
    """What torch's init does when the SIGINT lands in its import of numpy: the exception is lost."""
    import signal

    try:
        signal.raise_signal(signal.SIGINT)
    except KeyboardInterrupt:
        pass


@pytest.mark.parametrize("after", ["returns 0", "fails"])
def test_a_lost_ctrl_c_still_ends_the_command_with_130(monkeypatch, capsys, after, signal_defaults):
    """A Ctrl-C whose KeyboardInterrupt a C extension lost: 130 and "xrt: interrupted", whether the
    command then ran on or failed from it, never 0 or the later error."""
    import signal

    from xrt import cli

    assert threading_main(), "the handler is set from the main thread only"

    def func(args):
        _lose_a_ctrl_c()
        if after == "fails":
            raise RuntimeError("cannot load module more than once per process")
        return 0

    monkeypatch.setattr(cli, "build_parser", _command(func))
    assert cli.main(["lost"]) == 130
    assert capsys.readouterr().err == "xrt: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    monkeypatch.setattr(cli, "build_parser", _command(lambda args: 0))
    assert cli.main(["lost"]) == 0  # the next command starts afresh


def test_a_ctrl_c_inside_an_import_lands_after_it(monkeypatch, tmp_path, signal_defaults):
    """An extension's init is not written for an exception raised in it (orjson's crashed, DuckDB's
    aborted, torch's lost it): a signal that lands in an import is raised when the import is done."""
    import importlib
    import time

    from xrt import cli

    (tmp_path / "xrt_test_slow_import.py").write_text(
        "import signal, sys\nsignal.raise_signal(signal.SIGINT)\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    steps = []

    def func(args):
        mod = importlib.import_module("xrt_test_slow_import")  # nothing raised inside
        steps.append(("imported", mod.DONE))
        t = time.monotonic()
        try:
            time.sleep(5)
        finally:
            steps.append(("slept", round(time.monotonic() - t)))
        return 0

    monkeypatch.setattr(cli, "build_parser", _command(func))
    try:
        assert cli.main(["lost"]) == 130 and steps == [("imported", True), ("slept", 0)]
    finally:
        sys.modules.pop("xrt_test_slow_import", None)


@pytest.mark.parametrize("signum,code,word", [("SIGTERM", 143, "terminated"), ("SIGHUP", 129, "hung up")])
def test_sigterm_and_sighup_clean_up_as_ctrl_c(monkeypatch, capsys, signal_defaults, signum, code, word):
    import signal

    from xrt import cli

    steps = []

    def func(args):
        try:
            signal.raise_signal(getattr(signal, signum))
        finally:
            steps.append("cleaned up")
        return 0

    monkeypatch.setattr(cli, "build_parser", _command(func))
    assert cli.main(["lost"]) == code and steps == ["cleaned up"]
    assert capsys.readouterr().err == f"xrt: {word}\n"
    assert signal.getsignal(getattr(signal, signum)) is signal.SIG_DFL


def threading_main() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


@pytest.mark.slow
@pytest.mark.serial  # judges an A/A pair and a planted slowdown: never beside a busy worker
def test_demo_runs_on_the_default_device(tmp_path):
    """The demo as users get it, in a clone (the README's order: `make demo`, then `make test`): the A/A
    pair passes the gate, the planted slowdown fails it naming square's host series, the front page's
    list has it, and no tracked file of the checkout changed (its work lies in ignored paths only)."""
    from conftest import ROOT
    from test_bench_suite import clone_repo

    clone = clone_repo(ROOT, tmp_path / "repo")
    from xrt.bench import suite

    # a last run's database (here: not one at all) is replaced, never reused: in one database the last
    # run's planted commit, a sibling of this run's, was listed instead of this one's
    (clone / "results" / "demo").mkdir(parents=True)
    (clone / "results" / "demo" / "xrt.duckdb").write_bytes(b"a previous run's database")
    out = subprocess.run(XRT + ["demo", "--no-serve", "--repo", str(clone)], capture_output=True, text=True,
                         cwd=clone, env={**os.environ, "HOME": str(tmp_path), "XRT_CPU_SPAN": str(suite.CPU_SPAN)})
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert not subprocess.run(["git", "-C", str(clone), "status", "--porcelain"], capture_output=True,
                              text=True).stdout.strip()  # nothing tracked changed, nothing untracked left
    assert "square on" in out.stdout and "torch" in out.stdout
    assert "the tracker was right: the A/A pair passed and the planted slowdown failed the gate" in out.stdout
    gates = [ln for ln in out.stdout.splitlines() if ln.startswith("xrt gate: ")]
    assert len(gates) == 2 and gates[0].startswith("xrt gate: pass") and "REGRESSION" in gates[1], gates
    assert "REGRESSION bench_host.Square.time_host" in out.stdout
    assert "new (suspected)" in out.stdout  # `xrt regressions` lists what the front page shows
    # the worst step's --diag checklist, then explain naming the planted file (no GPU: no kernels to compare)
    checklist = out.stdout.split("[info] step: ", 1)[-1].split("[xrt demo]", 1)[0]
    assert "[ok]   tuning config / policy / profile" in checklist and "nothing to change found" in checklist, checklist
    src = out.stdout.split("Sources that change this series' measurements", 1)
    assert len(src) == 2 and "xrt/pytorch/ops/square.py ` (+3" in src[1].split("\n\n")[1], out.stdout[-3000:]
