"""Edges of each hero-selection rule, on inline HLO."""

from __future__ import annotations

import re

from heron.compiler import fusions_of
from heron.emitters.fusion_analysis import (
    find_hero,
    fusion_kind,
    reduction_dimensions,
    tiled_transpose,
)
from heron.hlo.parser import parse_module

ADD = "add {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"


def _fusion(body: str, params: str):
    """One fusion around ``body`` (a fused computation's lines); params are its parameter shapes."""
    shapes = [s.strip() for s in params.split(";")]
    entry_params = "\n".join(f" e{i} = {s} parameter({i})" for i, s in enumerate(shapes))
    args = ", ".join(f"e{i}" for i in range(len(shapes)))
    root_line = body.strip().splitlines()[-1]
    root_shape = re.search(r"ROOT \S+ = (.*?) [a-z-]+\(", root_line).group(1)
    text = (
        f"HloModule m\n{ADD}fused {{\n{body}\n}}\nENTRY main {{\n{entry_params}\n"
        f" ROOT f = {root_shape} fusion({args}), kind=kLoop, calls=fused\n}}\n"
    )
    return fusions_of(parse_module(text))[0]


def _kind(body: str, params: str) -> str:
    return fusion_kind(_fusion(body, params))


def test_transpose_big_enough_is_tiled():
    body = " p = f32[64,128] parameter(0)\n ROOT t = f32[128,64] transpose(p), dimensions={1,0}"
    fusion = _fusion(body, "f32[64,128]")
    desc = tiled_transpose(fusion.called("calls").root_instruction)
    assert desc is not None and desc.dimensions == (64, 128) and desc.permutation == (1, 0)
    assert fusion_kind(fusion) == "transpose"


def test_transpose_too_small_falls_back_to_loop():
    body = " p = f32[2,128] parameter(0)\n ROOT t = f32[128,2] transpose(p), dimensions={1,0}"
    assert _kind(body, "f32[2,128]") == "loop"


def test_transpose_is_normalised_by_collapsing():
    body = (
        " p = f32[8,16,32,1] parameter(0)\n"
        " ROOT t = f32[32,1,8,16] transpose(p), dimensions={2,3,0,1}"
    )
    desc = tiled_transpose(_fusion(body, "f32[8,16,32,1]").called("calls").root_instruction)
    assert desc is not None and desc.dimensions == (128, 32) and desc.permutation == (1, 0)


def test_hero_found_through_elementwise_chain():
    body = (
        " p = f32[64,128] parameter(0)\n t = f32[128,64] transpose(p), dimensions={1,0}\n"
        " ROOT n = f32[128,64] negate(t)"
    )
    fusion = _fusion(body, "f32[64,128]")
    assert find_hero(fusion.called("calls").root_instruction).opcode == "transpose"


def test_reduction_to_scalar_is_row():
    body = (
        " p = f32[4096] parameter(0)\n c = f32[] constant(0)\n"
        " ROOT r = f32[] reduce(p, c), dimensions={0}, to_apply=add"
    )
    fusion = _fusion(body, "f32[4096]")
    dims = reduction_dimensions(fusion.called("calls").root_instruction)
    assert dims.is_row_reduction and dims.dimensions == (1, 1, 4096)
    assert fusion_kind(fusion) == "reduce_row"


def test_short_rows_are_multi_row():
    body = (
        " p = f32[4096,16] parameter(0)\n c = f32[] constant(0)\n"
        " ROOT r = f32[4096] reduce(p, c), dimensions={1}, to_apply=add"
    )
    assert _kind(body, "f32[4096,16]") == "reduce_multirow"


def test_long_rows_are_row():
    body = (
        " p = f32[4096,1000] parameter(0)\n c = f32[] constant(0)\n"
        " ROOT r = f32[4096] reduce(p, c), dimensions={1}, to_apply=add"
    )
    assert _kind(body, "f32[4096,1000]") == "reduce_row"


def test_column_small_threshold():
    def column(minor: int) -> str:
        body = (
            f" p = f32[1024,{minor}] parameter(0)\n c = f32[] constant(0)\n"
            f" ROOT r = f32[{minor}] reduce(p, c), dimensions={{0}}, to_apply=add"
        )
        return _kind(body, f"f32[1024,{minor}]")

    assert column(16) == "reduce_column_small"
    assert column(64) == "reduce_column"
    assert column(48) == "reduce_column"


def test_tiny_reduction_is_loop():
    body = (
        " p = f32[8,5] parameter(0)\n c = f32[] constant(0)\n"
        " ROOT r = f32[8] reduce(p, c), dimensions={1}, to_apply=add"
    )
    assert _kind(body, "f32[8,5]") == "loop"


def test_scatter_root():
    body = (
        " o = f32[10,5] parameter(0)\n i = s32[3,1] parameter(1)\n u = f32[3,5] parameter(2)\n"
        " ROOT s = f32[10,5] scatter(o, i, u), update_window_dims={1},"
        " inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,"
        " to_apply=add"
    )
    assert _kind(body, "f32[10,5]; s32[3,1]; f32[3,5]") == "scatter"


def _concat(count: int) -> str:
    params = "\n".join(f" p{i} = f32[16,32] parameter({i})" for i in range(count))
    args = ", ".join(f"p{i}" for i in range(count))
    return f"{params}\n ROOT c = f32[16,{32 * count}] concatenate({args}), dimensions={{1}}"


def test_concatenate_operand_limit():
    assert _kind(_concat(4), "; ".join(["f32[16,32]"] * 4)) == "concatenate"
    assert _kind(_concat(5), "; ".join(["f32[16,32]"] * 5)) == "loop"


DUS = (
    " p = f32[64,8] parameter(0)\n u = f32[4,8] parameter(1)\n i = s32[] parameter(2)\n"
    " z = s32[] constant(0)\n"
)


def test_dus_in_place():
    body = DUS + " ROOT d = f32[64,8] dynamic-update-slice(p, u, i, z)"
    assert _kind(body, "f32[64,8]; f32[4,8]; s32[]") == "dynamic_update_slice"


def test_dus_whose_operand_has_another_user_is_loop():
    body = (
        DUS + " d = f32[64,8] dynamic-update-slice(p, u, i, z)\n n = f32[64,8] negate(p)\n"
        " ROOT t = (f32[64,8], f32[64,8]) tuple(d, n)"
    )
    assert _kind(body, "f32[64,8]; f32[4,8]; s32[]") == "loop"


def test_input_slices():
    def slices(second: str) -> str:
        return (
            f" a = f32[64] parameter(0)\n b = {second} parameter(1)\n"
            " s0 = f32[32] slice(a), slice={[0:32]}\n s1 = f32[32] slice(b), slice={[0:32]}\n"
            " ROOT t = (f32[32], f32[32]) tuple(s0, s1)"
        )

    assert _kind(slices("f32[64]"), "f32[64]; f32[64]") == "input_slices"
    assert _kind(slices("f32[48]"), "f32[64]; f32[48]") == "loop"
