"""The NVVM backend on what lower-tensors produces: vector accesses, sub-byte atomics, shared
memory, shuffles and calls become PTX that ptxas accepts for sm_80 and sm_90.

The inputs are the hand-written lower-tensors inputs of the pipeline tests
(packages/emitters-core/tests/vector_pipeline_inputs.py), lowered by the pass here.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from mlir import ir

from heron.emitters.dialect import make_context
from heron.emitters.pipeline import PipelineOptions, lower_tensors
from heron.runtime.cuda.compiler import compile_to_ptx, validate_ptx

_INPUTS = Path(__file__).resolve().parents[2] / "emitters-core" / "tests"


def _load_inputs():
    path = _INPUTS / "vector_pipeline_inputs.py"
    spec = importlib.util.spec_from_file_location("vector_pipeline_inputs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_inputs = _load_inputs()


def _ptx(text: str, arch: str) -> str:
    with make_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        lower_tensors.run(module, PipelineOptions(target="cuda"))
        ptx = compile_to_ptx(module, arch).ptx
    validate_ptx(ptx, arch)
    return ptx


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_gelu_vector_loads_and_stores(arch):
    ptx = _ptx(_inputs.gelu_lower_input(), arch)
    assert ".visible .entry fusion(" in ptx
    assert ".maxntid 128, 1, 1" in ptx  # from known_block_size
    # four bf16 per access: one 8-byte vector load and store, not four scalar ones
    assert re.search(r"ld\.global\.(v4\.b16|v2\.b32|b64)", ptx), ptx
    assert re.search(r"st\.global\.(v4\.b16|v2\.b32|b64)", ptx), ptx
    assert not re.search(r"ld\.global\.(b16|u16)\b", ptx)


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
