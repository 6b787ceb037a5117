"""The statistics the detector, the gate and bisect share: numpy only (scipy is not a dependency).

- :func:`mannwhitney`: two-sided Mann-Whitney U, normal approximation with tie correction and a
  continuity correction (what ``scipy.stats.mannwhitneyu(method="asymptotic")`` computes).
- :func:`run_noise`: a robust estimate of the commit-to-commit noise of a series of log values
  (one-commit spikes dropped first, :func:`drop_spikes`).
- :func:`despike`: replace isolated outliers with the running median, so a one-commit spike does
  not pull a candidate split towards itself.
"""

from __future__ import annotations

import math

import numpy as np

# Standard deviation of the central 90 % of a normal sample, in units of sigma: undoes the bias of
# dropping the largest 10 % of the differences in :func:`run_noise`.
_TRIM90_STD = 0.7892


def mannwhitney(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Two-sided Mann-Whitney U test of ``x`` against ``y``: ``(p_value, common-language effect)``.

    The effect is P(Y > X) + P(Y = X)/2 (0.5: no shift; 1: every y above every x). Normal
    approximation with tie correction; fine from about 8 values per side, which is what the
    detector and the gate require.
    """
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        return 1.0, 0.5
    allv = np.concatenate([x, y])
    n = n1 + n2
    uniq, inv, counts = np.unique(allv, return_inverse=True, return_counts=True)
    # average rank of each distinct value: ranks 1..n, ties share the mean of their ranks
    ends = np.cumsum(counts)
    avg_rank = ends - (counts - 1) / 2.0
    r1 = avg_rank[inv[:n1]].sum()
    u1 = r1 - n1 * (n1 + 1) / 2.0
    mu = n1 * n2 / 2.0
    tie = float((counts.astype(float) ** 3 - counts).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - tie / (n * (n - 1))) if n > 1 else 0.0
    effect = 1.0 - u1 / (n1 * n2)  # U1 counts x > y; the effect is about y > x
    if var <= 0:
        return 1.0, effect
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
    p = math.erfc(max(z, 0.0) / math.sqrt(2.0))
    return min(1.0, p), effect


def min_p(n1: int, n2: int) -> float:
    """The smallest p-value :func:`mannwhitney` can give with ``n1`` and ``n2`` samples (no ties).

    With few samples even complete separation is not significant (5 against 5: p = 0.012), so a
    gate that asks for p <= alpha must also ask for enough samples to reach it.
    """
    if n1 == 0 or n2 == 0:
        return 1.0
    n = n1 + n2
    mu = n1 * n2 / 2.0
    z = (mu - 0.5) / math.sqrt(n1 * n2 / 12.0 * (n + 1))
    return min(1.0, math.erfc(z / math.sqrt(2.0)))


def samples_needed(alpha: float, limit: int = 10_000) -> int:
    """The least n such that n samples on each side can reach p <= ``alpha``."""
    n = 2
    while min_p(n, n) > alpha and n < limit:
        n += 1
    return n


# A one-commit spike: a point further than this many σ (the trimmed σ of :func:`_trimmed_sd`) from
# both its neighbours, which agree with each other. At most this share of the points are dropped.
SPIKE_Z = 4.0
SPIKE_SHARE = 0.1
SPIKE_ROUNDS = 3  # find, drop, estimate again: a large spike hides a smaller one behind the σ it inflates


def drop_spikes(y: np.ndarray, k: float = SPIKE_Z, share: float = SPIKE_SHARE) -> np.ndarray:
    """Log values ``y`` without their one-commit spikes: the phase before :func:`run_noise`'s estimate.

    A spike is a point that leaves the series and comes straight back: both its differences are more
    than ``k`` σ with opposite signs, and its two neighbours are within half of that jump of each
    other. Otava (Hunter) and asv's step detection keep outliers from deciding their statistics in
    the same spirit (asv weighs points by a robust L1 cost). σ here is the series' own trimmed σ,
    not the MAD: a series that switches between two levels all the time has a σ that covers its
    switches, so they are not spikes and stay in σ (measured: with the MAD as the yardstick, random
    switching between two levels 8 % apart gave 46 false steps in 200 series instead of 5). Found
    again after each drop (:data:`SPIKE_ROUNDS`), never more than ``share`` of the points.
    """
    y = np.asarray(y, dtype=float)
    limit = int(share * len(y))
    dropped = 0
    for _ in range(SPIKE_ROUNDS):
        if len(y) < 5 or dropped >= limit:
            break
        s = _trimmed_sd(np.diff(y))
        d = np.diff(y)
        left, right = d[:-1], d[1:]  # the differences into and out of points 1..n-2
        jump = np.minimum(np.abs(left), np.abs(right))
        hit = np.flatnonzero((jump > k * s) & (np.sign(left) != np.sign(right))
                             & (np.abs(y[2:] - y[:-2]) <= jump / 2)) + 1
        if not len(hit):
            break
        hit = hit[np.argsort(-jump[hit - 1])][:limit - dropped]  # the largest first, within the share
        y = np.delete(y, hit)
        dropped += len(hit)
    return y


def _trimmed_sd(d: np.ndarray) -> float:
    """σ of one value from first differences ``d``: the largest 10 % dropped, the trim's bias undone."""
    a = np.sort(np.abs(d[np.isfinite(d)]))
    if len(a) < 3:
        return float("inf")
    keep = a[: max(2, int(math.ceil(0.9 * len(a))))]
    return math.sqrt(float(np.mean(keep ** 2))) / _TRIM90_STD / math.sqrt(2.0)


def run_noise(y: np.ndarray, floor: float = 1e-4) -> float:
    """Commit-to-commit standard deviation of log values ``y``, in two phases.

    1. :func:`drop_spikes`: rare one-commit spikes go first. A spike adds two large differences, so
       three of them in 40 commits are six of 39 differences, more than the trim below takes: σ came
       out too large and a sustained 7.6 % step beside them scored z 3.85 against 4.
    2. σ from the first differences of the rest (a step adds one large difference, a level does
       not), with the largest 10 % dropped (steps, and what is left of spikes) and the bias of that
       trim undone (:func:`_trimmed_sd`). Not the MAD: for bimodal noise (a series that switches at
       random between two levels) half the differences are 0, and the MAD would call the series
       quiet; the trimmed standard deviation sees the switching.
    """
    y = np.asarray(y, dtype=float)
    return max(_trimmed_sd(np.diff(drop_spikes(y[np.isfinite(y)]))), floor)


def despike(y: np.ndarray, sigma: float, width: int = 5, k: float = 4.0) -> np.ndarray:
    """``y`` with points more than ``k`` sigma from the centred running median replaced by it."""
    n = len(y)
    if n < width:
        return y
    h = width // 2
    padded = np.concatenate([np.full(h, y[0]), y, np.full(h, y[-1])])
    med = np.median(np.lib.stride_tricks.sliding_window_view(padded, width), axis=1)
    return np.where(np.abs(y - med) > k * sigma, med, y)
