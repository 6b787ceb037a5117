"""Machine identity and sidecar, diag output, the asv suites and `xrt bench run` on the CPU."""

import dataclasses
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from fake_nvml import FakeNVML

from xrt.bench import diag, machine, specs, suite
from xrt.device import DeviceInfo

H100 = DeviceInfo(kind="cuda", index=1, name="NVIDIA H100 80GB HBM3", compute_capability="9.0", sm_count=132,
                  l2_bytes=50 * 2**20, driver="580.159.04", cuda="13.0", torch="2.11.0", triton="3.6.0",
                  power_limit_w=700.0, max_sm_clock_mhz=1980, host="gpu box")


def test_one_asv_machine_per_gpu():
    assert machine.machine_name(H100) == "gpu-box-nvidia-h100-80gb-hbm3-1"
    assert machine.machine_name(DeviceInfo(kind="cpu", index=0, name="x"), host="ci") == "ci-cpu"
    info = machine.asv_machine_info(H100)
    assert info["machine"] == "gpu-box-nvidia-h100-80gb-hbm3-1" and "NVIDIA H100" in info["cpu"]


def test_sidecar_has_the_gpu_and_software_facts():
    s = machine.sidecar(H100, profile="full")
    for key, want in (("gpu_model", "NVIDIA H100 80GB HBM3"), ("driver", "580.159.04"), ("cuda", "13.0"),
                      ("torch", "2.11.0"), ("triton", "3.6.0"), ("sm_count", 132), ("l2_bytes", 50 * 2**20),
                      ("power_limit_w", 700.0), ("max_sm_clock_mhz", 1980), ("profile", "full")):
        assert s[key] == want, key
    assert {"load1", "cores", "load_per_core"} <= set(s["cpu_load"])
    json.dumps(s)  # serialisable as is


def test_sidecar_names_one_checkout_for_xrt_and_its_kernels():
    """The runner's proof of what was measured: xrt and xrt.kernels load from this one checkout."""
    assert suite._xrt_source() == str(ROOT)


def test_sidecar_records_the_processor_and_the_kernel(monkeypatch):
    cpu = DeviceInfo(kind="cpu", index=0, name="cpu", host="ci")
    monkeypatch.setattr(machine, "_cpu_model", lambda: "AMD EPYC 9654 96-Core Processor")
    monkeypatch.setattr(machine.platform, "release", lambda: "6.8.0-45-generic")
    s = machine.sidecar(cpu)
    assert s["cpu_model"] == "AMD EPYC 9654 96-Core Processor" and s["kernel"] == "6.8.0-45-generic"
    assert s["gpu_model"] is None and s["device_kind"] == "cpu"
    monkeypatch.setattr(machine, "_cpu_model", lambda: None)  # no /proc/cpuinfo: platform's word, else nothing
    monkeypatch.setattr(machine.platform, "processor", lambda: "")
    assert machine.sidecar(cpu)["cpu_model"] is None


def test_params_cover_op_shape_dtype_provider_config(monkeypatch, tmp_path):
    params, names = suite.params_for("square", "full")
    assert names == ["shape", "dtype", "provider", "config"]
    assert "16777216" in params[0] and "cuda" in params[2] and params[3] == ["default"]
    quick, _ = suite.params_for("square", "quick")
    assert quick[0] == ["4096"] and "cuda" not in quick[2]
    # The tuner's top-K configs join the default.
    (tmp_path / "square.json").write_text(json.dumps([{"config": {"BLOCK_SIZE": 2048, "num_warps": 8}}]))
    monkeypatch.setenv("XRT_TUNED_DIR", str(tmp_path))
    assert suite.params_for("square", "full")[0][3] == ["default", "BLOCK_SIZE=2048,num_warps=8"]
    assert suite.parse_config("BLOCK_SIZE=2048,num_warps=8") == {"BLOCK_SIZE": 2048, "num_warps": 8}
    # a tuned GEMM config's boolean knobs come back as booleans, which the tuning space checks
    from xrt.kernels import spaces

    gemm = {**spaces.default("matmul.triton"), "EPILOGUE_SUBTILE": True}
    assert suite.parse_config(suite.config_key(gemm)) == gemm
    assert spaces.check("matmul.triton", suite.parse_config(suite.config_key(gemm))) == gemm
    with pytest.raises(ValueError, match="must look like"):
        suite.parse_shape("4096*4096")


def test_the_grid_does_not_depend_on_the_working_directory(monkeypatch, tmp_path):
    """asv imports the suites in folders of its own (discovery, setup_cache: temporary ones; the
    forkserver: where asv started) and runs a combination by its index in the discovered grid: the
    tuner's configs must come from the checkout, not from the working directory."""
    import xrt

    monkeypatch.delenv("XRT_TUNED_DIR", raising=False)
    root = Path(xrt.__file__).resolve().parents[1]
    assert suite.tuned_dir() == root / "results" / "tuned"
    grids = []
    for cwd in (root, tmp_path):
        monkeypatch.chdir(cwd)
        grids.append(suite.params_for("layernorm_bwd", "full")[0])
    assert grids[0] == grids[1]
    monkeypatch.setenv("XRT_TUNED_DIR", "results/tuned")
    with pytest.raises(ValueError, match="XRT_TUNED_DIR='results/tuned': give an absolute path"):
        suite.tuned_configs("layernorm_bwd")


def test_a_process_that_sees_another_grid_fails_instead_of_replaying(monkeypatch, tmp_path, interpreter):
    """The H100 run of 7d96618: the forkserver saw the tuned configs, discovery did not, and asv filed
    other combinations' samples by index. Such a process must fail its combinations, not replay."""
    monkeypatch.setenv("XRT_BENCH_PROFILE", "full")
    monkeypatch.setenv("XRT_TUNED_DIR", str(tmp_path))
    monkeypatch.setattr(suite, "_REPLAY", {})  # what this test arms stays here
    measured = suite.make_suite("square", "Square", "bench_ops")  # the grid without tuned configs
    cache = {(suite.GRID, "square"): {"params": measured.params},
             ("device", "square", "4096", "float32", "torch", "default"): {"samples": [1e-6] * 10}}
    measured().setup(cache, "4096", "float32", "torch", "default")  # the same grid: replays
    (tmp_path / "square.json").write_text(json.dumps([{"config": {"BLOCK_SIZE": 2048, "num_warps": 8}}]))
    other = suite.make_suite("square", "Square", "bench_ops")
    assert other.params != measured.params
    with pytest.raises(RuntimeError, match=r"grid differs from the one measured \(config: \['BLOCK_SIZE=2048"):
        other().setup(cache, "4096", "float32", "torch", "default")


def test_setup_cache_measures_only_the_pairs_bench_selects(monkeypatch, tmp_path, interpreter):
    """``--bench '^bench_ops\\.(Square|VectorAdd)\\.|^bench_host\\.Square\\.'`` selects square's host series and not
    vector_add's: the one setup_cache measured both ops in both series (ops x series) until the runner
    named the pairs; a benchmark asv runs but the cache lacks fails naming the variables."""
    from xrt.bench import sources

    pairs = sources.pairs_matching(r"^bench_ops\.(Square|VectorAdd)\.|^bench_host\.Square\.", ["square", "vector_add"])
    assert pairs == [("device", "square"), ("device", "vector_add"), ("host", "square")]
    monkeypatch.setenv("XRT_SIDECAR_DIR", str(tmp_path))
    monkeypatch.setenv("XRT_BENCH_PROFILE", "quick")
    monkeypatch.setenv("XRT_BENCH_PAIRS", ",".join(f"{s}:{u}" for s, u in pairs))
    cache = suite.measure_all(["square", "vector_add"], ["device", "host"], pairs=suite.selected_pairs(),
                              log=lambda line: None)
    measured = {k[:2] for k in cache if k[0] != suite.GRID}
    assert measured == set(pairs), measured
    host = suite.make_host_suite("vector_add", "VectorAdd", "bench_host")
    with pytest.raises(RuntimeError, match="not measured by the suites' setup_cache .*XRT_BENCH_PAIRS="):
        host().setup(cache, "4096", "float32", "torch", "default")
    monkeypatch.setenv("XRT_BENCH_PAIRS", "host:square,hots:square")
    with pytest.raises(ValueError, match=r"XRT_BENCH_PAIRS=.*not series:op \(hots:square\)"):
        suite.selected_pairs()


def test_suite_measures_once_and_asv_gets_exactly_those_samples(monkeypatch, tmp_path, interpreter):
    """setup_cache measures every combination in one process; asv's process replays that one's samples."""
    monkeypatch.setenv("XRT_SIDECAR_DIR", str(tmp_path))
    monkeypatch.setenv("XRT_BENCH_PROFILE", "quick")
    monkeypatch.setenv("XRT_BENCH_OPS", "square")
    monkeypatch.setenv("XRT_BENCH_SERIES", "device")
    cls = suite.make_suite("square", "Square", "bench_ops")
    lines = []
    cache = suite.measure_all(suite.selected_ops(), suite.selected_series(), log=lines.append)
    # One setup_cache for every class of both modules: asv keys it by its definition, runs it once.
    for other in (suite.make_suite("softmax", "Softmax", "bench_ops"), suite.make_host_suite("square", "Square", "h")):
        assert other.setup_cache is cls.setup_cache
    assert cls.setup_cache.timeout == suite.CACHE_TIMEOUT
    combos = [("device", "square", *p) for p in itertools.product(*suite.params_for("square")[0])]
    assert sorted(k for k in cache if k[0] != suite.GRID) == sorted(combos)
    # one progress line each, in their order (on the CPU after the rounds' own lines), then the total
    each = [ln for ln in lines if ln.startswith("[suite ")]
    assert [ln.split("]")[0] for ln in each] == [f"[suite {i}/{len(combos)}" for i in range(1, len(combos) + 1)]
    assert len(lines) == len(combos) + suite.CPU_ROUNDS and lines[-1].startswith("[suite] ")
    assert cache[(suite.GRID, "square")] == {"params": cls.params}
    p = ("4096", "float32", "torch", "default")
    b = cls()
    b.setup(cache, *p)
    n = b.repeat[0]
    want = cache[("device", "square", *p)]["samples"]
    assert b.repeat == (n, n, 30.0) and n == len(want) and suite.MIN_SAMPLES <= n <= suite.MAX_ASV_SAMPLES
    got = []
    for _ in range(n):  # as asv does: setup again before every sample (it must not re-arm), one call
        b.setup(cache, *p)
        t0 = suite.device_timer()
        b.time_op(cache, *p)
        got.append(suite.device_timer() - t0)
    assert got == pytest.approx(want, rel=1e-6, abs=1e-12)
    rec = json.loads((tmp_path / "bench_ops.Square.time_op-4096-float32-torch-default.json").read_text())
    assert rec["benchmark"] == "bench_ops.Square.time_op" and rec["samples_s"] == want
    assert rec["params"] == ["'4096'", "'float32'", "'torch'", "'default'"]
    assert rec["bytes"] == 2 * 4096 * 4 and rec["pilot"]["n"] >= len(want)
    assert rec["items"] is None and rec["item_unit"] is None  # a kernel, not a model's step: no throughput
    assert len(rec["sm_mhz"]) == len(rec["reasons"]) == len(want)
    # A provider that cannot run here is an asv skip (NotImplementedError), not a failure.
    assert "cannot run here" in cache[("device", "square", "4096", "bfloat16", "triton", "default")]["skip"]
    with pytest.raises(NotImplementedError, match="cannot run here"):
        cls().setup(cache, "4096", "bfloat16", "triton", "default")
    # A combination whose measuring failed fails alone, with the measuring error.
    broken = {**cache, ("device", "square", *p): {"error": "RuntimeError: boom"}}
    with pytest.raises(RuntimeError, match="boom"):
        cls().setup(broken, *p)
    with pytest.raises(RuntimeError, match="XRT_BENCH_OPS"):
        cls().setup({}, *p)


def test_small_kernels_replay_a_graph_model_steps_never():
    """The device series graphs a kernel's small shapes on CUDA; a model's step is timed as a user
    runs it (launches included), at every shape; CUDA C and the CPU never."""
    small = suite.shape_key(specs.get("softmax").shapes["small"][0])
    large = suite.shape_key(specs.get("softmax").shapes["large"][0])
    assert suite.in_graph("softmax", small, "triton", "cuda") and not suite.in_graph("softmax", large, "triton", "cuda")
    assert not suite.in_graph("softmax", small, "triton", "cpu")
    assert not suite.in_graph("square", suite.shape_key(specs.get("square").shapes["small"][0]), "cuda", "cuda")
    for op in ("gpt_train", "gpt_infer_compiled", "cnn_infer"):
        for shape in specs.get(op).shapes["small"]:
            assert not suite.in_graph(op, suite.shape_key(shape), "torch", "cuda"), op


def test_measure_all_isolates_a_failing_combination(monkeypatch, interpreter):
    from xrt.bench import specs

    monkeypatch.setenv("XRT_BENCH_PROFILE", "quick")
    spec = specs.get("square")
    real = spec.call

    def call(args, provider, config):
        if provider == "triton":
            raise RuntimeError("compile error")
        return real(args, provider, config)

    monkeypatch.setitem(specs.SPECS, "square", dataclasses.replace(spec, call=call))
    cache = suite.measure_all(["square"], ["device", "host"], log=lambda m: None)
    for ser in ("device", "host"):
        assert cache[(ser, "square", "4096", "float32", "triton", "default")] == {
            "error": "RuntimeError: compile error"}
    assert len(cache[("device", "square", "4096", "float32", "torch", "default")]["samples"]) >= suite.MIN_SAMPLES


def test_bench_ops_env_names_a_bad_op(monkeypatch):
    monkeypatch.setenv("XRT_BENCH_OPS", "square,sqaure")
    with pytest.raises(ValueError, match="XRT_BENCH_OPS='square,sqaure': no benchmark spec for sqaure"):
        suite.selected_ops()
    monkeypatch.delenv("XRT_BENCH_OPS")
    assert "square" in suite.selected_ops() and suite.class_name("layernorm_bwd") == "LayernormBwd"
    monkeypatch.setenv("XRT_BENCH_SERIES", "device,hots")
    with pytest.raises(ValueError, match="XRT_BENCH_SERIES='device,hots': no series hots"):
        suite.selected_series()


def test_host_suite_replays_the_host_samples_and_writes_the_sidecar(monkeypatch, tmp_path, interpreter):
    monkeypatch.setenv("XRT_SIDECAR_DIR", str(tmp_path))
    monkeypatch.setenv("XRT_BENCH_PROFILE", "quick")
    cls = suite.make_host_suite("square", "Square", "bench_host")
    assert cls.params == suite.params_for("square")[0] and cls.timer() == suite.host_timer()
    p = ("4096", "float32", "torch", "default")
    calls = []
    real = suite.HostCase.sample

    def counted(self):
        calls.append(self.calls)
        real(self)

    monkeypatch.setattr(suite.HostCase, "sample", counted)
    cache = suite.measure_all(["square"], ["host"], log=lambda m: None)
    assert {k[0] for k in cache} == {"host", suite.GRID}
    want = cache[("host", "square", *p)]["samples"]
    assert suite.HOST_MIN_SAMPLES <= len(want) <= suite.HOST_SAMPLES
    b = cls()
    d0 = suite.device_timer()
    b.setup(cache, *p)
    assert b.repeat == (len(want), len(want), 30.0)
    got = []
    for _ in range(len(want)):
        b.setup(cache, *p)
        t0 = suite.host_timer()
        b.time_host(cache, *p)
        got.append(suite.host_timer() - t0)
    assert got == pytest.approx(want, rel=1e-6, abs=1e-12)
    assert suite.device_timer() == d0  # the device clock is not this series'
    rec = json.loads((tmp_path / "bench_host.Square.time_host-4096-float32-torch-default.json").read_text())
    assert rec["benchmark"] == "bench_host.Square.time_host" and rec["series"] == "host"
    assert rec["samples_s"] == want and 1 <= rec["calls_per_sample"] <= 64
    assert suite.HOST_MIN_SAMPLES >= 5  # the gate's minimum a side
    # No bytes (no bandwidth from host time) and no clocks: cycles are given, all None.
    assert "bytes" not in rec and rec["cycles"] == [None] * len(want)
    assert "cannot run here" in cache[("host", "square", "4096", "bfloat16", "triton", "default")]["skip"]


def test_bench_measure_reports_device_and_host_time(capsys, monkeypatch):
    from xrt import cli

    monkeypatch.setenv("XRT_DEVICE", "cpu")
    assert cli.main(["bench", "measure", "square", "--shape", "4096", "--provider", "torch", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["median_s"] > 0 and out["n"] >= 10
    assert out["host"]["median_s"] > 0 and out["host"]["n"] == 50 and 1 <= out["host"]["calls_per_sample"] <= 64


def test_diag_prints_what_it_checked_and_what_to_change(interpreter, tmp_path):
    checks = diag.diagnose("square", shape="100", provider="triton", config="BLOCK_SIZE=4096", warmup=1,
                           profile_dir=tmp_path, nvml=FakeNVML())
    text = diag.render(checks)
    names = [c.name for c in checks]
    for want in ("memory format", "layout / access-pattern settings", "tile / shared-memory size vs problem",
                 "first-step compilation / warm-up", "clocks and throttle reasons", "other processes on the GPU",
                 "CPU load", "driver and toolkit versions", "profile"):
        assert want in names
    tiles = next(c for c in checks if c.name.startswith("tile"))
    assert tiles.status == "warn" and "BLOCK_SIZE=4096 is larger than the 100 elements" in tiles.advice
    assert "[warn] tile" in text and "->" in text
    assert list(tmp_path.glob("square-triton-100-float32.json"))


def test_diag_clock_checks_with_a_fake_nvml():
    throttled = diag.check_clocks(H100, FakeNVML(sm=[1410], reasons=[0x40]))
    assert throttled.status == "warn" and "hw_thermal_slowdown" in throttled.detail
    calm = diag.check_clocks(H100, FakeNVML(sm=[1980], reasons=[0]))
    assert calm.status == "ok" and "float" in calm.detail
    others = diag.check_other_processes(H100, FakeNVML())
    assert others.status == "warn" and "4242" in others.detail


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="on a GPU, Triton can run")
def test_diag_names_a_provider_that_cannot_run(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="provider 'triton' is unavailable"):
        diag.diagnose("square", shape="100", provider="triton")


def clone_repo(src: Path, dest: Path) -> Path:
    """A clone of ``src`` that asv accepts: asv.conf.json names branch ``main``, which a clone of a
    checkout on another branch (a worktree's) has only as ``origin/main``."""
    subprocess.run(["git", "clone", "-q", str(src), str(dest)], check=True)
    has_main = subprocess.run(["git", "-C", str(dest), "rev-parse", "--verify", "-q", "refs/heads/main"],
                              capture_output=True).returncode == 0
    if not has_main:
        start = "origin/main" if subprocess.run(["git", "-C", str(dest), "rev-parse", "--verify", "-q", "origin/main"],
                                                capture_output=True).returncode == 0 else "HEAD"
        subprocess.run(["git", "-C", str(dest), "branch", "-q", "main", start], check=True)
    return dest


@pytest.mark.slow
def test_bench_run_quick_profile_end_to_end(tmp_path):
    """`xrt bench run` on a clone: asv per commit in the existing env, results + sidecar collected."""
    clone = clone_repo(ROOT, tmp_path / "repo")
    head = subprocess.run(["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    env = dict(os.environ, HOME=str(tmp_path))  # asv keeps its machine file in ~
    out = subprocess.run([sys.executable, "-m", "xrt.cli", "bench", "run", "--repo", str(clone), "--commits", "HEAD",
                          "--quick", "--bench", "Square"], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    # progress while asv runs: one line a combination and series, Square's only (XRT_BENCH_OPS)
    progress = [ln for ln in out.stderr.splitlines() if "[suite " in ln]
    n = 4 * len(suite.SERIES)  # 4 combinations, each in every series
    assert len(progress) == n and f"[suite {n}/{n}]" in progress[-1] and all(" square " in ln for ln in progress), \
        progress
    summary = json.loads(out.stdout)
    (entry,) = summary["commits"]
    assert entry["commit"] == head
    (mach,) = summary["machines"]
    files = entry["machines"][mach]["files"]
    assert len(files) == 1
    result = json.loads(Path(files[0]).read_text())
    assert result["commit_hash"] == head
    cols = result["result_columns"]
    values, params = result["results"]["bench_ops.Square.time_op"][:2]
    assert params[2] == ["'torch'", "'triton'"]
    assert any(isinstance(v, float) and v > 0 for v in values)
    samples = result["results"]["bench_ops.Square.time_op"][cols.index("samples")]
    assert any(s and len(s) >= 10 for s in samples)
    # The host series of the same combinations, beside the device series (docs/timing.md, "Host time").
    host = result["results"]["bench_host.Square.time_host"]
    assert host[1] == params and [bool(s) for s in host[cols.index("samples")]] == [bool(s) for s in samples]
    # ... and under torch.compile (default config only: all of the quick profile's)
    compiled = result["results"]["bench_compiled.Square.time_compiled"]
    assert compiled[1] == params and [bool(s) for s in compiled[cols.index("samples")]] == [bool(s) for s in samples]
    side = json.loads(Path(files[0]).with_suffix(".xrt").read_text())
    assert side["commit"] == head and side["machine"] == mach and side["cases"]
    assert {c["benchmark"] for c in side["cases"]} == set(suite.twins("bench_ops.Square.time_op").values())
    assert {c["series"] for c in side["cases"] if c["benchmark"].endswith("time_host")} == {"host"}
    benchmarks = json.loads((clone / "results" / "asv" / "benchmarks.json").read_text())
    assert benchmarks["bench_host.Square.time_host"]["unit"] == "seconds"


def test_each_target_sees_only_its_gpu_by_uuid():
    from xrt.bench import runner

    gpu1 = DeviceInfo(kind="cuda", index=1, name="NVIDIA H200", uuid=FakeNVML.UUIDS[1], host="box")
    assert runner.pin_env(gpu1) == {"CUDA_VISIBLE_DEVICES": FakeNVML.UUIDS[1], "XRT_DEVICE": "cuda:0"}
    assert runner.pin_env(DeviceInfo(kind="cuda", index=1, name="x"))["CUDA_VISIBLE_DEVICES"] == "1"
    assert runner.pin_env(DeviceInfo(kind="cpu", index=0, name="x")) == {"XRT_DEVICE": "cpu"}


def test_the_tuners_early_pins_are_the_runners_pinning():
    """The tuner's early timing workers (started before torch is imported) are pinned as pin_env pins a
    device; an early worker and the tuner's own may differ in the pinning keys (device_env.PIN_KEYS) only."""
    from xrt import device_env
    from xrt.bench import runner
    from xrt.tune.tuner import early_pins

    devs = [DeviceInfo(kind="cuda", index=1, name="x", uuid=FakeNVML.UUIDS[1]),
            DeviceInfo(kind="cuda", index=1, name="x"), DeviceInfo(kind="xpu", index=0, name="x"),
            DeviceInfo(kind="cpu", index=0, name="x")]
    assert all(set(runner.pin_env(d)) <= device_env.PIN_KEYS for d in devs)
    assert early_pins("1", {"CUDA_VISIBLE_DEVICES": f"{FakeNVML.UUIDS[0]},{FakeNVML.UUIDS[1]}"}) == [
        runner.pin_env(devs[0])]
    assert early_pins("1", {}) == [runner.pin_env(devs[1])] and early_pins(None, {}) == [{}]


@pytest.mark.slow
def test_bench_run_parallel_targets_write_their_own_machines(tmp_path, monkeypatch):
    """`--all-gpus` on the CPU: two targets (two "hosts"), two asv processes at once, two machines."""
    from xrt.bench import runner

    clone = clone_repo(ROOT, tmp_path / "repo")
    monkeypatch.setenv("HOME", str(tmp_path))  # asv keeps its machine file in ~
    cpus = [DeviceInfo(kind="cpu", index=0, name="cpu", host=h) for h in ("node-a", "node-b")]
    monkeypatch.setattr(runner, "targets", lambda all_gpus, device: [runner.Target(d, runner.pin_env(d)) for d in cpus])
    head = runner.resolve_commits(clone, "HEAD")
    lines = []
    summary = runner.run(clone, head, clone / "results" / "asv", all_gpus=True, bench="Square.time_op",
                         log=lines.append)
    assert summary["machines"] == ["node-a-cpu", "node-b-cpu"]
    assert any("2 asv processes in parallel" in ln for ln in lines)
    (entry,) = summary["commits"]
    for mach in summary["machines"]:
        state = entry["machines"][mach]
        assert state["status"] == "ok" and 0 < state["seconds"] <= entry["seconds"], (state, "\n".join(lines))
        (f,) = state["files"]
        result = json.loads(Path(f).read_text())
        assert result["commit_hash"] == head[0] and Path(f).parent.name == mach
        side = json.loads(Path(f).with_suffix(".xrt").read_text())
        assert side["machine"] == mach and side["cases"]
    assert json.loads((clone / "results" / "asv" / "benchmarks.json").read_text())["bench_ops.Square.time_op"]


@pytest.mark.slow
def test_a_parallel_asv_process_that_dies_at_its_start_runs_again_alone(tmp_path, monkeypatch):
    """Seen once on a CI runner: one of two asv processes in one worktree exited 1 after 0.8 s with
    nothing measured. The runner says so with its log and runs it again when the other is done."""
    import subprocess as sp

    from xrt.bench import runner

    clone = clone_repo(ROOT, tmp_path / "repo")
    monkeypatch.setenv("HOME", str(tmp_path))
    cpus = [DeviceInfo(kind="cpu", index=0, name="cpu", host=h) for h in ("node-a", "node-b")]
    monkeypatch.setattr(runner, "targets", lambda all_gpus, device: [runner.Target(d, runner.pin_env(d)) for d in cpus])
    real, died = sp.Popen, []

    def popen(cmd, **kw):  # node-b's first asv dies at once
        if not died and "run" in cmd and any("node-b" in str(c) for c in cmd):  # asv run, not asv machine
            died.append(cmd)
            return real([sys.executable, "-c", "print('asv: boom at start'); raise SystemExit(1)"], **kw)
        return real(cmd, **kw)

    monkeypatch.setattr(runner.subprocess, "Popen", popen)
    head = runner.resolve_commits(clone, "HEAD")
    lines = []
    summary = runner.run(clone, head, clone / "results" / "asv", all_gpus=True, bench="Square.time_op",
                         log=lines.append)
    text = "\n".join(lines)
    assert died and "node-b-cpu: asv exited 1 after" in text and "asv: boom at start" in text
    assert "runs again alone" in text
    (entry,) = summary["commits"]
    assert [entry["machines"][m]["status"] for m in ("node-a-cpu", "node-b-cpu")] == ["ok", "ok"], text


def test_progress_lines_are_logged_once_and_only_when_whole(tmp_path):
    """The runner follows each asv process's progress file while it runs: a line is logged once, and
    not before its end is written; a target with no file yet is passed over."""
    from xrt.bench import runner

    cpus = [DeviceInfo(kind="cpu", index=0, name="cpu", host=h) for h in ("node-a", "node-b")]
    tgts = [runner.Target(d, runner.pin_env(d)) for d in cpus]
    lines: list[str] = []
    job = runner._Job(tmp_path, tmp_path, tgts, ["square"], tmp_path, "quick", None, None, False, lines.append, 3)
    one = runner._CommitRun(job, 2, "a" * 40, tmp_path / "wt", 0.0)
    one.procs = [(t, None, None, None, None) for t in tgts]
    progress = runner._progress_file(tmp_path, "a" * 40, tgts[0].machine)
    progress.write_text("Square 1/4\nSquare 2/")
    one.tick()
    assert lines == [f"  [2/3] aaaaaaaaaa {tgts[0].machine}: Square 1/4"]
    progress.write_text("Square 1/4\nSquare 2/4\n")
    one.tick()
    one.tick()
    assert lines[1:] == [f"  [2/3] aaaaaaaaaa {tgts[0].machine}: Square 2/4"]


def test_cpu_rounds_interleave_the_combinations_over_the_span(monkeypatch, interpreter):
    """With rounds, every combination is measured once a round, in turn, each round starting no
    earlier than its share of the span, with its inputs built anew; the samples are the rounds'
    together. Measured in one go, a burst of load on a shared runner moved every sample of a series."""
    monkeypatch.setenv("XRT_BENCH_PROFILE", "quick")
    order, args, sleeps = [], {}, []
    real_more = {k: k.more for k in (suite.Case, suite.HostCase)}

    def more_of(kind):
        def more(self):
            order.append((kind.__name__, tuple(self.params)))
            args.setdefault((kind.__name__, tuple(self.params)), []).append(self.args[0])  # kept alive
            real_more[kind](self)
        return more

    for kind in real_more:
        monkeypatch.setattr(kind, "more", more_of(kind))
    import time as _time
    monkeypatch.setattr(_time, "sleep", lambda s: sleeps.append(s))
    cache = suite.measure_all(["square"], ["device", "host"], log=lambda m: None, rounds=3, span=30.0)
    f32, bf16 = ("4096", "float32", "torch", "default"), ("4096", "bfloat16", "torch", "default")
    runnable = [("Case", f32), ("HostCase", f32), ("Case", bf16), ("HostCase", bf16)]
    assert [o for o in order if o[1][2] == "torch"] == [o for o in runnable if o[0] == "HostCase"] + runnable * 2
    assert len(sleeps) == 2 and all(s > 5 for s in sleeps)  # rounds 2 and 3 wait for their share of 30 s
    assert all(len({id(x) for x in v}) == len(v) for v in args.values())  # new inputs each round
    for (kind, p) in runnable:
        ser = "device" if kind == "Case" else "host"
        samples = cache[(ser, "square", *p)]["samples"]
        assert suite.MIN_SAMPLES <= len(samples) <= (suite.MAX_ASV_SAMPLES if ser == "device" else suite.HOST_SAMPLES)
    assert suite.rounds_for("cpu") == suite.CPU_ROUNDS > 1 and suite.rounds_for("cuda") == 1


def test_the_asv_version_follows_the_device_not_the_profile(monkeypatch):
    """CPU samples (thread CPU time, in rounds) carry their own asv version; a GPU run with --quick
    takes device times in one round, as the full profile does, and keeps the GPU version."""
    from xrt.bench import suite

    monkeypatch.setenv("XRT_DEVICE", "cpu")
    assert suite.measured_on_cpu()
    for dev in ("cuda:0", "cuda"):
        monkeypatch.setenv("XRT_DEVICE", dev)
        assert not suite.measured_on_cpu()
    monkeypatch.setenv("XRT_BENCH_PROFILE", "quick")
    cls = suite.make_suite("square", "Square", "bench_square")
    assert cls.version == suite.SUITE_VERSION != suite.CPU_SUITE_VERSION
    monkeypatch.setenv("XRT_DEVICE", "cpu")
    assert suite.make_suite("square", "Square", "bench_square").version == suite.CPU_SUITE_VERSION


def test_the_cpu_span_is_five_seconds_unless_told_and_a_bad_value_is_named(monkeypatch):
    monkeypatch.delenv("XRT_CPU_SPAN", raising=False)
    assert suite.cpu_span() == suite.CPU_SPAN == 5.0
    monkeypatch.setenv("XRT_CPU_SPAN", "0")
    assert suite.cpu_span() == 0.0
    for bad in ("-1", "nan", "inf", "soon"):
        monkeypatch.setenv("XRT_CPU_SPAN", bad)
        with pytest.raises(ValueError, match=f"XRT_CPU_SPAN='{bad}'"):
            suite.cpu_span()


def test_compiled_series_times_the_op_from_a_compiled_function(monkeypatch, tmp_path, interpreter):
    """bench_compiled: the op called from torch.compile (one graph, the op in it), measured like the
    host series; default config only; a spec whose call is not one op's is skipped with the reason."""
    import torch

    monkeypatch.setenv("XRT_SIDECAR_DIR", str(tmp_path))
    monkeypatch.setenv("XRT_BENCH_PROFILE", "quick")
    monkeypatch.setattr(suite, "_REFERENCES", {})  # the reference call compiles anew in this test
    torch._dynamo.reset()
    from torch._dynamo.utils import counters

    counters.clear()
    cache = suite.measure_all(["square"], ["compiled"], log=lambda m: None)
    combos = [k for k in cache if k[0] == "compiled"]
    ran = [k for k in combos if "samples" in cache[k]]
    for k in combos:
        e = cache[k]
        if "skip" in e:  # what cannot run here (the interpreter has no bfloat16) is skipped, with why
            assert "cannot run here" in e["skip"], e
            continue
        assert suite.HOST_MIN_SAMPLES <= len(e["samples"]) <= suite.HOST_SAMPLES and min(e["samples"]) > 0, (k, e)
    # every combination compiled one graph of its own (never a recompile of another's function), and
    # the reference call its one graph a process (suite.reference_call)
    assert {k[4] for k in ran} == {"torch", "triton"}
    assert counters["stats"]["unique_graphs"] == len(ran) + 1
    with pytest.raises(NotImplementedError, match="the compiled series is measured at the default config only"):
        suite.CompiledCase("square", "4096", "float32", "triton", "BLOCK=256,num_warps=4")
    rec = json.loads((tmp_path / "bench_compiled.Square.time_compiled-4096-float32-torch-default.json").read_text())
    assert rec["benchmark"] == "bench_compiled.Square.time_compiled" and rec["series"] == "compiled"
    assert rec["cycles"] == [None] * len(rec["samples_s"])  # host time: no cycles from the GPU's clock
    # each sample has the reference call's sample beside it, taken in turn with it
    assert len(rec["ref_samples_s"]) == len(rec["samples_s"]) and min(rec["ref_samples_s"]) > 0
    # replayed to asv like the host series, on the host clock
    cls = suite.make_compiled_suite("square", "Square", "bench_compiled")
    p = ("4096", "float32", "torch", "default")
    b = cls()
    b.setup(cache, *p)
    t0 = suite.host_timer()
    b.time_compiled(cache, *p)
    assert suite.host_timer() - t0 == pytest.approx(cache[("compiled", "square", *p)]["samples"][0])
    skipped = suite.measure_all(["attention_bwd"], ["compiled"], log=lambda m: None)
    reasons = {e["skip"] for k, e in skipped.items() if k[0] == "compiled"}
    assert reasons == {"attention_bwd has no compiled series: its call is the backward alone, through "
                       "torch.autograd.grad on a stored graph"}


def test_the_three_series_share_a_class_and_params():
    assert suite.series_of("bench_compiled.LayernormBwd.time_compiled") == ("compiled", "LayernormBwd")
    assert suite.series_of("bench_ops.Square.time_host") is None and suite.series_of("ops.Op7.time_op") is None
    assert suite.twins("bench_host.Square.time_host") == {
        "device": "bench_ops.Square.time_op", "host": "bench_host.Square.time_host",
        "compiled": "bench_compiled.Square.time_compiled"}
    assert suite.twins("bench_allocator.Square.time_alloc") == {}
    from xrt.bench import sources

    assert sources.unit_of_benchmark("bench_compiled.Softmax.time_compiled") == "softmax"
    assert sources.series_matching("time_compiled", ["square"]) == ["compiled"]
    assert sources.units_matching("bench_compiled.Softmax") == ["softmax"]
    import re

    rx = re.compile(sources.bench_regex(["square"]))
    assert all(rx.search(n) for n in suite.twins("bench_ops.Square.time_op").values())
    classes = [m.Square for m in (__import__(f"benchmarks.{mod}", fromlist=["Square"])
                                  for mod, _ in suite.SERIES.values())]
    assert len({(tuple(map(tuple, c.params)), tuple(c.param_names)) for c in classes}) == 1


def test_cpu_bench_processes_run_one_intra_op_thread(monkeypatch):
    """A CPU run's benchmark processes get one OpenMP thread (an Inductor kernel's region otherwise
    waits for a busy core's time slice: docs/regressions.md), unless the caller set a count."""
    from xrt.bench import runner

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert runner.kind_env("cpu") == {"TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1"}
    assert "OMP_NUM_THREADS" not in runner.kind_env("cuda")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert runner.kind_env("cpu")["OMP_NUM_THREADS"] == "2"


def test_stopping_asv_stops_its_session_and_what_left_it(tmp_path):
    """An interrupted `xrt bench run` stops its asv processes: their session, and a process that left
    it (asv's fork server does), found by the run's mark in its environment."""
    import sys
    import textwrap
    import time
    import uuid

    from xrt.bench import runner

    pids = tmp_path / "pids"
    note = f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}}\\n')"
    (tmp_path / "escapes.py").write_text(f"import os, time\nos.setsid()\n{note}\ntime.sleep(60)\n")
    (tmp_path / "stays.py").write_text(f"import os, time\n{note}\ntime.sleep(60)\n")
    (tmp_path / "asv.py").write_text(textwrap.dedent(f"""\
        import os, subprocess, sys, time
        for name in ("escapes.py", "stays.py"):
            subprocess.Popen([sys.executable, name])
        {note}
        time.sleep(60)
    """))
    mark = "test-" + uuid.uuid4().hex
    with open(tmp_path / "log", "w") as log:
        p = runner._start_asv([sys.executable, "asv.py"], tmp_path, {**os.environ, runner.RUN_MARK: mark}, log)
    deadline = time.monotonic() + 30
    while (not pids.exists() or len(pids.read_text().split()) < 3) and time.monotonic() < deadline:
        time.sleep(0.05)
    started = [int(x) for x in pids.read_text().split()]
    assert len(started) == 3, (tmp_path / "log").read_text()
    runner.stop_asv([p], mark)
    assert p.returncode is not None
    time.sleep(0.2)
    alive = [pid for pid in started if _alive_not_zombie(pid)]
    assert not alive, f"{alive} outlived stop_asv"


def test_a_second_ctrl_c_while_asv_stops_still_stops_it(tmp_path, signal_defaults):
    """A Ctrl-C during stop_asv's grace (asv slow to stop) cuts the grace short, not the stop."""
    import signal
    import sys
    import threading
    import time

    from xrt.bench import runner

    ready = tmp_path / "ready"
    (tmp_path / "asv.py").write_text("import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                                     f"open({str(ready)!r}, 'w').close()\ntime.sleep(60)\n")
    with open(tmp_path / "log", "w") as log:
        p = runner._start_asv([sys.executable, "asv.py"], tmp_path, dict(os.environ), log)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    threading.Timer(0.5, signal.raise_signal, (signal.SIGINT,)).start()
    t = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        runner.stop_asv([p])
    assert p.returncode == -signal.SIGKILL and time.monotonic() - t < runner.STOP_GRACE_S


def _alive_not_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False
