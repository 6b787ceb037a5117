"""Kernel policy: validation, precedence, the real PyTorch switches, tuned-config lookup."""

import json

import pytest
import torch

import xrt.pytorch as xp
from xrt.device import DeviceInfo
from xrt.pytorch import policy as pol

pytestmark = pytest.mark.usefixtures("no_kernel_policy")


def test_unknown_op_lists_valid_ops():
    with pytest.raises(ValueError) as e:
        xp.KernelPolicy(matmull="cublasLt")
    msg = str(e.value)
    assert "'matmull'" in msg and "matmul" in msg and "attention" in msg and "square" in msg


def test_unknown_kernel_lists_valid_choices():
    with pytest.raises(ValueError) as e:
        xp.set_kernel_policy(attention="flash_v3")
    assert "'flash_v3'" in str(e.value) and "flash_v2, mem_efficient, math" in str(e.value)
    assert xp.get_kernel_policy() is None  # a rejected policy changes nothing


def test_set_get_clear_and_both_forms():
    p = xp.KernelPolicy(square="torch", attention="math")
    assert xp.set_kernel_policy(p) is p and xp.get_kernel_policy() is p
    xp.set_kernel_policy(square="triton")
    assert xp.get_kernel_policy().choices == {"square": "triton"}
    with pytest.raises(ValueError, match="not both"):
        xp.set_kernel_policy(p, square="torch")
    with pytest.raises(ValueError, match="expects a KernelPolicy"):
        xp.set_kernel_policy({"square": "torch"})
    xp.clear_kernel_policy()
    assert xp.get_kernel_policy() is None


def test_the_scoped_form_checks_what_it_is_given():
    """``kernel_policy({...})`` raised AttributeError from inside the merge ('dict' object has no
    attribute 'choices'); it says what it takes, as ``set_kernel_policy`` does, and opens no scope."""
    with pytest.raises(ValueError, match=r"kernel_policy expects a KernelPolicy, got dict \(for a dict, "
                                         r"kernel_policy\(\*\*choices\)\)"):
        with xp.kernel_policy({"square": "torch"}):
            pass
    with pytest.raises(ValueError, match="not both"):
        with xp.kernel_policy(xp.KernelPolicy(square="torch"), square="triton"):
            pass
    assert pol.resolve("square") == "auto"
    with xp.kernel_policy(square="torch"):
        assert pol.resolve("square") == "torch"


def test_precedence_call_over_scope_over_global_over_env(monkeypatch):
    assert pol.resolve("square") == "auto"
    monkeypatch.setenv("XRT_KERNEL_POLICY", "square=cuda, layernorm=triton")
    assert pol.resolve("square") == "cuda"
    xp.set_kernel_policy(square="triton")
    assert pol.resolve("square") == "triton"
    assert pol.resolve("layernorm") == "triton"  # the env still answers for ops the global omits
    with xp.kernel_policy(square="torch"):
        assert pol.resolve("square") == "torch"
        with xp.kernel_policy(layernorm="cuda"):
            assert pol.resolve("square") == "torch"  # inner scope does not name square
            assert pol.resolve("layernorm") == "cuda"
        assert pol.resolve("square", explicit="xpu") == "xpu"
    assert pol.resolve("square") == "triton"


def test_bad_env_policy_names_the_variable(monkeypatch):
    monkeypatch.setenv("XRT_KERNEL_POLICY", "square:triton")
    with pytest.raises(ValueError, match="XRT_KERNEL_POLICY"):
        pol.resolve("square")


def test_policy_drives_the_op_provider():
    x = torch.randn(33)
    with xp.profile() as prof:
        with xp.kernel_policy(square="torch"):
            xp.ops.square(x)
    names = {e.key for e in prof.key_averages()}
    assert "xrt::square[torch]" in names
    xp.set_kernel_policy(square="cuda")  # x is a CPU tensor: CUDA C cannot take it anywhere
    with pytest.raises(RuntimeError, match="provider 'cuda' is unavailable"):
        xp.ops.square(x)


def test_attention_switch_flips_sdpa_backends():
    xp.set_kernel_policy(attention="math")
    assert torch.backends.cuda.math_sdp_enabled()
    assert not torch.backends.cuda.flash_sdp_enabled()
    assert not torch.backends.cuda.mem_efficient_sdp_enabled()
    xp.clear_kernel_policy()
    assert torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()


def test_conv_switch_sets_cudnn_benchmark():
    with xp.kernel_policy(conv="cudnn_benchmark"):
        assert torch.backends.cudnn.benchmark is True
    assert torch.backends.cudnn.benchmark is False


@pytest.mark.skipif(torch.version.cuda is not None, reason="checks the error of a build without CUDA")
def test_matmul_switch_without_cuda_build_is_a_clear_error():
    with pytest.raises(RuntimeError, match="matmul='cublasLt' needs a CUDA build of PyTorch"):
        xp.set_kernel_policy(matmul="cublasLt")
    assert xp.get_kernel_policy() is None


@pytest.mark.gpu
def test_matmul_switch_sets_preferred_blas_library():
    xp.set_kernel_policy(matmul="cublasLt")
    assert torch.backends.cuda.preferred_blas_library() == torch._C._BlasBackend.Cublaslt
    xp.set_kernel_policy(matmul="cublas")
    assert torch.backends.cuda.preferred_blas_library() == torch._C._BlasBackend.Cublas


H100 = DeviceInfo(kind="cuda", index=0, name="NVIDIA H100 80GB HBM3", compute_capability="9.0")
H200 = DeviceInfo(kind="cuda", index=0, name="NVIDIA H200", compute_capability="9.0")
A100 = DeviceInfo(kind="cuda", index=0, name="NVIDIA A100-SXM4-80GB", compute_capability="8.0")


def test_shape_bucket_rounds_up_to_powers_of_two():
    assert pol.shape_bucket((1000, 4097)) == "1024x8192"
    assert pol.shape_bucket((1, 0, 4096)) == "1x1x4096"
    with pytest.raises(ValueError, match="negative"):
        pol.shape_bucket((3, -1))


def test_tuned_lookup_most_specific_first():
    p = xp.KernelPolicy()
    p.add_tuned("square", {"BLOCK_SIZE": 256}, device="*")
    p.add_tuned("square", {"BLOCK_SIZE": 512}, device="sm_90")
    p.add_tuned("square", {"BLOCK_SIZE": 1024}, device=H100, dtype=torch.bfloat16, shape=(4096, 4096))
    p.add_tuned("square", {"BLOCK_SIZE": 2048}, device=H100, dtype="bfloat16")
    look = p.tuned_config
    assert look("square", device=H100, dtype=torch.bfloat16, shape=(3000, 4000)) == {"BLOCK_SIZE": 1024}
    # Same GPU, other shape bucket: the model's any-shape entry, not another GPU's.
    assert look("square", device=H100, dtype=torch.bfloat16, shape=(64, 64)) == {"BLOCK_SIZE": 2048}
    # Same architecture, other model: the sm_90 entry.
    assert look("square", device=H200, dtype=torch.bfloat16, shape=(4096, 4096)) == {"BLOCK_SIZE": 512}
    assert look("square", device=A100, dtype=torch.float16) == {"BLOCK_SIZE": 256}
    assert look("layernorm", device=H100) is None
    # The returned config is a copy: editing it does not edit the policy.
    look("square", device=A100)["BLOCK_SIZE"] = 7
    assert look("square", device=A100) == {"BLOCK_SIZE": 256}


def test_tuned_lookup_through_policy_layers_and_files(tmp_path):
    g = xp.KernelPolicy().add_tuned("square", {"BLOCK_SIZE": 256})
    xp.set_kernel_policy(g)
    assert pol.lookup_tuned("square", device=H100) == {"BLOCK_SIZE": 256}
    scoped = xp.KernelPolicy().add_tuned("square", {"BLOCK_SIZE": 4096}, device=H100)
    with xp.kernel_policy(scoped):
        assert pol.lookup_tuned("square", device=H100) == {"BLOCK_SIZE": 4096}
        assert pol.lookup_tuned("square", device=A100) == {"BLOCK_SIZE": 256}
    path = tmp_path / "tuned.json"
    scoped.save_tuned(path)
    again = xp.KernelPolicy().load_tuned(path)
    assert again.tuned == scoped.tuned
    path.write_text(json.dumps([{"op": "square"}]))
    with pytest.raises(ValueError, match=r"tuned.json: entry 0 lacks config"):
        xp.KernelPolicy().load_tuned(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="tuned.json"):
        xp.KernelPolicy().load_tuned(path)


def test_tuned_config_is_used_by_the_op(interpreter):
    """A tuned config outside the tuning space is refused by the launcher: proof it was read."""
    with xp.kernel_policy(xp.KernelPolicy(square="triton").add_tuned("square", {"BLOCK_SIZE": 3})):
        with pytest.raises(ValueError, match="BLOCK_SIZE=3 is outside the tuning space"):
            xp.ops.square(torch.randn(10))


# -- policy state: PyTorch's switches, caches, threads (issue #14) -------------------------------

def _sdpa() -> dict[str, bool]:
    cuda = torch.backends.cuda
    return {"flash": cuda.flash_sdp_enabled(), "mem_efficient": cuda.mem_efficient_sdp_enabled(),
            "math": cuda.math_sdp_enabled(), "cudnn": cuda.cudnn_sdp_enabled()}


MATH_ONLY = {"flash": False, "mem_efficient": False, "math": True, "cudnn": False}


def test_env_policy_sets_the_sdpa_backends_at_import():
    """XRT_KERNEL_POLICY=attention=math: the switches match resolve() from the import on."""
    import os
    import subprocess
    import sys

    code = ("import json, torch, xrt.pytorch as xp; from xrt.pytorch import policy as p; c = torch.backends.cuda; "
            "print(json.dumps([p.resolve('attention'), c.flash_sdp_enabled(), c.mem_efficient_sdp_enabled(), "
            "c.math_sdp_enabled()]))")
    env = {**os.environ, "XRT_KERNEL_POLICY": "attention=math"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == ["math", False, False, True]


@pytest.fixture
def sdpa_restored():
    saved = _sdpa()
    yield
    for flag, on in saved.items():
        getattr(torch.backends.cuda, f"enable_{flag}_sdp")(on)


def test_unrelated_scope_and_set_leave_the_env_attention_alone(monkeypatch, sdpa_restored):
    monkeypatch.setenv("XRT_KERNEL_POLICY", "attention=math")
    assert pol.resolve("attention") == "math"  # the changed variable is noticed, switches follow
    assert _sdpa() == MATH_ONLY
    with xp.kernel_policy(square="torch"):
        assert _sdpa() == MATH_ONLY
    assert _sdpa() == MATH_ONLY
    xp.set_kernel_policy(square="torch")  # used to put every backend back on
    assert _sdpa() == MATH_ONLY and pol.resolve("attention") == "math"
    xp.clear_kernel_policy()
    assert _sdpa() == MATH_ONLY
    monkeypatch.delenv("XRT_KERNEL_POLICY")
    assert pol.resolve("attention") == "default"
    assert _sdpa()["flash"] and _sdpa()["mem_efficient"]


def test_switches_xrt_does_not_name_are_left_to_their_owner(sdpa_restored):
    torch.backends.cuda.enable_flash_sdp(False)  # the user's own setting
    with xp.kernel_policy(square="torch"):
        assert not torch.backends.cuda.flash_sdp_enabled()  # an unrelated scope used to turn it on
    assert not torch.backends.cuda.flash_sdp_enabled()
    with xp.kernel_policy(attention="flash_v2"):
        assert _sdpa() == {"flash": True, "mem_efficient": False, "math": False, "cudnn": False}
        with xp.kernel_policy(square="triton"):
            assert torch.backends.cuda.flash_sdp_enabled()
        assert torch.backends.cuda.flash_sdp_enabled()
    # Out of every policy that names attention: what the user had, not PyTorch's defaults.
    assert not torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.math_sdp_enabled()
    xp.set_kernel_policy(attention="math")
    assert _sdpa() == MATH_ONLY
    xp.set_kernel_policy(square="torch")
    assert not torch.backends.cuda.flash_sdp_enabled() and torch.backends.cuda.mem_efficient_sdp_enabled()


def test_scope_overrides_global_switch_and_restores_it(sdpa_restored):
    xp.set_kernel_policy(attention="math")
    with xp.kernel_policy(attention="mem_efficient"):
        assert _sdpa() == {"flash": False, "mem_efficient": True, "math": False, "cudnn": False}
    assert _sdpa() == MATH_ONLY


def _counting(monkeypatch, obj, name):
    calls = []
    real = getattr(obj, name)

    def wrapped(*a, **k):
        calls.append(a)
        return real(*a, **k)

    monkeypatch.setattr(obj, name, wrapped)
    return calls


def test_env_policy_is_parsed_once_per_value(monkeypatch):
    monkeypatch.setattr(pol, "_ENV_POLICY", {})  # (values an earlier test parsed are not counted again)
    calls = _counting(monkeypatch, pol, "_parse_env_policy")
    monkeypatch.setenv("XRT_KERNEL_POLICY", "square=cuda,softmax=triton")
    for _ in range(50):
        assert pol.resolve("square") == "cuda"
    assert len(calls) == 1
    monkeypatch.setenv("XRT_KERNEL_POLICY", "square=torch")  # a new value is noticed at once
    assert pol.resolve("square") == "torch" and pol.resolve("softmax") == "auto"
    monkeypatch.setenv("XRT_KERNEL_POLICY", "square=cuda,softmax=triton")
    assert pol.resolve("square") == "cuda"
    assert len(calls) == 2  # each distinct value parsed once
    monkeypatch.delenv("XRT_KERNEL_POLICY")
    assert pol.resolve("square") == "auto"


def test_resolve_follows_every_kind_of_policy_change(monkeypatch):
    r = lambda: pol.resolve("square")
    assert r() == "auto"
    xp.set_kernel_policy(square="triton")
    assert r() == "triton"
    with xp.kernel_policy(square="torch"):
        assert r() == "torch"
        with xp.kernel_policy(square="cuda"):
            assert r() == "cuda"
            with xp.kernel_policy(layernorm="torch"):
                assert r() == "cuda"
            assert r() == "cuda"
        assert r() == "torch"
        xp.set_kernel_policy(square="xpu")  # a global change inside a scope: the scope still wins
        assert r() == "torch"
    assert r() == "xpu"
    xp.clear_kernel_policy()
    assert r() == "auto"
    monkeypatch.setenv("XRT_KERNEL_POLICY", "square=cuda")
    assert r() == "cuda"
    xp.set_kernel_policy(xp.KernelPolicy(square="torch"))
    assert r() == "torch"


def test_a_scope_left_by_an_exception_is_popped():
    with pytest.raises(KeyError):
        with xp.kernel_policy(square="torch"):
            raise KeyError("boom")
    assert pol.resolve("square") == "auto"


def test_a_policy_entered_again_finds_its_answers_kept(monkeypatch):
    """A loop that enters the same policy every step decides once: the state (and its memo of tuned
    lookups, routing decisions and launch plans) comes back for equal choices and the same tuned
    configs. Other choices or other tuned configs get their own, and a thread keeps a few states."""
    calls = _counting(monkeypatch, pol, "_lookup_tuned_kernel")
    look = lambda: pol.lookup_tuned_kernel("square", "square.triton", device=H100, dtype=torch.float32,
                                           shape=(1000,))
    for _ in range(5):
        with xp.kernel_policy(square="triton", softmax="torch"):
            assert look() is None
        with xp.kernel_policy(softmax="torch", square="triton"):  # the same choices, another order
            assert look() is None
    assert len(calls) == 1
    with xp.kernel_policy(square="cuda"):
        look()
    assert len(calls) == 2
    a = xp.KernelPolicy(square="triton").add_tuned("square.triton", {"BLOCK_SIZE": 256})
    b = xp.KernelPolicy(square="triton").add_tuned("square.triton", {"BLOCK_SIZE": 512})
    for _ in range(3):
        with xp.kernel_policy(a):
            assert look() == {"BLOCK_SIZE": 256}
        with xp.kernel_policy(b):  # equal choices, other configs: never a's answers
            assert look() == {"BLOCK_SIZE": 512}
    assert len(calls) == 4
    # more policies than a thread keeps (made first: adding a tuned config bumps the version)
    many = [xp.KernelPolicy().add_tuned("square.triton", {"BLOCK_SIZE": 64 + i}) for i in range(pol.KEPT_STATES + 2)]
    for i, p in enumerate(many):
        with xp.kernel_policy(p):
            assert look() == {"BLOCK_SIZE": 64 + i}
    assert len(pol._tls.states) == pol.KEPT_STATES


def test_a_change_made_while_a_state_is_built_is_seen_at_the_next_call(monkeypatch):
    """Another thread's change lands between reading the layers and stamping the state (it swaps the
    policy in, then bumps the version): that state is stamped with the old version, so the next call
    builds one from the new policy. Kept states of an old version are dropped."""
    xp.set_kernel_policy(square="triton")
    real = pol._layers

    def racing():
        layers = real()  # the old global policy
        monkeypatch.setattr(pol, "_layers", real)
        xp.set_kernel_policy(square="cuda")  # the other thread's change
        return layers

    monkeypatch.setattr(pol, "_layers", racing)
    pol._tls.merged = None
    assert pol.resolve("square") == "triton"  # this call read the old layers
    assert pol.resolve("square") == "cuda"  # the next one sees the change
    for choice in ("torch", "triton", "cuda"):
        with xp.kernel_policy(square=choice):
            pol.resolve("square")
    pol.invalidate()
    with xp.kernel_policy(square="torch"):
        assert pol.resolve("square") == "torch"
    assert pol._tls.states and all(k[0] == pol._version for k in pol._tls.states)


def test_tuned_lookup_is_memoized_and_follows_changes(monkeypatch, tmp_path):
    calls = _counting(monkeypatch, pol, "_lookup_tuned_kernel")
    look = lambda: pol.lookup_tuned_kernel("square", "square.triton", device=H100, dtype=torch.float32,
                                           shape=(1000,))
    assert look() is None
    assert look() is None
    assert len(calls) == 1
    g = xp.KernelPolicy().add_tuned("square.triton", {"BLOCK_SIZE": 256})
    xp.set_kernel_policy(g)  # set
    assert look() == {"BLOCK_SIZE": 256}
    look()["BLOCK_SIZE"] = 7  # a copy: the memo is not edited through it
    assert look() == {"BLOCK_SIZE": 256}
    g.add_tuned("square.triton", {"BLOCK_SIZE": 512}, device=H100)  # a policy in force edited
    assert look() == {"BLOCK_SIZE": 512}
    with xp.kernel_policy(xp.KernelPolicy().add_tuned("square.triton", {"BLOCK_SIZE": 2048})):  # enter
        assert look() == {"BLOCK_SIZE": 2048}
        with xp.kernel_policy(square="torch"):  # nested: names no config, the outer's still wins
            assert look() == {"BLOCK_SIZE": 2048}
        assert look() == {"BLOCK_SIZE": 2048}
    assert look() == {"BLOCK_SIZE": 512}  # exit
    xp.clear_kernel_policy()  # clear
    assert look() is None
    # XRT_TUNED: set, changed to another file, and a file rewritten in place.
    monkeypatch.setattr(pol, "TUNED_RECHECK_S", 0.0)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    xp.KernelPolicy().add_tuned("square.triton", {"BLOCK_SIZE": 4096}).save_tuned(a)
    xp.KernelPolicy().add_tuned("square.triton", {"BLOCK_SIZE": 8192}).save_tuned(b)
    monkeypatch.setenv("XRT_TUNED", str(a))
    assert look() == {"BLOCK_SIZE": 4096}
    monkeypatch.setenv("XRT_TUNED", str(b))
    assert look() == {"BLOCK_SIZE": 8192}
    xp.KernelPolicy().add_tuned("square.triton", {"BLOCK_SIZE": 1024, "num_warps": 8}).save_tuned(b)
    import os

    os.utime(b, ns=(1, 1))  # a new mtime even on a coarse-clock filesystem
    assert look() == {"BLOCK_SIZE": 1024, "num_warps": 8}
    # A file added to an XRT_TUNED folder is seen too.
    d = tmp_path / "dir"
    d.mkdir()
    monkeypatch.setenv("XRT_TUNED", str(d))
    assert look() is None
    xp.KernelPolicy().add_tuned("square.triton", {"BLOCK_SIZE": 512}).save_tuned(d / "t.json")
    assert look() == {"BLOCK_SIZE": 512}
    monkeypatch.delenv("XRT_TUNED")
    assert look() is None


def test_scopes_are_per_thread_and_the_global_policy_is_shared():
    import threading

    seen: dict[str, object] = {}
    entered, release = threading.Event(), threading.Event()

    def other():
        with xp.kernel_policy(square="cuda"):
            seen["other inside its scope"] = pol.resolve("square")
            entered.set()
            release.wait(10)
        seen["other after its scope"] = pol.resolve("square")

    xp.set_kernel_policy(square="triton", layernorm="torch")
    t = threading.Thread(target=other)
    with xp.kernel_policy(square="torch"):
        t.start()
        assert entered.wait(10)
        seen["main inside its scope"] = pol.resolve("square")
        release.set()
        t.join(10)
    seen["main after"] = pol.resolve("square")
    assert seen == {"other inside its scope": "cuda", "main inside its scope": "torch",
                    "other after its scope": "triton", "main after": "triton"}

    # A second thread sees the global policy set by the first, and its changes are seen back.
    out = []
    t = threading.Thread(target=lambda: (out.append(pol.resolve("layernorm")), xp.set_kernel_policy(square="xpu")))
    t.start()
    t.join(10)
    assert out == ["torch"] and pol.resolve("square") == "xpu"


def test_policy_scope_is_traced_by_torch_compile():
    f = torch.compile(lambda t: xp.ops.square(t) + 1.0, backend="aot_eager", fullgraph=True)
    x = torch.randn(16)
    with xp.kernel_policy(square="torch"):
        torch.testing.assert_close(f(x), x * x + 1)
    with xp.kernel_policy(square="cuda"):  # the state is guarded: this recompiles and refuses
        with pytest.raises(Exception, match="provider 'cuda' is unavailable"):
            f(x)
    torch.testing.assert_close(f(x), x * x + 1)


def test_a_tuned_file_caught_half_written_keeps_the_last_good_read(monkeypatch, tmp_path):
    import os

    monkeypatch.setattr(pol, "TUNED_RECHECK_S", 0.0)
    f = tmp_path / "t.json"
    xp.KernelPolicy().add_tuned("square.triton", {"BLOCK_SIZE": 256}).save_tuned(f)
    monkeypatch.setenv("XRT_TUNED", str(f))
    look = lambda: pol.lookup_tuned_kernel("square", "square.triton", device=H100, dtype=torch.float32, shape=(8,))
    assert look() == {"BLOCK_SIZE": 256}
    f.write_text('[{"op": "square.triton", "con')
    os.utime(f, ns=(3, 3))
    with pytest.warns(RuntimeWarning, match="keeping the tuned configs read before"):
        assert look() == {"BLOCK_SIZE": 256}
    xp.KernelPolicy().add_tuned("square.triton", {"BLOCK_SIZE": 512}).save_tuned(f)
    os.utime(f, ns=(4, 4))
    assert look() == {"BLOCK_SIZE": 512}


def test_every_memo_writer_holds_the_bound(monkeypatch):
    """Tuned lookups, checked configs, launch plans and a routed call's decisions all go through
    ``_Merged.keep``: with ``MEMO_MAX`` at 8, shapes without end never grow the memo past 9."""
    import torch.nn.functional as F

    from xrt.pytorch.ops import kernel_providers

    monkeypatch.setattr(pol, "MEMO_MAX", 8)
    sizes = []
    with xp.kernel_policy(layernorm="triton"):
        state = pol.tuned_state()
        for n in range(1, 25):
            pol.lookup_tuned_kernel("square", "square.triton", device=H100, dtype=torch.float32, shape=(n,))
            kernel_providers.config("square", "square.triton", torch.empty(n))
            kernel_providers.keep_plan(("test-plan", n), None)
            sizes.append(len(state.memo))
        for n in range(1, 13):
            F.layer_norm(torch.randn(2, n), (n,))  # a routed call: its decision and its layernorm plan
            sizes.append(len(state.memo))
    assert max(sizes) == pol.MEMO_MAX + 1 and min(sizes[24:]) <= 3


def test_a_scope_of_xrt_kernels_enters_and_leaves_without_touching_torchs_switches(monkeypatch, sdpa_restored):
    """matmul=triton and attention=triton name xrt's kernels, no PyTorch setting: entering and
    leaving their scope saves, applies and restores nothing (a loop entering it every step pays
    nothing for the switches), and a switch the user flips inside the scope stays flipped. Under
    an outer policy that does set the switches, the inner kernel choice puts back what the user had."""
    import dataclasses

    calls: list[str] = []

    def counted(fn, name):
        def call(*args):
            calls.append(name)
            return fn(*args)
        return call

    for op in ("matmul", "attention"):
        spec = pol._OPS[op]
        monkeypatch.setitem(pol._OPS, op, dataclasses.replace(
            spec, **{part: counted(getattr(spec, part), f"{op}.{part}") for part in ("save", "apply", "restore")}))
    with xp.kernel_policy(matmul="triton", attention="triton"):
        torch.backends.cuda.enable_math_sdp(False)  # the user's own change, inside the scope
    assert calls == [] and not torch.backends.cuda.math_sdp_enabled()
    torch.backends.cuda.enable_math_sdp(True)
    with xp.kernel_policy(attention="flash_v2"):
        assert _sdpa() == {"flash": True, "mem_efficient": False, "math": False, "cudnn": False}
        with xp.kernel_policy(attention="triton"):
            assert _sdpa()["math"] and _sdpa()["mem_efficient"]  # what the user had
        assert _sdpa() == {"flash": True, "mem_efficient": False, "math": False, "cudnn": False}
    assert _sdpa()["math"] and _sdpa()["mem_efficient"]
    assert calls[:2] == ["attention.save", "attention.apply"]
