"""The gate, the newest-commit judge and the detector's records import each other only at module top,
in one direction (gate <- newest, regressions <- gate, newest): no import inside a function holds a
cycle together. Read from the source with ast, and checked by importing each in a fresh interpreter."""

import ast
import subprocess
import sys

import pytest
from conftest import ROOT

# The modules of the gate and what it shares with `xrt db ingest`'s judge and `xrt regressions`.
MODULES = ["xrt.track.gate", "xrt.track.gate_data", "xrt.track.gate_verdict", "xrt.track.gate_compare",
           "xrt.track.gate_rules", "xrt.track.gate_render", "xrt.track.newest", "xrt.track.regressions",
           "xrt.track.suspects"]


def _path(module: str):
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module:
        return [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return []


def _track_imports(module: str) -> tuple[set[str], list[str]]:
    """(the xrt.track modules it imports anywhere, 'function: module' for each imported inside a function)."""
    tree = ast.parse(_path(module).read_text())
    every = {m for node in ast.walk(tree) for m in _imported(node) if m.startswith("xrt.track")}
    inner = []
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            inner += [f"{fn.name}: {m}" for node in ast.walk(fn) for m in _imported(node) if m.startswith("xrt.track")]
    return {m for m in every if _path(m).is_file()}, inner


def test_no_xrt_track_import_inside_a_function():
    assert {m: _track_imports(m)[1] for m in MODULES} == {m: [] for m in MODULES}


def test_no_import_cycle_among_them():
    """Imports inside functions count too: they are what held the old cycle together."""
    graph = {m: _track_imports(m)[0] & set(MODULES) for m in MODULES}

    def reaches(a: str, b: str, seen: set[str]) -> bool:
        return any(n == b or (n not in seen and reaches(n, b, seen | {n})) for n in graph[a])

    assert [m for m in MODULES if reaches(m, m, set())] == []


@pytest.mark.parametrize("module", ["xrt.track.gate", "xrt.track.newest", "xrt.track.regressions"])
def test_each_imports_first_in_a_fresh_interpreter(module):
    r = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, capture_output=True, text=True,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
