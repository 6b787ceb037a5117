"""What ``auto`` picks for each routed call of the GPT-style model, from the committed tables.

    python scripts/auto_picks.py [--tables results/auto] [--dtype bfloat16] [--shape B,S,D,HEADS ...]

The model is :func:`xrt.pytorch.modules.gpt`: per block two ``nn.LayerNorm``, four ``nn.Linear``
(qkv, proj, up, down) and one causal ``F.scaled_dot_product_attention``. For each GPU model's table
(``results/auto/<model>.json``) and each shape (default: the model benchmark's, xrt/kernels/opdef.py) it prints
a markdown table: each routed call's measured op, suite shape and bucket, and ``auto``'s pick for an
inference pass and for a training step with the rule that gave it (``measured``, ``nearest`` or
``fallback``: :mod:`xrt.kernels.autotable`). Reads the tables only: no torch, no GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from xrt.kernels.opdef import MODEL_SHAPES  # noqa: E402

DEFAULT_SHAPES = tuple(s[:4] for s in MODEL_SHAPES)  # (batch, sequence, width, heads)


def calls(batch: int, seq: int, d: int, heads: int) -> list[tuple[str, str, tuple[int, ...]]]:
    """A block's routed calls: (name, measured op, suite shape), as routing measures them."""
    m = batch * seq
    return [("ln1, ln2 (F.layer_norm)", "layernorm", (m, d)),
            ("qkv (F.linear)", "matmul", (m, 3 * d, d)),
            ("proj (F.linear)", "matmul", (m, d, d)),
            ("up (F.linear)", "matmul", (m, 4 * d, d)),
            ("down (F.linear)", "matmul", (m, d, 4 * d)),
            ("attention (SDPA, causal)", "attention", (batch, heads, seq, d // heads, 1))]


def table(path: Path, shapes: list[tuple[int, ...]], dtype: str) -> str:
    """The markdown table of one GPU model's picks."""
    from xrt.kernels import autotable

    t = autotable.load(path)
    lines = [f"{t.gpu or path.stem} ({path.name}), {dtype}", "",
             "| shape (B, S, d, heads) | call | op | suite shape | bucket | inference | training |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for shape in shapes:
        for name, op, suite in calls(*shape):
            picks = [" ".join(t.pick(op, dtype, suite, train)) for train in (False, True)]
            lines.append(f"| {', '.join(map(str, shape))} | {name} | `{op}` | {'x'.join(map(str, suite))} "
                         f"| {autotable.bucket(suite)} | {picks[0]} | {picks[1]} |")
    return "\n".join(lines)


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(v) for v in text.split(","))
    except ValueError:
        dims = ()
    if len(dims) != 4 or any(v < 1 for v in dims) or dims[2] % dims[3]:
        raise argparse.ArgumentTypeError(f"{text!r} must be B,S,D,HEADS: four positive integers, D a multiple of HEADS")
    return dims


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="auto_picks", description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=Path, default=ROOT / "results" / "auto", help="a folder of auto tables")
    ap.add_argument("--dtype", default="bfloat16", help="the model's dtype as the tables name it")
    ap.add_argument("--shape", type=_shape, action="append", help="B,S,D,HEADS (repeatable)")
    args = ap.parse_args(argv)
    files = sorted(args.tables.glob("*.json")) if args.tables.is_dir() else []
    if not files:
        print(f"auto_picks: --tables {args.tables} holds no auto table (*.json)", file=sys.stderr)
        return 2
    for f in files:
        try:
            print(table(f, args.shape or list(DEFAULT_SHAPES), args.dtype) + "\n")
        except ValueError as e:
            print(f"auto_picks: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
