"""The search: compile pool, timing workers (one per GPU), journal, top-K file."""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xrt import device_env
from xrt.tune import search
from xrt.tune.journal import Journal
from xrt.tune.process import Gate, Problem, Stopping, TuneError, Worker, WorkerGone
from xrt.tune.timeline import Timeline


def early_pins(gpus: str | None, env: dict[str, str] | None = None) -> list[dict[str, str]]:
    """The timing workers' pinning as far as it can be told before torch is imported: the default
    device (no --gpus: the worker finds it as the tuner will), the indices of --gpus, or as many as
    NVML counts for --gpus all; [] where it cannot be told (the tuner then starts them itself)."""
    env = dict(os.environ) if env is None else env
    if gpus is None:
        return [{}]
    visible = env.get(device_env.CUDA_VISIBLE)
    entries = [v.strip() for v in visible.split(",") if v.strip()] if visible is not None else None
    if gpus == "all":
        n = len(entries) if entries is not None else _nvml_count()
        idx = list(range(n))
    else:
        try:
            idx = [int(g) for g in gpus.split(",")]
        except ValueError:
            return []
    if entries is not None and any(not 0 <= i < len(entries) for i in idx):
        return []
    return [device_env.cuda_pin(entries[i] if entries is not None else str(i)) for i in idx]


def _nvml_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no NVML, no driver: no early workers
        return 0


class EarlyWorkers:
    """The timing workers (one per GPU), started first thing by ``xrt tune``: before the tuner imports
    torch and finds its devices, so that a worker's own start (Python, torch, the CUDA context, the
    inputs, the reference) overlaps the tuner's. Only these: the build workers come later.

    The tuner adopts each into the slot of the device it reports (its UUID), where its environment
    matches the one the tuner would have given it; any other is stopped, as are all of them when the
    command fails (:meth:`stop`, in a ``finally``), and the tuner starts its own.
    """

    def __init__(self, problem: Problem, pins: list[dict[str, str]], timeline: Timeline | None = None,
                 start_timeout: float = 300.0) -> None:
        self.workers: list[Worker] = []
        self._lock = threading.Lock()
        self._read = False
        for k, pin in enumerate(pins):
            w = Worker(problem, "time", {**os.environ, **pin}, None, start_timeout,  # type: ignore[arg-type]
                       timeline=timeline, name=f"time{k}")
            w._spawn()
            self.workers.append(w)

    def take(self, dev: Any, env: dict[str, str]) -> Worker | None:
        """The early worker that runs on ``dev`` with ``env`` (but for the pinning), ready; else None."""
        with self._lock:
            if not self._read:  # they start at once: waiting for one after the other costs the slowest
                self._read = True
                for w in self.workers:
                    try:
                        w._await_ready()
                    except Exception:  # noqa: BLE001 - the tuner's own worker says why, when asked
                        w.stop()
                        self._discard(w)
            # an early worker may differ from the tuner's own worker in its pinning only (device_env.PIN_KEYS,
            # what xrt.bench.runner.pin_env sets), and only where it runs on the same device
            same = {k: v for k, v in env.items() if k not in device_env.PIN_KEYS}
            for w in self.workers:
                r = w.ready
                if w.proc is None or {k: v for k, v in w.env.items() if k not in device_env.PIN_KEYS} != same:
                    continue
                if (dev.kind == "cpu" and r.get("device") == "cpu") or (dev.uuid and r.get("uuid") == dev.uuid):
                    self.workers.remove(w)
                    return w
        return None

    def _discard(self, w: Worker) -> None:
        if w.timeline is not None:
            w.timeline.drop(f"{w.name} ")
            w.timeline.mark(f"early {w.name} not used")

    def stop(self) -> None:
        """Stop those not adopted."""
        with self._lock:
            for w in self.workers:
                if w.proc is not None:
                    self._discard(w)
                w.stop()
            self.workers = []


def stop_all(workers: list[Any]) -> None:
    """Stop workers at once: each is sent its kill before any is waited for, so that their exits
    (a CUDA context each, on a GPU) overlap."""
    for w in workers:
        proc = getattr(w, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()
    for w in workers:
        w.stop()


def _tail(path: Path, n: int = 5) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-600:]


@dataclass
class Outcome:
    problem: Problem
    machine: str
    tried: int = 0
    skipped: int = 0  # already in the journal
    counts: dict[str, int] = field(default_factory=dict)
    best: list[dict[str, Any]] = field(default_factory=list)
    default: dict[str, Any] | None = None
    out_file: Path | None = None
    journal: Path | None = None
    torn: int = 0
    space_hash: str = ""
    space_size: int = 0  # configs after pruning
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> configs the constraints dropped
    timeline: Timeline | None = None  # when each step happened (xrt.tune.timeline)


def targets(gpus: str | None) -> list[tuple[Any, dict[str, str]]]:
    """(DeviceInfo, env pinning a process to it) for each device the timing phase uses."""
    from xrt.bench.runner import pin_env
    from xrt.device import default_device, discover

    if gpus:
        want: list[int] = []
        if gpus != "all":
            try:
                want = [int(g) for g in gpus.split(",")]
            except ValueError:
                raise TuneError(f"--gpus {gpus!r}: give all or GPU indices like 0,1") from None
        found = [d for d in discover() if d.kind == "cuda"]
        if not found:
            raise TuneError("--gpus: torch sees no CUDA GPU on this machine")
        if want:
            bad = [g for g in want if g not in {d.index for d in found}]
            if bad:
                raise TuneError(f"--gpus {gpus}: no GPU {bad}; GPUs here: {[d.index for d in found]}")
            found = [d for d in found if d.index in want]
        return [(d, pin_env(d)) for d in found]
    dev = default_device()
    return [(dev, pin_env(dev))]


class Progress:
    """A progress bar with ETA on the tuner's log (stderr): redrawn in place on a terminal, else a
    line every tenth of the total."""

    def __init__(self, total: int, log, seconds: float | None = None, tty: bool | None = None) -> None:
        self.total, self.log, self.seconds = max(total, 1), log, seconds
        self.t0 = time.monotonic()
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.shown = -1

    def line(self, done: int, best: float | None) -> str:
        el = time.monotonic() - self.t0
        eta = el / done * (self.total - done) if done else float("nan")
        if self.seconds is not None:
            eta = min(eta, max(0.0, self.seconds - el)) if done else max(0.0, self.seconds - el)
        n = int(24 * done / self.total)
        b = f", best {best * 1e6:.2f} us" if best else ""
        return (f"[{'#' * n}{'.' * (24 - n)}] {done}/{self.total} evaluations, {el:.0f} s, "
                f"ETA {eta:.0f} s{b}")

    def update(self, done: int, best: float | None) -> None:
        step = max(1, self.total // 10)
        if self.tty:
            sys.stderr.write("\r" + self.line(done, best))
            sys.stderr.flush()
            if done >= self.total:
                sys.stderr.write("\n")
        elif done // step != self.shown or done >= self.total:
            self.shown = done // step
            self.log(self.line(done, best))


def device_problem(problem: Problem, dev: Any):
    """The problem as the space's constraints see it: shape, element size, the device's limits."""
    import torch

    from xrt.bench import suite
    from xrt.kernels import spaces

    shape = suite.parse_shape(problem.shape)
    dt = getattr(torch, problem.dtype, None)
    if not isinstance(dt, torch.dtype):
        raise TuneError(f"--dtype {problem.dtype!r} is not a torch dtype")
    return spaces.Problem(shape, torch.empty((), dtype=dt).element_size(), spaces.Limits.of(dev))


def check_journal(journal: Journal, space_hash: str) -> None:
    """A journal written for another version of the space (or before spaces had a hash) is refused."""
    other = {r.get("space_hash") for r in journal.records} - {space_hash}
    if other:
        old = ", ".join(sorted(str(h) for h in other))
        raise TuneError(f"{journal.path}: written for space hash {old}, this space is {space_hash} (the space or "
                        "its constraints changed); move that journal away or give another --out; nothing was "
                        "overwritten")


def tune(problem: Problem, *, budget: int | None = None, top_k: int = 3, jobs: int = 4, gpus: str | None = None,
         timeout: float = 120.0, out_dir: Path = Path("results/tuned"), retry_failed: bool = False,
         seed: int = 0, log=print, strategy: str = "exhaustive", budget_seconds: float | None = None,
         prune: bool = True, address: str | None = None, pipeline: bool | None = None,
         timeline: Timeline | None = None, early: EarlyWorkers | None = None) -> Outcome:
    """Search ``problem``'s tuning space on this machine and write its top ``top_k`` (:class:`Tuner`)."""
    return Tuner(problem, budget=budget, top_k=top_k, jobs=jobs, gpus=gpus, timeout=timeout, out_dir=out_dir,
                 retry_failed=retry_failed, seed=seed, log=log, strategy=strategy, budget_seconds=budget_seconds,
                 prune=prune, address=address, pipeline=pipeline, timeline=timeline, early=early).run()


class Tuner:
    """One search, as its phases in order (:meth:`run`): check the arguments, find the devices, build
    the space, load what the journal already holds, connect the workers, search (rounds of compile,
    then time), choose the best and write them."""

    def __init__(self, problem: Problem, *, budget: int | None = None, top_k: int = 3, jobs: int = 4,
                 gpus: str | None = None, timeout: float = 120.0, out_dir: Path = Path("results/tuned"),
                 retry_failed: bool = False, seed: int = 0, log=print, strategy: str = "exhaustive",
                 budget_seconds: float | None = None, prune: bool = True, address: str | None = None,
                 pipeline: bool | None = None, timeline: Timeline | None = None,
                 early: EarlyWorkers | None = None) -> None:
        self.problem, self.budget, self.top_k, self.jobs, self.gpus = problem, budget, top_k, jobs, gpus
        self.timeout, self.out_dir, self.retry_failed, self.seed, self.log = timeout, out_dir, retry_failed, seed, log
        self.strategy, self.budget_seconds, self.prune = strategy, budget_seconds, prune
        self.address, self.pipeline, self.early = address, pipeline, early
        self.tl = Timeline() if timeline is None else timeline
        self.lock = threading.Lock()
        self.gate = Gate()  # shut when the search stops: no worker starts after that
        self.workers: dict[tuple[str, int], Any] = {}
        self.cluster: Any = None
        self.prog: Progress | None = None
        self.starting: list[threading.Thread] = []
        self.retried: set[tuple[str, str]] = set()  # (phase, config) that crashed once and went back in the queue

    def run(self) -> Outcome:
        self.space = self.problem.space
        self.check_arguments()
        self.find_devices()
        self.build_space()
        self.load_journal()
        self.connect()
        self.search()
        return self.choose_and_write()

    # ------------------------------------------------------------------------------ before the search

    def check_arguments(self) -> None:
        if self.budget is not None and self.budget < 1:
            raise TuneError(f"--budget-evals {self.budget}: give at least 1 config to try")
        if self.budget_seconds is not None and not self.budget_seconds > 0:
            raise TuneError(f"--budget-seconds {self.budget_seconds}: must be positive")
        if self.strategy not in search.STRATEGIES:
            raise TuneError(f"--strategy {self.strategy!r}: choose one of {', '.join(search.STRATEGIES)}")

    def find_devices(self) -> None:
        """The timing devices (:func:`targets`), which must be one GPU model, and the machine's name."""
        from xrt.bench.machine import machine_name

        self.tgts = targets(self.gpus)
        self.tl.mark("devices found")
        self.dev0 = self.tgts[0][0]
        self.dproblem = device_problem(self.problem, self.dev0)
        models = sorted({d.name for d, _ in self.tgts})
        if len(models) > 1:  # one ranking from several GPUs is only fair between identical ones
            raise TuneError(f"--gpus {self.gpus}: the GPUs differ ({', '.join(models)}); tune on one model at a time")
        self.machine = machine_name(self.dev0)

    def build_space(self) -> None:
        """The journal (refused when written for another space), the pruned candidates and the strategy."""
        from xrt.kernels import spaces

        self.shash = spaces.space_hash(self.space)
        self.journal_path = self.out_dir / "journal" / self.machine / f"{self.problem.name}.jsonl"
        self.journal = Journal(self.journal_path)
        check_journal(self.journal, self.shash)
        try:
            self.cands, dropped = search.pruned(self.space, self.dproblem if self.prune else None)
            self.strat = search.make(self.strategy, self.cands, self.seed)
        except ValueError as e:
            raise TuneError(str(e)) from e
        self.dropped = dict(dropped)
        self.tl.mark("space built")

    def load_journal(self) -> None:
        """The journal is the search's record: what it holds is told to the strategy, never measured again."""
        done_keys = self.journal.done(self.retry_failed)
        last = self.journal.last()
        for k in done_keys:
            if k in self.strat.by_key:
                r = last[k]
                self.strat.observe(r["config"], r.get("median_s") if r["status"] == "timed" else None)
        self.n_known = len(self.strat.results)
        self.total = len(self.cands) if self.budget is None else min(self.budget, len(self.cands))
        problem = self.problem
        self.result = Outcome(problem, self.machine, skipped=self.n_known, journal=self.journal_path,
                              torn=self.journal.torn, timeline=self.tl)
        self.result.space_hash, self.result.space_size, self.result.dropped = self.shash, len(self.cands), self.dropped
        self.log(f"xrt tune: {problem.op}[{problem.provider}] {problem.dtype} {problem.shape} on {self.machine}: "
                 f"space {self.space} ({self.shash}): {len(search.grid(self.space))} configs, {len(self.cands)} "
                 f"after pruning; strategy {self.strategy}, seed {self.seed}: {self.total} to evaluate, "
                 f"{self.n_known} already in the journal")

    def connect(self) -> None:
        """The workers' environment, the Ray cluster (``address``), whether building is pipelined, and
        the timing slots."""
        from xrt.bench.machine import machine_name

        self.base_env = {**os.environ}
        if self.dev0.kind == "cpu":
            self.base_env.setdefault("TRITON_INTERPRET", "1")
        if self.address:
            from xrt.tune.distributed import Cluster

            try:
                self.cluster = Cluster(self.address)
            except RuntimeError as e:
                raise TuneError(str(e)) from None
            self.log(f"Ray cluster {self.address}: {self.jobs} compile actor(s), {max(1, self.cluster.gpus)} "
                     f"timing actor(s) ({self.cluster.gpus} GPU(s))")
        self.n_eval = len(self.journal.records)
        self.finished = self.n_known  # evaluations of this search that are final (the progress bar's count)
        self.best = min((v for v in self.strat.results.values() if v), default=None)
        self.pipelined = pipelined(self.cluster, self.dev0, self.problem, self.pipeline)
        self.named = [(machine_name(d), env) for d, env in self.tgts]
        if self.cluster is not None:  # Ray pins each timing actor to its GPU: no local pinning
            self.named = [(f"ray-{i}", {}) for i in range(self.cluster.slots(self.jobs)[1])]

    # ------------------------------------------------------------------------------------- the search

    def record(self, rec: dict[str, Any], phase: str) -> None:
        """Journal one final answer, log it and move the progress bar."""
        p = self.problem
        with self.lock:
            rec.update(space_hash=self.shash, op=p.op, provider=p.provider, shape=p.shape, dtype=p.dtype,
                       device=self.dev0.model_key, strategy=self.strategy, seed=self.seed, eval=self.n_eval,
                       default=search.key(rec["config"]) == search.key(self.cands[0]))
            self.n_eval += 1
            self.journal.add(rec)
            tail = f"{rec['median_s'] * 1e6:.2f} us" if rec["status"] == "timed" else rec["status"]
            if rec.get("error"):
                tail += f": {rec['error'][:160]}"
            self.log(f"  {phase} {rec['key']}: {tail}")
            if rec["status"] == "timed" and (self.best is None or rec["median_s"] < self.best):
                self.best = rec["median_s"]
            self.finished += 1
            if self.prog is not None:
                self.prog.update(self.finished, self.best)

    def worker(self, phase: str, slot: int, env: dict[str, str]) -> Any:
        """The worker of ``phase``'s ``slot``, made on first use (a Ray actor on a cluster)."""
        w = self.workers.get((phase, slot))
        if w is None:
            mode = "build" if phase == "compile" and self.pipelined else phase
            wlog = self.journal_path.parent / f"{self.problem.name}.{phase}{slot}.log"
            w = Worker(self.problem, mode, {**self.base_env, **env}, wlog, start_timeout=max(self.timeout, 300.0),
                       timeline=self.tl, name=f"{phase}{slot}" if phase == "time" else f"{mode} worker",
                       many=phase != "time")
            w.gate = self.gate
            if self.cluster is not None:
                wlog.parent.mkdir(parents=True, exist_ok=True)
                w = self.cluster.worker(w.cmd, w.env, str(wlog), max(self.timeout, 300.0), gpu=phase == "time")
            self.workers[(phase, slot)] = w
        return w

    def start_timing_workers(self, slots: list[tuple[str, dict[str, str]]]) -> None:
        """Start each GPU's timing worker (imports, inputs, the reference) while the first configs compile,
        or adopt the one ``xrt tune`` started for that GPU before its own imports (``early``).

        A worker that fails to start here is started again, with its error, when it is first asked.
        """
        for i, (_, env) in enumerate(slots):
            t = threading.Thread(target=self._start_timing_worker, args=(self.worker("time", i, env), self.tgts[i][0]),
                                 daemon=True)
            t.start()
            self.starting.append(t)

    def _start_timing_worker(self, w: Worker, dev: Any) -> None:
        try:
            e = self.early.take(dev, w.env) if self.early is not None else None
            if e is not None:
                w.adopt(e)
            else:
                w._start()
        except Exception:  # noqa: BLE001 - ask() starts it again and reports why
            w.stop()

    def start_phase(self, phase: str, q: queue.Queue, closed: threading.Event,
                    slots: list[tuple[str, dict[str, str]]], answered, failures: list[BaseException],
                    steal: queue.Queue | None = None) -> list[threading.Thread]:
        """One thread per slot asks its worker for the configs of ``q`` until ``closed`` is set and
        ``q`` is empty; each answer goes to ``answered``. With ``steal``, a worker with nothing in ``q``
        takes a config from ``steal`` instead (a timing worker, from the build queue: it compiles and
        checks it itself rather than wait for the build pool)."""
        threads = [threading.Thread(target=self._ask_all, args=(phase, i, where, env, q, closed, answered, failures,
                                                                steal), daemon=True)
                   for i, (where, env) in enumerate(slots)]
        for t in threads:
            t.start()
        return threads

    def _ask_all(self, phase: str, slot: int, where: str, env: dict[str, str], q: queue.Queue,
                 closed: threading.Event, answered, failures: list[BaseException], steal: queue.Queue | None) -> None:
        """One slot's thread of :meth:`start_phase`."""
        w = self.worker(phase, slot, env)
        try:
            if phase == "compile" and self.pipelined and w.proc is None:
                # started before it takes a config: meanwhile an idle timing worker may take them all
                try:
                    w._start()
                except WorkerGone:
                    w.stop()  # ask() starts it again and records why, against its config
            while not self.gate.stopping and (cfg := next_config(q, closed, steal)) is not None:
                ans = self._ask(w, phase, cfg)
                if ans is None:
                    q.put(cfg)
                    continue
                # machine: whose search this is; ran_on: the device that ran this config
                ans.update(key=search.key(cfg), phase=phase, machine=self.machine, ran_on=ans.pop("actor", where),
                           at=time.time())
                answered(ans)
        except BaseException as e:  # noqa: BLE001 - surfaced by run_round, after the other threads stop
            failures.append(e)
            w.stop()

    def _ask(self, w: Any, phase: str, cfg: dict[str, Any]) -> dict[str, Any] | None:
        """``w``'s answer for ``cfg``; None for a first crash, which the caller puts back in the queue."""
        try:
            ans = w.ask(cfg, self.timeout)
        except WorkerGone as e:
            if self.gate.stopping:  # stopped by the search's end or the signal: not the config's
                raise Stopping(f"{phase} {search.key(cfg)}: the search is stopping") from None
            ans = {"config": cfg, "status": e.status, "error": f"{e.detail}; log: {_tail(w.log)}"}
        if ans["status"] == "crash" and (phase, search.key(cfg)) not in self.retried:
            # A device fault can end every process on that GPU, not only the one that
            # made it (seen on the H100): a config is a crash when it crashes twice.
            with self.lock:
                self.retried.add((phase, search.key(cfg)))
            self.log(f"  {phase} {search.key(cfg)}: crash ({ans.get('error', '')[:120]}); "
                     "trying it once more in a fresh worker")
            return None
        return ans

    def run_round(self, cfgs: list[dict[str, Any]], slots: list[tuple[str, dict[str, str]]], last_round: bool
                  ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Compile ``cfgs`` on ``slots`` and time those that compiled on every GPU (:class:`_Round`)."""
        return _Round(self, cfgs).run(slots, last_round)

    def search(self) -> None:
        """Rounds of proposals from the strategy until the space, the budget or the clock is spent."""
        # exhaustive and random know their order: one batch as wide as the compile pool's work allows;
        # the model proposes a batch of --jobs at a time and learns from each before the next
        # (with --budget-seconds, rounds of a few compile-pool widths, so that the clock is looked at)
        batch = batch_size(self.strategy, self.jobs, len(self.named), self.budget_seconds, self.total - self.n_known)
        self.prog = Progress(self.total, self.log, self.budget_seconds)
        t0 = time.monotonic()
        if self.cluster is None and self.total > self.n_known:
            self.start_timing_workers(self.named)
        strat, total = self.strat, self.total
        try:
            while len(strat.results) < total:
                if self.budget_seconds is not None and time.monotonic() - t0 >= self.budget_seconds:
                    self.log(f"xrt tune: --budget-seconds {self.budget_seconds:g} spent; stopping")
                    break
                cfgs = strat.propose(min(batch, total - len(strat.results)))
                if not cfgs:
                    break
                self.result.tried += len(cfgs)
                slots = [self.named[i % len(self.named)] for i in range(max(1, min(self.jobs, len(cfgs))))]
                compiled, timed = self.run_round(cfgs, slots, last_round=len(strat.results) + len(cfgs) >= total)
                observe(strat, compiled, timed)
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop every worker and the cluster, whatever ended the search."""
        self.tl.mark("search done")
        self.gate.shut()
        for t in self.starting:
            t.join()
        stop_all(list(self.workers.values()))
        if self.cluster is not None:
            self.cluster.close()
        self.tl.mark("workers stopped")

    # ------------------------------------------------------------------------------- after the search

    def choose_and_write(self) -> Outcome:
        """Count the outcomes of this space's configs, keep the fastest ``top_k`` and merge them into the
        top-K file."""
        result = self.result
        last = self.journal.last()
        keys = set(self.strat.by_key)
        for k, rec in last.items():
            if k in keys:
                result.counts[rec["status"]] = result.counts.get(rec["status"], 0) + 1
        timed = sorted((r for k, r in last.items() if r["status"] == "timed" and k in keys),
                       key=lambda r: r["median_s"])
        result.best = timed[:self.top_k]
        result.default = last.get(search.key(self.cands[0]))
        if result.best:
            result.out_file = write_top(self.out_dir, self.problem, self.dev0, result.best, result.default)
            self.tl.mark("results written")
        return result


class _Round:
    """One round of :meth:`Tuner.run_round`: compile ``cfgs``, then time those that compiled. Pipelined,
    a config is timed as soon as it compiled, an idle timing worker takes the next config to build
    itself, and after the last round's builds the build workers stop while the timing goes on."""

    def __init__(self, tuner: Tuner, cfgs: list[dict[str, Any]]) -> None:
        self.tuner = tuner
        self.cq: queue.Queue = queue.Queue()
        for c in cfgs:
            self.cq.put(c)
        self.tq: queue.Queue = queue.Queue()
        self.c_closed, self.t_closed = threading.Event(), threading.Event()
        self.c_closed.set()
        self.compiled: list[dict[str, Any]] = []
        self.timed: list[dict[str, Any]] = []
        self.failures: list[BaseException] = []

    def on_compiled(self, ans: dict[str, Any]) -> None:
        tuner = self.tuner
        with tuner.lock:
            self.compiled.append(ans)
        tuner.tl.span(f"config {ans['status']}")
        if ans["status"] != "compiled":
            tuner.record(ans, "compile")
        elif tuner.pipelined:
            self.tq.put(ans["config"])

    def on_timed(self, ans: dict[str, Any]) -> None:
        with self.tuner.lock:
            self.timed.append(ans)
        self.tuner.tl.span("config timed" if ans["status"] == "timed" else f"config {ans['status']} in timing")
        self.tuner.record(ans, "time")

    def start_timing(self) -> list[threading.Thread]:
        tuner = self.tuner
        for t in tuner.starting:  # timing workers started while the first configs compiled
            t.join()
        tuner.starting.clear()
        return tuner.start_phase("time", self.tq, self.t_closed, tuner.named, self.on_timed, self.failures,
                                 steal=self.cq if tuner.pipelined else None)

    def run(self, slots: list[tuple[str, dict[str, str]]], last_round: bool
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(compile answers, timing answers)."""
        tuner = self.tuner
        t_threads: list[threading.Thread] = []
        try:
            c_threads = tuner.start_phase("compile", self.cq, self.c_closed, slots, self.on_compiled, self.failures)
            if tuner.pipelined:
                t_threads = self.start_timing()
            for t in c_threads:
                t.join()
            if tuner.pipelined and last_round:  # no build is left: their processes are not needed
                stop_all([tuner.workers.pop(k) for k in [k for k in tuner.workers if k[0] == "compile"]])
                tuner.tl.mark("build workers stopped")
            if not tuner.pipelined and not self.failures:
                for a in self.compiled:
                    if a["status"] == "compiled":
                        self.tq.put(a["config"])
                if not self.tq.empty():
                    t_threads = self.start_timing()
        finally:
            self.t_closed.set()
            for t in t_threads:
                t.join()
        if self.failures:
            raise self.failures[0]
        return self.compiled, self.timed


def pipelined(cluster: Any, dev: Any, problem: Problem, pipeline: bool | None) -> bool:
    """Whether building and timing overlap. Triton configs compile in processes that run nothing on the
    device ("build" workers), so the timing workers can measure while later configs still compile; other
    providers (and the interpreter, and Ray) compile by running, so every config compiles before any is
    timed. (pipeline=True forces it: the tests, on the CPU)"""
    return cluster is None and (dev.kind == "cuda" and problem.provider == "triton" if pipeline is None
                                else pipeline)


def batch_size(strategy: str, jobs: int, n_timing: int, budget_seconds: float | None, left: int) -> int:
    """Configs per round: exhaustive and random know their order, so one batch as wide as the work left
    (``left``); the model proposes ``jobs`` at a time (at least one per timing slot) and learns from each
    batch before the next; with a time budget, rounds of a few compile-pool widths, so that the clock is
    looked at."""
    if strategy == "model":
        return max(jobs, n_timing)
    if budget_seconds is not None:
        return max(16, 4 * jobs)
    return max(1, left)


def next_config(q: queue.Queue, closed: threading.Event, steal: queue.Queue | None = None) -> dict[str, Any] | None:
    """The next config for a worker: from ``q``, else from ``steal``; None once ``closed`` is set and
    ``q`` is empty (everything was put before closing)."""
    while True:
        for src in (q, steal):
            if src is not None:
                try:
                    return src.get_nowait()
                except queue.Empty:
                    pass
        try:
            return q.get(timeout=0.05)
        except queue.Empty:
            if closed.is_set():  # everything was put before closing: empty now means done
                try:
                    return q.get_nowait()
                except queue.Empty:
                    return None


def observe(strat: Any, compiled: list[dict[str, Any]], timed: list[dict[str, Any]]) -> None:
    """Tell the strategy a round's outcomes: a config that did not compile, or failed in timing, has no time."""
    for a in compiled:
        if a["status"] != "compiled":
            strat.observe(a["config"], None)
    for a in timed:
        strat.observe(a["config"], a.get("median_s") if a["status"] == "timed" else None)


def write_top(out_dir: Path, problem: Problem, dev: Any, best: list[dict[str, Any]],
              default: dict[str, Any] | None) -> Path:
    """Merge this problem's top-K into ``<out_dir>/<op>.json`` (the suites' and the policy's file)."""
    from xrt.bench import suite
    from xrt.pytorch.policy import shape_bucket

    path = out_dir / f"{problem.op}.json"
    rows: list[dict[str, Any]] = []
    if path.is_file():
        try:
            rows = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise TuneError(f"{path}: not valid JSON ({e}); fix or remove it, the tuner merges into it") from e
        if not isinstance(rows, list):
            raise TuneError(f"{path}: expected a JSON list of tuned configs; fix or remove it, "
                            "the tuner merges into it")
    device = dev.model_key
    bucket = shape_bucket(suite.parse_shape(problem.shape))
    same = (problem.space, device, problem.dtype, bucket)
    rows = [r for r in rows if (r.get("op"), r.get("device"), r.get("dtype"), r.get("shape")) != same]
    base = default.get("median_s") if default and default.get("status") == "timed" else None
    for rank, r in enumerate(best, 1):
        rows.append({"op": problem.space, "device": device, "dtype": problem.dtype, "shape": bucket,
                     "problem_shape": problem.shape, "config": r["config"], "rank": rank, "median_s": r["median_s"],
                     "default_median_s": base, "speedup_vs_default": (base / r["median_s"]) if base else None,
                     "machine": r.get("machine"), "tuned_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    rows.sort(key=lambda r: (r.get("op", ""), r.get("device", ""), r.get("dtype", ""), r.get("shape", ""),
                             r.get("rank", 0)))
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(rows, indent=1) + "\n")
    os.replace(tmp, path)
    return path
