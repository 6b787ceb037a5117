"""The gate's host series against their reference call, machine drift, and the paired rounds: on asv
result files with ``.xrt`` sidecars, ingested for real."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from xrt.cli import main  # noqa: E402
from xrt.db import result_names, sidecar_keys  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402
from xrt.track import synth  # noqa: E402

HOST = "bench_host.Square.time_host"
DEVICE = "bench_ops.Square.time_op"
PARAMS = [["'4096'"], ["'float32'"], ["'torch'"], ["'default'"]]
MACHINE = "gpu-host"


def _benchmarks(root):
    root.mkdir(parents=True, exist_ok=True)
    spec = {"type": "time", "unit": "seconds", "params": PARAMS, "param_names": ["shape", "dtype", "provider",
                                                                                  "config"], "version": "v1"}
    (root / "benchmarks.json").write_text(json.dumps({HOST: {"name": HOST, **spec}, DEVICE: {"name": DEVICE, **spec},
                                                      "version": 2}))
    (root / MACHINE).mkdir(exist_ok=True)
    (root / MACHINE / "machine.json").write_text(json.dumps({"machine": MACHINE, "os": "Linux", "arch": "x86_64",
                                                             "cpu": "t", "num_cpu": "16", "ram": "1", "version": 1}))


def write(root, commit, host, ref, device, name=None, rounds_of=None):
    """One run of ``commit``: the host series (``host`` samples, ``ref`` beside them or None) and a
    device series; ``name``: the result file's name (default asv's)."""
    _benchmarks(root)
    rows = {}
    for bn, smp in ((HOST, host), (DEVICE, device)):
        row = synth._row(list(smp))
        row[1] = PARAMS
        rows[bn] = row
    name = name or result_names.result_file_name(commit, "existing-py")
    d = {"commit_hash": commit, "env_name": "existing-py", "date": 1_700_000_000_000, "params": {"machine": MACHINE},
         "python": "3.12", "requirements": {}, "env_vars": {}, "result_columns": synth.COLUMNS, "results": rows,
         "durations": {}, "version": 2}
    f = root / MACHINE / name
    f.write_text(json.dumps(d))
    params = ["'4096'", "'float32'", "'torch'", "'default'"]
    cases = [{"benchmark": HOST, "params": params, "series": "host", "samples_s": list(host),
              "cycles": [None] * len(host), **({sidecar_keys.CASE_REF_SAMPLES: list(ref)} if ref is not None else {})},
             {"benchmark": DEVICE, "params": params, "series": "device", "samples_s": list(device)}]
    side = {sidecar_keys.SCHEMA_KEY: sidecar_keys.SCHEMA, sidecar_keys.COMMIT: commit,
            sidecar_keys.RESULT_FILE: f.name, sidecar_keys.CASES: cases}
    f.with_name(f.name[:-5] + sidecar_keys.SUFFIX).write_text(json.dumps(side))


def lognormal(rng, level, n=40, cv=0.03):
    return list(level * rng.lognormal(0, cv, n))


@pytest.fixture
def world(tmp_path):
    repo = tmp_path / "repo"
    commits = synth.git_history(repo, 3)
    return repo, commits, tmp_path / "results", tmp_path / "xrt.duckdb", np.random.default_rng(11)


def gate(db, repo, base, head, capsys):
    code = main(["gate", "--db", str(db), "--repo", str(repo), "--base", base, "--head", head, "--no-history"])
    return code, capsys.readouterr().out


def test_a_host_that_got_twice_as_slow_is_named_drift_not_a_regression(world, capsys):
    repo, (c0, c1, c2), root, db, rng = world
    write(root, c1, lognormal(rng, 10e-6), lognormal(rng, 5e-6), lognormal(rng, 4e-6))
    write(root, c2, lognormal(rng, 20e-6), lognormal(rng, 10e-6), lognormal(rng, 4e-6))  # everything 2x on the host
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 0, out
    took = re.search(r"machine drift on gpu-host: the reference call took ([\d.]+)x its base time", out)
    assert took and 1.9 < float(took[1]) < 2.1, out
    assert "moved with the machine (not failing): bench_host.Square.time_host" in out


def test_without_the_reference_the_same_drift_fails_the_gate(world, capsys):
    repo, (c0, c1, c2), root, db, rng = world
    write(root, c1, lognormal(rng, 10e-6), None, lognormal(rng, 4e-6))
    write(root, c2, lognormal(rng, 20e-6), None, lognormal(rng, 4e-6))
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 1 and f"REGRESSION {HOST}" in out, out


def test_a_real_host_slowdown_under_drift_still_fails(world, capsys):
    repo, (c0, c1, c2), root, db, rng = world
    write(root, c1, lognormal(rng, 10e-6), lognormal(rng, 5e-6), lognormal(rng, 4e-6))
    # the host 2x slower, and the op 10 µs dearer on top: 1.5x against the reference
    write(root, c2, lognormal(rng, 30e-6), lognormal(rng, 10e-6), lognormal(rng, 4e-6))
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 1, out
    line = next(ln for ln in out.splitlines() if ln.startswith(f"REGRESSION {HOST}"))
    assert 1.4 < float(line.split("] ")[1].split()[0]) < 1.6  # the ratio against the reference
    assert f"REGRESSION {DEVICE}" not in out


def rounds(root, base, head, base_levels, head_levels, rng):
    """Two rounds, each a result file per commit named as xrt.orchestrate.paired names them."""
    for k, (b, h) in enumerate(zip(base_levels, head_levels), 1):
        for commit, level in ((base, b), (head, h)):
            name = result_names.round_name(result_names.result_file_name(commit, "existing-py"), k)
            write(root, commit, lognormal(rng, 10e-6), lognormal(rng, 5e-6), lognormal(rng, level, cv=0.01), name=name)


def test_paired_rounds_a_slowdown_in_one_round_alone_does_not_fail(world, capsys):
    repo, (c0, c1, c2), root, db, rng = world
    rounds(root, c1, c2, [4e-6, 4e-6], [4.8e-6, 4e-6], rng)  # head's first process ran 20 % slow, the second not
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 0, out
    assert "not slower in every round (head / base per round: 1.2" in out


def test_paired_rounds_a_slowdown_in_every_round_fails(world, capsys):
    repo, (c0, c1, c2), root, db, rng = world
    rounds(root, c1, c2, [4e-6, 4e-6], [4.8e-6, 4.8e-6], rng)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 1 and f"REGRESSION {DEVICE}" in out, out


def test_five_rounds_one_slow_base_process_does_not_pass_a_slowdown(world, capsys):
    """From five rounds the round rules set the extreme round aside: head 1.4x in four rounds, and
    the base's process of round 3 ran 1.5x slow (head / base 0.93 there), as a busy neighbour does."""
    repo, (c0, c1, c2), root, db, rng = world
    rounds(root, c1, c2, [4e-6, 4e-6, 6e-6, 4e-6, 4e-6], [5.6e-6] * 5, rng)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 1 and f"REGRESSION {DEVICE}" in out, out


def test_five_rounds_a_slowdown_in_three_alone_does_not_fail(world, capsys):
    """Head 1.4x in three rounds of five (its median 1.4x), as fast as base in the other two: a process
    flipping between two levels, not slower in every round but one."""
    repo, (c0, c1, c2), root, db, rng = world
    rounds(root, c1, c2, [4e-6] * 5, [5.6e-6, 4e-6, 5.6e-6, 4e-6, 5.6e-6], rng)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 0, out
    assert "not slower in every round but one (head / base per round: 1.4" in out, out


def test_five_noisy_rounds_of_a_lone_series_are_judged_against_their_spread(world, capsys):
    """The device series is its machine's only paired series of its kind here: five rounds give it 4
    degrees of freedom, enough for a pool of its own, so its spread is judged (trimmed: 1.04-1.30x in
    the middle rounds, t well under 4). With the trimmed degrees of freedom (2) it had no pool, skipped
    the spread, and failed the gate."""
    repo, (c0, c1, c2), root, db, rng = world
    rounds(root, c1, c2, [4e-6] * 5, [4e-6 * r for r in (1.03, 1.30, 1.04, 1.06, 1.45)], rng)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 0, out
    assert "within the round-to-round spread (5 rounds, the 3 between the extremes" in out, out


def test_five_base_runs_and_one_head_run_are_no_rounds():
    """Base measured five times, head once: the five head / base pairs are not rounds (no round spread
    and nothing trimmed); five runs a side are."""
    from xrt.track.gate_compare import round_logs
    from xrt.track.gate_data import Side

    def side(values):
        return Side(unit="seconds", params=[], runs=[((k, k), v, v) for k, v in enumerate(values)])

    assert round_logs(side([1.0] * 5), side([1.3]), True) is None
    assert round_logs(side([1.0] * 5), side([1.3] * 5), True) is not None


def test_trimmed_rounds_are_yuens():
    """Five rounds: the mean of the middle three, σ from the winsorized five; four: plain."""
    from xrt.track.gate_compare import trimmed

    d = np.log([1.30, 1.18, 1.53, 1.42, 1.48])
    mean, sigma, kept = trimmed(d)
    s = np.sort(d)
    w = np.array([s[1], s[1], s[2], s[3], s[3]])
    se = np.sqrt(np.sum((w - w.mean()) ** 2) / (3 * 2))  # Yuen: the winsorized squares over h (h - 1)
    assert mean == pytest.approx(s[1:4].mean()) and kept == 3
    assert sigma / np.sqrt(3) == pytest.approx(se)
    m4, s4, kept4 = trimmed(d[:4])
    assert m4 == pytest.approx(d[:4].mean()) and s4 == pytest.approx(np.std(d[:4], ddof=1)) and kept4 == 4
    one_wild = np.log([1.4, 1.41, 0.9, 1.39, 1.4])  # one round out: the trimmed σ stays small
    assert trimmed(one_wild)[1] < 0.02 < np.std(one_wild, ddof=1)


def host_rounds(root, base, head, head_host, head_ref, rng):
    """Two rounds: base's host series 10 µs beside a 5 µs reference, head's ``head_host`` beside
    ``head_ref`` (seconds), in both rounds; the device series unchanged."""
    for k in (1, 2):
        for commit, host, ref in ((base, 10e-6, 5e-6), (head, head_host, head_ref)):
            name = result_names.round_name(result_names.result_file_name(commit, "existing-py"), k)
            write(root, commit, lognormal(rng, host, cv=0.01), lognormal(rng, ref, cv=0.01),
                  lognormal(rng, 4e-6, cv=0.01), name=name)


def test_paired_rounds_slower_only_against_a_reference_that_ran_fast_passes(world, capsys):
    """Head's reference ran 16 % fast in both rounds, its op 3 % slower in µs: 1.23x against the
    reference. Side by side, a slower op is slower in µs too: the machine moved, not the code."""
    repo, (c0, c1, c2), root, db, rng = world
    host_rounds(root, c1, c2, 10.3e-6, 4.2e-6, rng)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 0, out
    line = next(ln for ln in out.splitlines() if f"{HOST} ['4096'" in ln)
    assert line.startswith("moved with the machine (not failing)"), line
    assert re.search(r"\] 1\.0[1-5]\d in µs, 1\.[12]\d\d against the reference", line), line


def test_paired_rounds_slower_in_us_and_against_the_reference_fails(world, capsys):
    repo, (c0, c1, c2), root, db, rng = world
    host_rounds(root, c1, c2, 13e-6, 5e-6, rng)  # 1.3x in µs beside an unmoved reference
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 1 and f"REGRESSION {HOST} ['4096'" in out, out


def test_round_files_are_runs_of_their_own(world):
    repo, (c0, c1, c2), root, db, rng = world
    rounds(root, c1, c2, [4e-6, 4e-6], [4e-6, 4e-6], rng)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    n = con.execute("SELECT count(*) FROM runs").fetchone()[0]
    refs = con.execute(f"SELECT len(ref_samples) FROM results WHERE benchmark = '{HOST}'").fetchall()
    assert n == 4 and refs == [(40,)] * 4


def test_paired_order_alternates():
    from xrt.orchestrate.paired import order

    assert order(["a", "b"], 3) == [(1, "a"), (1, "b"), (2, "b"), (2, "a"), (3, "a"), (3, "b")]
    with pytest.raises(ValueError, match="--rounds 0"):
        order(["a", "b"], 0)


def test_paired_rounds_a_head_within_bases_own_spread_does_not_fail(world, capsys):
    """Base's two processes read 4.0 and 4.6 µs (a series that flips between levels): a head at 4.6 and
    4.9 is slower in every round, but not beyond what base itself does from process to process."""
    repo, (c0, c1, c2), root, db, rng = world
    rounds(root, c1, c2, [4e-6, 4.6e-6], [4.6e-6, 4.9e-6], rng)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 0, out
    assert "within base's own run-to-run spread" in out


# -- one process a side: the like series' pooled noise ------------------------------------------

SHAPES = ["'4096'", "'65536'", "'1048576'", "'16777216'"]


def write_shapes(root, commit, ratios, rng, name=None):
    """One run of ``commit``: the host series at the first ``len(ratios)`` of :data:`SHAPES`, op /
    reference = ``ratios`` (``name``: the result file's name, default asv's)."""
    root.mkdir(parents=True, exist_ok=True)
    shapes = SHAPES[:len(ratios)]
    grid = [shapes, ["'float32'"], ["'triton'"], ["'default'"]]
    spec = {"name": HOST, "type": "time", "unit": "seconds", "params": grid,
            "param_names": ["shape", "dtype", "provider", "config"], "version": "v1"}
    (root / "benchmarks.json").write_text(json.dumps({HOST: spec, "version": 2}))
    (root / MACHINE).mkdir(exist_ok=True)
    (root / MACHINE / "machine.json").write_text(json.dumps({"machine": MACHINE, "os": "Linux", "arch": "x86_64",
                                                             "cpu": "t", "num_cpu": "16", "ram": "1", "version": 1}))
    refs = [lognormal(rng, 10e-6, cv=0.01) for _ in shapes]
    ops = [[r * q * rng.lognormal(0, 0.01) for r in ref] for ref, q in zip(refs, ratios)]
    rows = [synth._row(s) for s in ops]
    row = [[r[0][0] for r in rows], grid, "v1", 1_700_000_000_000, 1.0,
           *[[r[k][0] for r in rows] for k in range(5, 11)], [r[11][0] for r in rows]]
    name = name or result_names.result_file_name(commit, "existing-py")
    f = root / MACHINE / name
    f.write_text(json.dumps({"commit_hash": commit, "env_name": "existing-py", "date": 1_700_000_000_000,
                             "params": {"machine": MACHINE}, "python": "3.12", "requirements": {}, "env_vars": {},
                             "result_columns": synth.COLUMNS, "results": {HOST: row}, "durations": {}, "version": 2}))
    cases = [{"benchmark": HOST, "params": [s, "'float32'", "'triton'", "'default'"], "series": "host",
              "samples_s": op, "cycles": [None] * len(op), sidecar_keys.CASE_REF_SAMPLES: ref}
             for s, op, ref in zip(shapes, ops, refs)]
    f.with_name(f.name[:-5] + sidecar_keys.SUFFIX).write_text(json.dumps(
        {sidecar_keys.SCHEMA_KEY: sidecar_keys.SCHEMA, sidecar_keys.COMMIT: commit, sidecar_keys.RESULT_FILE: f.name,
         sidecar_keys.CASES: cases}))


@pytest.fixture
def history(tmp_path):
    """Five commits of history (the last is the base), one process each: the other shapes' op / reference
    moves 15 % from process to process, the first shape's happened to hold still."""
    repo, rng = tmp_path / "repo", np.random.default_rng(5)
    commits = synth.git_history(repo, 6)
    root = tmp_path / "results"
    for c in commits[:5]:
        write_shapes(root, c, [2.0 * rng.lognormal(0, 0.005)] + list(2.0 * rng.lognormal(0, 0.15, 3)), rng)
    return repo, commits, root, tmp_path / "xrt.duckdb", rng


def test_one_process_a_side_a_flip_within_like_series_noise_passes(history, capsys):
    repo, commits, root, db, rng = history
    write_shapes(root, commits[5], [2.7, 2.0, 2.0, 2.0], rng)  # 1.35x: how far a like series' process moves
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, commits[4], commits[5], capsys)
    assert code == 0, out
    assert "raised toward like series'" in out, out


def test_one_process_a_side_a_large_slowdown_still_fails(history, capsys):
    repo, commits, root, db, rng = history
    write_shapes(root, commits[5], [6.0, 2.0, 2.0, 2.0], rng)  # 3x against the reference
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, commits[4], commits[5], capsys)
    assert code == 1 and f"REGRESSION {HOST} ['4096'" in out, out


# -- paired rounds on a busy machine: the machine's pooled round-to-round spread -------------------

# head / base per round of each shape: on a busy 2-core runner every series moves by its own 5-20 % from
# round to round (a CPU A/A pair of the protocol); the first shape happened to read slower in both rounds.
BUSY_ROUNDS = ([1.06, 1.12, 0.90, 1.10], [1.09, 0.92, 1.08, 0.95])


def busy_rounds(root, base, head, first, rng):
    """Two rounds of base and head (files named as xrt.orchestrate.paired names them): base's op /
    reference 2.0 at every shape, head's moved by :data:`BUSY_ROUNDS`, its first shape by ``first``."""
    for k, moves in enumerate(BUSY_ROUNDS, 1):
        for commit, ratios in ((base, [2.0] * 4), (head, [2.0 * m for m in [first[k - 1], *moves[1:]]])):
            name = result_names.round_name(result_names.result_file_name(commit, "existing-py"), k)
            write_shapes(root, commit, ratios, rng, name=name)


def test_paired_rounds_a_shift_within_the_machines_round_spread_passes(world, capsys):
    repo, (c0, c1, c2), root, db, rng = world
    busy_rounds(root, c1, c2, BUSY_ROUNDS[0][:1] + BUSY_ROUNDS[1][:1], rng)  # 1.06 and 1.09: slower in both
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 0, out
    line = next(ln for ln in out.splitlines() if f"{HOST} ['4096'" in ln)
    assert "within the round-to-round spread (2 rounds, σ 11" in line, line  # σ pooled over the 4 shapes


def test_paired_rounds_a_real_slowdown_beyond_the_round_spread_still_fails(world, capsys):
    repo, (c0, c1, c2), root, db, rng = world
    busy_rounds(root, c1, c2, [2.0, 2.1], rng)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 1 and f"REGRESSION {HOST} ['4096'" in out, out
    assert out.count("REGRESSION ") == 1, out


# head / base per round of three series in three rounds, as a CPU demo's A/A pair read them: the first
# slower in all three rounds (1.05-1.11x), the others moving as far either way.
DEMO_ROUNDS = ([1.069, 1.052, 1.114], [0.988, 1.032, 1.065], [1.114, 1.014, 0.946])


def demo_rounds(root, base, head, first, rng):
    """Three rounds of base and head, three series: base's op / reference 2.0, head's moved by
    :data:`DEMO_ROUNDS`, its first series by ``first`` instead."""
    for k in range(3):
        moves = [first[k], DEMO_ROUNDS[1][k], DEMO_ROUNDS[2][k]]
        for commit, ratios in ((base, [2.0] * 3), (head, [2.0 * m for m in moves])):
            name = result_names.round_name(result_names.result_file_name(commit, "existing-py"), k + 1)
            write_shapes(root, commit, ratios, rng, name=name)


def test_three_rounds_of_three_series_judge_against_their_pooled_spread(world, capsys):
    repo, (c0, c1, c2), root, db, rng = world
    demo_rounds(root, c1, c2, DEMO_ROUNDS[0], rng)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 0, out  # 3 series of 2 degrees of freedom each: 6, a pooled σ
    line = next(ln for ln in out.splitlines() if f"{HOST} ['4096'" in ln)
    assert "within the round-to-round spread (3 rounds, σ " in line, line


def test_three_rounds_of_three_series_a_real_slowdown_still_fails(world, capsys):
    repo, (c0, c1, c2), root, db, rng = world
    demo_rounds(root, c1, c2, [1.5, 1.45, 1.55], rng)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 1 and f"REGRESSION {HOST} ['4096'" in out, out
    assert out.count("REGRESSION ") == 1, out


def test_gate_paired_measures_through_the_orchestration_layer(world, capsys, monkeypatch):
    """`xrt gate` is the tracker's; what --paired measures first is xrt.orchestrate's, given to the gate's
    parser when the xrt command registers the orchestration layer's commands."""
    from xrt.bench.runner import BenchError
    from xrt.orchestrate import paired

    repo, commits, _, db, _ = world
    seen = []

    def measure(repo_, base, heads, out, **kw):
        seen.append((base, heads))
        raise BenchError("stopped before measuring")

    monkeypatch.setattr(paired, "measure", measure)
    code = main(["gate", "--paired", "--db", str(db), "--repo", str(repo), "--base", commits[0],
                 "--head", commits[1]])
    out = capsys.readouterr().out
    assert code == 2 and seen == [(commits[0], [commits[1]])]
    assert "cannot judge: paired measurement: stopped before measuring" in out, out


def test_gate_paired_without_the_orchestration_layer_says_so(world, capsys):
    """A parser with only the tracker's commands: --paired is one line naming what is missing, exit 2."""
    import argparse

    from xrt.track import cli as track_cli

    repo, commits, _, db, _ = world
    parser = argparse.ArgumentParser(prog="xrt")
    track_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["gate", "--paired", "--db", str(db), "--repo", str(repo), "--base", commits[0],
                              "--head", commits[1]])
    assert args.func(args) == 2
    assert "cannot judge: --paired: measuring needs xrt.orchestrate's commands" in capsys.readouterr().out


NOISY_ROUNDS = ([1.25, 1.26, 1.24, 1.25, 1.26],  # steady, 1.25x in every round: a real slowdown
                [1.0, 1.01, 0.99, 1.0, 1.01],  # steady, unchanged
                [1.06, 2.04, 1.96, 0.82, 0.75])  # a Triton-interpreter series on the CPU moves like this


def test_a_noisy_series_does_not_hide_a_steady_slowdown(world, capsys):
    """Five rounds of three series. The noisy one (its σ more than ROUND_OUTLIER times the machine's
    median) is left out of the machine's pool and judged by its own σ; the steady 1.25x is named.
    Pooled with the noisy series (a CI run of the gate protocol), the pool's σ was 14 % and the
    steady 1.25x passed as within the round-to-round spread."""
    repo, (c0, c1, c2), root, db, rng = world
    for k in range(5):
        for commit, ratios in ((c1, [2.0] * 3), (c2, [2.0 * s[k] for s in NOISY_ROUNDS])):
            name = result_names.round_name(result_names.result_file_name(commit, "existing-py"), k + 1)
            write_shapes(root, commit, ratios, rng, name=name)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code, out = gate(db, repo, c1, c2, capsys)
    assert code == 1 and out.count("REGRESSION ") == 1, out
    assert f"REGRESSION {HOST} [{SHAPES[0]}" in out, out
