"""Which configs of a tuning space to try."""

from __future__ import annotations

import random
from typing import Any

from xrt.kernels import spaces


def candidates(space: str, budget: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """The default config first, then the rest of the grid (all of it, or ``budget`` in total).

    With a budget smaller than the grid, the others are a random sample (seeded: a resumed search
    picks the same ones). Configs that spell the default (``"auto"`` or the default values) count
    once.
    """
    if budget is not None and budget < 1:
        raise ValueError(f"--budget {budget}: give at least 1 config to try")
    default = spaces.default(space)
    grid = []
    seen = {key(default)}
    for cfg in spaces.configs(space):
        full = {**default, **cfg}
        if key(full) not in seen:
            seen.add(key(full))
            grid.append(full)
    if budget is not None and budget - 1 < len(grid):
        grid = random.Random(seed).sample(grid, budget - 1)
    return [default] + grid


def key(config: dict[str, Any]) -> str:
    """A config's stable name: ``BLOCK_SIZE=1024,num_warps=4``."""
    return ",".join(f"{k}={config[k]}" for k in sorted(config))
