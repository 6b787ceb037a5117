"""One definition per op (xrt/kernels/defs): every layer that lists ops derives its list from it, and no
module outside the definitions (and the op's own files) holds a list of op names."""

import ast
import contextlib
import importlib
import inspect
import io
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import ROOT

from xrt.kernels import defs, spaces
from xrt.kernels.opdef import POINTER


def test_every_definition_file_is_collected():
    """Every file of xrt/kernels/defs is read, each op of its DEFS is in OPS once, and ORDER (the
    order of reports) names no file that is gone."""
    files = {p.stem for p in (ROOT / "xrt" / "kernels" / "defs").glob("*.py") if p.stem != "__init__"}
    assert set(defs.MODULES) == files and set(defs.ORDER) <= files
    named = [d.name for m in defs.MODULES for d in importlib.import_module(f"xrt.kernels.defs.{m}").DEFS]
    assert named == list(defs.OPS)


def test_definitions_name_existing_spaces_and_files():
    for d in defs.OPS.values():
        assert set(d.providers) <= {"torch", "triton", "cuda", "xpu"}, d.name
        assert d.providers[0] == "torch", d.name  # the reference first: the suites' baseline
        for key in d.space_keys.values():
            assert key in spaces.SPACES, f"{d.name}: no tuning space {key!r} in xrt/kernels/spaces.py"
        if d.model:
            continue
        assert (ROOT / "xrt" / "kernels" / "reference" / f"{d.file}.py").is_file(), d.name
        assert (ROOT / "xrt" / "pytorch" / "ops" / f"{d.file}.py").is_file(), d.name
        for p in d.timed:
            if p != "torch":
                assert (ROOT / "xrt" / "kernels" / p / f"{d.file}.py").is_file(), (d.name, p)
        # xrt kernels dump --provider cuda compiles xrt/kernels/cuda/<file>.cu
        assert ("cuda" in d.providers) == (ROOT / "xrt" / "kernels" / "cuda" / f"{d.file}.cu").is_file(), d.name
        if d.shapes:
            assert set(d.shapes) == {"quick", "small", "large"} and d.dtypes, d.name
        for stem in d.uses:  # another op's kernels, which xrt bench run --changed-only follows
            assert (ROOT / "xrt" / "kernels" / "triton" / f"{stem}.py").is_file(), (d.name, stem)


def test_every_model_says_what_a_step_processes():
    """The dashboard's tokens/s and images/s come from these: every model counts its items from its
    shapes; a kernel has none."""
    models = {d.name: d for d in defs.OPS.values() if d.model}
    assert {n for n in models if n.startswith("gpt_")} and {"cnn_infer", "cnn_train"} <= set(models)
    for d in defs.OPS.values():
        if not d.model:
            assert not d.step_items and d.items_per_step((4096,)) is None, d.name
            continue
        assert d.step_items in ("tokens", "images") and d.step_dims, d.name
        for shape in (s for shapes in d.shapes.values() for s in shapes):
            assert max(d.step_dims) < len(shape), (d.name, shape)
    # a GPT step at (batch, sequence, width, heads, blocks) is batch x sequence tokens; a CNN's, batch images
    assert defs.get("gpt_train").items_per_step((4, 2048, 2048, 16, 4)) == 4 * 2048
    assert defs.get("gpt_infer_compiled").step_items == "tokens"
    assert (defs.get("cnn_infer").step_items, defs.get("cnn_infer").items_per_step((256, 64))) == ("images", 256)


def test_the_policy_offers_every_op():
    from xrt.pytorch import policy

    known = policy.known_ops()
    for d in defs.OPS.values():
        assert d.policy_op in known, d.name
        if not d.policy:
            assert known[d.name] == ("auto", *d.providers), d.name


def test_xrt_kernels_lists_every_op_with_its_providers():
    from xrt.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["kernels", "list"]) == 0
    listed: dict[str, set[str]] = {}
    for line in out.getvalue().splitlines()[1:]:
        op, provider = line.split()[:2]
        listed.setdefault(op, set()).add(provider)
    for d in defs.OPS.values():
        if not d.model:
            assert set(d.providers) <= listed.get(d.name, set()), d.name


def test_bench_specs_gpucheck_and_tuner_derive_from_the_definitions():
    from xrt.bench import gpucheck, specs
    from xrt.tune.cli import tunable_ops

    assert set(specs.SPECS) == {d.name for d in defs.OPS.values() if d.shapes}
    for name, spec in specs.SPECS.items():
        d = defs.get(name)
        assert spec.shapes == {k: list(v) for k, v in d.shapes.items()}
        assert (spec.dtypes, spec.providers, spec.spaces) == (list(d.dtypes), list(d.timed), d.space_keys)
    assert gpucheck.OPS == [d.name for d in defs.OPS.values() if d.gpucheck]
    assert tunable_ops() == [d.name for d in defs.OPS.values() if d.space_keys]


def test_a_backwards_spec_checks_its_own_providers():
    """A backward's policy entry is its forward's, so the spec asks the provider registry itself
    (``xrt bench measure layernorm_bwd`` once failed: no policy op 'layernorm_bwd')."""
    import torch

    import xrt.pytorch  # noqa: F401  (registers the providers)
    from xrt.bench import specs

    backwards = [d.name for d in defs.OPS.values() if d.shapes and not d.model and d.policy not in ("", "switch")]
    assert {"layernorm_bwd", "add_layernorm_bwd", "linear_gelu_bwd"} <= set(backwards)
    for name in backwards:
        spec = specs.get(name)
        args = spec.make_inputs(spec.shapes["quick"][0], torch.float32, "cpu")
        spec.runnable(args, "torch")
        with pytest.raises((RuntimeError, ValueError)):  # a CPU tensor, or no CUDA C for this op
            spec.runnable(args, "cuda")


def test_dump_signatures_match_the_triton_kernels():
    """``xrt kernels dump`` compiles each declared kernel with its declared signature: the runtime
    arguments in the kernel's order, and a value for each constexpr without a default."""
    from xrt.commands.kernels import _triton_specs

    checked = 0
    for d in defs.OPS.values():
        for k in d.dump:
            fn = getattr(importlib.import_module(f"xrt.kernels.triton.{d.file}"), k.fn)
            params = inspect.signature(fn.fn).parameters.values()
            const = {p.name: p.default is inspect.Parameter.empty for p in params if "constexpr" in str(p.annotation)}
            runtime = [p.name for p in params if p.name not in const]
            assert list(k.signature) == runtime, (d.name, k.fn)
            assert set(k.constexprs) | set(k.fp32) <= set(const), (d.name, k.fn)
            assert {n for n, required in const.items() if required} <= set(k.constexprs), (d.name, k.fn)
            for dtype, ptr in POINTER.items():
                types = k.types(dtype)
                assert ptr in types.values() and "*T" not in types.values()
            checked += 1
        assert [s[1] for s in _triton_specs(d.name, "bfloat16")] == [k.fn for k in d.dump]
    assert checked >= 5


def test_dump_cuda_names_the_definitions_source(tmp_path):
    """An op without CUDA C says so, naming the sources (no nvcc needed to get there)."""
    from xrt.cli import CLIError
    from xrt.commands.kernels import dump_cuda

    with pytest.raises(CLIError, match="op 'attention' has no CUDA C source; sources: .*layernorm.cu"):
        dump_cuda("attention", tmp_path, "sm_90")


# -- no list of op names outside the definitions -------------------------------------------------

def own_files(name: str) -> set[Path]:
    """The files of the op whose file stem is ``name``: its kernels, launchers, reference and op module."""
    return {ROOT / "xrt" / "kernels" / kind / f"{name}.py" for kind in ("reference", "triton", "cuda")} | {
        ROOT / "xrt" / "pytorch" / "ops" / f"{name}.py"}


def op_name_lists(path: Path, names: set[str]) -> list[str]:
    """Each literal list, tuple, set or dict (its keys) in ``path`` that holds two op names or more
    as strings, as 'file:line: names'. ``__all__`` (the public functions) is not a list of ops."""
    tree = ast.parse(path.read_text())
    skip = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets)}
    out = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        items = (node.keys if isinstance(node, ast.Dict) else node.elts
                 if isinstance(node, (ast.List, ast.Tuple, ast.Set)) else [])
        found = sorted({i.value for i in items if isinstance(i, ast.Constant) and i.value in names})
        if len(found) >= 2:
            out.append(f"{path.name}:{node.lineno}: {', '.join(found)}")
    return out


def test_no_module_outside_the_definitions_lists_op_names():
    """A new op is its kernel files and its definition: a module that keeps its own list of ops
    (gpucheck's OPS, xrt kernels' dump table, the policy's op list once did) would miss it."""
    names = set(defs.OPS)
    allowed = {p for d in defs.OPS.values() for p in own_files(d.file)}
    paths = [p for p in (ROOT / "xrt").rglob("*.py")
             if "defs" not in p.relative_to(ROOT).parts and p.resolve() not in allowed and p not in allowed]
    offenders = [hit for p in sorted(paths) for hit in op_name_lists(p, names)]
    assert offenders == []


def test_the_rule_catches_a_list_of_op_names(tmp_path):
    """The check itself: gpucheck's old literal list is reported; one name, or ``__all__``, is not."""
    f = tmp_path / "fake.py"
    f.write_text('OPS = ["square", "vector_add", "softmax"]\nONE = ("square", 3)\n'
                 '__all__ = ["square", "softmax"]\nT = {"layernorm": 1, "matmul": 2}\n')
    assert op_name_lists(f, set(defs.OPS)) == ["fake.py:1: softmax, square, vector_add", "fake.py:4: layernorm, matmul"]


# A new op as a contributor adds it: its kernel files, its op module and its definition, each a new
# file; no file of the tree is edited (the test copies xrt/ and benchmarks/ and adds only these).
TOY_FILES = {
    "xrt/kernels/defs/toy.py": """
        from xrt.kernels.opdef import VECTOR_SHAPES, OpDef

        DEFS = (OpDef("toy", "y = 2 x elementwise", flat=True, gpucheck=True, shapes=VECTOR_SHAPES,
                      dtypes=("float32",), spaces={"triton": "square.triton"}),)
    """,
    "xrt/kernels/reference/toy.py": """
        def toy(x):
            return x * 2
    """,
    "xrt/kernels/triton/toy.py": """
        import torch
        import triton
        import triton.language as tl


        @triton.jit
        def _toy_kernel(x_ptr, y_ptr, n, BLOCK_SIZE: tl.constexpr):
            offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


        def toy(x, config=None):
            x = x.contiguous()
            y = torch.empty_like(x)
            _toy_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK_SIZE=1024)
            return y
    """,
    "xrt/pytorch/ops/toy.py": """
        from xrt.pytorch.ops import dispatch, kernel_providers

        kernel_providers.register("toy")


        def _setup_context(ctx, inputs, output):
            pass


        def _backward(ctx, grad):
            return grad * 2, None


        _toy_op, _eager = dispatch.define("toy", dispatch.contiguous_like, _setup_context, _backward, triton=True)


        def toy(x, *, provider=None):
            return dispatch.call("toy", dispatch.choose("toy", x, provider), _toy_op, _eager, x)
    """,
}

TOY_CHECK = """
    import contextlib, io, json, sys
    import torch
    from xrt.cli import main

    def cli(*argv):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main(list(argv))
        return rc, out.getvalue()

    import xrt.pytorch as xp
    from xrt.bench import gpucheck, specs
    from xrt.pytorch import policy
    import benchmarks.bench_ops as suites

    rc_list, listed = cli("kernels", "list")
    rc_space, space = cli("tune", "space", "toy", "--provider", "triton", "--json")
    from xrt.tune.cli import tunable_ops
    spec = specs.get("toy")
    x = torch.arange(8, dtype=torch.float32)
    args = spec.make_inputs((4096,), torch.float32, "cpu")
    print(json.dumps({
        "listed": [ln.split()[:2] for ln in listed.splitlines() if ln.startswith("toy ")], "rc_list": rc_list,
        "suite": hasattr(suites, "Toy"), "gpucheck": "toy" in gpucheck.OPS, "policy": list(policy.known_ops()["toy"]),
        "space": json.loads(space)["space"] if rc_space == 0 else space,
        "torch": xp.ops.toy(x, provider="torch").tolist(), "triton": xp.ops.toy(x, provider="triton").tolist(),
        "spec": bool(torch.equal(spec.call(args, "triton", None), args[0] * 2)), "tunable": "toy" in tunable_ops(),
    }))
"""


def test_a_new_op_is_its_files_and_one_definition(tmp_path):
    """A toy op added as new files only (kernels, op module, definition) shows in ``xrt kernels list``,
    the suites' discovery (``bench_ops.Toy``), gpucheck's ops, the policy, ``xrt tune``'s ops and
    ``xrt tune space``,
    and runs through its providers and its suite spec."""
    import shutil

    for part in ("xrt", "benchmarks"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    for rel, text in TOY_FILES.items():
        assert not (tmp_path / rel).exists(), rel
        (tmp_path / rel).write_text(textwrap.dedent(text).lstrip())
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path), "TRITON_INTERPRET": "1", "XRT_DEVICE": "cpu"}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(TOY_CHECK)], capture_output=True, text=True,
                       cwd=tmp_path, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = __import__("json").loads(r.stdout.strip().splitlines()[-1])
    assert got == {"listed": [["toy", "torch"], ["toy", "triton"], ["toy", "cuda"], ["toy", "xpu"]], "rc_list": 0,
                   "suite": True, "gpucheck": True, "policy": ["auto", "torch", "triton", "cuda", "xpu"],
                   "space": "square.triton", "torch": [0, 2, 4, 6, 8, 10, 12, 14],
                   "triton": [0, 2, 4, 6, 8, 10, 12, 14], "spec": True, "tunable": True}, got


def test_flat_ops_bucket_tuned_configs_by_numel(monkeypatch):
    """``flat=True`` in a definition: the providers look tuned configs up by ``(numel,)``, as the
    kernels see a flat tensor; a row op by its shape."""
    import torch

    import xrt.pytorch  # noqa: F401  (registers the providers)
    from xrt.bench import specs
    from xrt.pytorch.ops import dispatch, kernel_providers

    class Looked(Exception):
        pass

    seen = {}

    def config(op, space, x, shape=None):
        seen[op] = shape
        raise Looked  # the lookup is what is checked, not the launch

    monkeypatch.setattr(kernel_providers, "config", config)
    flat = [d.name for d in defs.OPS.values() if d.flat]
    for name in [*flat, "softmax"]:
        args = specs.get(name).make_inputs((8, 512), torch.float32, "cpu")
        with pytest.raises(Looked):
            dispatch.get(name, "triton").fn(*args)
    assert flat and {n: seen[n] for n in flat} == {n: (4096,) for n in flat}
    assert seen["softmax"] is None  # x.shape
