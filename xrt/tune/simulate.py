"""``python -m xrt.tune.simulate JOURNAL``: replay search strategies on a recorded exhaustive search.

The journal of an exhaustive ``xrt tune`` run holds every config of the (pruned) space with its
time or its failure. Each strategy is replayed against it (a config's "evaluation" is its
recorded outcome, no GPU involved), seeds ``0 .. --seeds - 1``, in batches of ``--batch`` as the
tuner proposes them, and the harness reports, per strategy, how many evaluations it took to find a
config within ``--within`` (3 %) of the optimum, as a share of the space: the median over the seeds,
each seed's figure, and whether the median meets ``--target`` (25 %).

Exit status 0 when ``model`` meets the target, 1 when it does not, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from xrt.tune import search
from xrt.tune.journal import Journal


class SimError(ValueError):
    pass


def load(path: Path) -> tuple[list[dict[str, Any]], dict[str, float | None], dict[str, Any]]:
    """(configs, default first; key -> median_s or None for a failure; facts) of an exhaustive journal."""
    if not path.is_file():
        raise SimError(f"{path}: no such journal")
    j = Journal(path)
    last = j.last()
    if not last:
        raise SimError(f"{path}: no readable record ({j.torn} torn line(s))")
    hashes = {r.get("space_hash") for r in last.values()}
    if len(hashes) > 1:
        raise SimError(f"{path}: records of {len(hashes)} space hashes ({', '.join(map(str, hashes))}); one search a "
                       "journal")
    bad = [k for k, r in last.items() if not isinstance(r.get("config"), dict)]
    if bad:
        raise SimError(f"{path}: record {bad[0]!r} has no config object")
    recs = list(last.values())
    default = next((r for r in recs if r.get("default")), recs[0])
    cfgs = [default["config"]] + [r["config"] for r in recs if r is not default]
    times = {k: (r["median_s"] if r["status"] == "timed" and (r.get("median_s") or 0) > 0 else None)
             for k, r in last.items()}
    if not any(times.values()):
        raise SimError(f"{path}: no config was timed; nothing to find")
    strategies = {r.get("strategy") for r in recs} - {None}
    facts = {"space_hash": hashes.pop(), "configs": len(cfgs), "timed": sum(1 for v in times.values() if v),
             "optimum_s": min(v for v in times.values() if v), "optimum": None, "torn": j.torn,
             "recorded_by": sorted(strategies) or ["unknown"]}
    facts["optimum"] = next(k for k, v in times.items() if v == facts["optimum_s"])
    return cfgs, times, facts


def evals_to_find(strategy: str, cfgs: list[dict[str, Any]], times: dict[str, float | None], seed: int,
                  within: float, batch: int, cap: int) -> tuple[int | None, float]:
    """(evaluations until a config within ``within`` of the optimum was found, or None past ``cap``;
    the best time found within ``cap`` evaluations)."""
    goal = min(v for v in times.values() if v) * (1 + within)
    s = search.make(strategy, cfgs, seed)
    n, best = 0, float("inf")
    while n < cap:
        got = s.propose(min(batch, cap - n))
        if not got:
            break
        for c in got:  # a batch is evaluated together: the tuner learns of them at once
            k = search.key(c)
            v = times.get(k)
            n += 1
            if v:
                best = min(best, v)
        for c in got:
            s.observe(c, times.get(search.key(c)))
        if best <= goal:
            return n, best
    return None, best


def without_default(cfgs: list[dict[str, Any]], times: dict[str, float | None], facts: dict[str, Any]
                    ) -> tuple[list[dict[str, Any]], dict[str, float | None], dict[str, Any]]:
    """The space less its default: the searches start from the default, so where the default is the
    optimum (or near it) every strategy finds it at once and the figure says nothing about the search.
    Each seed then starts from a config drawn by the seed (:func:`_start`)."""
    dk = search.key(cfgs[0])
    rest = {k: v for k, v in times.items() if k != dk}
    if not any(rest.values()):
        raise SimError("the space has no timed config but its default")
    best = min(v for v in rest.values() if v)
    facts = {**facts, "configs": len(cfgs) - 1, "timed": sum(1 for v in rest.values() if v), "optimum_s": best,
             "optimum": next(k for k, v in rest.items() if v == best), "without_default": dk}
    return cfgs[1:], rest, facts


def _start(cfgs: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """``cfgs`` with a config drawn by ``seed`` first (the strategies evaluate the first one first)."""
    import random

    i = random.Random(seed).randrange(len(cfgs))
    return [cfgs[i]] + cfgs[:i] + cfgs[i + 1:]


def run(path: Path, strategies: list[str], seeds: int, within: float, target: float, batch: int,
        cap_share: float, no_default: bool = False) -> dict[str, Any]:
    cfgs, times, facts = load(path)
    if no_default:
        cfgs, times, facts = without_default(cfgs, times, facts)
    n = len(cfgs)
    cap = max(1, min(n, round(cap_share * n)))
    out: dict[str, Any] = {"journal": str(path), **facts, "within": within, "target": target, "batch": batch,
                           "cap": cap, "strategies": {}}
    for strat in strategies:
        runs = [evals_to_find(strat, _start(cfgs, s) if no_default else cfgs, times, s, within, batch, cap)
                for s in range(seeds)]
        shares = [(e / n if e is not None else None) for e, _ in runs]
        # a seed that never got there within the cap counts as the whole space (an upper bound)
        med = statistics.median([x if x is not None else 1.0 for x in shares])
        out["strategies"][strat] = {"evals": [e for e, _ in runs], "shares": shares, "median_share": med,
                                    "median_evals": statistics.median([e if e is not None else n for e, _ in runs]),
                                    "meets_target": med <= target,
                                    "best_within_cap_vs_optimum": [b / facts["optimum_s"] for _, b in runs]}
    return out


def markdown(r: dict[str, Any]) -> str:
    lines = [f"Journal `{r['journal']}` (space hash {r['space_hash']}, recorded by {', '.join(r['recorded_by'])}): "
             f"{r['configs']} configs, {r['timed']} timed; optimum {r['optimum_s'] * 1e6:.2f} us (`{r['optimum']}`).",
             *([f"Without the default (`{r['without_default']}`): the optimum of the rest, each seed starting "
                "from a config it draws.", ""] if r.get("without_default") else []),
             "", f"Evaluations to find a config within {r['within'] * 100:g} % of the optimum, as a share of the "
             f"space (batches of {r['batch']}; a seed not there after {r['cap']} evaluations counts as 100 %):", "",
             "| strategy | median share | median evaluations | per seed | target ≤ "
             f"{r['target'] * 100:g} % |", "| --- | ---: | ---: | --- | --- |"]
    for name, s in r["strategies"].items():
        per = ", ".join("-" if e is None else str(e) for e in s["evals"])
        lines.append(f"| {name} | {s['median_share'] * 100:.1f} % | {s['median_evals']:g} | {per} | "
                     f"{'met' if s['meets_target'] else 'not met'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m xrt.tune.simulate", description=__doc__.split("\n\n")[0])
    p.add_argument("journal", type=Path, help="the journal of an exhaustive xrt tune run (.jsonl)")
    p.add_argument("--strategy", action="append", help="strategies to replay [model and random]")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0 .. N-1 per strategy [5]")
    p.add_argument("--within", type=float, default=0.03, help="how close to the optimum counts as found [0.03]")
    p.add_argument("--target", type=float, default=0.25, help="share of the space the median may use [0.25]")
    p.add_argument("--batch", type=int, default=4, help="configs proposed at once, as --jobs in xrt tune [4]")
    p.add_argument("--cap", type=float, default=0.5, help="stop a seed after this share of the space [0.5]")
    p.add_argument("--without-default", action="store_true",
                   help="search the space less its default (the searches start there: a default at the optimum "
                   "says nothing about the search)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON")
    a = p.parse_args(argv)
    strategies = a.strategy or ["model", "random"]
    try:
        for s in strategies:
            if s not in search.STRATEGIES:
                raise SimError(f"--strategy {s!r}: choose among {', '.join(search.STRATEGIES)}")
        if a.seeds < 1:
            raise SimError(f"--seeds {a.seeds}: at least 1")
        if not 0 <= a.within < 1 or not 0 < a.target <= 1 or not 0 < a.cap <= 1:
            raise SimError("--within must be in [0, 1), --target and --cap in (0, 1]")
        if a.batch < 1:
            raise SimError(f"--batch {a.batch}: at least 1")
        r = run(a.journal, strategies, a.seeds, a.within, a.target, a.batch, a.cap, a.without_default)
    except SimError as e:
        print(f"xrt.tune.simulate: {e}", file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(r, indent=1) + "\n" if a.json else markdown(r))
    m = r["strategies"].get("model")
    return 0 if m is None or m["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
