"""Which configs of a tuning space to try: the pruned space, and the strategies that walk it.

* :func:`pruned`: the space's configs for one problem on one device, minus those a rule of
  ``xrt/kernels/spaces.py`` (``CONSTRAINTS``) drops, with the count of each reason;
* :class:`Exhaustive`, :class:`RandomOrder`, :class:`ModelGuided`: ``propose`` the next configs,
  ``observe`` their outcome. ``model`` is Optuna's TPE sampler (seeded), told log(median) of every
  timed config and a failure for every config that crashed, hung or was wrong.

The tuner and the simulation harness (:mod:`xrt.tune.simulate`) use the same strategies.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Any

from xrt.kernels import spaces

STRATEGIES = ("exhaustive", "random", "model")


def key(config: dict[str, Any]) -> str:
    """A config's stable name: ``BLOCK_SIZE=1024,num_warps=4``."""
    return ",".join(f"{k}={config[k]}" for k in sorted(config))


def grid(space: str) -> list[dict[str, Any]]:
    """The default first, then every other config of the space once (``"auto"`` spellings of the default count once)."""
    default = spaces.default(space)
    out = [default]
    seen = {key(default)}
    for cfg in spaces.configs(space):
        full = {**default, **cfg}
        if key(full) not in seen:
            seen.add(key(full))
            out.append(full)
    return out


def pruned(space: str, problem: spaces.Problem | None = None) -> tuple[list[dict[str, Any]], Counter]:
    """(the configs kept, default first; Counter of reason -> configs dropped). The default is always
    kept: it is the baseline every result is compared with.

    Raises ValueError when the rules leave nothing but the default of a space that has more.
    """
    full = grid(space)
    if problem is None:
        return full, Counter()
    kept, dropped = [full[0]], Counter()
    for cfg in full[1:]:
        why = spaces.why_dropped(space, cfg, problem)
        if why:
            dropped[why] += 1
        else:
            kept.append(cfg)
    if len(full) > 1 and len(kept) == 1:
        raise ValueError(f"{space}: the constraints prune every config but the default for shape "
                         f"{'x'.join(map(str, problem.shape))} ({', '.join(f'{n} {w}' for w, n in dropped.items())})")
    return kept, dropped


def candidates(space: str, budget: int | None = None, seed: int = 0,
               problem: spaces.Problem | None = None) -> list[dict[str, Any]]:
    """The default first, then the rest of the (pruned) grid: all of it, or a seeded random ``budget`` in total."""
    if budget is not None and budget < 1:
        raise ValueError(f"--budget {budget}: give at least 1 config to try")
    cands, _ = pruned(space, problem)
    rest = cands[1:]
    if budget is not None and budget - 1 < len(rest):
        rest = random.Random(seed).sample(rest, budget - 1)
    return [cands[0]] + rest


class Strategy:
    """Walks a list of candidate configs (the default first). ``propose(n)`` never returns a config
    proposed before; ``observe`` takes the outcome (a time in seconds, or None for a failure)."""

    def __init__(self, cands: list[dict[str, Any]], seed: int = 0) -> None:
        if not cands:
            raise ValueError("no configs to search")
        self.cands, self.seed = cands, seed
        self.by_key = {key(c): c for c in cands}
        self.proposed: set[str] = set()
        self.results: dict[str, float | None] = {}

    def left(self) -> int:
        return len(self.cands) - len(self.proposed)

    def order(self) -> list[dict[str, Any]]:
        return self.cands

    def propose(self, n: int) -> list[dict[str, Any]]:
        out = []
        for c in self.order():
            if len(out) >= n:
                break
            k = key(c)
            if k not in self.proposed:
                self.proposed.add(k)
                out.append(c)
        return out

    def observe(self, cfg: dict[str, Any], value: float | None) -> None:
        k = key(cfg)
        self.proposed.add(k)
        self.results[k] = value


class Exhaustive(Strategy):
    """Every candidate, the default first, in the space's order."""


class RandomOrder(Strategy):
    """The default, then the others in a seeded random order."""

    def __init__(self, cands: list[dict[str, Any]], seed: int = 0) -> None:
        super().__init__(cands, seed)
        rest = cands[1:]
        self._order = [cands[0]] + random.Random(seed).sample(rest, len(rest))

    def order(self) -> list[dict[str, Any]]:
        return self._order


class ModelGuided(Strategy):
    """Optuna's TPE sampler over the space's parameters (categorical), seeded; the default first.

    TPE proposes a point of the full grid; a point the constraints pruned is told as failed and
    another is asked; after ``MAX_MISSES`` points in a row that are pruned or already taken, the next
    unproposed candidate of a seeded random order is taken, so a search always makes progress.
    Several proposals at once (a batch for the compile pool) use TPE's constant liar.
    """

    MAX_MISSES = 64
    N_STARTUP = 10

    def __init__(self, cands: list[dict[str, Any]], seed: int = 0) -> None:
        super().__init__(cands, seed)
        try:
            import optuna
        except ImportError as e:
            raise ValueError('--strategy model needs Optuna: pip install -c requirements/constraints.txt '
                             '-e ".[tune]"') from e
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        self.names = sorted({n for c in cands for n in c})
        self.choices = {n: sorted({c[n] for c in cands if n in c}, key=lambda v: (str(type(v)), v))
                        for n in self.names}
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=self.N_STARTUP, multivariate=True,
                                             constant_liar=True)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self.pending: dict[str, Any] = {}  # key -> trial asked and not yet told
        self.fallback = RandomOrder(cands, seed + 1)
        self._first = True

    def _tell(self, trial: Any, value: float | None) -> None:
        if value is None or not value > 0:
            self.study.tell(trial, state=self.optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, math.log(value))

    def _ask(self) -> dict[str, Any] | None:
        if self._first:  # the default: the baseline, and TPE's first observation
            self._first = False
            d = self.cands[0]
            if key(d) not in self.proposed:
                self.study.enqueue_trial({n: d[n] for n in self.names if n in d})
        misses = 0
        while misses < self.MAX_MISSES and self.left() > 0:
            trial = self.study.ask()
            cfg = {n: trial.suggest_categorical(n, self.choices[n]) for n in self.names}
            k = key(cfg)
            if k in self.by_key and k not in self.proposed:
                self.pending[k] = trial
                return self.by_key[k]
            misses += 1
            self._tell(trial, self.results.get(k) if k in self.by_key else None)
        for c in self.fallback.order():
            if key(c) not in self.proposed:
                return c
        return None

    def propose(self, n: int) -> list[dict[str, Any]]:
        out = []
        while len(out) < n:
            c = self._ask()
            if c is None:
                break
            self.proposed.add(key(c))
            out.append(c)
        return out

    def observe(self, cfg: dict[str, Any], value: float | None) -> None:
        super().observe(cfg, value)
        k = key(cfg)
        trial = self.pending.pop(k, None)
        if trial is None:  # a config from the journal or the fallback: tell it as a fixed trial
            dists = {n: self.optuna.distributions.CategoricalDistribution(self.choices[n]) for n in self.names}
            params = {n: cfg[n] for n in self.names if n in cfg}
            if len(params) != len(self.names):
                return
            if value is None or not value > 0:
                t = self.optuna.trial.create_trial(params=params, distributions=dists,
                                                   state=self.optuna.trial.TrialState.FAIL)
            else:
                t = self.optuna.trial.create_trial(params=params, distributions=dists, value=math.log(value))
            self.study.add_trial(t)
            if self._first and k == key(self.cands[0]):
                self._first = False
            return
        self._tell(trial, value)


def make(strategy: str, cands: list[dict[str, Any]], seed: int = 0) -> Strategy:
    if strategy not in STRATEGIES:
        raise ValueError(f"--strategy {strategy!r}: choose one of {', '.join(STRATEGIES)}")
    return {"exhaustive": Exhaustive, "random": RandomOrder, "model": ModelGuided}[strategy](cands, seed)
