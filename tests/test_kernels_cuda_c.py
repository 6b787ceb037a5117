"""The CUDA C sources compile for Hopper here (nvcc, no GPU) and export the entries launchers call;
``xrt kernels dump`` writes PTX and SASS."""

import subprocess

import pytest

from xrt.kernels import cuda_source, cuda_sources, source

V2_ITEMS = (1, 2, 4, 8)
DT = ("f32", "f16", "bf16")
ENTRIES = {
    "square.cu": {f"square_{v}_{t}" for v in ("v1", "v2") for t in DT},
    "vector_add.cu": {f"vector_add_{v}_{t}" for v in ("v1", "v2") for t in DT},
    "window_sum.cu": {f"window_sum_{v}_{t}" for v in ("v1", "v2") for t in DT},
    "softmax.cu": {f"softmax_v1_{t}" for t in DT} | {f"softmax_v2_{t}_{i}" for t in DT for i in V2_ITEMS},
    "layernorm.cu": ({f"layernorm_{d}_v1_{t}" for d in ("fwd", "bwd") for t in DT}
                     | {f"layernorm_{d}_v2_{t}_{i}" for d in ("fwd", "bwd") for t in DT for i in V2_ITEMS}
                     | {f"layernorm_sum_partials_{t}" for t in DT}
                     | {f"layernorm_bwd_rowsum_{v}_{t}" for v in ("v1", "v2") for t in DT}
                     | {f"layernorm_bwd_v3{s}_{t}" for s in ("", "_vec") for t in DT}),
    "matmul.cu": {f"matmul_v{v}_f32" for v in (1, 2, 3, 4)},
}


def test_every_shipped_cuda_source_is_checked():
    assert sorted(ENTRIES) == cuda_sources()


def test_cuda_source_inlines_the_shared_header():
    """What is compiled carries common.cuh's text (so pycuda's cache, keyed on the text, changes
    when the header does) and no quoted include that nvcc would have to find in a temporary folder."""
    header = source("cuda/common.cuh")
    for name in cuda_sources():
        text = cuda_source(name)
        assert not [ln for ln in text.splitlines() if ln.startswith('#include "')], name
        if '#include "common.cuh"' in source(f"cuda/{name}"):
            assert header in text and '#line 1 "common.cuh"' in text, name
    assert {n for n in cuda_sources() if header in cuda_source(n)} >= {
        "square.cu", "vector_add.cu", "softmax.cu", "layernorm.cu"}


def test_cuda_source_follows_the_header_and_the_lines():
    """An edited header changes the compiled text; after it, #line gives the source's own numbering."""
    from xrt.kernels import _expand

    files = {"k.cu": '// k\n#include "h.cuh"\nint k;\n', "h.cuh": "int h;\n"}
    text = _expand("k.cu", files.__getitem__, ())
    assert text == '// k\n#line 1 "h.cuh"\nint h;\n#line 3 "k.cu"\nint k;\n'
    files["h.cuh"] = "int h2;\n"
    assert _expand("k.cu", files.__getitem__, ()) != text
    files["h.cuh"] = '#include "k.cu"\n'
    with pytest.raises(ValueError, match="include cycle: k.cu -> h.cuh -> k.cu"):
        _expand("k.cu", files.__getitem__, ())
    # a header that is not shipped is named at once, not left to nvcc in some temporary folder
    def read(name):
        return '#include "nothere.cuh"\n' if name == "k.cu" else source(f"cuda/{name}")

    with pytest.raises(FileNotFoundError, match="no kernel source 'cuda/nothere.cuh'"):
        _expand("k.cu", read, ())


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_cuda_c_sources_compile(nvcc, tmp_path, name):
    src = tmp_path / name
    src.write_text(cuda_source(name))
    ptx = tmp_path / "out.ptx"
    subprocess.run([nvcc, "-ptx", "-arch=sm_90", "-std=c++17", "-o", str(ptx), str(src)], check=True,
                   capture_output=True)
    entries = {ln.split()[-1].rstrip("(") for ln in ptx.read_text().splitlines() if ".entry" in ln}
    assert entries == ENTRIES[name]


def test_launchers_name_existing_entries():
    """The names the launchers build are among the entries (the plan's versions and items)."""
    import torch

    from xrt.kernels.cuda.softmax import kernel_name, row_plan

    for n, esize in ((4096, 2), (32768, 2), (1023, 2), (65536 + 8, 4), (8, 4)):
        for block in ("auto", 128, 1024):
            version, b, items = row_plan(n, esize, block, "v2", True)
            assert b % 32 == 0 and 32 <= b <= 1024
            dtype = torch.bfloat16 if esize == 2 else torch.float32
            assert kernel_name("softmax", version, dtype, items) in ENTRIES["softmax.cu"]
            assert kernel_name("layernorm_fwd", version, dtype, items) in ENTRIES["layernorm.cu"]


def test_layernorm_bwd_launcher_names_existing_entries():
    """Every backward plan (auto, v1, v2, v3; vectors or scalars) names entries layernorm.cu has."""
    import torch

    from xrt.kernels.cuda.layernorm import bwd_plan
    from xrt.kernels.cuda.softmax import kernel_name

    for n, esize in ((4096, 2), (8192, 2), (16384, 2), (32768, 2), (1023, 2), (8192, 4), (65536 + 8, 4)):
        dtype = torch.bfloat16 if esize == 2 else torch.float32
        for version in ("auto", "v1", "v2", "v3"):
            for block in ("auto", 128, 1024):
                for aligned in (True, False):
                    v, b, items = bwd_plan(n, esize, block, version, aligned)
                    assert b % 32 == 0 and 32 <= b <= 1024
                    sfx = "bf16" if esize == 2 else "f32"
                    if v == "v3":
                        names = {f"layernorm_bwd_rowsum_{'v2' if items else 'v1'}_{sfx}",
                                 f"layernorm_bwd_v3{'_vec' if items else ''}_{sfx}"}
                    else:
                        names = {kernel_name("layernorm_bwd", v, dtype, items)}
                    assert names <= ENTRIES["layernorm.cu"], (n, esize, version, block, names)


def test_dump_cuda_writes_ptx_and_sass(nvcc, tmp_path):
    from xrt.cli import main

    assert main(["kernels", "dump", "softmax", "--provider", "cuda", "--out", str(tmp_path)]) == 0
    assert ".entry softmax_v2_bf16_4" in (tmp_path / "softmax.sm_90.ptx").read_text()
