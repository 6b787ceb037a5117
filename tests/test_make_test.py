"""`make test` runs the suite in two phases whose union is the whole suite: what is not marked serial on
pytest-xdist workers, then the tests marked serial (they time something and judge it), one at a time."""

import re
import subprocess
import sys
import types

import conftest
import pytest
from conftest import ROOT


def _variables(text: str) -> dict[str, str]:
    """The Makefile's simple ``NAME := value`` assignments."""
    return dict(re.findall(r"^([A-Z_]+) := (.*)$", text, flags=re.M))


def _phases() -> list[str]:
    """The pytest command lines of the Makefile's ``test`` target, in order, with its ``:=`` variables expanded."""
    text = (ROOT / "Makefile").read_text()
    recipe = text.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    for name, value in _variables(text).items():
        recipe = recipe.replace(f"$({name})", value)
    return [ln for ln in recipe.replace("\\\n", "\n").splitlines() if "-m pytest" in ln]


def test_make_test_runs_what_is_not_serial_on_workers_then_what_is_serial_one_at_a_time():
    first, second = _phases()
    assert re.search(r'-n \$\(TEST_JOBS\) .*-m "not serial"', first), first
    assert "-m serial" in second and "-n " not in second and "no:xdist" in second, second
    # neither names files or other marks: together they select every test
    for cmd in (first, second):
        assert not re.search(r"tests/|-k |--deselect|--ignore", cmd), cmd
    recipe = (ROOT / "Makefile").read_text().split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert " & " not in recipe and "wait" not in recipe, recipe  # nothing runs beside the serial tests


def _config(markexpr: str) -> types.SimpleNamespace:
    return types.SimpleNamespace(getoption=lambda name: markexpr if name == "markexpr" else None)


def test_the_serial_phase_collects_only_the_files_that_mark_a_test_serial(tmp_path):
    marks, plain = tmp_path / "test_marks.py", tmp_path / "test_plain.py"
    marks.write_text("import pytest\n\n\n@pytest.mark.serial\ndef test_x():\n    pass\n")
    plain.write_text("def test_y():\n    pass\n")
    assert conftest.pytest_ignore_collect(plain, _config("serial")) is True
    assert conftest.pytest_ignore_collect(marks, _config("serial")) is None
    for expr in ("not serial", "", "serial or slow"):  # any other selection collects every file
        assert conftest.pytest_ignore_collect(plain, _config(expr)) is None


def test_a_test_marked_serial_without_the_spelling_the_serial_phase_reads_stops_the_run(tmp_path):
    """Marked another way (here a name bound to the mark), the serial phase would not collect it and the
    first phase deselects it: the collection fails instead of dropping the test."""
    f = tmp_path / "test_hidden.py"
    f.write_text("import pytest\n\nalone = getattr(pytest.mark, 'ser' + 'ial')\n\n\n@alone\ndef test_z():\n    pass\n")
    item = types.SimpleNamespace(path=f, get_closest_marker=lambda name: name == "serial" or None, keywords={})
    with pytest.raises(pytest.UsageError, match="test_hidden.py marks a test serial"):
        conftest.pytest_collection_modifyitems(_config("not serial"), [item])
    f.write_text(f.read_text().replace("alone = getattr(pytest.mark, 'ser' + 'ial')", "alone = pytest.mark.serial"))
    conftest.pytest_collection_modifyitems(_config("not serial"), [item])  # spelled: collected by both phases


def test_two_pip_builds_from_the_checkout_take_turns():
    """setuptools writes build/ and the egg-info into the checkout: a second build waits for the first."""
    probe = ("import fcntl, sys\n"
             "f = open(sys.argv[1], 'w')\n"
             "try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    print('held')\n"
             "else:\n    print('free')\n")
    with conftest.checkout_build_lock():
        held = subprocess.run([sys.executable, "-c", probe, conftest.BUILD_LOCK], capture_output=True, text=True)
    free = subprocess.run([sys.executable, "-c", probe, conftest.BUILD_LOCK], capture_output=True, text=True)
    assert (held.stdout.strip(), free.stdout.strip()) == ("held", "free"), held.stderr + free.stderr


def _venv_installs() -> list[str]:
    """The pip lines of the Makefile's venv recipe that install the project and its dependencies."""
    text = (ROOT / "Makefile").read_text()
    recipe = text.split("\n$(STAMP):", 1)[1].split("\n\n", 1)[0]
    return [ln.strip() for ln in recipe.splitlines() if "$(PIP) install" in ln and "--upgrade pip" not in ln]


def test_make_venv_installs_in_one_pip_call_per_branch_and_byte_compiles():
    """Each branch (GPU host, CPU) is one pinned pip call. pip byte-compiles what it installs: with
    PYTHONDONTWRITEBYTECODE set (a CI machine may set it) Python never caches a module it compiles, and
    every process the tests start compiled pandas and streamlit again (phase 1 took 18 min, not 10)."""
    lines = _venv_installs()
    assert len(lines) == 2, lines  # the GPU branch and the CPU branch
    for ln in lines:
        assert "--no-compile" not in ln and "-c requirements/constraints.txt" in ln and '-e ".[$(EXTRAS)]"' in ln, ln
    assert '"torch==2.13.0"' in lines[1], lines[1]
