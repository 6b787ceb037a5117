import contextlib
import fcntl
import hashlib
import os
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# A CPU run spreads its rounds over xrt.bench.suite.CPU_SPAN (5 s), sleeping between them, so that a
# burst of load slows one round, not a whole series. The tests that check what a run records (most)
# do not need that; those that judge a run's noise (the planted host slowdown, the demo's front page,
# the rounds themselves) set XRT_CPU_SPAN back to CPU_SPAN.
os.environ.setdefault("XRT_CPU_SPAN", "0")
# The django-asv results corpus: DJANGO_ASV_CORPUS, else where CI unpacks its shared data beside the checkout.
DJANGO_TARBALL = Path(os.environ.get("DJANGO_ASV_CORPUS")
                      or ROOT.parent / "shared" / "datasets" / "django-asv-results.tar.gz")


# Run a command as a terminal's foreground process would start: with SIGINT and SIGTERM at their
# defaults and not blocked. A test runner started in the background (`cmd &` or nohup in a script)
# has SIGINT ignored, its children inherit that, and Python then never raises KeyboardInterrupt; an
# ignored or blocked disposition also passes from the runner's process to every child. A shell cannot
# undo an ignored signal on entry, so a small Python step resets them and execs the command (same pid).
_FOREGROUND = ("import os, signal, sys; sigs = (signal.SIGINT, signal.SIGTERM); "
               "[signal.signal(s, signal.SIG_DFL) for s in sigs]; signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs); "
               "os.execv(sys.argv[1], sys.argv[1:])")


def foreground(cmd: list[str]) -> list[str]:
    """``cmd`` (its first item an executable's path) with SIGINT and SIGTERM at their defaults, as the
    Ctrl-C and kill tests need."""
    return [sys.executable, "-c", _FOREGROUND, *cmd]


def extract_django(dest: Path, skip_machines: tuple[str, ...] = ()) -> Path:
    """Unpack the django-asv corpus into ``dest`` (without the named machines); skip if it is absent."""
    if not DJANGO_TARBALL.exists():
        pytest.skip(f"corpus not found: {DJANGO_TARBALL} (set DJANGO_ASV_CORPUS to the django asv results .tar.gz)")
    with tarfile.open(DJANGO_TARBALL) as tf:
        keep = [m for m in tf.getmembers() if not any(f"/{x}/" in f"/{m.name}" for x in skip_machines)]
        tf.extractall(dest, members=keep, filter="data")
    return dest


# one lock a checkout, beside every pytest process that runs its tests (xdist's workers, other runs)
BUILD_LOCK = Path(tempfile.gettempdir()) / f"xrt-tests-build-{hashlib.sha1(str(ROOT).encode()).hexdigest()[:12]}.lock"


@contextlib.contextmanager
def checkout_build_lock() -> Iterator[None]:
    """Held while pip builds from this checkout. setuptools writes ``build/`` and ``*.egg-info`` into the
    source tree, so two builds at once (two pytest-xdist workers, ``make test``) would mix their files."""
    with open(BUILD_LOCK, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def graph_keeper(codes: list[str]):
    """A ``torch.compile`` backend that runs AOTAutograd without codegen and keeps each graph's code
    in ``codes`` (forward, then backward), partitioned by the min-cut partitioner as Inductor's are.
    (On CPU tensors torch cannot read which kernel arguments are written and takes all of them.)"""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    def keep(gm, _inputs):
        codes.append(gm.code)
        return make_boxed_func(gm)

    return aot_autograd(fw_compiler=keep, bw_compiler=keep, partition_fn=min_cut_rematerialization_partition,
                        keep_inference_input_mutations=True)


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


SERIAL_TEXT = "mark.serial"  # what a file that marks a test serial spells (pytest_ignore_collect reads it)


def pytest_ignore_collect(collection_path: Path, config):
    """``-m serial`` (make test's second phase) imports only the test files that mark a test serial:
    collecting the whole suite to deselect all but a few of it costs a collection's seconds."""
    if (config.getoption("markexpr") == "serial" and collection_path.suffix == ".py"
            and collection_path.name.startswith("test_") and SERIAL_TEXT not in collection_path.read_text()):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    # The second phase finds serial tests by their file's text: a test marked another way would run in neither phase.
    for path in {item.path for item in items if item.get_closest_marker("serial")}:
        if SERIAL_TEXT not in path.read_text():
            raise pytest.UsageError(f"{path.name} marks a test serial without spelling `pytest.{SERIAL_TEXT}`: "
                                    "make test's serial phase would not collect it")
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the GPU host)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def native_lib():
    """xrt's native ops library (``xrt.pytorch.ops.native``), built and loaded; skips where there is no
    C++ compiler, fails where the build or the load does."""
    import torch

    from xrt.pytorch.ops import native

    if not native._compilers():
        pytest.skip("no C++ compiler to build the native ops")
    if not native.load():
        pytest.fail(f"the native ops did not build or load: {native.why()}")
    return torch.ops.xrt_native


@pytest.fixture
def interpreter():
    """Triton's CPU interpreter must be on before triton.jit runs, i.e. from the process start."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("Triton on the CPU needs TRITON_INTERPRET=1 in the environment (make test sets it)")


@pytest.fixture
def signal_defaults():
    """Python's own signal dispositions for the test (a pytest started in the background inherits
    SIGINT ignored; the in-process Ctrl-C tests need what a terminal's `xrt` has)."""
    import signal

    sigs = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL,
            signal.SIGHUP: signal.SIG_DFL, signal.SIGALRM: signal.SIG_DFL}
    old = {s: signal.signal(s, d) for s, d in sigs.items()}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


@pytest.fixture
def no_kernel_policy(monkeypatch):
    """No kernel policy before and after the test: none set, none from ``XRT_KERNEL_POLICY`` or ``XRT_TUNED``."""
    import xrt.pytorch as xp

    monkeypatch.delenv("XRT_KERNEL_POLICY", raising=False)
    monkeypatch.delenv("XRT_TUNED", raising=False)
    xp.clear_kernel_policy()
    yield
    xp.clear_kernel_policy()


@pytest.fixture
def nvcc():
    path = shutil.which("nvcc")
    if path is None:
        pytest.skip("nvcc (the CUDA toolkit) is not on PATH")
    return path


_readers: list = []  # the read-only connections ro() opened; closed when the test ends


def ro(db):
    """A read-only connection to ``db`` (``xrt.db.store.read``) for a test's calls of the functions that
    take one; closed after the test."""
    from xrt.db import store

    cm = store.read(db)
    con = cm.__enter__()
    _readers.append(cm)
    return con


def rw(db, fn):
    """``fn(con)`` in one write to ``db`` (``xrt.db.store.write``): the functions that write take its connection."""
    from xrt.db import store

    return store.write(db, fn)


@pytest.fixture(autouse=True)
def _close_readers():
    yield
    while _readers:
        with contextlib.suppress(Exception):
            _readers.pop().__exit__(None, None, None)
