"""Each layer imports only the ones below it: kernels -> xrt.pytorch -> xrt.bench (and xrt.tune) -> xrt.db
-> xrt.track -> the top (the CLI, xrt.orchestrate, the dashboard). Read from the source with ast, lazy
imports inside functions included, so that it stays true."""

import ast
from pathlib import Path

from conftest import ROOT

# Bottom first. xrt itself (its version), xrt.device (the DeviceInfo every layer uses), xrt.device_env
# (XRT_DEVICE and the pinning variables) and xrt.interrupt (the command's signals, which the layers
# that start processes or write check) sit under all.
LAYERS = ["base", "kernels", "pytorch", "bench", "tune", "db", "track", "top"]
BASE = {"xrt", "xrt._version", "xrt.device", "xrt.device_env", "xrt.interrupt"}
# Named exceptions, each with its reason: (importer's layer, imported module).
ALLOWED = {
    # the .xrt sidecar's key names: written by xrt.bench, read by xrt.db; stdlib only and no imports
    ("bench", "xrt.db.sidecar_keys"),
    # asv's result-file names: the runner picks a commit's files by them, ingest and the gate read them
    ("bench", "xrt.db.result_names"),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> str | None:
    """The layer of an xrt (or dashboard) module; None for anything else (the standard library, torch...)."""
    parts = module.split(".")
    if parts[0] == "dashboard":
        return "top"
    if parts[0] != "xrt":
        return None
    if module in BASE:
        return "base"
    if parts[1] in ("cli", "commands", "orchestrate") or parts[-1] == "cli":
        return "top"
    return parts[1] if parts[1] in LAYERS else "unknown"


def imports(path: Path, name: str) -> list[str]:
    """The modules ``path`` imports (``from a import b``: ``a.b`` when that is a module, else ``a``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            out += [f"{base}.{a.name}" if module_exists(f"{base}.{a.name}") else base for a in node.names]
    return out


def module_exists(module: str) -> bool:
    parts = module.split(".")
    if parts[0] != "xrt":
        return False
    where = ROOT.joinpath(*parts)
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def sources() -> list[tuple[Path, str]]:
    paths = [*(ROOT / "xrt").rglob("*.py"), *(ROOT / "dashboard").rglob("*.py")]
    return [(p, module_name(p)) for p in sorted(paths)]


def test_every_module_has_a_layer():
    unknown = [name for _, name in sources() if layer(name) == "unknown"]
    assert unknown == []


def upward(modules: list[tuple[Path, str]]) -> list[str]:
    """Each import of a higher layer's module, as 'file (layer) imports module (layer)'."""
    out = []
    for path, name in modules:
        mine = layer(name)
        for imported in imports(path, name):
            theirs = layer(imported)
            if theirs is not None and (mine, imported) not in ALLOWED and LAYERS.index(theirs) > LAYERS.index(mine):
                out.append(f"{path.name} [{name}] ({mine}) imports {imported} ({theirs})")
    return out


def test_each_layer_imports_only_the_ones_below_it():
    assert upward(sources()) == []


# What measures, ingests or checks out commits: orchestration (xrt.orchestrate, the CLI) drives it.
DRIVERS = {"xrt.bench.runner", "xrt.bench.worktrees", "xrt.db.ingest"}


def in_track(name: str) -> bool:
    """Whether ``name`` is a module of the xrt/track folder, its CLI included (which :func:`layer` puts
    with the top, as every package's ``cli``)."""
    return name == "xrt.track" or name.startswith("xrt.track.")


def test_detection_reads_what_is_stored_and_drives_nothing():
    """xrt.track judges the database; running benchmarks, ingesting and checking out commits (xrt bisect,
    xrt explain, xrt gate --paired's measuring) is xrt.orchestrate's. Its CLI included."""
    offenders = [f"{path.name}: {imported}" for path, name in sources() if in_track(name)
                 for imported in imports(path, name) if imported in DRIVERS]
    assert offenders == []


def track_upward(modules: list[tuple[Path, str]]) -> list[str]:
    """Each import of a module above xrt.track (xrt.orchestrate, the CLI, the commands) by a module of
    the xrt/track folder, its CLI included."""
    return [f"{path.name} [{name}] imports {imported} ({layer(imported)})" for path, name in modules
            if in_track(name) for imported in imports(path, name)
            if layer(imported) is not None and LAYERS.index(layer(imported)) > LAYERS.index("track")]


def test_track_imports_nothing_above_it():
    """The tracker's folder, its commands included, imports nothing from xrt.orchestrate or the CLI:
    the commands that check out and measure commits are registered from xrt.orchestrate.cli."""
    assert track_upward(sources()) == []


def test_the_track_rule_catches_its_cli_importing_orchestration(tmp_path):
    f = tmp_path / "cli.py"
    f.write_text("from xrt.db.store import DEFAULT_DB\n\n\ndef run(args):\n    from xrt.orchestrate import bisect\n"
                 "    from xrt.cli import CLIError\n    from xrt.track import gate\n")
    assert track_upward([(f, "xrt.track.cli")]) == [
        "cli.py [xrt.track.cli] imports xrt.orchestrate.bisect (top)", "cli.py [xrt.track.cli] imports xrt.cli (top)"]
    assert track_upward([(f, "xrt.orchestrate.cli")]) == []


def is_top_module(text: str) -> bool:
    """Whether ``text`` is the name of a top-layer module that exists (``xrt.cli``, ``xrt.db.cli``...)."""
    if not text.isascii() or not all(p.isidentifier() for p in text.split(".")) or layer(text) != "top":
        return False
    where = ROOT.joinpath(*text.split("."))
    return module_exists(text) or where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def top_module_strings(modules: list[tuple[Path, str]]) -> list[str]:
    """Each string constant of a lower layer that names a top-layer module: ``[sys.executable, "-m",
    "xrt.cli", ...]`` drives the CLI from below, an upward import through a subprocess."""
    out = []
    for path, name in modules:
        mine = layer(name)
        if mine in (None, "top"):
            continue
        out += [f"{path.name} [{name}] ({mine}) names {node.value} (top)"
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and is_top_module(node.value)]
    return out


def test_no_lower_layer_runs_a_top_module():
    assert top_module_strings(sources()) == []


def test_the_rule_catches_a_top_module_run_from_below(tmp_path):
    """The check itself: ``python -m xrt.cli`` from the database layer is reported; the same from its
    CLI module (top), or a sentence that mentions the command, is not."""
    f = tmp_path / "fake.py"
    f.write_text('"""Runs `xrt db ingest` (xrt.cli)."""\nimport subprocess\nimport sys\n\n\n'
                 'def f():\n    subprocess.run([sys.executable, "-m", "xrt.cli", "db", "ingest"])\n'
                 '    return "xrt.db.cli", "xrt.db.store", "dashboard.app", "xrt.nothing.cli"\n')
    assert sorted(top_module_strings([(f, "xrt.db.fake")])) == [
        "fake.py [xrt.db.fake] (db) names dashboard.app (top)", "fake.py [xrt.db.fake] (db) names xrt.cli (top)",
        "fake.py [xrt.db.fake] (db) names xrt.db.cli (top)"]
    assert top_module_strings([(f, "xrt.db.cli")]) == []


def test_kernels_are_imported_as_xrt_kernels_only():
    """The kernels are the package xrt.kernels: a bare ``import kernels`` (xrt/ on sys.path) would load
    a second copy of every kernel module."""
    offenders = []
    for path in [p for d in ("xrt", "benchmarks", "dashboard", "tests", "scripts")
                 for p in (ROOT / d).rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "kernels"]
    assert offenders == []


def test_the_rule_catches_an_import_from_above(tmp_path):
    """The check itself: a track module importing the orchestration layer or the CLI is reported, lazily
    or not; one importing the database is not."""
    f = tmp_path / "fake.py"
    f.write_text("from xrt.db import store\nfrom xrt.orchestrate import bisect\n\n\n"
                 "def f():\n    from xrt.cli import CLIError\n")
    assert upward([(f, "xrt.track.fake")]) == [
        "fake.py [xrt.track.fake] (track) imports xrt.orchestrate.bisect (top)",
        "fake.py [xrt.track.fake] (track) imports xrt.cli (top)"]
    assert layer("xrt.kernels.triton.square") == "kernels" and layer("xrt.bench.cli") == "top"
    assert layer("xrt.db.cli") == "top" and layer("torch") is None


def test_no_submodule_hides_a_package_function():
    """Importing a submodule sets it as an attribute of its package: a submodule named like a
    function of the package's ``__init__`` replaces that function (``xrt/kernels/cuda/launch.py`` once
    hid ``xrt.kernels.cuda.launch()``, and every CUDA C launch failed on the GPU only)."""
    import importlib
    import pkgutil

    for pkg_name in ("xrt.kernels", "xrt.kernels.cuda", "xrt.kernels.triton", "xrt.pytorch", "xrt.pytorch.ops",
                     "xrt.bench", "xrt.db", "xrt.track", "xrt.tune"):
        pkg = importlib.import_module(pkg_name)
        tree = ast.parse(Path(pkg.__file__).read_text())
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        subs = {m.name for m in pkgutil.iter_modules(pkg.__path__)}
        assert not defined & subs, f"{pkg_name}: submodule(s) named like the package's own {sorted(defined & subs)}"


def module_file(module: str) -> Path | None:
    """The source file of an xrt module of this tree (``a/b.py`` or ``a/b/__init__.py``), else None."""
    where = ROOT.joinpath(*module.split("."))
    return next((f for f in (where.with_suffix(".py"), where / "__init__.py") if f.is_file()), None)


def bound_names(stmts: list[ast.stmt]) -> set[str]:
    """The names a module's top level binds (definitions, assignments, imports; inside if, try and with
    blocks too, not inside functions or classes)."""
    out: set[str] = set()
    for n in stmts:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
            continue
        if isinstance(n, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            out |= {x.id for t in targets for x in ast.walk(t) if isinstance(x, ast.Name)}
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names}
        for block in ("body", "orelse", "finalbody", "handlers"):
            if isinstance(getattr(n, block, None), list):
                out |= bound_names(getattr(n, block))
    return out


def missing_imports(path: Path, name: str) -> list[str]:
    """Each xrt module or name that ``path`` imports and this tree does not have."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name.split(".")[0] == "xrt" and module_file(a.name) is None]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.split(".")[0] != "xrt":
                continue
            where = module_file(base)
            have = bound_names(ast.parse(where.read_text()).body) if where else set()
            out += [f"{base}.{a.name}" for a in node.names if module_file(f"{base}.{a.name}") is None
                    and a.name != "*" and a.name not in have and "__getattr__" not in have]
    return out


def test_every_import_of_xrt_names_something_the_tree_has():
    """An import of an xrt module or name this tree lacks (a fallback for an old name, kept for older
    commits) is dead code here, or a bug hidden by its ``except ImportError``."""
    assert [f"{p.relative_to(ROOT)}: {m}" for p, n in sources() for m in missing_imports(p, n)] == []


def test_the_import_rule_catches_an_old_name(tmp_path):
    f = tmp_path / "fake.py"
    f.write_text("try:\n    from xrt.pytorch.ops import kernel_providers\nexcept ImportError:\n"
                 "    from xrt.pytorch.ops import _tuned as kernel_providers\n"
                 "from xrt.track.gate import judge, no_such_name\nimport xrt.no_such_module\n")
    assert sorted(missing_imports(f, "xrt.orchestrate.fake")) == [
        "xrt.no_such_module", "xrt.pytorch.ops._tuned", "xrt.track.gate.no_such_name"]


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles of ``graph`` (module -> the modules it imports): each set of modules that
    reach one another, sorted (Tarjan's strongly connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = stack[stack.index(v):]
            del stack[stack.index(v):]
            if len(part) > 1:
                out.append(sorted(part))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def test_no_import_circle_among_the_modules():
    """No modules of xrt/ (or dashboard/) import one another around a circle, counting imports inside
    functions: those hide a circle from Python at import time, not from a reader. ``from xrt.pytorch
    import policy`` names the submodule, not the package that imports it back."""
    names = {n for _, n in sources()}
    graph = {n: {m for m in imports(p, n) if m in names and m != n} for p, n in sources()}
    assert circles(graph) == []


def test_the_circle_rule_catches_modules_that_import_each_other():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"f"}, "f": {"e"}}
    assert circles(graph) == [["a", "b", "c"], ["e", "f"]]
