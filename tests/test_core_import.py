"""The core imports without torch, and the wheel carries every kernel."""

import subprocess
import sys
import venv
from pathlib import Path

import pytest
from conftest import ROOT


def test_import_xrt_does_not_import_torch():
    code = "import sys, xrt, xrt.device, xrt.cli; xrt.cli.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory):
    """A venv with only the xpuruntime wheel (built from this tree) and no torch."""
    tmp = tmp_path_factory.mktemp("bare")
    wheel_dir = tmp / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(wheel_dir), str(ROOT)], check=True, capture_output=True)
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    wheel = next(wheel_dir.glob("xpuruntime-*.whl"))
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True)
    return py, tmp


def _run(py: Path, code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([py, "-c", code], capture_output=True, text=True, cwd=cwd)


def test_installed_without_torch(bare_venv):
    py, tmp = bare_venv
    out = _run(py, "import xrt; print(xrt.__version__)", tmp)
    assert out.returncode == 0, out.stderr
    out = _run(py, "import xrt.pytorch", tmp)
    assert out.returncode != 0
    assert ("ImportError: xrt.pytorch requires PyTorch. Install with: "
            "pip install -e '.[torch]' in an xpuruntime checkout" in out.stderr)


def test_wheel_ships_every_kernel(bare_venv):
    """From another directory, with no source tree: every kernel source loads from the wheel."""
    py, tmp = bare_venv
    here = sorted(p.name for p in (ROOT / "kernels" / "cuda").glob("*.cu"))
    code = ("import xrt.kernels as k, xrt.kernels.spaces as s; names = k.cuda_sources(); "
            "print(','.join(names)); print(sum(len(k.source('cuda/' + n)) > 0 for n in names)); "
            "print(len(list(s.configs('square.triton'))) > 0)")
    out = _run(py, code, tmp)
    assert out.returncode == 0, out.stderr
    names, loaded, spaces_ok = out.stdout.split()
    assert names.split(",") == here
    assert int(loaded) == len(here)
    assert spaces_ok == "True"
    listing = _run(py, "import importlib.resources as r; "
                   "print(sorted(p.name for p in r.files('xrt.kernels.triton').iterdir()))", tmp)
    assert "square.py" in listing.stdout
    # The wheel's kernels come from site-packages, not from this checkout.
    where = _run(py, "import xrt.kernels; print(xrt.kernels.__file__)", tmp)
    assert str(ROOT) not in where.stdout and "site-packages" in where.stdout
