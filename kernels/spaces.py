"""Tuning spaces: every tunable parameter of every kernel is named here once.

Launchers read their defaults from here, the benchmark suites read the configs to time from
here, and the tuner searches these spaces. A space maps a parameter name to its candidate values;
``DEFAULTS`` holds the config used when no tuned config is found.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

SPACES: dict[str, dict[str, list[Any]]] = {
    # Elementwise: how many elements one Triton program handles, and its warps.
    "square.triton": {"BLOCK_SIZE": [256, 512, 1024, 2048, 4096, 8192], "num_warps": [2, 4, 8]},
    # CUDA C: threads per block, and which side-by-side version of kernels/cuda/square.cu.
    "square.cuda": {"block": [128, 256, 512, 1024], "version": ["v1", "v2"]},
}

DEFAULTS: dict[str, dict[str, Any]] = {
    "square.triton": {"BLOCK_SIZE": 1024, "num_warps": 4},
    "square.cuda": {"block": 256, "version": "v2"},
}


def space(key: str) -> dict[str, list[Any]]:
    if key not in SPACES:
        raise KeyError(f"no tuning space {key!r}; known: {', '.join(sorted(SPACES))}")
    return SPACES[key]


def default(key: str) -> dict[str, Any]:
    if key not in DEFAULTS:
        raise KeyError(f"no default config {key!r}; known: {', '.join(sorted(DEFAULTS))}")
    return dict(DEFAULTS[key])


def configs(key: str) -> Iterator[dict[str, Any]]:
    """Every config of a space, in a stable order."""
    s = space(key)
    names = list(s)
    for values in itertools.product(*(s[n] for n in names)):
        yield dict(zip(names, values))


def check(key: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` filled from the defaults; an unknown name or a value outside the space is an error."""
    s = space(key)
    unknown = set(config) - set(s)
    if unknown:
        raise ValueError(f"{key}: unknown tuning parameter(s) {sorted(unknown)}; known: {sorted(s)}")
    for name, value in config.items():
        if value not in s[name]:
            raise ValueError(f"{key}: {name}={value!r} is outside the tuning space {s[name]}")
    return {**default(key), **config}
