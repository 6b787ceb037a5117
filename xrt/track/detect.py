"""Change-point detection for one series (machine × benchmark × parameter combination).

Three phases, after the anchors (docs/regressions.md says why each is there):

1. **Candidates** on the per-commit log medians, by binary segmentation: in each segment take the
   split maximising the between-segment statistic ``nL·nR/(nL+nR)·(meanL − meanR)²``. That is
   E-divisive means' Q̂ with exponent α = 2 (with α = 2 the energy distance is exactly twice the
   squared difference of the means), which cumulative sums give in O(n) per segment instead of
   E-divisive's O(n²). Splits must leave ``min_points`` commits on each side (Chromium), and
   isolated outliers are replaced by the running median first, so a one-commit spike cannot be
   a segment. The stopping rule is Otava's relaxed one: a z of ``z_split`` (3), not the final bar.
2. **Judging** each candidate against its neighbours' segments (at most ``window`` commits each
   side): (a) the effect, the ratio of the medians of the commit medians, must reach
   ``min_effect`` within ``effect_se`` (1) standard errors of the estimate; (b) the shift must
   stand out from the series' own commit-to-commit noise
   (z ≥ ``z_commit`` with the noise from :func:`stats.run_noise`, which sees bimodal switching and
   drops one-commit spikes first);
   (c) a Mann-Whitney U test on the raw samples of the two sides must give p ≤ ``alpha``.
3. **Pruning** (Otava/Hunter's merge phase): drop the weakest failing change point, re-judge its
   neighbours with the merged segment, repeat until every change point passes.

Then each step is classified by direction (regression / improvement, after the unit) and, where
per-sample cycles (time × SM clock) exist on both sides, confirmed in cycle space (nvbench):
a time step without a cycle step is a ``clock`` change, not a code change. A regression whose
series later returns to its old level is ``fixed`` by the change point that brought it back.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from xrt.track import stats
from xrt.track.labels import CLOCK, IMPROVEMENT, REGRESSION

HIGHER_IS_BETTER = re.compile(r"/s\b|/sec|per.?s(ec)?\b|flop|ops\b|throughput|bandwidth|speedup", re.I)


def higher_is_better(unit: str | None) -> bool:
    """asv's ``time_`` units (seconds) and sizes are lower-is-better; rates (GB/s, TFLOP/s) higher."""
    return isinstance(unit, str) and bool(HIGHER_IS_BETTER.search(unit))  # NULL may arrive as None or NaN


def parse_effect(text: str | float, what: str = "--min-effect") -> float:
    """A minimum effect from the user: a finite fraction, at least 0 (0.02 is 2 %). NaN or infinity
    would silence every step, and a negative one has no log; each is one ValueError naming it."""
    try:
        v = math.nan if isinstance(text, bool) else float(text)
    except (TypeError, ValueError):
        v = math.nan
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"{what} {text!r}: expected a finite fraction of at least 0, such as 0.02 (2 %)")
    return v


@dataclass
class DetectConfig:
    min_effect: float = 0.02          # smallest reported change, as a fraction (2 %)
    min_points: int = 3               # commits each side of a step (Chromium: a minimum per side)
    alpha: float = 1e-3               # Mann-Whitney p-value bar on the raw samples
    z_commit: float = 4.0             # shift / commit-to-commit noise bar
    z_split: float = 3.0              # relaxed bar for candidates (pruned later)
    window: int = 20                  # commits each side used to judge a step
    effect_se: float = 1.0            # the effect bar's slack, in standard errors of the estimated step
    effects: list[tuple[str, float]] = field(default_factory=list)  # (regex on benchmark, min_effect)

    def effect_for(self, benchmark: str) -> float:
        """Per-benchmark minimum effect: the last matching regex wins, else ``min_effect``."""
        out = self.min_effect
        for pattern, eff in self.effects:
            if re.search(pattern, benchmark):
                out = eff
        return out


@dataclass
class Series:
    """One series in commit order. Samples are flattened: commit i owns ``flat[off[i]:off[i+1]]``
    (a commit without recorded samples owns its value as one sample). ``cyc_off``/``cyc_flat``
    likewise for cycles (time × SM clock), or None where no clock was recorded for any commit."""

    machine: str
    benchmark: str
    param_key: str
    params: list[str]
    unit: str | None
    commits: list[str]
    values: np.ndarray
    off: np.ndarray
    flat: np.ndarray
    cyc_off: np.ndarray | None = None
    cyc_flat: np.ndarray | None = None


@dataclass
class Step:
    index: int                # first commit at the new level (position in the series)
    kind: str                 # regression | improvement | clock
    before: float             # level before (median of commit medians, in the series' unit)
    after: float
    ratio: float              # after / before
    p_value: float
    z: float
    n_before: int             # commits judged each side
    n_after: int
    cycles_ratio: float | None = None
    fixed_by: int | None = None  # index of the step that brought the series back


def _best_split(y: np.ndarray, m: int) -> tuple[int, float]:
    """argmax over splits with ≥ m points each side of nL·nR/n·(meanL − meanR)²; (tau, |diff|·√(nL nR/n))."""
    n = len(y)
    c = np.cumsum(y)
    tau = np.arange(m, n - m + 1)
    nl = tau.astype(float)
    nr = n - nl
    diff = c[tau - 1] / nl - (c[-1] - c[tau - 1]) / nr
    q = nl * nr / n * diff * diff
    i = int(np.argmax(q))
    return int(tau[i]), math.sqrt(float(q[i]))


def candidates(y: np.ndarray, sigma: float, cfg: DetectConfig) -> list[int]:
    m = cfg.min_points
    out: list[int] = []
    todo = [(0, len(y))]
    while todo:
        s, e = todo.pop()
        if e - s < 2 * m:
            continue
        tau, stat = _best_split(y[s:e], m)
        if stat / sigma >= cfg.z_split:
            out.append(s + tau)
            todo += [(s, s + tau), (s + tau, e)]
    return sorted(out)


class _Judge:
    """Judges a change point k against the segment bounds (a, b) around it; memoised, because the
    pruning loop re-asks the same questions of every untouched change point."""

    def __init__(self, s: Series, y: np.ndarray, ycyc: np.ndarray | None, sigma: float, cfg: DetectConfig):
        self.s, self.y, self.ycyc, self.sigma, self.cfg = s, y, ycyc, sigma, cfg
        self.eff = math.log1p(cfg.effect_for(s.benchmark))
        self.memo: dict[tuple[int, int, int], tuple[bool, float, float]] = {}

    def bounds(self, a: int, k: int, b: int) -> tuple[int, int]:
        w = self.cfg.window
        return max(a, k - w), min(b, k + w)

    def judge(self, a: int, k: int, b: int) -> tuple[bool, float, float]:
        """(passes, z, p)."""
        key = (a, k, b)
        if key in self.memo:
            return self.memo[key]
        lo, hi = self.bounds(a, k, b)
        d = float(np.median(self.y[k:hi]) - np.median(self.y[lo:k]))
        nl, nr = k - lo, hi - k
        # a median of n normal values has ~1.25x the standard error of their mean
        se = self.sigma * 1.2533 * math.sqrt(1 / nl + 1 / nr)
        z = abs(d) / se
        # A step exactly at the bar is measured below it half the time: the bar is met when the
        # estimate reaches it within `effect_se` standard errors. With z >= z_commit also asked,
        # the estimate can never be below z/(z + effect_se) of the bar (4/5: 1.6 % for 2 %).
        bar = self.eff - self.cfg.effect_se * se
        ok = abs(d) >= bar and z >= self.cfg.z_commit and min(nl, nr) >= self.cfg.min_points
        p = 1.0
        if ok:
            off, flat = self.s.off, self.s.flat
            p, _ = stats.mannwhitney(flat[off[lo]:off[k]], flat[off[k]:off[hi]])
            ok = p <= self.cfg.alpha
        self.memo[key] = (ok, z, p)
        return self.memo[key]


def _prune(cps: list[int], n: int, judge: _Judge) -> list[int]:
    cps = list(cps)
    while cps:
        worst, worst_z = None, math.inf
        for j, k in enumerate(cps):
            a = cps[j - 1] if j else 0
            b = cps[j + 1] if j + 1 < len(cps) else n
            ok, z, _ = judge.judge(a, k, b)
            if not ok and z < worst_z:
                worst, worst_z = j, z
        if worst is None:
            return cps
        del cps[worst]
    return cps


def _refine(cps: list[int], y: np.ndarray, m: int) -> list[int]:
    """Move each change point to the best split between its neighbours (the search placed it
    inside a larger segment; with its final neighbours the best position can differ by a commit)."""
    out = list(cps)
    for j in range(len(out)):
        a = out[j - 1] if j else 0
        b = out[j + 1] if j + 1 < len(out) else len(y)
        if b - a >= 2 * m:
            tau, _ = _best_split(y[a:b], m)
            out[j] = a + tau
    return out


def commit_medians(off: np.ndarray, flat: np.ndarray) -> np.ndarray:
    """Median of each commit's slice of ``flat``."""
    return np.array([np.median(flat[off[i]:off[i + 1]]) if off[i + 1] > off[i] else np.nan
                     for i in range(len(off) - 1)])


def detect(s: Series, cfg: DetectConfig | None = None) -> list[Step]:
    """The steps of one series, oldest first."""
    cfg = cfg or DetectConfig()
    ok = np.isfinite(s.values) & (s.values > 0)
    if not ok.all():
        raise ValueError(f"{s.benchmark} [{s.param_key}]: values must be finite and > 0 (filter them first)")
    n = len(s.values)
    if n < 2 * cfg.min_points:
        return []
    y = np.log(s.values)
    sigma = stats.run_noise(y)
    if not math.isfinite(sigma):
        return []
    yd = stats.despike(y, sigma)  # the splits are searched and refined without one-commit spikes
    cps = candidates(yd, sigma, cfg)
    ycyc = None
    if s.cyc_off is not None and s.cyc_flat is not None and len(s.cyc_flat):
        cm = commit_medians(s.cyc_off, s.cyc_flat)
        ycyc = np.where(cm > 0, np.log(np.where(cm > 0, cm, 1.0)), np.nan)
    judge = _Judge(s, y, ycyc, sigma, cfg)
    cps = _prune(cps, n, judge)
    refined = _refine(cps, yd, cfg.min_points)
    if refined != cps:
        cps = _prune(sorted(set(refined)), n, judge)
    hib = higher_is_better(s.unit)
    steps: list[Step] = []
    for j, k in enumerate(cps):
        a = cps[j - 1] if j else 0
        b = cps[j + 1] if j + 1 < len(cps) else n
        _, z, p = judge.judge(a, k, b)
        lo, hi = judge.bounds(a, k, b)
        before, after = float(np.exp(np.median(y[lo:k]))), float(np.exp(np.median(y[k:hi])))
        ratio = after / before
        worse = ratio < 1 if hib else ratio > 1
        kind = REGRESSION if worse else IMPROVEMENT
        cyc_ratio = None
        if ycyc is not None:
            left, right = ycyc[lo:k], ycyc[k:hi]
            left, right = left[np.isfinite(left)], right[np.isfinite(right)]
            if len(left) >= cfg.min_points and len(right) >= cfg.min_points:
                cyc_ratio = float(np.exp(np.median(right) - np.median(left)))
                # time moved, cycles did not (by half the bar or more in the same direction): the clock moved
                if abs(math.log(cyc_ratio)) < judge.eff / 2 or (math.log(cyc_ratio) > 0) != (ratio > 1):
                    kind = CLOCK
        steps.append(Step(k, kind, before, after, ratio, p, z, k - lo, hi - k, cyc_ratio))
    _mark_fixed(steps, y, cps, judge.eff, hib)
    return steps


def _mark_fixed(steps: list[Step], y: np.ndarray, cps: list[int], eff: float, hib: bool) -> None:
    """A regression is fixed by the first later step after which the level is back within half
    the effect bar of the level before it (or better)."""
    n = len(y)
    levels = [float(np.median(y[cps[j]:(cps[j + 1] if j + 1 < len(cps) else n)])) for j in range(len(cps))]
    for j, st in enumerate(steps):
        if st.kind != "regression":
            continue
        base = math.log(st.before)
        for m in range(j + 1, len(steps)):
            back = levels[m] >= base - eff / 2 if hib else levels[m] <= base + eff / 2
            if back:
                st.fixed_by = steps[m].index
                break
