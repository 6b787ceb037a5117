"""Plain `asv run` (asv builds its own virtualenv): the wheel goes in with torch, and the suites run.

The end-to-end run builds a virtualenv and installs torch into it (about 80 s on the 2-core CPU
runner, docs/timing.md "Plain asv run"), so it runs only with XRT_TEST_ASV_RUN=1; the install
command itself is checked always.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import asv_install  # noqa: E402


def test_asv_config_installs_the_wheel_with_torch_pinned_by_the_constraints(tmp_path, monkeypatch):
    from asv import util as asv_util

    conf = asv_util.load_json(str(ROOT / "asv.conf.json"), js_comments=True)
    (cmd,) = conf["install_command"]
    assert "--no-deps" not in cmd and "scripts/asv_install.py {wheel_file} {build_dir}" in cmd
    wheel = tmp_path / "xpuruntime-0-py3-none-any.whl"
    wheel.write_bytes(b"")
    monkeypatch.setenv("XRT_TORCH_INDEX", "default")
    got = asv_install.command(str(wheel), str(ROOT))
    assert got[1:5] == ["-m", "pip", "install", f"{wheel}[torch]"]
    assert got[got.index("-c") + 1] == str(ROOT / "requirements" / "constraints.txt")
    assert "--extra-index-url" not in got
    monkeypatch.delenv("XRT_TORCH_INDEX")
    monkeypatch.setattr(asv_install, "has_nvidia_gpu", lambda: False)
    got = asv_install.command(str(wheel), str(ROOT))
    assert got[got.index("--extra-index-url") + 1] == asv_install.CPU_INDEX  # the CPU wheel without a GPU
    monkeypatch.setattr(asv_install, "has_nvidia_gpu", lambda: True)
    assert "--extra-index-url" not in asv_install.command(str(wheel), str(ROOT))  # PyPI's CUDA wheel
    with pytest.raises(SystemExit, match="no such wheel file"):
        asv_install.command(str(tmp_path / "nope.whl"), str(ROOT))
    text = (ROOT / "requirements" / "constraints.txt").read_text()
    assert "torch==" in text and "triton==" in text


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("XRT_TEST_ASV_RUN") != "1",
                    reason="builds a virtualenv with torch (~80 s): set XRT_TEST_ASV_RUN=1")
def test_plain_asv_run_in_a_fresh_clone(tmp_path):
    from test_bench_suite import clone_repo

    clone = clone_repo(ROOT, tmp_path / "repo")
    env = {**os.environ, "HOME": str(tmp_path), "XRT_TORCH_INDEX": os.environ.get("XRT_TORCH_INDEX", "default")}
    for k in ("PYTHONPATH", "XRT_BENCH_PROFILE", "XRT_BENCH_OPS", "XRT_SIDECAR_DIR"):
        env.pop(k, None)
    asv = [sys.executable, "-m", "asv"]
    subprocess.run(asv + ["machine", "--yes", "--machine", "plain-asv"], cwd=clone, env=env, check=True,
                   capture_output=True)
    out = subprocess.run(asv + ["run", "--quick", "-b", "Square", "HEAD^!"], cwd=clone, env=env,
                         capture_output=True, text=True, timeout=900)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    assert "ModuleNotFoundError" not in log and "failed" not in log.lower(), log[-3000:]
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    (f,) = [p for p in (clone / "results" / "asv" / "plain-asv").glob(f"{head[:8]}-*.json")]
    d = json.loads(f.read_text())
    for name in ("bench_ops.Square.time_op", "bench_host.Square.time_host"):
        values = d["results"][name][0]
        assert any(isinstance(v, float) and v > 0 for v in values), (name, values)
