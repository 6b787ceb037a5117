"""The gate's rules: how one series is judged, as an ordered list of named rules.

Each rule of :data:`RULES` takes a series' two sides (:class:`xrt.track.gate_data.Pair`) and the
comparison's :class:`Context`, and returns the series' :class:`~xrt.track.gate_verdict.Outcome`, or
None to pass it to the next rule (as Otava composes its phases: each named, each checkable on its
own). A series with enough valid samples on both sides goes through
:func:`xrt.track.gate_compare.compare`. ``docs/regressions.md`` ("The gate's rule") names the rules
in this order. Nothing here reads the database (:mod:`xrt.track.gate_data`) or renders the verdict
(:mod:`xrt.track.gate_render`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from xrt.db import result_names
from xrt.track import noise as noisemod
from xrt.track.detect import higher_is_better
from xrt.track.gate_compare import compare, process_sigma, round_ratios, round_sigma
from xrt.track.gate_data import Pair, Side, host_series, like
from xrt.track.gate_verdict import (
    CARRIED,
    COMPARED,
    FAILED_AT_BASE,
    FAILED_AT_HEAD,
    HISTORY,
    INVALID,
    MISSING_AT_HEAD,
    NEW_AT_HEAD,
    SEVERAL_RUNS,
    SKIPPED_AT_HEAD,
    SKIPPED_BOTH,
    TOO_FEW,
    VERSION_CHANGED,
    Outcome,
    Settings,
    Verdict,
)


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
    spread_pool: dict[tuple, float] = field(default_factory=dict)  # (machine, paired) -> between-process σ
    round_pool: dict[tuple, float] = field(default_factory=dict)  # (machine, paired) -> round-to-round σ


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
            p.machine in c.changed, *_noise(c.hist, "paired", p.hkey, b, h, True), paired=True,
            drift=c.v.drift.get(p.machine, (None,))[0],
            spread_prior=c.spread_pool.get((p.machine, True)), round_prior=c.round_pool.get((p.machine, True)))
    return COMPARED


def on_samples(p: Pair, c: Context) -> Outcome | None:
    """Every other series: compared on its samples (:func:`compare`)."""
    drift = c.v.drift.get(p.machine, (None,))[0] if host_series(p.key[1]) else None
    compare(c.v, c.cfg, c.eff, p.key, p.base, p.head, p.xs, p.ys, p.machine in c.changed,
            *_noise(c.hist, "value", p.hkey, p.base, p.head, False), drift=drift,
            spread_prior=c.spread_pool.get((p.machine, False)), round_prior=c.round_pool.get((p.machine, False)))
    return COMPARED


# The fewest degrees of freedom a machine's pooled round-to-round σ is taken from: 4 series in 2
# rounds, or 2 in 3 rounds. The demo's 3 series in 3 rounds (6) had none under a count of 4 series,
# and a series 1.05-1.11x in its three rounds failed the A/A, its own σ of 2 degrees of freedom 3 %.
ROUND_POOL_DF = 4


def _pooled(ps: list[Pair], sigma_of, min_df: int = 1, outlier: float | None = None) -> dict[tuple, float]:
    """The pooled σ of a machine's series, keyed (machine, judged op / reference): the root of their
    variances (``sigma_of(base, head, paired)`` -> (σ, degrees of freedom) or None) averaged by
    degrees of freedom, the usual pooled variance, where they have ``min_df`` degrees of freedom together.
    ``outlier``: a series whose σ is more than that many times the machine's median σ is left out."""
    own_of: dict[tuple, list[tuple[float, int]]] = {}
    for p in ps:
        if p.base is None or p.head is None:
            continue
        paired = bool(p.base.paired and p.head.paired)
        own = sigma_of(p.base, p.head, paired)
        if own is not None:
            own_of.setdefault((p.machine, paired), []).append(own)
    out = {}
    for k, owns in own_of.items():
        if outlier is not None:
            cap = outlier * float(np.median([s for s, _ in owns]))
            owns = [o for o in owns if o[0] <= cap] if cap > 0 else owns
        df = sum(d for _, d in owns)
        if df >= min_df:
            out[k] = float(np.sqrt(sum(s * s * d for s, d in owns) / df))
    return out


# A series whose own round-to-round σ is more than this many times the machine's median σ does not
# widen the pool the machine's steady series are judged by (a Triton-interpreter series on the CPU,
# milliseconds a call, 0.75-2.0x from round to round, took the pool to 14 % and hid a 1.25x plant in
# series that moved 2 % a round); it is judged by its own σ (gate_compare.within_round_spread).
ROUND_OUTLIER = 3.0


def round_spread_pool(ps: list[Pair]) -> dict[tuple, float]:
    """The pooled round-to-round σ of a machine's series measured in paired rounds (:func:`round_sigma`),
    where they have :data:`ROUND_POOL_DF` degrees of freedom together, less the outliers
    (:data:`ROUND_OUTLIER`). Two rounds give a series one degree of freedom; the machine's series
    together say how far a round moves them."""
    return _pooled(ps, round_sigma, ROUND_POOL_DF, ROUND_OUTLIER)


def process_spread_pool(ps: list[Pair]) -> dict[tuple, float]:
    """The pooled between-process σ of a machine's series measured in processes (:func:`process_sigma`).
    Whole processes move a machine's host and compiled series (1.15-1.5x on two of three H100 hosts),
    and 3 processes a side give one series 4 degrees of freedom only: in an A/A pair a series' own σ,
    and even that of its like series (the other shapes), came out at half the true one.
    :func:`xrt.track.gate_compare.within_process_spread` raises a series' own σ to it."""
    return _pooled(ps, process_sigma)


def one_process(p: Pair) -> bool:
    """A host series measured in one process a side: how far a whole process moves it is unseen."""
    return (host_series(p.key[1]) and p.base is not None and p.head is not None
            and len(p.base.runs) == 1 and len(p.head.runs) == 1)


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
    single = one_process(p)
    for lst, n in zip(_listed(v), marks):
        for item in lst[n:]:
            item["env"] = p.env  # which environment slowed down, where they are judged apart
            if single:
                item.setdefault("processes", "one process a side (xrt bench run --processes N shows the "
                                "between-process spread)")
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
