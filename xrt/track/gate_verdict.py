"""The gate's verdict and knobs: the exit codes, each series' :class:`Outcome`, the :class:`Verdict`
a comparison fills, and the validated :class:`Settings`. Shared by the rules
(:mod:`xrt.track.gate_rules`, :mod:`xrt.track.gate_compare`) and the rendering
(:mod:`xrt.track.gate_render`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from xrt.track import stats

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
