"""``xrt explain``'s collection: each commit checked out in a worktree (:mod:`xrt.bench.worktrees`),
its side collected by :mod:`xrt.orchestrate.explain_side` in a subprocess that imports that commit's
own xrt, Nsight Compute run on one call, and both sides compared and rendered by :mod:`xrt.track.explain`
(what is collected, and why ``--clock-control none``, is said there).

It lives here, apart from :mod:`xrt.track.explain`, because checking out and running commits is
orchestration: the tracker's layer only reads and judges what is stored (tests/test_layering.py).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from xrt.track.explain import (
    SCHEMA,
    Case,
    code_pairs,
    compare,
    diff_rows,
    parse_ncu_csv,
    parse_ptx,
    parse_res_usage,
    parse_sass,
    parse_sass_memory_ops,
    parse_trace,
    sass_diffs,
)

SIDE_SCRIPT = Path(__file__).with_name("explain_side.py")
NCU_SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy")
CLOCK_CONTROL = "none"  # never lock or change clocks; recorded in every payload


def compiled_stats(dump: Path) -> dict[str, dict[str, Any]]:
    """Per kernel function of a ``xrt kernels dump`` folder: registers, spills (local bytes), stack,
    static shared memory, SASS and PTX instruction counts (what the tools found)."""
    from xrt.commands.kernels import find_tool

    out: dict[str, dict[str, Any]] = {}
    for ptx in sorted(dump.glob("*.ptx")):
        for fn, n in parse_ptx(ptx.read_text(errors="replace")).items():
            out.setdefault(fn, {})["ptx_instructions"] = n
    for sass in sorted(dump.glob("*.sass")):
        text = sass.read_text(errors="replace")
        for fn, n in parse_sass(text).items():
            out.setdefault(fn, {})["sass_instructions"] = n
        for fn, ops in parse_sass_memory_ops(text).items():
            out.setdefault(fn, {})["memory_ops"] = ops
    exe = find_tool("cuobjdump")
    for cubin in sorted(dump.glob("*.cubin")) if exe else []:
        r = subprocess.run([exe, "-res-usage", str(cubin)], capture_output=True, text=True, check=False)
        if r.returncode == 0:
            for fn, st in parse_res_usage(r.stdout).items():
                out.setdefault(fn, {}).update(st)
    return out



# ---------------------------------------------------------------------------------------- collecting

def find_ncu() -> str | None:
    """``ncu`` from PATH, the CUDA toolkit, or a standalone Nsight Compute install (the newest)."""
    import glob

    found = shutil.which("ncu") or shutil.which("ncu", path="/usr/local/cuda/bin")
    if found:
        return found
    cands = sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu") + glob.glob("/usr/local/cuda-*/bin/ncu"))
    return cands[-1] if cands else None


def ncu_command(ncu: str, target: list[str]) -> list[str]:
    cmd = [ncu]
    for s in NCU_SECTIONS:
        cmd += ["--section", s]
    # --profile-from-start off: only the launches between the target's cudaProfilerStart and Stop
    # (one call after warm-up; the inputs' random kernels and the warm-up calls are not profiled)
    return cmd + ["--csv", "--page", "details", "--clock-control", CLOCK_CONTROL, "--profile-from-start", "off",
                  *target]


def _gpu_here() -> str | None:
    """None when a CUDA GPU is visible to torch here, else why not."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    return None if torch.cuda.is_available() else "no CUDA GPU visible to torch"


def collect_side(repo: Path, commit: str, case: Case, work: Path, label: str, *, use_ncu: bool = True,
                 arch: str | None = None, timeout: float = 900, log=print) -> dict[str, Any]:
    """One commit's collection for ``case``, in a worktree of it (removed afterwards)."""
    from xrt.bench import worktrees

    out = work / f"side-{label}"
    side: dict[str, Any] = {"commit": commit, "parts": {}}
    with worktrees.checkout(repo, commit, work / f"wt-{label}") as wt:
        path = os.pathsep.join([str(wt)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        # Triton's interpreter (TRITON_INTERPRET=1, the CPU tests' setting) cannot compile for a GPU
        # target: the sides always compile and run for real
        env = {**{k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}, "PYTHONPATH": path}
        argv = [f"--op={case.op}", f"--shape={case.shape}", f"--dtype={case.dtype}", f"--provider={case.provider}",
                f"--config={case.config}"]
        cmd = [sys.executable, str(SIDE_SCRIPT), *argv, f"--out={out}"] + ([f"--arch={arch}"] if arch else [])
        log(f"  {label} {commit[:10]}: settings, compiled code, profiler")
        r = subprocess.run(cmd, cwd=wt, env=env, capture_output=True, text=True, timeout=timeout)
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
            side["parts"]["collect"] = f"failed: exit {r.returncode}: {tail}"
        try:
            side["parts"].update(json.loads((out / "parts.json").read_text()))
        except (OSError, ValueError):
            pass
        if (out / "settings.json").is_file():
            side["settings"] = json.loads((out / "settings.json").read_text())
        src = (side.get("settings") or {}).get("xrt_source", "")
        if not str(src).startswith(str(wt.resolve())) and not str(src).startswith(str(wt)):
            # the commit has no xrt of its own (or another one shadowed it): nothing here is the commit's
            side["parts"] = {"collect": f"refused: the side imported xrt from {src or 'nowhere'}, not from the "
                             f"commit's worktree; {commit[:10]} cannot be explained with its own code",
                             "ncu": "skipped: the commit's own xrt did not load"}
            side.pop("settings", None)
            return side
        if (out / "trace.json").is_file():
            side["kernels"] = parse_trace((out / "trace.json").read_text())
        if (out / "dump").is_dir():
            side["compiled"] = compiled_stats(out / "dump")
            side["compiled_files"] = sorted(p.name for p in (out / "dump").iterdir())
        ncu, why = find_ncu(), _gpu_here()
        if not use_ncu:
            side["parts"]["ncu"] = "skipped: --no-ncu"
        elif why:
            side["parts"]["ncu"] = f"skipped: {why}"
        elif ncu is None:
            side["parts"]["ncu"] = "skipped: ncu (Nsight Compute) is not on PATH, in the CUDA toolkit or /opt/nvidia"
        else:
            ncmd = ncu_command(ncu, [sys.executable, str(SIDE_SCRIPT), *argv, "--mode=target"])
            log(f"  {label} {commit[:10]}: {' '.join(ncmd[:14])} …")
            r = subprocess.run(ncmd, cwd=wt, env=env, capture_output=True, text=True, timeout=timeout)
            (out / "ncu.csv").write_text(r.stdout)
            try:
                side["ncu"] = parse_ncu_csv(r.stdout)
                side["parts"]["ncu"] = "ok" if side["ncu"] else "ncu profiled no kernel between cudaProfilerStart/Stop"
            except ValueError as e:
                tail = (r.stderr.strip().splitlines() or [""])[-1]
                side["parts"]["ncu"] = f"failed: exit {r.returncode}: {e}; {tail}"
    return side


def explain(repo: Path, base: str, head: str, case: Case, *, regression: dict | None = None,
            use_ncu: bool = True, arch: str | None = None, keep: Path | None = None, log=print) -> dict[str, Any]:
    """Collect both sides and compare them: the payload stored in ``explanations``."""
    work = Path(tempfile.mkdtemp(prefix="xrt-explain-"))
    t0 = time.time()
    try:
        sides = {label: collect_side(repo, commit, case, work, label, use_ncu=use_ncu, arch=arch, log=log)
                 for label, commit in (("base", base), ("head", head))}
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for label in sides:
                src = work / f"side-{label}"
                if src.is_dir():
                    shutil.copytree(src, keep / label, dirs_exist_ok=True)
        pairs, note = code_pairs(sides["base"], sides["head"])
        diffs = sass_diffs(work / "side-base" / "dump", work / "side-head" / "dump", pairs, note, keep)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    payload = {"schema": SCHEMA, "case": asdict(case), "param_key": case.param_key,
               "regression_id": (regression or {}).get("id"), "machine": (regression or {}).get("machine"),
               "ratio": (regression or {}).get("ratio"), "base": base, "head": head,
               "host": platform.node(), "collected_on": _machine(),
               "gpu": _gpu_name(), "seconds": round(time.time() - t0, 1),
               "ncu": {"sections": list(NCU_SECTIONS), "clock_control": CLOCK_CONTROL,
                       "profiled": "one call after warm-up", "launches_per_kernel": 1, "warmup_calls": 10},
               "sides": sides}
    payload["sass_diffs"] = diffs
    payload["changes"] = compare(sides["base"], sides["head"]) + diff_rows(diffs)
    payload["sources"] = changed_sources(repo, base, head, case.benchmark)
    return payload


def changed_sources(repo: Path, base: str, head: str, benchmark: str) -> list[dict[str, Any]]:
    """The files changed between ``base`` and ``head`` that change this benchmark's measurements (its
    op's own files and the shared ones: :func:`xrt.bench.sources.affected`), with lines added and
    removed. On a host-time step, or without a GPU, often the only evidence there is."""
    from xrt.bench import sources

    out = subprocess.run(["git", "-C", str(repo), "diff", "--numstat", "--no-renames", base, head],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return []
    stat = {}
    for line in out.stdout.splitlines():
        added, removed, path = (line.split("\t", 2) + ["", "", ""])[:3]
        stat[path] = (added, removed)
    unit = sources.unit_of_benchmark(benchmark)
    mine = sources.affected(sorted(stat)).get(unit, []) if unit else sorted(stat)
    return [{"path": p, "added": stat[p][0], "removed": stat[p][1]} for p in mine]


def _machine() -> str | None:
    """This host's machine name as the database knows it (``<host>-<gpu model>-<index>``), not the
    bare host name (``vm``), so the explanation names the machine a reader finds on the dashboard."""
    try:
        from xrt.bench.machine import machine_name
        from xrt.device import default_device

        return machine_name(default_device())
    except Exception:
        return None


def _gpu_name() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:
        return None
