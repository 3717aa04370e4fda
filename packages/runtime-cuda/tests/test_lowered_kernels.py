"""The NVVM backend on what lower-tensors produces: vector accesses, sub-byte atomics, shared
memory, shuffles and calls become PTX that ptxas accepts for sm_80 and sm_90.

The inputs are the hand-written lower-tensors inputs of the pipeline tests
(heron_test_support.vector_pipeline_inputs), lowered by the pass here.
"""

from __future__ import annotations

import re

import pytest
from heron_test_support import vector_pipeline_inputs as _inputs
from heron_test_support.kernels import gpu_module, ptx_and_stages


def _ptx(text: str, arch: str) -> str:
    lowered = gpu_module(text, "cuda")
    return ptx_and_stages(lowered, arch)[0]


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_gelu_vector_loads_and_stores(arch):
    ptx = _ptx(_inputs.gelu_lower_input(), arch)
    assert ".visible .entry fusion(" in ptx
    assert ".maxntid 128, 1, 1" in ptx  # from known_block_size
    # four bf16 per access: one 8-byte vector load and store, not four scalar ones
    # (loads through the read-only cache: the input is noalias readonly)
    assert re.search(r"ld\.global\.nc\.(v4\.b16|v2\.b32|b64)", ptx), ptx
    assert re.search(r"st\.global\.(v4\.b16|v2\.b32|b64)", ptx), ptx
    assert not re.search(r"ld\.global\.(nc\.)?(b16|u16)\b", ptx)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_element_kinds_and_sub_byte_atomics(arch):
    ptx = _ptx(_inputs.elements_lower_input(), arch)
    # the s4 and f4 stores: clear then set bits of the containing byte (widened to 32 bits)
    assert len(re.findall(r"atom\.global\.and\.b32", ptx)) == 2
    assert len(re.findall(r"atom\.global\.or\.b32", ptx)) == 2
    # array constants in memory layout: s4 packed low nibble first, f8 as its bits
    assert "elements_constant_1[8] = {225, 195, 165, 135, 16, 50, 84, 118};" in ptx
    assert "elements_constant_2[16] = {56, 64, 68, 72, 74, 76, 78, 80, 81, 82," in ptx


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_shared_memory_shuffles_atomics_and_calls(arch):
    ptx = _ptx(_inputs.reduction_lower_input(), arch)
    assert ".shared .align" in ptx and "bar.sync" in ptx
    assert len(re.findall(r"shfl\.sync\.bfly\.b32", ptx)) == 4
    assert re.search(r"(atom|red)\.global\.add\.f32", ptx)
    assert "atom.global.cas.b32" in ptx or re.search(r"atom\.[a-z_.]*cas\.b32", ptx)
