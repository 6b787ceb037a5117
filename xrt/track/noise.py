"""Run-to-run noise of one series, from its history: the one model the gate and the newest-commit
judgement share (the detector computes the same σ over its segments with :func:`stats.run_noise`).

Samples taken inside one run are not independent of each other: a process that landed on a slow
core, a GPU at another clock, a CPU runner under load, moves *every* sample of the run. A test on
the samples alone (Mann-Whitney) then calls that run's offset a regression. The history of the
series says how far whole runs move: σ is the commit-to-commit standard deviation of the log
per-commit value (one-commit spikes dropped, then first differences, largest 10 % trimmed,
:func:`stats.run_noise`), over the last
``window`` commits before the one being judged.

**The run's value is its best sample** (the fastest time; the highest rate) where samples exist,
for the comparison of two runs with samples (:meth:`Noise.z_pair`): load on a CPU runner only
ever slows samples down, so a run's median moves with how busy the machine was while its fastest
sample stays near what the code costs (on this 2-core CPU, with the Square suites: the σ a run of
the median was 20–57 %, and 10 A/A pairs failed 3 and 0 times while a planted 2x failed 5 and 2
times of 10; with :func:`steadier`'s rule 2 and 1 A/A, 8 and 10 planted, re-judged on the same runs,
and 1 A/A, 10 planted on a fresh run: docs/regressions.md). Those runs measured wall time in one
go; since the CPU measures the thread's CPU time in rounds spread over the run (asv version
xrt-suite-3-cpu), the best sample of the same series moves by 1-1.3 % (torch) and 6-7 % (Triton
interpreter) a run at a load of 6, and the same judge failed 0 of 10 A/A gates and all 10 planted
ones there. The history judgement of one-value runs (:meth:`Noise.z_head`) keeps asv's value.

Two uses:

- **A bar per series** (:meth:`Noise.z_pair`): base and head are two runs, so their log difference
  has standard deviation σ·√2; a slowdown whose z is below ``z`` is within what this series does
  from run to run, and is not a regression however small the p-value of its samples.
- **A verdict without samples** (:meth:`Noise.z_head`): a series that stores one value per run
  (asv ``track_`` benchmarks, or runs that kept no samples) cannot be tested on samples; its head
  is judged against the level of its recent history instead, with the same σ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from xrt.track import stats

WINDOW = 20        # commits of history (the detector's window)
MIN_HISTORY = 5    # fewer commits than this: no model (4 differences are too few to trust a σ)
Z = 4.0            # the detector's commit-level bar (DetectConfig.z_commit)
BEST_OVER_MEDIAN = 2.0  # the best sample's σ may be up to this times the median's and still be used
PRIOR_WEIGHT = 4   # the like series' pooled σ counts as this many run-to-run differences (floored)


@dataclass(frozen=True)
class Noise:
    sigma: float  # standard deviation of one run's log value
    level: float  # median log value over the window
    n: int        # commits of history used
    prior: float | None = None  # the like series' pooled σ it was raised toward (:func:`floored`)

    def z_pair(self, log_ratio: float) -> float:
        """The z of a log difference between two runs of this series."""
        return abs(log_ratio) / (self.sigma * math.sqrt(2.0))

    def z_head(self, log_value: float) -> float:
        """The z of one run's log value against the history's level (the median's own error included)."""
        return abs(log_value - self.level) / (self.sigma * math.sqrt(1.0 + math.pi / 2.0 / self.n))

    def describe(self) -> str:
        if self.n == 0:
            return f"σ {math.expm1(self.sigma) * 100:.2g} % a run, pooled over like series"
        raised = f", raised toward like series' {math.expm1(self.prior) * 100:.2g} %" if self.prior else ""
        return f"σ {math.expm1(self.sigma) * 100:.2g} % a run over {self.n} commits{raised}"


def best(fastest: float | None, slowest: float | None, higher_is_better: bool) -> float | None:
    """A run's best sample from its smallest and largest: the largest for a rate, else the smallest."""
    return slowest if higher_is_better else fastest


def steadier(history: list[tuple], higher_is_better: bool) -> tuple[Noise | None, str]:
    """From (value, smallest sample, largest sample) per commit: the model of the run's best sample,
    and which run value it is (``"best"``), unless history says the best sample moves more than
    :data:`BEST_OVER_MEDIAN` times as much as the median from run to run: then the median's
    (``"median"``, asv's value). On a loaded CPU the best sample is the steadier by far; on the H100
    most series are alike, and a few whose best sample is jumpy (a rare fast outlier) keep the median.
    Not simply the smaller σ: picking the smaller of two noisy estimates underestimates the noise
    (on the loaded CPU run it failed 3 of 10 A/A gates instead of 1)."""
    med = from_values([t[0] for t in history])
    top = from_values([best(lo, hi, higher_is_better) for _, lo, hi in history])
    if top is not None and (med is None or top.sigma <= BEST_OVER_MEDIAN * med.sigma):
        return top, "best"
    return med, "median"


def pooled(sigmas: list[float]) -> float | None:
    """The pooled σ of like series (the root of their median variance), or None under 3 series."""
    return float(np.sqrt(np.median(np.square(sigmas)))) if len(sigmas) >= 3 else None


def floored(model: Noise | None, prior: float | None) -> Noise | None:
    """``model`` with its σ raised toward ``prior``, the pooled σ of like series, never lowered: limma's
    moderated variance (Smyth 2004), (d0·s0² + d·s²) / (d0 + d), d the series' own differences and d0
    :data:`PRIOR_WEIGHT`. Five commits give σ from four differences, and for a host series that moves
    as a whole process does, four are often too few to see its spread (an A/A pair of one process a
    side on the H100 named 2 and 10 host series whose own σ came out small). Where there is no model
    (too little history), the prior alone."""
    if prior is None:
        return model
    if model is None:
        return Noise(prior, 0.0, 0)
    d = max(model.n - 1, 1)
    mod = math.sqrt((PRIOR_WEIGHT * prior ** 2 + d * model.sigma ** 2) / (PRIOR_WEIGHT + d))
    return model if mod <= model.sigma else Noise(mod, model.level, model.n, prior)


def from_values(values: np.ndarray | list[float], window: int = WINDOW) -> Noise | None:
    """The model from a series' per-commit values, oldest first (only the last ``window`` are used);
    ``None`` when fewer than :data:`MIN_HISTORY` valid values exist."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)][-window:]
    if len(v) < MIN_HISTORY:
        return None
    y = np.log(v)
    return Noise(stats.run_noise(y), float(np.median(y)), len(y))
