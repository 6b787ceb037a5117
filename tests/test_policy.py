"""Kernel policy: validation, precedence, the real PyTorch switches, tuned-config lookup."""

import json

import pytest
import torch

import xrt.pytorch as xp
from xrt.device import DeviceInfo
from xrt.pytorch import policy as pol


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.delenv("XRT_KERNEL_POLICY", raising=False)
    xp.clear_kernel_policy()
    yield
    xp.clear_kernel_policy()


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
