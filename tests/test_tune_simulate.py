"""The simulation harness: strategies replayed on a recorded exhaustive journal."""

from __future__ import annotations

import json

from xrt.kernels import spaces
from xrt.tune import search, simulate

H = spaces.space_hash("square.triton")


def journal(tmp_path, times=None, name="j.jsonl", hashes=None):
    cfgs = search.grid("square.triton")
    p = tmp_path / name
    with open(p, "w") as f:
        for i, c in enumerate(cfgs):
            k = search.key(c)
            t = (times or {}).get(k, 10e-6 + i * 1e-6)
            r = {"key": k, "config": c, "status": "timed" if t else "crash", "space_hash": (hashes or {}).get(k, H),
                 "eval": i, "default": i == 0, "strategy": "exhaustive"}
            if t:
                r["median_s"] = t
            f.write(json.dumps(r) + "\n")
    return p, cfgs


def test_exhaustive_replay_finds_the_optimum_where_it_sits(tmp_path):
    keys = [search.key(c) for c in search.grid("square.triton")]
    times = {keys[11]: 5e-6, keys[3]: None}  # the optimum is the 12th config; the 4th crashed
    p, _ = journal(tmp_path, times)
    r = simulate.run(p, ["exhaustive", "random", "model"], seeds=3, within=0.03, target=0.25, batch=1, cap_share=1.0)
    assert r["configs"] == 18 and r["timed"] == 17 and r["optimum"] == keys[11] and r["optimum_s"] == 5e-6
    ex = r["strategies"]["exhaustive"]
    assert ex["evals"] == [12, 12, 12] and ex["median_share"] == 12 / 18 and not ex["meets_target"]
    for s in ("random", "model"):
        st = r["strategies"][s]
        assert all(1 <= e <= 18 for e in st["evals"]) and st["best_within_cap_vs_optimum"] == [1.0] * 3
    again = simulate.run(p, ["random", "model"], seeds=3, within=0.03, target=0.25, batch=1, cap_share=1.0)
    assert [again["strategies"][s]["evals"] for s in ("random", "model")] == \
        [r["strategies"][s]["evals"] for s in ("random", "model")]  # seeded: the same figures
    # batches: a seed is charged the whole batch the optimum came in
    b4 = simulate.run(p, ["exhaustive"], seeds=1, within=0.03, target=0.25, batch=4, cap_share=1.0)
    assert b4["strategies"]["exhaustive"]["evals"] == [12]
    capped = simulate.run(p, ["exhaustive"], seeds=1, within=0.03, target=0.25, batch=1, cap_share=0.5)
    assert capped["strategies"]["exhaustive"]["evals"] == [None] and capped["strategies"]["exhaustive"][
        "median_share"] == 1.0


def test_cli_table_json_exit_status_and_bad_input(tmp_path, capsys):
    keys = [search.key(c) for c in search.grid("square.triton")]
    p, _ = journal(tmp_path, {keys[1]: 1e-6})
    assert simulate.main([str(p), "--seeds", "2", "--batch", "2", "--target", "1", "--cap", "1"]) == 0
    out = capsys.readouterr().out
    assert "| model | " in out and "| random | " in out and "within 3 % of the optimum" in out
    assert simulate.main([str(p), "--seeds", "1", "--json", "--strategy", "exhaustive", "--batch", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["strategies"]["exhaustive"]["evals"] == [2]
    far, _ = journal(tmp_path, {keys[17]: 1e-6}, name="far.jsonl")
    assert simulate.main([str(far), "--seeds", "1", "--strategy", "model", "--target", "0.05",
                          "--cap", "0.05"]) == 1  # not met: exit 1
    capsys.readouterr()
    for args, msg in [([str(tmp_path / "none.jsonl")], "no such journal"),
                      ([str(p), "--strategy", "tpe"], "--strategy 'tpe'"),
                      ([str(p), "--seeds", "0"], "--seeds 0"),
                      ([str(p), "--within", "2"], "--within must be")]:
        assert simulate.main(args) == 2
        assert msg in capsys.readouterr().err
    mixed, _ = journal(tmp_path, name="mixed.jsonl", hashes={keys[2]: "ffff"})
    assert simulate.main([str(mixed)]) == 2 and "2 space hashes" in capsys.readouterr().err
    dead, _ = journal(tmp_path, {k: None for k in keys}, name="dead.jsonl")
    assert simulate.main([str(dead)]) == 2 and "no config was timed" in capsys.readouterr().err


def test_the_h100_journal_without_its_default(capsys):
    """The committed H100 exhaustive journal: its optimum is the default, which every search evaluates
    first; without it, the figure measures the search."""
    from pathlib import Path

    from xrt.tune import simulate

    j = Path(__file__).resolve().parents[1] / ("results/tuned/journal/vm-nvidia-h100-80gb-hbm3-0/"
                                               "matmul.triton-bfloat16-4096x4096x4096.jsonl")
    full = simulate.run(j, ["random"], 3, 0.03, 0.25, 4, 0.5)
    assert full["configs"] == 544 and full["strategies"]["random"]["evals"] == [4, 4, 4]  # the default, at once
    rest = simulate.run(j, ["random"], 3, 0.03, 0.25, 4, 0.5, no_default=True)
    assert rest["configs"] == 543 and rest["optimum_s"] > full["optimum_s"]
    assert rest["without_default"] == full["optimum"]
    assert all(e is None or e > 0 for e in rest["strategies"]["random"]["evals"])
    assert rest["strategies"]["random"]["evals"] != [4, 4, 4]  # seeds start from their own draws
    assert simulate.main([str(j), "--without-default", "--strategy", "random", "--seeds", "2"]) in (0, 1)
    assert "Without the default (`BLOCK_K=64,BLOCK_M=128,BLOCK_N=256" in capsys.readouterr().out
