"""The gate's rules one at a time (xrt.track.gate_rules, gate_compare), on typed sides built here,
and the docs' list of them in the code's order. The whole gate on ingested files is tests/test_track_gate*.py."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import ROOT

from xrt.track import gate, gate_compare, gate_rules
from xrt.track.gate_data import Pair, Side

KEY = ("m1", "bench_x.Op.time", "64")
BASE, HEAD = "a" * 40, "b" * 40


def side(samples: list[float], status: str = "ok", files: tuple[str, ...] = ("m1/aaaaaaaa-e.json",),
         versions: tuple[str, ...] = ("v1",), cycles: list[float] | None = None) -> Side:
    s = Side(["64"], "seconds", {status}, list(samples), list(cycles or []), set(versions), None)
    s.files = {f: "e" for f in files}
    return s


def context(threshold: float = 0.05) -> gate_rules.Context:
    v = gate.Verdict(base=BASE, head=HEAD, counts={o.name: 0 for o in gate.OUTCOMES})
    return gate_rules.Context(v, gate.Settings(threshold), float(np.log1p(threshold)), BASE, {})


def samples(level: float, n: int = 10, seed: int = 0) -> list[float]:
    return list(level * (1 + 0.001 * np.random.default_rng(seed).standard_normal(n)))


def test_docs_name_the_rules_and_compare_steps_in_the_code_order():
    text = (ROOT / "docs" / "regressions.md").read_text()
    section = text.split("## The gate's rule", 1)[1].split("\n## ", 1)[0]
    listed = re.findall(r"^\d+\. `(\w+)`", section, re.M)
    assert listed == [f.__name__ for f in (*gate_rules.RULES, *gate_compare.COMPARE_STEPS)]


def test_the_first_rule_that_decides_wins():
    """Two result files at head and failed at head: several-runs, the first rule, decides alone."""
    c = context()
    p = Pair(KEY, None, side(samples(1.0)), side([], "failed", files=("m1/bbbbbbbb-e.json", "m1/bbbbbbbb-e (1).json")))
    assert gate_rules.statuses(p, context()) is gate.FAILED_AT_HEAD
    assert gate_rules.judge_series(p, c) is gate.SEVERAL_RUNS
    assert len(c.v.problems) == 1 and "result files of one commit" in c.v.problems[0]
    assert c.v.counts[gate.SEVERAL_RUNS.name] == 1 and c.v.counts[gate.FAILED_AT_HEAD.name] == 0


@pytest.mark.parametrize("rule", gate_rules.RULES[:-1])
def test_every_rule_but_the_last_passes_a_plain_series_on(rule):
    """A series ok on both sides, same version, enough valid samples: no rule but on_samples decides."""
    c = context()
    assert rule(Pair(KEY, None, side(samples(1.0)), side(samples(1.0, seed=1))), c) is None
    assert c.v.problems == []


def test_version_changed_blocks_with_both_versions_named():
    c = context()
    p = Pair(KEY, None, side(samples(1.0), versions=("v1",)), side(samples(1.0), versions=("v2",)))
    assert gate_rules.judge_series(p, c) is gate.VERSION_CHANGED
    assert "v1 at base" in c.v.problems[0] and "v2 at head" in c.v.problems[0]


@pytest.mark.parametrize(("cycles_head", "listed"), [(1.0, "clock"), (1.3, "regressions")])
def test_compare_places_a_slowdown_by_its_cycles(cycles_head, listed):
    """1.3x slower in time: a clock change where cycles did not move, else a regression."""
    c = context()
    p = Pair(KEY, None, side(samples(1.0), cycles=[1e6] * 10), side(samples(1.3, seed=1),
                                                                      cycles=[1e6 * cycles_head] * 10))
    assert gate_rules.judge_series(p, c) is gate.COMPARED
    lists = {n: getattr(c.v, n) for n in ("regressions", "clock", "within_noise", "with_machine", "changed_machine")}
    assert {n for n, items in lists.items() if items} == {listed}
    assert lists[listed][0]["ratio"] == pytest.approx(1.3, rel=0.01)


def test_compare_lists_nothing_below_the_threshold():
    c = context(threshold=0.5)
    gate_rules.judge_series(Pair(KEY, None, side(samples(1.0)), side(samples(1.3, seed=1))), c)
    assert not (c.v.regressions or c.v.clock or c.v.within_noise or c.v.with_machine or c.v.changed_machine)


def paired_side(us: float, ratio: float, processes: bool = False) -> Side:
    """Two runs (rounds, or processes) of a host series: ``us`` seconds, ``ratio`` times its reference."""
    s = side(samples(us))
    s.paired = samples(ratio)
    s.runs = [((k, k), us, ratio) for k in (1, 2)]
    s.processes = processes
    return s


@pytest.mark.parametrize("processes", [False, True])
def test_slower_against_the_reference_only_is_the_machine_in_rounds_not_in_processes(processes):
    """1.19x against the reference, 1.09x in µs, the machine's references 1.22x: in paired rounds the
    machine moved; in processes measured at other times the reference is what the gate trusts."""
    b, h = paired_side(1e-3, 30.0, processes), paired_side(1.09e-3, 35.7, processes)
    c = gate_compare.Comparison(gate.Settings(0.05), float(np.log1p(0.05)), KEY, b, h, np.asarray(b.paired),
                                np.asarray(h.paired), paired=True, drift=1.22)
    c.rounds, c.item = gate_compare.round_ratios(b, h, True), {}
    assert c.rounds is not None and abs(c.abs_ratio - 1.09) < 0.01
    got = gate_compare.slower_against_the_reference_only(c)
    if processes:
        assert got is None and c.item == {}
    else:
        assert got == "with_machine" and "1.09" in c.item["judged"] and "(1.22x)" in c.item["judged"]
