"""The core imports without torch, and the wheel carries every kernel.

The kernels are the sub-package ``xrt/kernels`` (a real folder, no link): the tests below load it from a
checkout (PYTHONPATH), an editable install and the wheel.
"""

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest
from conftest import ROOT, checkout_build_lock

# The subprocesses run without the caller's PYTHONPATH (a checkout, when the tests run from one): with it,
# the bare venv's pip and python would see this checkout instead of the wheel.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_import_xrt_does_not_import_torch():
    code = "import sys, xrt, xrt.device, xrt.cli; xrt.cli.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory):
    """A venv with only the xpuruntime wheel (built from this tree) and no torch."""
    tmp = tmp_path_factory.mktemp("bare")
    wheel_dir = tmp / "wheel"
    with checkout_build_lock():
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(wheel_dir), str(ROOT)], check=True, capture_output=True, env=_ENV)
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    wheel = next(wheel_dir.glob("xpuruntime-*.whl"))
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True, env=_ENV)
    return py, tmp


def _run(py: Path, code: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    """``py -c code`` in ``cwd``, with ``pythonpath`` as PYTHONPATH (none by default)."""
    env = _ENV if pythonpath is None else {**_ENV, "PYTHONPATH": str(pythonpath)}
    return subprocess.run([py, "-c", code], capture_output=True, text=True, cwd=cwd, env=env)


def test_installed_without_torch(bare_venv):
    py, tmp = bare_venv
    out = _run(py, "import xrt; print(xrt.__version__)", tmp)
    assert out.returncode == 0, out.stderr
    out = _run(py, "import xrt.pytorch", tmp)
    assert out.returncode != 0
    assert ("ImportError: xrt.pytorch requires PyTorch. Install with: "
            "pip install -e '.[torch]' in an xpuruntime checkout" in out.stderr)


def test_wheel_ships_every_kernel(bare_venv):
    """From another directory, with no source tree: every kernel source loads from the wheel, with the
    headers it includes (``cuda_source`` raises on one not shipped)."""
    py, tmp = bare_venv
    here = sorted(p.name for p in (ROOT / "xrt" / "kernels" / "cuda").glob("*.cu"))
    code = ("import xrt.kernels as k, xrt.kernels.spaces as s; names = k.cuda_sources(); "
            "print(','.join(names)); print(sum(len(k.cuda_source(n)) > 0 for n in names)); "
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


_WHERE = "import xrt.kernels as k, xrt.kernels.spaces as s; print(k.__file__); print(s.__file__)"


def test_checkout_loads_its_own_kernels(tmp_path):
    """PYTHONPATH=<checkout> (the tests, asv and ``xrt bench run``): xrt.kernels is that checkout's xrt/kernels."""
    out = _run(Path(sys.executable), _WHERE, tmp_path, pythonpath=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(ROOT / "xrt" / "kernels" / "__init__.py"),
                                  str(ROOT / "xrt" / "kernels" / "spaces.py")]
    # a folder of the package, not a link to one elsewhere that tools would see as unconnected
    assert not (ROOT / "xrt" / "kernels").is_symlink() and not (ROOT / "kernels").exists()


def test_editable_install_loads_the_checkouts_kernels(tmp_path):
    """``pip install -e .``: xrt and xrt.kernels load from this checkout."""
    prefix = tmp_path / "prefix"
    # --ignore-installed: without it pip first uninstalls the xpuruntime of the environment running
    # the tests (.venv), and every later test that starts `xrt` or the dashboard in a subprocess fails
    with checkout_build_lock():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--ignore-installed", "--prefix", str(prefix), "-e", str(ROOT)], check=True,
                       capture_output=True, env=_ENV)
    site = next(prefix.glob("lib/python*/site-packages"))
    code = f"import site; site.addsitedir({str(site)!r}); " + _WHERE
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env=_ENV)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(ROOT / "xrt" / "kernels" / "__init__.py"),
                                  str(ROOT / "xrt" / "kernels" / "spaces.py")]
    # ... and the environment running the tests still has its own install
    here = subprocess.run([sys.executable, "-m", "pip", "show", "-q", "xpuruntime"], capture_output=True, env=_ENV)
    assert here.returncode == 0, "the test uninstalled xpuruntime from the environment running it"
