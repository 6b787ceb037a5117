"""The process environment read raw, for variables looked up on every launch or call.

``os.environ.get(name)`` encodes the name on each call (about a microsecond); the mapping behind
it, keyed by the encoded name, answers in a tenth of that. Values come back encoded too (bytes on
POSIX): compare them with :func:`value`'s result, or ``os.fsdecode`` them. Changes made through
``os.environ`` show here at once (it is the same mapping).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

try:
    DATA: Mapping[Any, Any] = os.environ._data  # type: ignore[attr-defined]
    key: Callable[[str], Any] = os.environ.encodekey  # type: ignore[attr-defined]
    value: Callable[[str], Any] = os.environ.encodevalue  # type: ignore[attr-defined]
except AttributeError:  # pragma: no cover - another os.environ implementation: read it as it is
    DATA = os.environ

    def key(name: str) -> Any:
        return name

    def value(text: str) -> Any:
        return text
