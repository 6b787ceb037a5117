"""How the gate places a series with enough valid samples on both sides: :func:`compare` runs
:data:`COMPARE_STEPS`, an ordered list of named steps, each returning the :class:`Verdict` list the
slowdown goes to (or :data:`NOWHERE`), or None to pass it on. ``docs/regressions.md`` ("The gate's
rule") names them in this order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from xrt.track import noise as noisemod
from xrt.track import stats
from xrt.track.detect import higher_is_better
from xrt.track.gate_data import Side
from xrt.track.gate_verdict import Settings, Verdict


def round_ratios(b: Side, h: Side, paired: bool) -> list[float] | None:
    """Head / base per round, where a side was measured in several runs (``xrt bench compare``'s
    rounds, or a commit measured twice): the k-th run of head against the k-th of base, by round
    (``xrt.orchestrate.paired`` names each round's files ``-round<k>``), else in ingest order;
    every pair where the counts differ, or where the runs are processes of ``xrt bench run
    --processes N`` (measured at other times, so the k-th of each side are no pair). None: one run a
    side."""
    col = 2 if paired else 1
    bs = [r[col] for r in sorted(b.runs) if r[col]]
    hs = [r[col] for r in sorted(h.runs) if r[col]]
    if not bs or not hs or (len(bs) < 2 and len(hs) < 2):
        return None
    by_round = len(bs) == len(hs) and not (b.processes or h.processes)
    pairs = zip(bs, hs) if by_round else ((x, y) for x in bs for y in hs)
    return [y / x for x, y in pairs]


def process_logs(b: Side, h: Side, paired: bool) -> tuple[np.ndarray, np.ndarray]:
    """The log of each run's median (op / reference where ``paired``) at base and at head."""
    col = 2 if paired else 1
    return tuple(np.log([r[col] for r in d.runs if r[col]]) for d in (b, h))


def process_sigma(b: Side, h: Side, paired: bool) -> tuple[float, int] | None:
    """The between-process σ of a series measured in processes (``xrt bench run --processes N``): the
    pooled standard deviation of each side's log run values around that side's mean, and its degrees
    of freedom (runs less one a side). None: fewer than 2 degrees of freedom, or no processes."""
    if not (b.processes or h.processes):
        return None
    bs, hs = process_logs(b, h, paired)
    df = sum(max(len(x) - 1, 0) for x in (bs, hs))
    if df < 2:
        return None
    ss = sum(float(np.sum((x - x.mean()) ** 2)) for x in (bs, hs) if len(x) > 1)
    return float(np.sqrt(ss / df)), df


def round_logs(b: Side, h: Side, paired: bool) -> np.ndarray | None:
    """The log of head / base per round, where both sides were measured in the same rounds (a paired
    measurement: one run a side a round, at least 2); None otherwise (processes, unequal counts)."""
    if b.processes or h.processes:
        return None
    rs = round_ratios(b, h, paired)
    col = 2 if paired else 1
    counts = {len([r for r in d.runs if r[col]]) for d in (b, h)}  # one size: one run a side a round
    if rs is None or len(rs) < 2 or counts != {len(rs)}:
        return None
    return np.log(rs)


# From this many paired rounds on, the round rules set the extreme rounds aside: one round whose
# process ran slow (a busy neighbour for a minute) can neither fail the gate alone nor pass a real
# slowdown alone. On a shared 2-core CI runner the CPU protocol's compiled plant (1.4x op / reference
# on a quiet machine) passed its five rounds as noise once, while its µs moved 1.4-3.5x a round.
TRIM_FROM = 5


def trimmed(d: np.ndarray) -> tuple[float, float, int]:
    """Yuen's trimmed mean of the round values ``d`` and its σ a round, where there are
    :data:`TRIM_FROM` or more (the lowest and the highest set aside): the mean of the rest, and the
    σ from the winsorized values (the extremes replaced by their neighbours), scaled so that σ / √kept
    is the trimmed mean's standard error. Fewer rounds: the mean and the plain σ. Third: the rounds
    kept."""
    n = len(d)
    if n < TRIM_FROM:
        return float(d.mean()), float(np.std(d, ddof=1)), n
    s = np.sort(d)
    kept = n - 2
    w = np.clip(s, s[1], s[-2])
    return float(s[1:-1].mean()), float(np.std(w, ddof=1) * np.sqrt((n - 1) / (kept - 1))), kept


def trims(b: Side, h: Side, paired: bool) -> bool:
    """Are the round rules to set the extreme round aside: measured in :data:`TRIM_FROM` or more paired
    rounds (:func:`round_logs`)?"""
    d = round_logs(b, h, paired)
    return d is not None and len(d) >= TRIM_FROM


def round_sigma(b: Side, h: Side, paired: bool) -> tuple[float, int] | None:
    """The round-to-round σ of a series' log head / base ratio (:func:`round_logs`; trimmed from
    :data:`TRIM_FROM` rounds, :func:`trimmed`) and the rounds less one, its weight in the machine's
    pool (the winsorized σ is taken from every round). None: not measured in paired rounds."""
    d = round_logs(b, h, paired)
    if d is None:
        return None
    return trimmed(d)[1], len(d) - 1


def run_gap(b: Side, h: Side, paired: bool, sign: int) -> float | None:
    """The log gap between head's best run and base's worst run (positive: every head run is worse
    than every base run), where base has several runs; None otherwise. Base's runs of one commit
    measure how far a whole process moves (Pinpoint's inter-task noise): a series that flips between
    two levels from one process to the next (seen for a compiled CUDA C call: 1.65 or 1.9-2.1 times
    its reference) moves that far in an A/A pair too, and is not a regression unless head's runs all
    lie beyond base's. From :data:`TRIM_FROM` paired rounds: head's second best against base's second
    worst."""
    col = 2 if paired else 1
    bs = sorted(np.log(r[col]) * sign for r in b.runs if r[col])
    hs = sorted(np.log(r[col]) * sign for r in h.runs if r[col])
    if len(bs) < 2 or not hs:
        return None
    k = 1 if trims(b, h, paired) else 0  # each side's extreme run set aside (head's best, base's worst)
    return float(hs[k] - bs[-1 - k])



@dataclass
class Comparison:
    """One series with enough valid samples on both sides, as :func:`compare`'s steps see it."""

    cfg: Settings
    eff: float
    key: tuple
    b: Side
    h: Side
    xs: np.ndarray
    ys: np.ndarray
    machine_changed: bool = False
    model: noisemod.Noise | None = None
    stat: str = "median"
    paired: bool = False
    drift: float | None = None
    item: dict | None = None  # what the verdict lists, once the samples say slower
    rounds: list[float] | None = None
    spread_prior: float | None = None  # the machine's pooled between-process σ (processes only)
    round_prior: float | None = None  # the machine's pooled round-to-round σ of head / base (paired rounds)

    def __post_init__(self) -> None:
        self.hib = higher_is_better(self.b.unit)
        self.sign = -1 if self.hib else 1
        self.ratio = float(np.median(self.ys) / np.median(self.xs))
        self.worse = np.log(self.ratio) * self.sign
        # head / base in µs: the same as ratio, but for a paired series (op / reference)
        self.abs_ratio = float(np.median(self.h.samples) / np.median(self.b.samples)) if self.paired else self.ratio


# A step of :func:`compare` returns the Verdict list the series goes to (NOWHERE: none), or None to
# pass it to the next step.
Step = Callable[[Comparison], "str | None"]
NOWHERE = ""


def not_slower(c: Comparison) -> str | None:
    """Not slower by the threshold; a host series slower in µs only moved with the machine."""
    if not c.worse < c.eff:
        return None
    if c.paired and np.log(c.abs_ratio) >= c.eff:
        m, bn, pk = c.key
        c.item = {"machine": m, "benchmark": bn, "param_key": pk, "ratio": c.ratio, "abs_ratio": c.abs_ratio}
        return "with_machine"
    return NOWHERE


def p_value(c: Comparison) -> str | None:
    """Not slower by the samples: the Mann-Whitney p-value above alpha."""
    p, _ = stats.mannwhitney(c.xs, c.ys)
    if p > c.cfg.alpha:
        return NOWHERE
    m, bn, pk = c.key
    c.item = {"machine": m, "benchmark": bn, "params": c.b.params, "param_key": pk, "ratio": c.ratio,
              "p_value": p, "before": float(np.median(c.xs)), "after": float(np.median(c.ys)), "judged": "on samples",
              "unit": c.b.unit}
    if c.paired:
        c.item.update(before=float(np.median(c.b.samples)), after=float(np.median(c.h.samples)),
                      judged="against the reference call (op / reference, sample by sample)")
    return None


def not_in_every_round(c: Comparison) -> str | None:
    """Measured in several runs a side, and not slower in every round (:func:`round_ratios`); from
    :data:`TRIM_FROM` paired rounds, in every round but one."""
    c.rounds = round_ratios(c.b, c.h, c.paired)
    if c.rounds is None:
        return None
    c.item["rounds"] = c.rounds
    worse = sorted(c.sign * np.log(r) for r in c.rounds)
    but_one = trims(c.b, c.h, c.paired)  # the round least slower set aside
    if worse[1 if but_one else 0] < c.eff / 2:
        c.item["judged"] = (("not slower in every round but one" if but_one else "not slower in every round")
                            + " (head / base per round: " + ", ".join(f"{r:.3f}" for r in c.rounds) + ")")
        return "within_noise"
    return None


def within_base_spread(c: Comparison) -> str | None:
    """Head's best run within base's own run-to-run spread (:func:`run_gap`)."""
    apart = run_gap(c.b, c.h, c.paired, c.sign) if c.rounds is not None else None
    if apart is None or not apart < c.eff / 2:
        return None
    c.item["judged"] = (f"within base's own run-to-run spread (head's best run is {np.expm1(apart):+.1%} from "
                        "base's worst)")
    return "within_noise"


def within_round_spread(c: Comparison) -> str | None:
    """Measured in paired rounds: head / base, averaged over the rounds, within the round-to-round
    spread of the machine's series, a t below :data:`noise.Z`. The σ is the pooled one
    (``round_prior``, :func:`xrt.track.gate_rules.round_spread_pool`): a whole process moves every
    series of a busy machine by its own amount (a 2-core runner under load: 5-11 % in both rounds of an
    A/A pair, with other series 0.95 in one round and 1.26 in the other), and one series' own two
    rounds say little of how far that goes; its own σ where that is the larger. From :data:`TRIM_FROM`
    rounds, Yuen's trimmed mean and its σ (:func:`trimmed`)."""
    d = round_logs(c.b, c.h, c.paired) if c.rounds is not None and c.round_prior else None
    if d is None:
        return None
    # A series noisier than the pool (one the pool left out as an outlier) is judged by its own σ.
    # From TRIM_FROM rounds, the trimmed mean of the rounds between the extremes (:func:`trimmed`).
    mean, own, kept = trimmed(d)
    sigma, whose = (own, "its own") if own > c.round_prior else (c.round_prior, "pooled over the machine's series")
    t = mean * c.sign / (sigma / np.sqrt(kept))
    spread = (f"{len(d)} rounds" + (f", the {kept} between the extremes" if kept < len(d) else "")
              + f", σ {np.expm1(sigma):.1%} a round {whose}, t {t:.1f}")
    if t >= noisemod.Z:
        c.item["round_spread"] = f"beyond the round-to-round spread: {spread} >= {noisemod.Z:g}"
        return None
    c.item["judged"] = f"within the round-to-round spread ({spread} < {noisemod.Z:g})"
    return "within_noise"


def slower_against_the_reference_only(c: Comparison) -> str | None:
    """Measured in paired rounds and judged against the reference call: slower against it, but in µs
    slower by no more than the machine drifted (the references' median move, at least 1; ``drift``).
    Each host sample's reference is measured beside it, and on a busy machine the references of
    one process moved 1.04-1.95x between base and head, each by its own amount. An op whose µs held
    still beside a reference that moved less is not shown slower: the gate cannot tell a slower op
    from a reference that ran fast, so it says the machine moved. (A CPU A/A pair: an op in
    Triton's interpreter, 30x its reference, read 1.19x against it, 1.09x in µs, while the
    machine's references moved 1.22x.) Side by side, a slower op is slower in µs too. Not for
    processes measured at other times (``--processes N`` in history mode): there a machine that got
    faster overnight can hide a slower op in µs, and the reference is what shows it."""
    if not c.paired or c.rounds is None or round_logs(c.b, c.h, c.paired) is None:
        return None
    moved = max(c.drift or 1.0, 1.0)
    if np.log(c.abs_ratio) * c.sign >= np.log(moved) + c.eff:
        return None
    c.item["abs_ratio"] = c.abs_ratio
    c.item["judged"] = (f"slower against its reference call only: {c.abs_ratio:.3f}x in µs, within the machine's "
                        f"drift ({moved:.2f}x) and the threshold")
    return "with_machine"


def within_process_spread(c: Comparison) -> str | None:
    """Measured in several processes a side (``xrt bench run --processes N``): head's mean process
    within the between-process spread, a t of the log process values below :data:`noise.Z`. The σ
    is the two sides' own (:func:`process_sigma`), raised to the machine's pooled σ where that is
    larger (``spread_prior``, :func:`xrt.track.gate_rules.process_spread_pool`), never lowered."""
    own = process_sigma(c.b, c.h, c.paired) if c.rounds is not None else None
    if own is None:
        return None
    raised = c.spread_prior is not None and c.spread_prior > own[0]
    sigma = c.spread_prior if raised else own[0]
    bs, hs = process_logs(c.b, c.h, c.paired)
    se = sigma * np.sqrt(1 / len(bs) + 1 / len(hs))
    gap = float(hs.mean() - bs.mean()) * c.sign
    t = gap / se if se > 0 else float("inf") if gap > 0 else 0.0
    spread = (f"{len(bs)} processes at base, {len(hs)} at head, σ {np.expm1(sigma):.1%} a process"
              + (f" (its own {np.expm1(own[0]):.1%}, raised to its machine's pooled)" if raised else "")
              + f", t {t:.1f}")
    if t >= noisemod.Z:
        c.item["processes"] = f"beyond the between-process spread: {spread} >= {noisemod.Z:g}"
        return None
    c.item["judged"] = f"within the between-process spread ({spread} < {noisemod.Z:g})"
    return "within_noise"


def within_drift(c: Comparison) -> str | None:
    """A series without a reference call of its own, slower by no more than its machine's drift."""
    if c.paired or c.drift is None or not c.worse <= np.log(c.drift) + c.eff:
        return None
    c.item["judged"] = f"within the machine's drift ({c.drift:.2f}x; no reference call recorded for it)"
    return "with_machine"


def within_noise(c: Comparison) -> str | None:
    """Within the series' run-to-run noise (``model``, from its history): z below :data:`noise.Z`."""
    if c.model is None:
        return None
    xs, ys, hib = c.xs, c.ys, c.hib  # the run's value the model was learnt on (noise.steadier)
    lr = float(np.log(c.ratio)) if c.stat == "median" else float(np.log(
        noisemod.best(ys.min(), ys.max(), hib) / noisemod.best(xs.min(), xs.max(), hib)))
    c.item["z"] = c.model.z_pair(lr) if (lr < 0 if hib else lr > 0) else 0.0  # not worse by that value: 0
    if not c.item["z"] < noisemod.Z:
        return None
    c.item["judged"] = (f"within run-to-run noise ({c.model.describe()} of the run's {c.stat}, z {c.item['z']:.1f} < "
                        f"{noisemod.Z:g})")
    return "within_noise"


def clock(c: Comparison) -> str | None:
    """Time moved, cycles did not (by less than half the threshold): a clock change."""
    bc = [x for x in c.b.cycles or [] if x is not None]  # None: no SM clock recorded (CPU, no NVML)
    hc = [x for x in c.h.cycles or [] if x is not None]
    if len(bc) < c.cfg.min_samples or len(hc) < c.cfg.min_samples:
        return None
    c.item["cycles_ratio"] = float(np.median(hc) / np.median(bc))
    return "clock" if abs(np.log(c.item["cycles_ratio"])) < c.eff / 2 else None


def changed_machine(c: Comparison) -> str | None:
    """Slower on a machine whose environment changed: listed apart, not a regression."""
    return "changed_machine" if c.machine_changed else None


def regression(c: Comparison) -> str | None:
    """Everything above passed: a regression."""
    return "regressions"


# compare's steps, in order (docs/regressions.md, "The gate's rule").
COMPARE_STEPS: tuple[Step, ...] = (not_slower, p_value, not_in_every_round, within_base_spread,
                                   within_round_spread, slower_against_the_reference_only, within_process_spread,
                                   within_drift, within_noise, clock, changed_machine, regression)


def compare(v: Verdict, cfg: Settings, eff: float, key: tuple, b: Side, h: Side, xs: np.ndarray,
            ys: np.ndarray, machine_changed: bool = False, model: noisemod.Noise | None = None,
            stat: str = "median", paired: bool = False, drift: float | None = None,
            spread_prior: float | None = None, round_prior: float | None = None) -> None:
    """One series with enough valid samples on both sides, through :data:`COMPARE_STEPS`: a regression,
    a clock change, a slowdown within the series' run-to-run noise (``model``, from its history) or not
    seen in every round, a slowdown of the whole host (``drift``: how far the machine's references
    moved; a series without a reference of its own slower by no more, or a paired series in rounds
    slower in µs by no more), or nothing.

    ``paired``: ``xs`` and ``ys`` are op / reference (host series); the item still shows µs.
    ``spread_prior``: the machine's pooled between-process σ (:func:`within_process_spread`);
    ``round_prior``: its pooled round-to-round σ (:func:`within_round_spread`)."""
    c = Comparison(cfg, eff, key, b, h, xs, ys, machine_changed, model, stat, paired, drift,
                   spread_prior=spread_prior, round_prior=round_prior)
    where = next(w for step in COMPARE_STEPS if (w := step(c)) is not None)
    if where:
        getattr(v, where).append(c.item)
