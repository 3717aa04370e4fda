"""Edges of each hero-selection rule, on inline HLO, and what the analysis holds."""

from __future__ import annotations

import re

import attrs
import pytest
from heron_test_support.analysis import H100, MI300X, analysed

from heron.compiler import fusions_of
from heron.emitters.fusion_analysis import (
    FusionAnalysis,
    analyse_fusion,
    claims_kind,
    union_is_loop,
)
from heron.emitters.fusion_graph import FusionGraph
from heron.emitters.heroes import find_hero
from heron.emitters.reductions import reduction_dimensions
from heron.emitters.transposes import normalise_transpose, tiled_transpose
from heron.hlo.errors import UnsupportedError
from heron.hlo.parser import parse_module

ADD = "add {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"
#: The combiner of a variadic (f32, f32) reduce, ``to_apply=vadd``.
VARIADIC_ADD = (
    "vadd {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n c = f32[] parameter(2)\n"
    " d = f32[] parameter(3)\n x = f32[] add(a, c)\n y = f32[] add(b, d)\n"
    " ROOT t = (f32[], f32[]) tuple(x, y)\n}\n"
)


def _fusion(body: str, params: str):
    """One fusion around ``body`` (a fused computation's lines); params are its parameter shapes."""
    shapes = [s.strip() for s in params.split(";")]
    entry_params = "\n".join(f" e{i} = {s} parameter({i})" for i, s in enumerate(shapes))
    args = ", ".join(f"e{i}" for i in range(len(shapes)))
    root_line = body.strip().splitlines()[-1]
    root_shape = re.search(r"ROOT \S+ = (.*?) [a-z-]+\(", root_line).group(1)
    text = (
        f"HloModule m\n{ADD}{VARIADIC_ADD}fused {{\n{body}\n}}\nENTRY main {{\n{entry_params}\n"
        f" ROOT f = {root_shape} fusion({args}), kind=kLoop, calls=fused\n}}\n"
    )
    return fusions_of(parse_module(text))[0]


def _kind(body: str, params: str, target=H100) -> str:
    return analysed(_fusion(body, params), target).kind


def test_transpose_big_enough_is_tiled():
    body = " p = f32[64,128] parameter(0)\n ROOT t = f32[128,64] transpose(p), dimensions={1,0}"
    fusion = _fusion(body, "f32[64,128]")
    desc = tiled_transpose(fusion.called("calls").root_instruction)
    assert desc is not None and desc.dimensions == (64, 128) and desc.permutation == (1, 0)
    analysis = analysed(fusion)
    assert analysis.kind == "transpose"
    assert analysis.transpose.heroes == (fusion.called("calls").root_instruction,)
    assert analysis.transpose.normalised.output_dims == (128, 64)


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
    computation = fusion.called("calls")
    assert find_hero(computation.root_instruction, FusionGraph(computation)).opcode == "transpose"
    assert [h.opcode for h in analysed(fusion).heroes] == ["transpose"]


def test_reduction_to_scalar_is_row():
    body = (
        " p = f32[4096] parameter(0)\n c = f32[] constant(0)\n"
        " ROOT r = f32[] reduce(p, c), dimensions={0}, to_apply=add"
    )
    fusion = _fusion(body, "f32[4096]")
    dims = reduction_dimensions(fusion.called("calls").root_instruction)
    assert dims.is_row_reduction and dims.dimensions == (1, 1, 4096)
    analysis = analysed(fusion)
    assert analysis.kind == "reduce_row" and analysis.reduction.dimensions == dims


def test_short_rows_are_multi_row():
    body = (
        " p = f32[4096,16] parameter(0)\n c = f32[] constant(0)\n"
        " ROOT r = f32[4096] reduce(p, c), dimensions={1}, to_apply=add"
    )
    assert _kind(body, "f32[4096,16]") == "reduce_multirow"


@pytest.mark.parametrize("rows", [3, 4096])
def test_short_rows_are_multi_row_even_in_one_block_but_never_variadic(rows):
    """XLA 0.12, measured: f32[3,2] rows are one multi-row block; a variadic reduce is row."""
    plain = (
        f" p = f32[{rows},2] parameter(0)\n c = f32[] constant(0)\n"
        f" ROOT r = f32[{rows}] reduce(p, c), dimensions={{1}}, to_apply=add"
    )
    assert _kind(plain, f"f32[{rows},2]") == "reduce_multirow"
    variadic = (
        f" p = f32[{rows},2] parameter(0)\n c = f32[] constant(0)\n"
        f" i = f32[{rows},2] iota(), iota_dimension=1\n"
        f" ROOT r = (f32[{rows}], f32[{rows}]) reduce(p, i, c, c), dimensions={{1}},"
        " to_apply=vadd"
    )
    fusion = _fusion(variadic, f"f32[{rows},2]")
    assert fusion.called("calls").root_instruction.shape.is_tuple
    assert analysed(fusion).kind == "reduce_row"


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
    # CreateReductionFusion: any divisor of the warp, however small (no minimum).
    assert column(4) == column(2) == "reduce_column_small"
    assert column(6) == "reduce_column"


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


def test_a_concatenate_hero_of_several_roots_is_a_loop():
    """XLA 0.12: several roots are input slices or a loop, never its concatenate emitter."""
    shared = (
        " a = f32[16,48] parameter(0)\n b = f32[16,80] parameter(1)\n"
        " c = f32[16,128] concatenate(a, b), dimensions={1}\n"
        " n = f32[16,128] negate(c)\n"
    )
    alone = shared + " ROOT r = f32[16,128] exponential(n)"
    assert _kind(alone, "f32[16,48]; f32[16,80]") == "concatenate"
    both = shared + " ROOT t = (f32[16,128], f32[16,128]) tuple(c, n)"
    analysis = analysed(_fusion(both, "f32[16,48]; f32[16,80]"))
    assert [h.opcode for h in analysis.heroes] == ["concatenate", "concatenate"]
    assert analysis.kind == "loop"


def _s4_transpose(dims: str, out: str, permutation: str, element: str = "s4") -> str:
    return (
        f" p = {element}[{dims}] parameter(0)\n"
        f" ROOT t = {element}[{out}] transpose(p), dimensions={{{permutation}}}"
    )


@pytest.mark.parametrize("element", ["s4", "u4"])
def test_a_4_bit_transpose_of_the_minor_dimension_is_a_loop(element):
    """XLA's b/415741994: tiled only when packed (s8 of the same shape is tiled)."""
    for dims, out, permutation in (("64,64", "64,64", "1,0"), ("24,2,24", "24,2,24", "2,1,0")):
        body = _s4_transpose(dims, out, permutation, element)
        assert _kind(body, f"{element}[{dims}]") == "loop"
        assert _kind(body.replace(element, "s8"), f"s8[{dims}]") == "transpose"
    # A kept minor dimension (a 102 transpose) is still tiled at 4 bits.
    kept = _s4_transpose("64,64,2", "64,64,2", "1,0,2", element)
    assert _kind(kept, f"{element}[64,64,2]") == "transpose"
    # So is one big enough for XLA's packed transpose (tested first): 128x256 u4
    # is one packed block in XLA 0.12 (measured with heron xla: 32,768 B shared).
    big = _s4_transpose("128,256", "256,128", "1,0", element)
    packed = analysed(_fusion(big, f"{element}[128,256]"))
    assert packed.kind == "transpose" and packed.transpose.packed


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


# -- bug: a reduction of every dimension to a scalar is a row reduction ---------------------


@pytest.mark.parametrize("element", ["f32", "f16"])
def test_a_reduction_of_everything_to_a_scalar_is_a_row_reduction_however_long(element):
    """Not race free (300000 > 1024 * 16), but its own root: XLA's IsRealReductionHero."""
    body = (
        f" p = {element}[1000,300] parameter(0)\n c = {element}[] constant(0)\n"
        f" ROOT r = {element}[] reduce(p, c), dimensions={{0,1}}, to_apply=add"
    )
    analysis = analysed(_fusion(body, f"{element}[1000,300]"))
    assert analysis.kind == "reduce_row"
    assert analysis.reduction.dimensions.dimensions == (1, 1, 300000)
    assert analysis.reduction.dimensions.is_row_reduction


def test_a_long_reduction_with_an_epilogue_is_not_a_reduction_hero():
    """An epilogue needs a race-free reduction (XLA's IsRealReductionHero): loop."""
    body = (
        " p = f32[1000,300] parameter(0)\n c = f32[] constant(0)\n"
        " r = f32[] reduce(p, c), dimensions={0,1}, to_apply=add\n ROOT n = f32[] negate(r)"
    )
    assert _kind(body, "f32[1000,300]") == "loop"


# -- transposes are normalised in physical order -----------------------------------------------


def test_a_transpose_into_the_layout_that_undoes_it_is_a_bitcast():
    """f32[768,288]{0,1} holds its elements in f32[288,768]{1,0}'s order: no data moves."""
    body = (
        " p = f32[288,768]{1,0} parameter(0)\n"
        " ROOT t = f32[768,288]{0,1} transpose(p), dimensions={1,0}"
    )
    fusion = _fusion(body, "f32[288,768]{1,0}")
    assert normalise_transpose(fusion.called("calls").root_instruction) is None
    assert analysed(fusion).kind == "loop"


def test_a_transpose_is_normalised_in_the_physical_order_of_its_layouts():
    body = (
        " p = f32[20,160,170]{0,2,1} parameter(0)\n"
        " ROOT t = f32[20,160,170]{2,1,0} transpose(p), dimensions={0,1,2}"
    )
    spec = normalise_transpose(
        _fusion(body, "f32[20,160,170]{0,2,1}").called("calls").root_instruction
    )
    # Physically [160][170][20] -> [20][160][170]: one 2-D swap of 160*170 and 20.
    assert spec is not None and spec.dims == (160 * 170, 20) and spec.permutation == (1, 0)


@pytest.mark.parametrize(
    ("dims", "permutation", "out_dims"),
    [((16, 64, 128), (0, 2, 1), (16, 128, 64)), ((16, 64, 128), (2, 1, 0), (128, 64, 16))],
)
def test_plain_3d_transposes_are_transpose_heroes(dims, permutation, out_dims):
    shape = f"f32[{','.join(map(str, dims))}]"
    out = f"f32[{','.join(map(str, out_dims))}]"
    body = (
        f" p = {shape} parameter(0)\n"
        f" ROOT t = {out} transpose(p), dimensions={{{','.join(map(str, permutation))}}}"
    )
    analysis = analysed(_fusion(body, shape))
    assert analysis.kind == "transpose"
    assert analysis.transpose.normalised.permutation == permutation


# -- the analysis object ----------------------------------------------------------------------


def test_the_analysis_holds_roots_heroes_and_output_positions():
    body = (
        " p = f32[64,128] parameter(0)\n c = f32[] constant(0)\n"
        " r = f32[64] reduce(p, c), dimensions={1}, to_apply=add\n"
        " e = f32[64,128] exponential(p)\n"
        " ROOT t = (f32[64], f32[64,128], f32[64]) tuple(r, e, r)"
    )
    fusion = _fusion(body, "f32[64,128]")
    analysis = analysed(fusion)
    computation = fusion.called("calls")
    assert analysis.fusion is fusion and analysis.target is H100
    assert analysis.computation is computation
    assert [r.name for r in analysis.roots] == ["r", "e", "r"]
    assert [h.name for h in analysis.heroes] == ["r", "e", "r"]
    assert analysis.output_positions == ((0,), (1,), (2,))
    assert [h.name for h in analysis.reduction.heroes] == ["r"]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        analysis.kind = "loop"


def test_each_analysis_has_its_own_graph():
    """No cache outlives an analysis: a second analysis sees the computation as it is now."""
    body = " p = f32[64,128] parameter(0)\n ROOT t = f32[128,64] transpose(p), dimensions={1,0}"
    fusion = _fusion(body, "f32[64,128]")
    first, second = analysed(fusion), analysed(fusion)
    assert first.graph is not second.graph
    assert first.graph.computation is fusion.called("calls")


def test_warp_size_is_the_target_s():
    """XLA reads WarpSize(device): a 48-element row is a reduction on 32 lanes, not on 64."""
    body = (
        " p = f32[4096,48] parameter(0)\n c = f32[] constant(0)\n"
        " ROOT r = f32[4096] reduce(p, c), dimensions={1}, to_apply=add"
    )
    assert _kind(body, "f32[4096,48]", H100) == "reduce_row"
    assert _kind(body, "f32[4096,48]", MI300X) == "loop"


def test_core_count_is_the_target_s():
    """The multi-row vector shrinks until every core has a block: more cores, smaller vectors."""
    body = (
        " p = f32[4096,16] parameter(0)\n c = f32[] constant(0)\n"
        " ROOT r = f32[4096] reduce(p, c), dimensions={1}, to_apply=add"
    )
    fusion = _fusion(body, "f32[4096,16]")
    few = analysed(fusion, attrs.evolve(H100, core_count=8))
    many = analysed(fusion, attrs.evolve(H100, core_count=1000))
    assert few.kind == many.kind == "reduce_multirow"
    assert few.reduction.vector_size > many.reduction.vector_size


def test_analysing_what_is_not_a_fusion_or_without_a_target_is_refused():
    body = " p = f32[8] parameter(0)\n ROOT n = f32[8] negate(p)"
    fusion = _fusion(body, "f32[8]")
    with pytest.raises(UnsupportedError, match="'p' is a parameter, not a fusion"):
        analyse_fusion(fusion.called("calls").parameters[0], H100)
    with pytest.raises(UnsupportedError, match="object .* is not a heron.target.Target"):
        analyse_fusion(fusion, object())


def test_claims_kind_declines_anything_but_an_analysis():
    body = " p = f32[8] parameter(0)\n ROOT n = f32[8] negate(p)"
    fusion = _fusion(body, "f32[8]")
    loop = claims_kind("loop")
    assert loop(analysed(fusion)) is True
    assert claims_kind("transpose")(analysed(fusion)) is False
    assert loop(fusion) is False and loop(object()) is False
    assert isinstance(analysed(fusion), FusionAnalysis)


# ---------------------------------------------------------------------------
# union_is_loop: multi-output fusion's refusal before building a sibling merge.
# ---------------------------------------------------------------------------
_ELEMENTWISE = " p = f32[64,128] parameter(0)\n ROOT n = f32[64,128] negate(p)"
_OTHER_SHAPE = " p = f32[32] parameter(0)\n ROOT e = f32[32] exponential(p)"
_TRANSPOSE = " p = f32[64,128] parameter(0)\n ROOT t = f32[128,64] transpose(p), dimensions={1,0}"
_ROW_SUM = (
    " p = f32[64,128] parameter(0)\n z = f32[] constant(0)\n"
    " ROOT r = f32[64] reduce(p, z), dimensions={1}, to_apply=add"
)
_SLICE = " p = f32[64,128] parameter(0)\n ROOT s = f32[64,64] slice(p), slice={[0:64], [0:64]}"


def _analyses(*bodies: tuple[str, str]) -> list[FusionAnalysis]:
    return [analysed(_fusion(body, params)) for body, params in bodies]


def test_union_of_loop_fusions_is_a_loop():
    assert union_is_loop(_analyses((_ELEMENTWISE, "f32[64,128]"), (_OTHER_SHAPE, "f32[32]")))


def test_union_with_a_reduction_is_left_to_its_analysis():
    # a reduction emitter may take the union (its other roots of the reduce input's size)
    analyses = _analyses((_ELEMENTWISE, "f32[64,128]"), (_ROW_SUM, "f32[64,128]"))
    assert analyses[1].kind == "reduce_row"
    assert not union_is_loop(analyses)


def test_union_of_slices_is_left_to_its_analysis():
    # several roots all slices of same-shaped inputs are input slices, not a loop
    assert not union_is_loop(_analyses((_SLICE, "f32[64,128]"), (_ELEMENTWISE, "f32[64,128]")))


def test_union_with_a_transpose_and_a_root_of_another_size_is_a_loop():
    # the transpose emitter takes a union only with every other root of its input's size
    analyses = _analyses((_TRANSPOSE, "f32[64,128]"), (_OTHER_SHAPE, "f32[32]"))
    assert analyses[0].kind == "transpose"
    assert union_is_loop(analyses)
    same_size = _analyses((_TRANSPOSE, "f32[64,128]"), (_ELEMENTWISE, "f32[64,128]"))
    assert not union_is_loop(same_size)
