"""Profiling: torch.profiler with xrt's op ranges, a Chrome trace and the key-averages table.

Every xrt op runs inside a ``record_function("xrt::<op>[<provider>]")`` range, so traces show
which provider ran.

    with xrt.pytorch.profile(export_chrome_trace="trace.json") as prof:
        y = xrt.pytorch.ops.square(x)
    print(prof.table)
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity


class ProfileResult:
    def __init__(self) -> None:
        self.profiler: torch.profiler.profile | None = None
        self.table: str = ""
        self.trace_path: Path | None = None

    def key_averages(self):
        if self.profiler is None:
            raise RuntimeError("the profile is not finished yet: read it after the with block")
        return self.profiler.key_averages()


@contextlib.contextmanager
def profile(export_chrome_trace: str | Path | None = None, *, record_shapes: bool = True,
            sort_by: str | None = None, row_limit: int = 20, print_table: bool = False
            ) -> Iterator[ProfileResult]:
    """Profile the block on the CPU and, where present, CUDA / XPU.

    ``export_chrome_trace``: path of the Chrome / Perfetto trace to write on exit.
    The key-averages table is in ``result.table`` (printed too with ``print_table=True``).
    """
    activities = [ProfilerActivity.CPU]
    device_sort = "cpu_time_total"
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
        device_sort = "cuda_time_total"
    elif getattr(torch, "xpu", None) is not None and torch.xpu.is_available():
        activities.append(ProfilerActivity.XPU)
        device_sort = "xpu_time_total"
    if export_chrome_trace is not None:
        out = Path(export_chrome_trace)
        if out.is_dir():
            raise ValueError(f"export_chrome_trace={str(out)!r} is a directory; give a file path")
        out.parent.mkdir(parents=True, exist_ok=True)
    result = ProfileResult()
    with torch.profiler.profile(activities=activities, record_shapes=record_shapes) as prof:
        with torch.profiler.record_function("xrt::profile"):
            yield result
    result.profiler = prof
    result.table = prof.key_averages().table(sort_by=sort_by or device_sort, row_limit=row_limit)
    if export_chrome_trace is not None:
        prof.export_chrome_trace(str(export_chrome_trace))
        result.trace_path = Path(export_chrome_trace)
    if print_table:
        print(result.table)
