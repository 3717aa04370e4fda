"""The ROCDL backend on what lower-tensors produces: vector accesses, sub-byte atomics, shared
memory, shuffles and calls become HSACO for gfx90a and gfx942.

The inputs are the hand-written lower-tensors inputs of the pipeline tests
(heron_test_support.vector_pipeline_inputs), lowered by the pass here.
"""

from __future__ import annotations

import pytest
from heron_test_support import vector_pipeline_inputs as _inputs
from heron_test_support.kernels import gpu_module, hsaco_stages


def _stages(text: str, arch: str) -> dict[str, str]:
    """Every dumped stage of compiling ``text`` (after lower-tensors) for ``arch``."""
    lowered = gpu_module(text, "rocm")
    return hsaco_stages(lowered, arch)


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942"])
def test_gelu_vector_loads_and_stores(arch):
    asm = _stages(_inputs.gelu_lower_input(), arch)["amdgcn-asm"]
    assert asm.count("global_load_dwordx2") == 1  # four bf16 in one 8-byte load
    assert asm.count("global_store_dwordx2") == 1
    assert "global_load_ushort" not in asm and "global_load_short_d16" not in asm


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942"])
def test_element_kinds_and_sub_byte_atomics(arch):
    stages = _stages(_inputs.elements_lower_input(), arch)
    # the s4 and f4 stores: clear then set bits of the containing byte
    assert stages["llvm-ir"].count("atomicrmw and ptr") == 2
    assert stages["llvm-ir"].count("atomicrmw or ptr") == 2
    assert "cmpswap" in stages["amdgcn-asm"]  # byte atomics are compare-and-swap loops here
    assert (
        '@elements_constant_1 = private constant [8 x i8] c"\\E1\\C3\\A5\\87' in stages["llvm-ir"]
    )


@pytest.mark.parametrize("arch", ["gfx90a", "gfx942"])
def test_shared_memory_shuffles_atomics_and_calls(arch):
    stages = _stages(_inputs.reduction_lower_input(), arch)
    asm = stages["amdgcn-asm"]
    # 16 threads fit one wavefront, so the code generator drops the barrier itself
    assert "llvm.amdgcn.s.barrier" in stages["llvm-ir"]
    assert "ds_write_b32" in asm and "ds_read_b32" in asm  # the shared buffer
    assert asm.count("ds_swizzle_b32") + asm.count("ds_bpermute_b32") == 4  # the shuffles
    assert "global_atomic_cmpswap" in asm  # the i32 multiply: a CAS loop
