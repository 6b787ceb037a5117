"""The gate's rules: how one series is judged, as an ordered list of named rules.

Each rule of :data:`RULES` takes a series' two sides (:class:`xrt.track.gate_data.Pair`) and the
comparison's :class:`Context`, and returns the series' :class:`Outcome`, or None to pass it to the
next rule (as Otava composes its phases: each named, each checkable on its own). A series with
enough valid samples on both sides goes through :func:`compare`, whose steps (:data:`COMPARE_STEPS`)
decide where its slowdown is listed. ``docs/regressions.md`` ("The gate's rule") names both lists in
this order. Nothing here reads the database (:mod:`xrt.track.gate_data`) or renders the verdict
(:mod:`xrt.track.gate_render`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from xrt.db import result_names
from xrt.track import noise as noisemod
from xrt.track import stats
from xrt.track.detect import higher_is_better
from xrt.track.gate_data import Pair, Side, host_series, like

PASS, REGRESSION, CANNOT_JUDGE = 0, 1, 2


@dataclass(frozen=True)
class Outcome:
    """How one series was judged: the words the report uses, and whether it stops a pass."""

    name: str
    text: str
    blocks: bool


COMPARED = Outcome("compared", "compared", False)
NEW_AT_HEAD = Outcome("new", "new at head (no baseline yet; judged from the next commit on)", False)
SKIPPED_BOTH = Outcome("skipped", "skipped at base and head (asv skip: not applicable)", False)
FAILED_AT_BASE = Outcome("failed-base", "failed at base: nothing to compare head with", True)
FAILED_AT_HEAD = Outcome("failed-head", "failed at head", True)
MISSING_AT_HEAD = Outcome("missing-head", "missing at head (ran at base)", True)
SKIPPED_AT_HEAD = Outcome("skipped-head", "skipped at head (ran at base)", True)
HISTORY = Outcome("history", "judged against its history (too few samples to test: one value a run)", False)
INVALID = Outcome("invalid", "invalid samples", True)
TOO_FEW = Outcome("too-few", "too few samples", True)
# `xrt bench run --changed-only` did not run the series' op at head (its sources had not changed) and
# recorded which commit's measurement head carries (xrt.bench.sources): judged on that commit's
# samples, compared with base unless that commit is base itself. A carried series whose measurement
# failed is "failed at head"; one carried from a commit with no results for it cannot be judged.
CARRIED = Outcome("carried", "carried forward at head (sources unchanged since the commit it was measured at)",
                  False)
# asv's benchmark version differs between base and head: the suite measures the series another way
# now (the single-process suite, version xrt-suite-2, times CUDA C small shapes at 71 us where the one
# before gave 3.9 us), so the two sides are not comparable; measure base again with this suite.
VERSION_CHANGED = Outcome("version-changed", "benchmark version changed between base and head (measured "
                          "another way: not comparable; measure base again with this suite)", True)
# Two result files for one commit, one machine and one environment (a copied ``X (1).json``): their
# samples are never pooled into one series (a slower copy would hide in the other's samples); the
# series is not judged, and the files are named. (Files of different environments are judged per
# environment: :func:`xrt.track.gate_data.per_env`.)
SEVERAL_RUNS = Outcome("several-runs", "several result files for one commit in one environment on one machine "
                       "(a copy?): their samples are not pooled, so it is not judged", True)
OUTCOMES = (COMPARED, HISTORY, CARRIED, NEW_AT_HEAD, SKIPPED_BOTH, FAILED_AT_BASE, FAILED_AT_HEAD, MISSING_AT_HEAD,
            SKIPPED_AT_HEAD, INVALID, TOO_FEW, VERSION_CHANGED, SEVERAL_RUNS)


@dataclass
class Verdict:
    code: int = PASS
    base: str = ""
    head: str = ""
    regressions: list[dict] = field(default_factory=list)
    clock: list[dict] = field(default_factory=list)
    changed_machine: list[dict] = field(default_factory=list)  # slower, on a machine whose environment changed
    within_noise: list[dict] = field(default_factory=list)  # slower by the samples, within the run-to-run noise
    drift: dict = field(default_factory=dict)  # machine -> (reference head / base, series): the host moved
    with_machine: list[dict] = field(default_factory=list)  # slower in µs, not against the reference: drift
    problems: list[str] = field(default_factory=list)
    compared: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # Outcome.name -> series
    carried_from: dict[str, int] = field(default_factory=dict)  # commit carried series were measured at -> count
    carried_compared: int = 0  # carried series compared with base (on the carrying commit's samples)
    notes: list[str] = field(default_factory=list)  # what was not judged and does not block
    history: list[Any] = field(default_factory=list)  # detector steps between base and head
    envs: dict = field(default_factory=dict)  # (machine, commit) -> recorded environment (alerts' cause)


@dataclass(frozen=True)
class Settings:
    """The gate's knobs, validated: a bad value is a ``ValueError`` naming the option and the value."""

    threshold: float = 0.05  # a fraction: 0.05 = 5 % slower fails
    alpha: float = 0.002
    min_samples: int = 5

    def __post_init__(self) -> None:
        for option, value in (("--threshold", self.threshold), ("--alpha", self.alpha),
                              ("--min-samples", self.min_samples)):
            if (why := _knob_problem(option, value)) is not None:
                raise ValueError(f"{option} {value!r}: {why}")

    @classmethod
    def from_text(cls, threshold: str, alpha: str, min_samples: str) -> Settings:
        """The command line's words; an error quotes the word as the user typed it."""
        thr = parse_threshold(threshold)
        out = []
        for option, text, kind in (("--alpha", alpha, float), ("--min-samples", min_samples, int)):
            try:
                value = kind(text)
            except (TypeError, ValueError):
                raise ValueError(f"{option} {text!r}: not a{'' if kind is float else ' whole'} number") from None
            if (why := _knob_problem(option, value)) is not None:
                raise ValueError(f"{option} {text!r}: {why}")
            out.append(value)
        return cls(thr, *out)

    @property
    def samples_needed(self) -> int:
        """Per side: ``min_samples``, and enough for Mann-Whitney to reach ``alpha`` at all."""
        return max(self.min_samples, stats.samples_needed(self.alpha))


def _knob_problem(option: str, value: float | int) -> str | None:
    """Why ``value`` cannot be ``option`` (None: it can). A knob that would pass anything is refused."""
    if option == "--threshold" and not (isinstance(value, float | int) and math.isfinite(value) and 0 < value <= 9):
        return "need a slowdown fraction in (0, 9] (0.05 = 5 %; 9 is a 10x ratio)"
    if option == "--alpha" and not (isinstance(value, float | int) and math.isfinite(value) and 0 < value < 1):
        return "need a p-value bar in (0, 1), such as 0.002"
    if option == "--min-samples" and not (isinstance(value, int) and value >= 2):
        return "need a whole number >= 2"
    return None


def parse_threshold(text: str) -> float:
    """``--threshold``: a fraction (``0.05``) or a ratio (``1.05``), as a fraction.

    ``1`` is refused as ambiguous (a ratio of 1 fails on any noise); the range is :func:`_knob_problem`'s.
    """
    try:
        t = float(text)
    except (TypeError, ValueError):
        raise ValueError(f"--threshold {text!r}: not a number (a fraction such as 0.05 or a ratio such as 1.05)") \
            from None
    if t == 1:
        raise ValueError(f"--threshold {text!r}: ambiguous (a ratio of 1 would fail on any noise); give a "
                         "fraction such as 0.05 or a ratio such as 1.05")
    frac = t - 1 if t > 1 else t  # NaN and inf stay what they are, and are refused below
    if (why := _knob_problem("--threshold", frac)) is not None:
        raise ValueError(f"--threshold {text!r}: {why}; or a ratio above 1, such as 1.05")
    return frac




def identical(xs: np.ndarray, ys: np.ndarray) -> bool:
    """Every value at base and head is one and the same finite number >= 0: a deterministic series (a
    memory benchmark at 0 bytes, a count), unchanged. Equal is equal: it is compared, and did not move,
    even at 0 (which no time or rate can be) and with one value a side."""
    v = np.concatenate([xs, ys])
    return len(xs) > 0 and len(ys) > 0 and bool(np.isfinite(v[0]) and v[0] >= 0 and (v == v[0]).all())


def outcome(b: Side | None, h: Side | None) -> Outcome | None:
    """The outcome decided by the statuses alone; ``None``: both sides ran, look at the samples."""
    bs, hs = b.status if b else set(), h.status if h else set()
    if "ok" in bs:
        if "ok" in hs:
            return None
        return FAILED_AT_HEAD if "failed" in hs else (SKIPPED_AT_HEAD if "skipped" in hs else MISSING_AT_HEAD)
    if "failed" in bs:
        return FAILED_AT_BASE
    if "failed" in hs:  # skipped or absent at base, broken at head
        return FAILED_AT_HEAD
    return NEW_AT_HEAD if "ok" in hs else SKIPPED_BOTH


def several_runs(b: Side | None, h: Side | None) -> str | None:
    """Where base or head has rows of more than one result file for the series: the files (and their
    environments) in words, else None (:data:`SEVERAL_RUNS`). The rounds of a paired measurement
    (``-round<k>`` files, one a round) are several runs by design."""
    said = []
    for side, d in (("base", b), ("head", h)):
        files = d.files if d else {}
        rounds = [m[1] if (m := re.search(result_names.ROUND_RE, f or "")) else None for f in files]
        if len(files) > 1 and len(set(rounds)) < len(rounds):
            said.append(f"{len(files)} at {side}: " + ", ".join(f"{f} [{e}]" for f, e in sorted(files.items(),
                                                                                            key=str)))
    return "; ".join(said) or None



@dataclass
class Context:
    """What every rule of one comparison shares: the verdict it writes to, the knobs, base's commit,
    the noise models' history (:func:`xrt.track.gate_data.histories`) and the changed machines."""

    v: Verdict
    cfg: Settings
    eff: float  # log(1 + threshold)
    base: str
    hist: dict[str, dict]
    changed: set[str] = field(default_factory=set)  # machines whose environment differs between the sides


# A rule looks at one series and returns its outcome (adding a problem line where it blocks), or
# None to pass the series to the next rule. The first outcome wins; the last rule always decides.
Rule = Callable[[Pair, Context], "Outcome | None"]


def several_result_files(p: Pair, c: Context) -> Outcome | None:
    """Rows of more than one result file for one commit and environment: never pooled, not judged."""
    several = several_runs(p.base, p.head)
    if not several:
        return None
    c.v.problems.append(f"{p.label}: result files of one commit ({several}): not pooled, not judged; keep "
                        "one file per commit and environment (remove the copy)")
    return SEVERAL_RUNS


def statuses(p: Pair, c: Context) -> Outcome | None:
    """Failed, skipped, missing or new on a side (:func:`outcome`); a carried series says from where."""
    out = outcome(p.base, p.head)
    if out is None:
        return None
    if p.carried and out.blocks:
        out = Outcome(out.name, f"{out.text} (carried forward from {p.carried[:10]})", True)
    if out.blocks:
        c.v.problems.append(f"{p.label}: {out.text}")
    return out


def carried_from_base(p: Pair, c: Context) -> Outcome | None:
    """Head carries base's own measurement (sources unchanged since): nothing to compare."""
    return CARRIED if p.carried == c.base else None


def version_changed(p: Pair, c: Context) -> Outcome | None:
    """asv's benchmark version differs between the sides: measured another way, not comparable."""
    bv, hv = p.base.versions, p.head.versions
    if not (bv and hv) or bv & hv:
        return None
    c.v.problems.append(f"{p.label}: {VERSION_CHANGED.text} ({', '.join(sorted(bv))[:24]} at base, "
                        f"{', '.join(sorted(hv))[:24]} at head)")
    return VERSION_CHANGED


def identical_values(p: Pair, c: Context) -> Outcome | None:
    """Every value on both sides one and the same number (:func:`identical`): compared, nothing moved."""
    return COMPARED if identical(p.xs, p.ys) else None


def invalid_samples(p: Pair, c: Context) -> Outcome | None:
    """A sample (or the stored value) <= 0, NaN or infinite on a side."""
    bad = [f"{n} at {side}" for a, side in ((p.xs, "base"), (p.ys, "head"))
           if (n := int((~(np.isfinite(a) & (a > 0))).sum()))]
    if not bad:
        return None
    c.v.problems.append(f"{p.label}: invalid samples (negative, zero or not finite: {', '.join(bad)})")
    return INVALID


def too_few_samples(p: Pair, c: Context) -> Outcome | None:
    """Fewer samples a side than the test needs: head against its history (:func:`against_history`)
    where the series has enough of it, else too few."""
    need = c.cfg.samples_needed
    if len(p.xs) >= need and len(p.ys) >= need:
        return None
    model = noisemod.from_values([t[0] for t in c.hist.get("value", {}).get(p.hkey, [])])
    if model is not None:
        against_history(c.v, c.eff, p.key, p.base, p.ys, model, p.machine in c.changed)
        return HISTORY
    why = f"need {need}" + (f": p <= {c.cfg.alpha:g} is out of reach with fewer" if need > c.cfg.min_samples else "")
    c.v.problems.append(f"{p.label}: too few samples ({len(p.xs)} at base, {len(p.ys)} at head; {why}) "
                        f"and too little history to judge it otherwise (fewer than "
                        f"{noisemod.MIN_HISTORY} commits)")
    return TOO_FEW


def paired_host_series(p: Pair, c: Context) -> Outcome | None:
    """A host series with its reference call beside every sample: compared op / reference."""
    b, h, need = p.base, p.head, c.cfg.samples_needed
    if not (b.paired and h.paired and min(len(b.paired), len(h.paired)) >= need):
        return None
    compare(c.v, c.cfg, c.eff, p.key, b, h, np.asarray(b.paired, float), np.asarray(h.paired, float),
            p.machine in c.changed, *_noise(c.hist, "paired", p.hkey, b, h, True), paired=True)
    return COMPARED


def on_samples(p: Pair, c: Context) -> Outcome | None:
    """Every other series: compared on its samples (:func:`compare`)."""
    drift = c.v.drift.get(p.machine, (None,))[0] if host_series(p.key[1]) else None
    compare(c.v, c.cfg, c.eff, p.key, p.base, p.head, p.xs, p.ys, p.machine in c.changed,
            *_noise(c.hist, "value", p.hkey, p.base, p.head, False), drift=drift)
    return COMPARED


# The gate's rule for one series, in order (docs/regressions.md, "The gate's rule").
RULES: tuple[Rule, ...] = (several_result_files, statuses, carried_from_base, version_changed, identical_values,
                           invalid_samples, too_few_samples, paired_host_series, on_samples)


def _listed(v: Verdict) -> tuple[list[dict], ...]:
    """The verdict's lists of slower series, in one order."""
    return v.regressions, v.within_noise, v.clock, v.changed_machine, v.with_machine


def judge_series(p: Pair, c: Context) -> Outcome:
    """One series (in one environment where ``p.env`` is given) into ``c.v``: the first rule's outcome.
    A carried series compared on the carrying commit's samples counts as carried."""
    v = c.v
    marks = [len(x) for x in _listed(v)]
    out = next(o for rule in RULES if (o := rule(p, c)) is not None)
    if p.carried and out in (COMPARED, HISTORY):
        v.carried_compared += 1
        out = CARRIED
    if out is CARRIED:
        v.carried_from[p.carried] = v.carried_from.get(p.carried, 0) + 1
    v.counts[out.name] += 1
    for lst, n in zip(_listed(v), marks):
        for item in lst[n:]:
            item["env"] = p.env  # which environment slowed down, where they are judged apart
    return out


def _noise(hist: dict[str, dict], kind: str, hkey: tuple, b: Side, h: Side,
           paired: bool) -> tuple[noisemod.Noise | None, str]:
    """The run-to-run noise model of a series and the run's value it models (:func:`noise.steadier`).
    A host series measured in one process a side has its σ raised toward its like series' pooled σ
    (:func:`noise.floored`): its own few commits often miss how far a whole process moves. Several
    runs a side are judged round by round instead (:func:`compare`)."""
    model, stat = noisemod.steadier(hist.get(kind, {}).get(hkey, []), higher_is_better(b.unit))
    if host_series(hkey[1]) and round_ratios(b, h, paired) is None:
        model = noisemod.floored(model, hist.get("pool", {}).get((kind, like(hkey), stat)))
    return model, stat


def against_history(v: Verdict, eff: float, key: tuple, b: Side, ys: np.ndarray, model: noisemod.Noise,
                     machine_changed: bool) -> None:
    """A series with too few samples to test: head's value against the level of its recent history."""
    m, bn, pk = key
    y = float(np.log(np.median(ys)))
    ratio = float(np.exp(y - model.level))
    worse = np.log(ratio) * (-1 if higher_is_better(b.unit) else 1)
    z = model.z_head(y)
    if worse < eff or z < noisemod.Z:
        return
    item = {"machine": m, "benchmark": bn, "params": b.params, "param_key": pk, "ratio": ratio,
            "p_value": None, "z": z, "judged": f"against history ({model.describe()})",
            "before": float(np.exp(model.level)), "after": float(np.median(ys)), "unit": b.unit}
    (v.changed_machine if machine_changed else v.regressions).append(item)


def machine_drift(b_rows: dict[tuple, Side], h_rows: dict[tuple, Side], eff: float) -> dict[str, tuple[float, int]]:
    """Per machine, how much slower (or faster) the host series' reference call ran at head than at
    base, where that moved by the threshold or more: ``{machine: (median ratio, series)}``.

    Every host sample is taken in turn with the same reference call (a plain torch op, which no
    commit of xrt changes), so when the references of a machine's series moved together, the host
    moved, not the code."""
    per: dict[str, list[float]] = {}
    for key, b in b_rows.items():
        h = h_rows.get(key)
        if h is not None and b.refs and h.refs:
            per.setdefault(key[0], []).append(float(np.median(h.refs) / np.median(b.refs)))
    out = {}
    for m, ratios in per.items():
        d = float(np.median(ratios))
        if abs(np.log(d)) >= eff:
            out[m] = (d, len(ratios))
    return out


def round_ratios(b: Side, h: Side, paired: bool) -> list[float] | None:
    """Head / base per round, where a side was measured in several runs (``xrt bench compare``'s
    rounds, or a commit measured twice): the k-th run of head against the k-th of base, by round
    (``xrt.orchestrate.paired`` names each round's files ``-round<k>``), else in ingest order;
    every pair where the counts differ. None: one run a side."""
    col = 2 if paired else 1
    bs = [r[col] for r in sorted(b.runs) if r[col]]
    hs = [r[col] for r in sorted(h.runs) if r[col]]
    if not bs or not hs or (len(bs) < 2 and len(hs) < 2):
        return None
    pairs = zip(bs, hs) if len(bs) == len(hs) else ((x, y) for x in bs for y in hs)
    return [y / x for x, y in pairs]


def run_gap(b: Side, h: Side, paired: bool, sign: int) -> float | None:
    """The log gap between head's best run and base's worst run (positive: every head run is worse
    than every base run), where base has several runs; None otherwise. Base's runs of one commit
    measure how far a whole process moves (Pinpoint's inter-task noise): a series that flips between
    two levels from one process to the next (seen for a compiled CUDA C call: 1.65 or 1.9-2.1 times
    its reference) moves that far in an A/A pair too, and is not a regression unless head's runs all
    lie beyond base's."""
    col = 2 if paired else 1
    bs = [np.log(r[col]) * sign for r in b.runs if r[col]]
    hs = [np.log(r[col]) * sign for r in h.runs if r[col]]
    if len(bs) < 2 or not hs:
        return None
    return float(min(hs) - max(bs))



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

    def __post_init__(self) -> None:
        self.hib = higher_is_better(self.b.unit)
        self.sign = -1 if self.hib else 1
        self.ratio = float(np.median(self.ys) / np.median(self.xs))
        self.worse = np.log(self.ratio) * self.sign


# A step of :func:`compare` returns the Verdict list the series goes to (NOWHERE: none), or None to
# pass it to the next step.
Step = Callable[[Comparison], "str | None"]
NOWHERE = ""


def not_slower(c: Comparison) -> str | None:
    """Not slower by the threshold; a host series slower in µs only moved with the machine."""
    if not c.worse < c.eff:
        return None
    if c.paired and np.log(np.median(c.h.samples) / np.median(c.b.samples)) >= c.eff:
        m, bn, pk = c.key
        c.item = {"machine": m, "benchmark": bn, "param_key": pk, "ratio": c.ratio,
                  "abs_ratio": float(np.median(c.h.samples) / np.median(c.b.samples))}
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
    """Measured in several runs a side, and not slower in every round (:func:`round_ratios`)."""
    c.rounds = round_ratios(c.b, c.h, c.paired)
    if c.rounds is None:
        return None
    c.item["rounds"] = c.rounds
    if min(c.sign * np.log(r) for r in c.rounds) < c.eff / 2:
        c.item["judged"] = ("not slower in every round (head / base per round: "
                            + ", ".join(f"{r:.3f}" for r in c.rounds) + ")")
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


def within_drift(c: Comparison) -> str | None:
    """A series without a reference call of its own, slower by no more than its machine's drift."""
    if c.drift is None or not c.worse <= np.log(c.drift) + c.eff:
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
COMPARE_STEPS: tuple[Step, ...] = (not_slower, p_value, not_in_every_round, within_base_spread, within_drift,
                                   within_noise, clock, changed_machine, regression)


def compare(v: Verdict, cfg: Settings, eff: float, key: tuple, b: Side, h: Side, xs: np.ndarray,
            ys: np.ndarray, machine_changed: bool = False, model: noisemod.Noise | None = None,
            stat: str = "median", paired: bool = False, drift: float | None = None) -> None:
    """One series with enough valid samples on both sides, through :data:`COMPARE_STEPS`: a regression,
    a clock change, a slowdown within the series' run-to-run noise (``model``, from its history) or not
    seen in every round, a slowdown of the whole host (``drift``: the machine's reference moved, and
    this series has no reference of its own to be judged against), or nothing.

    ``paired``: ``xs`` and ``ys`` are op / reference (host series); the item still shows µs."""
    c = Comparison(cfg, eff, key, b, h, xs, ys, machine_changed, model, stat, paired, drift)
    where = next(w for step in COMPARE_STEPS if (w := step(c)) is not None)
    if where:
        getattr(v, where).append(c.item)
