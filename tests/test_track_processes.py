"""History mode with several processes a commit (``xrt bench run --processes N``): the gate judges the
host and compiled series by the spread between a commit's processes.

The fixtures have the shape of real runs: one result file per process (``-proc<k>``, as the runner names
them), with ``.xrt`` sidecars holding each host sample's reference call; two ops, each with a host and a
compiled series at four shapes. Each process's op / reference level is drawn with a between-process
factor of up to 1.5x (what two processes of the same code gave on two of three H100 hosts), while the
samples inside one process are tight (1 %)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("duckdb")
pytest.importorskip("pyarrow")

from xrt.cli import main  # noqa: E402
from xrt.db import result_names, sidecar_keys  # noqa: E402
from xrt.db.ingest import ingest  # noqa: E402
from xrt.track import synth  # noqa: E402

MACHINE = "h100"
SHAPES = ["'4096'", "'65536'", "'1048576'", "'16777216'"]
OPS = ("Square", "Softmax")
BENCHES = [f"bench_{s}.{op}.time_{s}" for op in OPS for s in ("host", "compiled")]
LEVEL = {b: 2.0 + i * 0.4 for i, b in enumerate(BENCHES)}  # op / reference of each series, before the factor
FACTOR = 1.5  # the largest between-process factor measured on the H100
N = 40  # samples a case


def grid(shape_list=SHAPES):
    return [list(shape_list), ["'float32'"], ["'triton'"], ["'default'"]]


def write_process(root, commit, k, rng, plant=None, ref_level=10e-6, op_scale=1.0):
    """One process of ``commit`` (``k``: its number, None: asv's plain name). Every series' op / reference
    is its level times a factor drawn for this process in [1, 1.5]; ``plant``: {benchmark: factor} on
    top (code that got slower). ``ref_level``, ``op_scale``: the host itself slower (drift)."""
    root.mkdir(parents=True, exist_ok=True)
    g = grid()
    spec = {"type": "time", "unit": "seconds", "params": g, "param_names": ["shape", "dtype", "provider", "config"],
            "version": "v1"}
    (root / "benchmarks.json").write_text(json.dumps({**{b: {"name": b, **spec} for b in BENCHES}, "version": 2}))
    (root / MACHINE).mkdir(exist_ok=True)
    (root / MACHINE / "machine.json").write_text(json.dumps({"machine": MACHINE, "os": "Linux", "arch": "x86_64",
                                                             "cpu": "t", "num_cpu": "16", "ram": "1", "version": 1}))
    results, cases = {}, []
    for b in BENCHES:
        refs = [list(ref_level * rng.lognormal(0, 0.01, N)) for _ in SHAPES]
        ratios = [LEVEL[b] * np.exp(rng.uniform(0, np.log(FACTOR))) * (plant or {}).get(b, 1.0) for _ in SHAPES]
        ops = [[r * q * op_scale * rng.lognormal(0, 0.01) for r in ref] for ref, q in zip(refs, ratios)]
        rows = [synth._row(s) for s in ops]
        results[b] = [[r[0][0] for r in rows], g, "v1", 1_700_000_000_000, 1.0,
                      *[[r[i][0] for r in rows] for i in range(5, 11)], [r[11][0] for r in rows]]
        cases += [{"benchmark": b, "params": [s, "'float32'", "'triton'", "'default'"], "series": b.split("_")[1].split(
            ".")[0], "samples_s": op, "cycles": [None] * len(op), sidecar_keys.CASE_REF_SAMPLES: ref}
                  for s, op, ref in zip(SHAPES, ops, refs)]
    name = result_names.result_file_name(commit, "existing-py")
    if k is not None:
        name = result_names.process_name(name, k)
    f = root / MACHINE / name
    f.write_text(json.dumps({"commit_hash": commit, "env_name": "existing-py", "date": 1_700_000_000_000,
                             "params": {"machine": MACHINE}, "python": "3.12", "requirements": {}, "env_vars": {},
                             "result_columns": synth.COLUMNS, "results": results, "durations": {}, "version": 2}))
    f.with_name(f.name[:-5] + sidecar_keys.SUFFIX).write_text(json.dumps(
        {sidecar_keys.SCHEMA_KEY: sidecar_keys.SCHEMA, sidecar_keys.COMMIT: commit, sidecar_keys.RESULT_FILE: f.name,
         sidecar_keys.CASES: cases}))


def measure(root, commit, processes, rng, **kw):
    """``commit`` as ``xrt bench run --processes N`` stores it: one file a process, named by its number
    where there are several (one process: asv's own name, as before)."""
    for k in range(1, processes + 1):
        write_process(root, commit, k if processes > 1 else None, rng, **kw)


@pytest.fixture
def world(tmp_path):
    repo = tmp_path / "repo"
    return repo, synth.git_history(repo, 2), tmp_path / "results", tmp_path / "xrt.duckdb"


def gate(world, capsys, base_kw=None, head_kw=None, processes=3, seed=0):
    repo, (base, head), root, db = world
    rng = np.random.default_rng(seed)
    measure(root, base, processes, rng, **(base_kw or {}))
    measure(root, head, processes, rng, **(head_kw or {}))
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    code = main(["gate", "--db", str(db), "--repo", str(repo), "--base", base, "--head", head, "--no-history"])
    return code, capsys.readouterr().out


def named(out):
    return [ln for ln in out.splitlines() if ln.startswith("REGRESSION ")]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_aa_three_processes_a_side_passes(world, capsys, seed):
    code, out = gate(world, capsys, seed=seed)
    assert code == 0, out
    assert not named(out)
    assert "between-process spread" in out or "run-to-run spread" in out or "every round" in out, out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_aa_one_process_a_side_fails_and_says_it_is_one_process(world, capsys, seed):
    """The same A/A with one process a side: the factor between two processes looks like code."""
    code, out = gate(world, capsys, processes=1, seed=seed)
    assert code == 1, out
    assert named(out) and all("one process a side" in ln for ln in named(out)), out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_2x_host_plant_fails_with_three_a_side_naming_only_that_op(world, capsys, seed):
    host = "bench_host.Square.time_host"
    code, out = gate(world, capsys, head_kw={"plant": {host: 2.0}}, seed=seed)
    assert code == 1, out
    lines = named(out)
    assert {ln.split()[1] for ln in lines} == {host}, out
    assert len(lines) == len(SHAPES), out
    assert all("3 processes at base, 3 at head" in ln for ln in lines), out


def test_machine_drift_is_named_with_processes(world, capsys):
    """The host 2x slower at head (the reference call and the op alike): drift, not code."""
    code, out = gate(world, capsys, head_kw={"ref_level": 20e-6})
    assert code == 0, out
    assert "machine drift on h100: the reference call took" in out, out


def test_process_files_are_runs_of_their_own_and_not_a_copy(world, capsys):
    repo, (base, head), root, db = world
    rng = np.random.default_rng(0)
    measure(root, base, 3, rng)
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 3
    assert con.execute("SELECT count(*) FROM ingest_errors").fetchone()[0] == 0


def test_with_history_of_processes_the_aa_passes_and_the_plant_fails(tmp_path, capsys):
    """Five commits of history, each in 3 processes (the noise model learns from each commit's median
    process): the A/A still passes and the 2x host plant still fails, naming that op alone."""
    repo, rng = tmp_path / "repo", np.random.default_rng(7)
    commits = synth.git_history(repo, 7)
    root, db = tmp_path / "results", tmp_path / "xrt.duckdb"
    for c in commits[:5]:
        measure(root, c, 3, rng)
    measure(root, commits[5], 3, rng)  # A/A head of commits[4]
    measure(root, commits[6], 3, rng, plant={"bench_host.Square.time_host": 2.0})
    ingest(root, db, repo=str(repo), echo=lambda s: None)
    verdicts = []
    for head in commits[5:]:
        code = main(["gate", "--db", str(db), "--repo", str(repo), "--base", commits[4], "--head", head,
                     "--no-history"])
        verdicts.append((code, capsys.readouterr().out))
    (aa, aa_out), (plant, plant_out) = verdicts
    assert aa == 0 and not named(aa_out), aa_out
    assert plant == 1 and {ln.split()[1] for ln in named(plant_out)} == {"bench_host.Square.time_host"}, plant_out
