"""``xrt kernels``: the ops, their providers and whether each can run here; tuning spaces."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

from xrt.cli import CLIError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("kernels", help="list ops, providers and tuning spaces")
    ksub = p.add_subparsers(dest="kernels_command", metavar="ACTION")
    ls = ksub.add_parser("list", help="each op's providers and whether they run on this machine")
    ls.set_defaults(func=run_list)
    sp = ksub.add_parser("spaces", help="the tuning spaces and their defaults")
    sp.set_defaults(func=run_spaces)
    dp = ksub.add_parser("dump", help="write the PTX (and SASS where the tools exist) of an op's kernel")
    dp.add_argument("op", help="an xrt op, e.g. softmax, layernorm, layernorm_bwd")
    dp.add_argument("--provider", choices=("triton", "cuda"), default="triton", help="whose kernels [triton]")
    dp.add_argument("--dtype", choices=DTYPES, default="bfloat16", help="Triton: the pointers' dtype")
    dp.add_argument("--arch", default=None, help="sm_90 etc.; default: this GPU's, else sm_90")
    dp.add_argument("--out", default="kernels-dump", help="directory for the files (default: kernels-dump)")
    dp.set_defaults(func=run_dump)
    at = ksub.add_parser("auto-table", help="write auto's tables: per GPU model, the provider that measured fastest "
                         "per (op, dtype, shape bucket)")
    src = at.add_mutually_exclusive_group()
    src.add_argument("--db", default=None, help="a results database (xrt db ingest) to read")
    src.add_argument("--results", default="results/asv",
                     help="an asv results directory, ingested into a temporary database (default: results/asv)")
    at.add_argument("--out", default="results/auto", help="directory for <gpu-model>.json (default: results/auto)")
    at.set_defaults(func=run_auto_table)
    p.set_defaults(func=run_list)


def run_list(args: argparse.Namespace) -> int:
    import torch

    import xrt.pytorch as xp
    from xrt.device import default_device

    dev = default_device()
    x = torch.empty(16, device=dev.torch_device)
    print(f"device: {dev.summary()}")
    rows = [(op, name, "ok" if (why := prov.missing(x)) is None else "unavailable: " + why)
            for op in _ops() for name, prov in xp.ops.providers(op).items()]
    print(columns(rows), end="")
    return 0


def columns(rows: list[tuple[str, ...]]) -> str:
    """Rows as text columns, each as wide as its longest cell (an op name such as
    ``conv_bn_relu_train`` never pushes the next column out of line); the last is not padded."""
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "".join(" ".join([*(c.ljust(w) for c, w in zip(r, widths)), r[-1]]) + "\n" for r in rows)


def run_spaces(args: argparse.Namespace) -> int:
    from xrt.kernels import spaces

    for key, space in sorted(spaces.SPACES.items()):
        n = len(list(spaces.configs(key)))
        print(f"{key}: {n} configs; default {spaces.default(key)}")
        for name, values in space.items():
            print(f"    {name}: {values}")
    return 0


# -- xrt kernels auto-table ------------------------------------------------------------------------

def run_auto_table(args: argparse.Namespace) -> int:
    """Measure nothing: read the suites' results (a database, or a results directory ingested into a
    temporary one) and write each GPU model's table of auto's choices (xrt.db.auto_table)."""
    import tempfile

    from xrt.db import auto_table, store

    if args.db is not None:
        tables = auto_table.tables(store.check_path(args.db))
    else:
        from xrt.db.ingest import ingest

        if not Path(args.results).is_dir():
            raise CLIError(f"--results {args.results}: not a directory")
        with tempfile.TemporaryDirectory(prefix="xrt-auto-") as tmp:
            db = Path(tmp, "results.duckdb")
            ingest(args.results, db, echo=lambda _: None, tuned=None)
            tables = auto_table.tables(db)
    if not tables:
        raise CLIError(f"{args.db or args.results}: no bench_ops time_op results with torch and another provider")
    for path in auto_table.write(tables, args.out):
        print(f"xrt kernels auto-table: {path}")
    return 0


# -- xrt kernels dump ------------------------------------------------------------------------------

DTYPES = ("float32", "float16", "bfloat16")


def _ops() -> list[str]:
    import xrt.pytorch as xp  # noqa: F401  (importing the ops registers their providers)
    from xrt.pytorch.ops import dispatch

    return dispatch.ops()


def find_tool(name: str) -> str | None:
    """A CUDA binary tool from PATH, the CUDA toolkit, or the copy Triton ships."""
    import shutil

    found = shutil.which(name) or shutil.which(name, path="/usr/local/cuda/bin")
    if found:
        return found
    try:
        import triton

        cand = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
        return str(cand) if cand.exists() else None
    except ImportError:
        return None


def _sass(cubin: Path, out: Path) -> str:
    for tool, argv in (("cuobjdump", ["-sass"]), ("nvdisasm", ["-c"])):
        exe = find_tool(tool)
        if exe:
            r = subprocess.run([exe, *argv, str(cubin)], capture_output=True, text=True, check=False)
            if r.returncode == 0:
                out.write_text(r.stdout)
                return f"{out} ({tool})"
    return "no SASS: neither cuobjdump nor nvdisasm found"


def dump_cuda(op: str, out: Path, arch: str) -> list[str]:
    from xrt.kernels import cuda_source, cuda_sources, defs

    name = f"{defs.OPS[op].file if op in defs.OPS else op}.cu"  # its definition names its files
    if name not in cuda_sources():
        raise CLIError(f"op {op!r} has no CUDA C source; sources: {', '.join(cuda_sources())}")
    nvcc = find_tool("nvcc")
    if nvcc is None:
        raise CLIError("nvcc (the CUDA toolkit) is not on PATH: it compiles the CUDA C source to PTX")
    src = out / name
    src.write_text(cuda_source(name))
    base = out / f"{Path(name).stem}.{arch}"
    written = []
    for kind in ("ptx", "cubin"):
        r = subprocess.run([nvcc, f"-{kind}", f"-arch={arch}", "-O3", "--use_fast_math", "-std=c++17", "-o",
                            f"{base}.{kind}", str(src)], capture_output=True, text=True, check=False)
        if r.returncode:
            raise CLIError(f"nvcc -{kind} failed for {name}:\n{r.stderr}")
        written.append(f"{base}.{kind}")
    written.append(_sass(Path(f"{base}.cubin"), Path(f"{base}.sass")))
    return written


def _triton_specs(op: str, dtype: str) -> list[tuple[str, str, dict, dict]]:
    """What ``dump OP`` compiles, from the op's definition (xrt/kernels/defs): (kernel module, jit function,
    its signature for ``dtype``, its constexprs); none for an op without a definition or a dump."""
    from xrt.kernels import defs

    d = defs.OPS.get(op)
    if d is None:
        return []
    return [(d.file, k.fn, k.types(dtype), k.constants(dtype)) for k in d.dump]


def dump_triton(op: str, out: Path, dtype: str, arch: str) -> list[str]:
    import importlib

    import triton
    from triton.backends.compiler import GPUTarget

    specs = _triton_specs(op, dtype)
    if not specs:
        raise CLIError(f"op {op!r} has no Triton kernel to dump")
    cc = int(arch.removeprefix("sm_").rstrip("a"))
    written = []
    for module, fn_name, signature, constexprs in specs:
        fn = getattr(importlib.import_module(f"xrt.kernels.triton.{module}"), fn_name)
        sig = dict(signature, **{k: "constexpr" for k in constexprs})
        try:
            src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=constexprs)
            compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32),
                                      options={"num_warps": 8})
        except Exception as e:
            raise CLIError(f"Triton could not compile {fn_name} for {arch} here: {type(e).__name__}: {e}") from e
        base = out / f"{fn_name.strip('_')}.{dtype}.{arch}"
        Path(f"{base}.ptx").write_text(compiled.asm["ptx"])
        written.append(f"{base}.ptx")
        if "cubin" in compiled.asm:
            Path(f"{base}.cubin").write_bytes(compiled.asm["cubin"])
            written.append(_sass(Path(f"{base}.cubin"), Path(f"{base}.sass")))
    return written


def run_dump(args: argparse.Namespace) -> int:
    op = args.op
    if op not in _ops():
        raise CLIError(f"unknown op {op!r}; known: {', '.join(_ops())}")
    arch = args.arch
    if arch is None:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            arch = f"sm_{major}{minor}"
        else:
            arch = "sm_90"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.provider == "cuda":
        written = dump_cuda(op, out, arch)
    else:
        written = dump_triton(op, out, args.dtype, arch)
    for w in written:
        print(w)
    return 0
