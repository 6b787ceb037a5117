"""``xrt bench run``: the asv suites per commit, per GPU, in the existing environment.

Offline GPU hosts cannot build asv's virtualenvs, and asv refuses commit ranges with
``-E existing``. So for each commit (first-parent, oldest first) this checks the commit out in a
temporary git worktree, and runs ``asv run -E existing --set-commit-hash`` there with
``PYTHONPATH`` pointing at the worktree (the commit's own xrt and kernels load; nothing is
installed). Each GPU is its own asv machine; ``--all-gpus`` runs one asv process per GPU in
parallel, each pinned to its GPU by UUID in ``CUDA_VISIBLE_DEVICES`` and writing to its own
results folder (asv does not write its files atomically, so two runs never share one). Results are
copied into ``--results`` with a ``.xrt`` sidecar beside each asv result file: the GPU and software
facts, and per sample clocks and throttle reasons.

``--changed-only``: per commit and machine, the units (ops, and the allocator suite) whose sources
(:mod:`xrt.bench.sources`) did not change since the last commit measured on that machine are not
run; ``<results>/<machine>/<commit>.carried`` records, for each, the commit whose measurement it
carries forward, and ``xrt gate`` judges those series on that commit's samples. Where the previous
commit or the diff cannot be found, every unit is measured (never carried on an error).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xrt import device_env
from xrt.bench import machine as xmachine
from xrt.bench import sources, suite_env, worktrees
from xrt.db import result_names, sidecar_keys
from xrt.device import DeviceInfo


class BenchError(RuntimeError):
    pass


def _git(repo: Path, *args: str) -> str:
    try:
        return worktrees.git(repo, *args)
    except worktrees.GitError as e:
        raise BenchError(str(e)) from None


def resolve_commits(repo: Path, spec: str) -> list[str]:
    """``A..B`` (first-parent, oldest first), ``HASH[,HASH...]``, ``HEAD~4..HEAD``, or one rev."""
    if ".." in spec:
        a, b = spec.split("..", 1)
        if not a or not b:
            raise BenchError(f"--commits {spec!r}: give both ends, like HEAD~5..HEAD")
        hashes = _git(repo, "rev-list", "--first-parent", "--reverse", f"{a}..{b}").split()
        if not hashes:
            raise BenchError(f"--commits {spec!r} selects no commits")
        return hashes
    return [_git(repo, "rev-parse", "--verify", f"{rev}^{{commit}}") for rev in spec.split(",") if rev]


@dataclass
class Target:
    """One GPU (or the CPU): where a benchmark process runs, and its asv machine."""

    dev: DeviceInfo
    env: dict[str, str]

    @property
    def machine(self) -> str:
        return xmachine.machine_name(self.dev)


def targets(all_gpus: bool, device: str | None) -> list[Target]:
    from xrt.device import default_device, discover

    if all_gpus:
        gpus = [d for d in discover() if d.kind == "cuda"]
        if not gpus:
            raise BenchError("--all-gpus: torch sees no CUDA GPU on this machine")
        return [Target(d, pin_env(d)) for d in gpus]
    if device:
        os.environ[device_env.DEVICE] = device
    dev = default_device()
    return [Target(dev, pin_env(dev))]


def pin_env(dev: DeviceInfo) -> dict[str, str]:
    """The environment that shows a benchmark process only this device, as its device 0 (keys: device_env.PIN_KEYS)."""
    if dev.kind == "cpu":
        return {device_env.DEVICE: "cpu"}
    if dev.kind == "xpu":
        return {device_env.XPU_AFFINITY: str(dev.index), device_env.DEVICE: "xpu:0"}
    # The UUID, not the index: an index counts within this process's own CUDA_VISIBLE_DEVICES.
    return device_env.cuda_pin(dev.uuid or str(dev.index))



def register_machine(t: Target, repo: Path | None = None) -> None:
    """``asv machine`` for ``t``, run in ``repo`` (asv looks for its asv.conf.json there)."""
    info = xmachine.asv_machine_info(t.dev)
    cmd = [sys.executable, "-m", "asv", "machine", "--yes"]
    for key in ("machine", "os", "arch", "cpu", "num_cpu", "ram"):
        cmd += [f"--{key}", info[key]]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=repo)
    if out.returncode != 0:
        raise BenchError(f"asv machine --machine {info['machine']}: {out.stderr.strip() or out.stdout.strip()}")


def _asv_config(worktree: Path, t: Target) -> tuple[Path, Path]:
    """A copy of the commit's asv.conf.json whose results go to a folder of this machine's own.

    Returns (config, results folder). Parallel asv runs in one worktree would otherwise write the
    same ``benchmarks.json`` at once, and the commit's committed results never mix with this run's.
    """
    from asv import util as asv_util

    conf = asv_util.load_json(str(worktree / "asv.conf.json"), js_comments=True)
    out = f".xrt-results-{t.machine}"
    conf["results_dir"] = out
    conf["html_dir"] = f".xrt-html-{t.machine}"
    # asv resolves the configured branches even with --set-commit-hash: in a clone without `main`
    # it stopped with "Unknown branch main". The worktree's HEAD is the commit being measured.
    conf["branches"] = ["HEAD"]
    path = worktree / f".xrt-asv-{t.machine}.conf.json"
    path.write_text(json.dumps(conf, indent=1))
    return path, worktree / out


def _asv_cmd(commit: str, t: Target, bench: str | None, config: Path) -> list[str]:
    # forkserver: asv imports the suites once, then forks a process per combination. The suites import
    # no torch: one setup_cache process per series measures everything (xrt.bench.suite), the forked
    # processes only hand its samples to asv.
    cmd = [sys.executable, "-m", "asv", "run", "--config", str(config), "-E", f"existing:{sys.executable}",
           "--set-commit-hash", commit, "--machine", t.machine, "--record-samples", "--show-stderr",
           "--launch-method", "forkserver"]
    if bench:
        cmd += ["--bench", bench]
    return cmd


def _merge_benchmarks(new: Path, dest: Path) -> None:
    """Add the benchmarks a run declared to ``dest``, keeping the entries already there.

    Result files carry their own params; benchmarks.json gives type, unit and version. Keeping
    existing entries means a CPU demo run does not rewrite the description the GPU runs wrote.
    """
    fresh = json.loads(new.read_text())
    if not dest.is_file():
        shutil.copy2(new, dest)
        return
    have = json.loads(dest.read_text())
    added = {k: v for k, v in fresh.items() if k not in have}
    if added:
        have.update(added)
        tmp = dest.with_suffix(".tmp")
        tmp.write_text(json.dumps(have, indent=4, sort_keys=True))
        os.replace(tmp, dest)


CARRIED_SCHEMA = "xrt-carried/1"


def measured(results: Path, machine: str, commit: str) -> bool:
    d = results / machine
    return d.is_dir() and any(result_names.is_result_file_of(f.name, commit) for f in d.iterdir())


def carried_path(results: Path, machine: str, commit: str) -> Path:
    return results / machine / f"{commit}{result_names.CARRIED_SUFFIX}"


def read_carried(results: Path, machine: str, commit: str) -> dict[str, Any] | None:
    """The commit's carried-forward record on the machine, or None (a bad file is an error, named)."""
    path = carried_path(results, machine, commit)
    if not path.is_file():
        return None
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise BenchError(f"{path}: not a carried-forward record ({e})") from None
    if not isinstance(rec, dict) or rec.get("schema") != CARRIED_SCHEMA or not isinstance(rec.get("carried"), dict):
        raise BenchError(f"{path}: not a carried-forward record (schema {CARRIED_SCHEMA} with 'carried' expected)")
    return rec


def plan_changed(repo: Path, results: Path, machine: str, commit: str, wanted: list[str],
                 depth: int = 500) -> tuple[list[str], dict[str, dict[str, str]], str]:
    """(units to measure, units carried {unit: {"from": commit measured at, "since": previous}}, note).

    The previous commit is the nearest first-parent ancestor measured (or carried) on ``machine``.
    Nothing is carried when there is none, or git cannot diff: the note says why.
    """
    try:
        ancestors = _git(repo, "rev-list", "--first-parent", f"--max-count={depth}", f"{commit}^").split()
    except BenchError as e:
        return list(wanted), {}, f"no parent to compare with ({e}); measuring every unit"
    prev, prev_rec = None, None
    for a in ancestors:
        rec = read_carried(results, machine, a)
        if measured(results, machine, a) or rec is not None:
            prev, prev_rec = a, rec
            break
    if prev is None:
        return list(wanted), {}, f"no earlier commit measured on {machine}; measuring every unit"
    try:
        changed = _git(repo, "diff", "--name-only", "--no-renames", prev, commit).splitlines()
    except BenchError as e:
        return list(wanted), {}, f"cannot diff against {prev[:10]} ({e}); measuring every unit"
    touched = sources.affected([c for c in changed if c])
    measure = [u for u in wanted if u in touched]
    carried = {}
    for u in wanted:
        if u in touched:
            continue
        origin = (prev_rec or {}).get("carried", {}).get(u, {}).get("from", prev)
        carried[u] = {"from": origin, "since": prev}
    note = (f"since {prev[:10]}: {len(changed)} file(s) changed; measuring {', '.join(measure) or 'nothing'}"
            + (f"; carried forward: {', '.join(carried)}" if carried else ""))
    return measure, carried, note


def write_carried(results: Path, machine: str, commit: str, carried: dict[str, dict[str, str]]) -> Path:
    path = carried_path(results, machine, commit)
    path.parent.mkdir(parents=True, exist_ok=True)
    rec = {"schema": CARRIED_SCHEMA, "commit": commit, "machine": machine,
           "carried": {u: {**v, "reason": "sources unchanged"} for u, v in sorted(carried.items())}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=1))
    os.replace(tmp, path)
    return path


def _collect(worktree: Path, src_root: Path, results: Path, t: Target, commit: str, sidecars: Path,
             facts: dict) -> list[Path]:
    """Copy the commit's asv results for this machine, each with its ``.xrt`` sidecar beside it."""
    dest = results / t.machine
    dest.mkdir(parents=True, exist_ok=True)
    copied = []
    if (src_root / "benchmarks.json").is_file():
        _merge_benchmarks(src_root / "benchmarks.json", results / "benchmarks.json")
    src = src_root / t.machine
    for f in sorted(src.glob("*.json")) if src.is_dir() else []:
        if f.name == "machine.json":
            shutil.copy2(f, dest / f.name)
            continue
        if not result_names.is_result_file_of(f.name, commit):
            continue  # results the commit itself carries: not this run's
        shutil.copy2(f, dest / f.name)
        cases = [json.loads(p.read_text()) for p in sorted(sidecars.glob("*.json"))]
        # Proof that the commit's own code was measured, not whatever xrt the environment has.
        sources = {c.get("xrt_source", "") for c in cases}
        foreign = sorted(s for s in sources if not s.startswith(str(worktree)))
        if foreign:
            raise BenchError(f"commit {commit[:10]}: benchmarks imported xrt from {foreign}, not from the commit's "
                             f"worktree {worktree}; refusing to record them as that commit's results")
        side = {**facts, sidecar_keys.COMMIT: commit, sidecar_keys.RESULT_FILE: f.name, sidecar_keys.CASES: cases}
        tmp = dest / (f.stem + ".xrt.tmp")
        tmp.write_text(json.dumps(side))
        os.replace(tmp, dest / (f.stem + sidecar_keys.SUFFIX))
        copied.append(dest / f.name)
    return copied


def sources_module(series: str) -> str:
    """The asv module of a suite series (``host`` -> ``bench_host``)."""
    from xrt.bench.suite import SERIES

    return SERIES[series][0]


def _tag_process(f: Path, k: int) -> Path:
    """Rename a collected result file and its sidecar as process ``k``'s (``X-proc<k>.json``): each
    process a run of its own (ingest keys a run by its file's path)."""
    dest = f.with_name(result_names.process_name(f.name, k))
    os.replace(f, dest)
    side = f.with_name(f.stem + sidecar_keys.SUFFIX)
    if side.is_file():
        os.replace(side, side.with_name(result_names.process_name(side.name, k, sidecar_keys.SUFFIX)))
    return dest


STOP_GRACE_S = 10.0  # an asv process asked to stop (SIGINT) gets this long before it is killed


def _start_asv(cmd: list[str], cwd: Path, env: dict[str, str], log) -> subprocess.Popen:
    """An asv process in a session of its own, with the benchmark processes it starts, so that
    :func:`stop_asv` stops all of them (a terminal's Ctrl-C reaches xrt, which stops them)."""
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_asv(procs: list[subprocess.Popen], mark: str | None = None) -> None:
    """Stop the asv processes still running and the processes of their sessions: SIGINT (asv stops
    its benchmark processes), then SIGKILL after :data:`STOP_GRACE_S`. Each is waited for. With
    ``mark`` (the run's :data:`RUN_MARK`), also what left their sessions (asv's fork server)."""
    running = [p for p in procs if p.poll() is None]
    for p in running:
        try:
            os.killpg(p.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + STOP_GRACE_S
    again: BaseException | None = None
    for p in running:
        try:
            if again is None:
                p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        except KeyboardInterrupt as e:  # a second Ctrl-C: no more grace, but still stop them all
            again = e
        try:  # whatever is left of its session (benchmark processes asv left behind)
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        p.wait()
    if running and mark:
        _kill_marked(f"{RUN_MARK}={mark}".encode())
    if again is not None:
        raise again


RUN_MARK = "XRT_BENCH_RUN"  # in every asv process's environment: which run started it


def _kill_marked(entry: bytes) -> None:
    """SIGKILL every other process whose environment holds ``entry`` (Linux's /proc; elsewhere none)."""
    if not os.path.isdir("/proc"):
        return
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if entry in f.read().split(b"\0"):
                    os.kill(int(d), signal.SIGKILL)
        except OSError:  # gone, or not ours to read
            pass


EARLY_EXIT_S = 10.0  # an asv process that exits 1 this soon, beside others, measured nothing: run it again alone


def _finished(procs: list[tuple], t0: float, tick=None):
    """Yield each process's tuple plus (exit code, seconds since ``t0``) in the order they end;
    ``tick()`` is called while waiting (progress)."""
    pending = list(procs)
    while pending:
        if tick is not None:
            tick()
        for item in list(pending):
            rc = item[-1].poll()
            if rc is not None:
                pending.remove(item)
                yield (*item, rc, round(time.time() - t0, 1))
        if pending:
            time.sleep(0.2)


def _progress_file(work: Path, commit: str, machine: str) -> Path:
    """Where the suites of ``commit`` on ``machine`` write their progress lines, and the runner follows them."""
    return work / f"progress-{commit[:12]}-{machine}.log"


# Processes a commit's host and compiled series are measured in, per profile, unless --processes says:
# on the H100 a whole process moved them 1.15-1.5x against their reference call, so one process a side
# cannot be judged (docs/regressions.md, "Several processes a commit"). Device series agree from one
# process to the next: they are measured in the first process only.
PROCESSES = {"full": 3, "quick": 1}
PROCESS_SERIES = ("host", "compiled")  # the series measured again in each further process
# Intra-op threads of a CPU run's benchmark processes (unless OMP_NUM_THREADS is set). With two, a
# compiled graph's Inductor kernel runs an OpenMP region, and on a runner whose other core is busy
# (make test's other lane) each call then waited a scheduler slice for its second thread: 3.6-5.9 ms
# a call against 0.06 ms, in whole processes, so the gate lost a planted compiled regression.
CPU_THREADS = "1"


def kind_env(kind: str) -> dict[str, str]:
    """What a benchmark process on a device of ``kind`` runs with: Triton's interpreter and
    :data:`CPU_THREADS` on the CPU; on a GPU, the caller's TRITON_INTERPRET (off by default)."""
    if kind == "cpu":
        return {"TRITON_INTERPRET": "1", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", CPU_THREADS)}
    return {"TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", "0")}


def run(repo: Path, commits: list[str], results: Path, *, all_gpus: bool = False, device: str | None = None,
        quick: bool = False, bench: str | None = None, lock_clocks: str | None = None,
        skip_existing: bool = False, changed_only: bool = False, processes: int | None = None,
        log=print) -> dict[str, Any]:
    """Measure each of ``commits`` on each target (:class:`_CommitRun`): the summary of what each machine
    did per commit. ``processes``: how many processes measure the host and compiled series (default
    :data:`PROCESSES` of the profile); each process's result files are kept apart, named ``-proc<k>``
    (:func:`xrt.db.result_names.process_name`), when there are several."""
    if processes is not None and (not isinstance(processes, int) or processes < 1):
        raise BenchError(f"--processes {processes!r}: need a whole number >= 1")
    repo, results = repo.resolve(), results.resolve()
    wanted = sources.units_matching(bench)
    if not wanted:
        raise BenchError(f"--bench {bench!r} selects no benchmark of any op")
    tgts = targets(all_gpus, device)
    for t in tgts:
        register_machine(t, repo)
    profile = "quick" if quick or tgts[0].dev.kind == "cpu" else "full"
    again = [s for s in PROCESS_SERIES if s in sources.series_matching(bench, wanted)]
    n_proc = (processes or PROCESSES[profile]) if again else 1
    summary: dict[str, Any] = {"commits": [], "machines": [t.machine for t in tgts], "profile": profile,
                               "processes": n_proc}
    work = Path(tempfile.mkdtemp(prefix="xrt-bench-"))
    job = _Job(repo, results, tgts, wanted, work, profile, bench, lock_clocks, changed_only, log,
               len(commits), n_proc)
    try:
        for i, commit in enumerate(commits, 1):
            t0 = time.time()
            if skip_existing and all(measured(results, t.machine, commit) for t in tgts):
                log(f"[{i}/{len(commits)}] {commit[:10]}: already measured on {', '.join(t.machine for t in tgts)}")
                summary["commits"].append({"commit": commit, "status": "already measured"})
                continue
            wt = work / commit[:12]
            try:
                worktrees.add(repo, commit, wt)
            except worktrees.GitError as e:
                raise BenchError(str(e)) from None
            try:
                summary["commits"].append(_CommitRun(job, i, commit, wt, t0).measure())
            finally:
                worktrees.remove(repo, wt)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        subprocess.run(["git", "-C", str(repo), "worktree", "prune"], capture_output=True)
    return summary


@dataclass
class _Job:
    """What every commit of one :func:`run` shares."""

    repo: Path
    results: Path
    tgts: list[Target]
    wanted: list[str]
    work: Path  # the temporary folder: worktrees, asv logs, progress files, sidecars
    profile: str
    bench: str | None
    lock_clocks: str | None
    changed_only: bool
    log: Any
    n_commits: int
    processes: int = 1  # processes of the host and compiled series; device series run in the first only
    mark: str = field(default_factory=lambda: uuid.uuid4().hex)  # RUN_MARK's value in its asv processes


class _CommitRun:
    """One commit checked out in ``wt``, measured on every target, as its phases (:meth:`measure`):
    launch one asv process per target, follow their progress, collect each as it ends, and run again
    alone one that stopped at its start beside the others."""

    def __init__(self, job: _Job, i: int, commit: str, wt: Path, t0: float) -> None:
        self.job, self.commit, self.wt, self.t0 = job, commit, wt, t0
        self.tag = f"[{i}/{job.n_commits}] {commit[:10]}"
        self.entry: dict[str, Any] = {"commit": commit, "machines": {}}
        self.procs: list[tuple] = []
        self.launches: dict[str, tuple[list[str], dict[str, str]]] = {}  # machine -> (asv command, env)
        self.seen: dict[str, int] = {}  # machine -> progress lines already logged
        self.units: dict[str, list[str]] = {}  # machine -> the units measured (after --changed-only's plan)
        self.k = 1  # the process being measured (1 .. job.processes)

    def measure(self) -> dict[str, Any]:
        """The commit's entry of the summary."""
        log = self.job.log
        if not (self.wt / "asv.conf.json").is_file() or not (self.wt / "benchmarks" / "bench_ops.py").is_file():
            log(f"{self.tag}: no asv suites in this commit; skipped")
            return {"commit": self.commit, "status": "no suites"}
        for k in range(1, self.job.processes + 1):
            self.k, self.procs, self.seen = k, [], {}
            if self.job.processes > 1:
                log(f"{self.tag}: process {self.k} of {self.job.processes}"
                    + (f" ({', '.join(PROCESS_SERIES)} series)" if self.k > 1 else ""))
            try:
                for t in self.job.tgts:
                    self.launch(t)
                if len(self.procs) > 1:
                    log(f"{self.tag}: {len(self.procs)} asv processes in parallel, one per GPU")
                for t, side, out, log_name in self.wait():
                    cmd, env = self.launches[t.machine]
                    with open(log_name, "w") as f:
                        p = _start_asv(cmd, self.wt, env, f)
                        try:
                            rc = p.wait()
                        finally:
                            stop_asv([p], self.job.mark)
                    self.finish(t, side, out, log_name, rc, round(time.time() - self.t0, 1))
            finally:  # a Ctrl-C, a SIGTERM or an error here: no asv process outlives the run
                stop_asv([item[-1] for item in self.procs], self.job.mark)
        self.entry["seconds"] = round(time.time() - self.t0, 1)
        states = ", ".join(f"{m}: {v['status']}" for m, v in self.entry["machines"].items())
        log(f"{self.tag} in {self.entry['seconds']} s: {states}")
        return self.entry

    def launch(self, t: Target) -> None:
        """Start the asv process of target ``t``; with ``--changed-only``, only for the units that changed
        (none: nothing starts), the others carried forward."""
        job, commit = self.job, self.commit
        units = list(job.wanted)
        if self.k > 1:
            units = self.units.get(t.machine, [])
        elif job.changed_only:
            units, carried, note = plan_changed(job.repo, job.results, t.machine, commit, job.wanted)
            job.log(f"{self.tag} on {t.machine}: {note}")
            if carried:
                write_carried(job.results, t.machine, commit, carried)
                self.entry["machines"][t.machine] = {"status": "carried forward", "files": [], "carried": carried,
                                                     "measured": units}
        self.units[t.machine] = units
        if not units or (self.k > 1 and self.entry["machines"].get(t.machine, {}).get("status") not in
                         ("ok", "benchmark failures")):
            return  # nothing to measure, or the first process measured nothing: no second one
        side = job.work / f"side-{commit[:12]}-{t.machine}-{self.k}"
        shutil.rmtree(side, ignore_errors=True)
        _progress_file(job.work, commit, t.machine).unlink(missing_ok=True)  # the previous process's lines
        env = self._env(t, units, side)
        config, out = _asv_config(self.wt, t)
        for f in (out / t.machine).glob("*.json") if (out / t.machine).is_dir() else []:
            if result_names.is_result_file_of(f.name, commit):
                f.unlink()  # the previous process's results: asv would add to them
        narrowed = job.bench if units == sources.units() and self.k == 1 else sources.bench_regex(units, job.bench)
        if self.k > 1:  # the host and compiled series alone
            modules = "|".join(sources_module(s) for s in PROCESS_SERIES)
            narrowed = f"(?=^({modules})\\.)" + (narrowed or "")
        cmd = _asv_cmd(commit, t, narrowed, config)
        if job.lock_clocks:
            cmd = [sys.executable, "-m", "xrt.bench.locked", "--index", str(t.dev.index),
                   *(["--uuid", t.dev.uuid] if t.dev.uuid else []), "--mode", job.lock_clocks, "--"] + cmd
        logf = open(job.work / f"asv-{commit[:12]}-{t.machine}.log", "w")
        self.launches[t.machine] = (cmd, env)
        self.procs.append((t, side, out, logf, _start_asv(cmd, self.wt, env, logf)))

    def _env(self, t: Target, units: list[str], side: Path) -> dict[str, str]:
        """The asv process's environment: this commit's xrt first on the path, the target's pinning, and
        what the suites read (:mod:`xrt.bench.suite_env`)."""
        job = self.job
        # asv drops PYTHONPATH for benchmark processes and uses ASV_PYTHONPATH instead.
        path = os.pathsep.join([str(self.wt)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        return {**os.environ, **t.env, "PYTHONPATH": path, "ASV_PYTHONPATH": path, RUN_MARK: job.mark,
                suite_env.SIDECAR_DIR: str(side),
                suite_env.PROGRESS_FILE: str(_progress_file(job.work, self.commit, t.machine)),
                suite_env.PROFILE: job.profile,
                # the suites' one setup_cache measures these ops and series only (xrt.bench.suite)
                suite_env.OPS: ",".join(u for u in units if u != sources.ALLOCATOR) or "none",
                suite_env.SERIES: ",".join(s for s in sources.series_matching(job.bench, units)
                                           if self.k == 1 or s in PROCESS_SERIES) or "device",
                suite_env.PAIRS: ",".join(f"{s}:{u}" for s, u in sources.pairs_matching(job.bench, units)),
                **kind_env(t.dev.kind)}

    def tick(self) -> None:
        """Log the whole progress lines the suites wrote since the last tick."""
        for t, *_ in self.procs:
            path = _progress_file(self.job.work, self.commit, t.machine)
            try:
                text = path.read_text()
                lines = text[:text.rfind("\n") + 1].splitlines()  # whole lines only
            except OSError:
                continue
            for line in lines[self.seen.get(t.machine, 0):]:
                self.job.log(f"  {self.tag} {t.machine}: {line}")
            self.seen[t.machine] = len(lines)

    def wait(self) -> list[tuple[Target, Path, Path, str]]:
        """Collect each process as it ends; those to run again alone: (target, sidecars, out, log name)."""
        again = []
        for t, side, out, logf, _proc, rc, took in _finished(self.procs, self.t0, self.tick):
            self.tick()
            logf.close()
            wrote = [f for f in out.glob("*/*.json") if result_names.is_result_file(f.name)]
            if rc == 1 and len(self.procs) > 1 and took < EARLY_EXIT_S and not wrote:
                # One of several asv processes in this worktree stopped at its start with nothing
                # measured (seen once on a CI runner; cause not found): said, with its log, and run
                # again alone once the others are done; it never counts as a pass in between.
                tail = "\n".join(Path(logf.name).read_text().splitlines()[-15:])
                self.job.log(f"  {t.machine}: asv exited 1 after {took:.1f} s with nothing measured, beside "
                             f"{len(self.procs) - 1} other asv process(es) in the same worktree; its log:\n{tail}\n"
                             f"  {t.machine}: it runs again alone when the others are done")
                again.append((t, side, out, logf.name))
                continue
            self.finish(t, side, out, logf.name, rc, took)
        return again

    def finish(self, t: Target, side: Path, out: Path, log_name: str, rc: int, took: float) -> None:
        """Copy one target's results with their sidecars (:func:`_collect`) and record its status."""
        job = self.job
        facts = xmachine.sidecar(t.dev, profile=job.profile, lock_clocks=job.lock_clocks)
        log_text = Path(log_name).read_text()
        machines = self.entry["machines"]
        try:
            files = _collect(self.wt, out, job.results, t, self.commit, side, facts)
        except BenchError as e:
            machines[t.machine] = {"status": f"refused: {e}", "files": []}
            job.log(f"  {t.machine}: {e}")
            return
        if job.processes > 1:
            files = [_tag_process(f, self.k) for f in files]
        # asv exits 2 when a benchmark failed; the failures are recorded in its results.
        status = "ok" if rc == 0 else ("benchmark failures" if rc == 2 and files else f"asv exit {rc}")
        prior = machines.get(t.machine, {})
        if self.k > 1 and prior.get("status") == "benchmark failures" and status == "ok":
            status = prior["status"]
        earlier = prior.get("files", []) if self.k > 1 else []  # the files of this commit's earlier processes
        machines[t.machine] = {**prior, "status": status, "files": earlier + [str(f) for f in files], "seconds": took}
        if not files:
            tail = "\n".join(log_text.splitlines()[-15:])
            job.log(f"  {t.machine}: asv produced no results (exit {rc}):\n{tail}")
