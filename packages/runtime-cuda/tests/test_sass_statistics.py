"""heron.runtime.cuda.sass_statistics: SASS measures of nvdisasm text and of assembled PTX."""

from __future__ import annotations

import pytest

from heron.runtime.cuda.sass_statistics import (
    SassError,
    ptx_sass_statistics,
    sass_statistics,
)

#: nvdisasm -c output of two kernels (shortened from a real sm_90a cubin): the first
#: with an IEEE division's slow-path subroutine, the second with vector accesses.
SASS = """
	.target	sm_90a

//--------------------- .text.first --------------------------
	.section	.text.first,"ax",@progbits
        .global         first
        .type           first,@function
first:
.text.first:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E.64.CONSTANT R2, desc[UR4][R2.64] ;
        /*0020*/                   MUFU.EX2 R3, R0 ;
        /*0030*/                   MUFU.RCP R10, R15 ;
        /*0040*/                   FFMA R4, R3, R10, -1 ;
        /*0050*/              @!P0 BRA `(.L_x_1) ;
        /*0060*/       CALL.REL.NOINC `($__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath) ;
.L_x_1:
        /*0070*/                   STG.E.64 desc[UR4][R2.64], R4 ;
        /*0080*/                   EXIT ;
        .type           $__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath,@function
$__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath:
        /*0090*/                   FCHK P0, R1, R2 ;
        /*00a0*/                   MUFU.RCP R5, R2 ;
        /*00b0*/                   RET.REL.NODEC R4 `(first) ;
        /*00c0*/                   NOP;
        /*00d0*/                   NOP;

//--------------------- .text.second --------------------------
	.section	.text.second,"ax",@progbits
        .global         second
second:
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;
        /*0010*/                   LDS.U16 R8, [R9] ;
        /*0020*/                   STS.64 [R9], R4 ;
        /*0030*/                   { RED.E.ADD.F32x4.FTZ.RN.STRONG.GPU desc[UR4][R2.64], R4 ;
        /*0040*/                   STG.E.U8 desc[UR4][R6.64], R8 ; }
        /*0050*/                   STL [R1], R8 ;
        /*0060*/                   EXIT ;
.L_x_2:
        /*0070*/                   BRA `(.L_x_2);
"""


def test_instructions_calls_and_slow_paths_per_kernel():
    stats = sass_statistics(SASS)
    assert list(stats) == ["first", "second"]
    first = stats["first"]
    assert first.instructions == 12  # NOP padding left out
    assert first.subroutines == ("$__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath",)
    assert first.subroutine_instructions == 3
    assert (first.branches, first.calls) == (1, 1)
    assert first.mufu == {"EX2": 1, "RCP": 2} and first.mufu_count == 3
    assert first.global_loads == {64: 1} and first.global_stores == {64: 1}
    assert first.opcodes["FFMA"] == 1 and "NOP" not in first.opcodes


def test_memory_widths_spaces_and_vector_atomics():
    second = sass_statistics(SASS)["second"]
    assert second.global_loads == {128: 1}
    assert second.global_stores == {8: 1}
    assert (second.shared_loads, second.shared_stores) == (1, 1)
    assert second.local_accesses == 1
    assert second.atomics == {128: 1}  # RED ... F32x4: four f32 lanes in one instruction
    assert second.branches == 1 and second.subroutines == ()
    record = second.as_dict()
    assert record["sass_atomics"] == {"128": 1}
    assert record["sass_instructions"] == 8


def _tools():
    compiler_tools = pytest.importorskip("heron.runtime.cuda.compiler_tools")
    try:
        return compiler_tools.find_ptxas(), compiler_tools.find_nvdisasm()
    except compiler_tools.ToolNotFoundError as exc:
        pytest.skip(str(exc))


def _division_kernel(name: str, form: str) -> str:
    return f"""
.visible .entry {name}(.param .u64 p)
{{
	.reg .b32 	%r<4>;
	.reg .b64 	%rd<3>;
	ld.param.u64 	%rd1, [p];
	cvta.to.global.u64 	%rd2, %rd1;
	ld.global.v2.f32 	{{%r1, %r2}}, [%rd2];
	{form}.f32 	%r3, %r1, %r2;
	st.global.f32 	[%rd2], %r3;
	ret;
}}
"""


def test_ieee_division_has_a_slow_path_and_div_full_has_none():
    """What issue 29 measures: ``div.rn.f32`` is a fast path plus a called slow path
    in SASS, ``div.full.f32`` a few instructions around one MUFU.RCP."""
    ptxas, nvdisasm = _tools()
    header = ".version 8.0\n.target sm_90\n.address_size 64\n"
    ptx = header + _division_kernel("ieee", "div.rn") + _division_kernel("full", "div.full")
    stats = ptx_sass_statistics(ptx, ptxas, nvdisasm)
    assert set(stats) == {"ieee", "full"}
    ieee, full = stats["ieee"], stats["full"]
    assert ieee.calls >= 1 and ieee.subroutine_instructions > 10
    assert full.calls == 0 and full.subroutines == ()
    assert full.mufu["RCP"] == 1
    assert full.instructions < ieee.instructions - ieee.subroutine_instructions
    assert full.global_loads == {64: 1} and full.global_stores == {32: 1}


def test_ptx_without_a_target_needs_an_arch():
    ptxas, nvdisasm = _tools()
    ptx = ".version 8.0\n.address_size 64\n" + _division_kernel("k", "div.full")
    with pytest.raises(SassError, match="names no .target"):
        ptx_sass_statistics(ptx, ptxas, nvdisasm)
    assert set(ptx_sass_statistics(ptx, ptxas, nvdisasm, arch="sm_80")) == {"k"}


def test_a_rejected_ptx_is_an_error_naming_ptxas():
    ptxas, nvdisasm = _tools()
    with pytest.raises(SassError, match="ptxas rejected the PTX for sm_90"):
        ptx_sass_statistics(".version 8.0\n.target sm_90\nnonsense", ptxas, nvdisasm)
