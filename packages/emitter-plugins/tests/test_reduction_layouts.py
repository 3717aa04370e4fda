"""Reductions over values in several layouts: two silent wrong answers, found by library code.

A reduction's epilogue root is written where the epilogue moves each reduced value.

equinox's ``AdaptiveMaxPool2d`` gave a silent wrong answer: JAX ends it in a
``transpose`` that layout assignment turns into a ``bitcast`` of the same
dimensions and another layout (``f32[3,3,2]{2,1,0} -> f32[3,3,2]{2,0,1}``),
which priority fusion puts after the reduce as its epilogue. The reduction
emitters wrote an epilogue root of the reduce's dimensions at the reduce's own
index, as if the epilogue were elementwise: 12 of 18 outputs landed in the
wrong places. Now each epilogue root is written at its index as the epilogue
maps it (:func:`heron.plugins.iteration.epilogue_map`, XLA's
``ComputeEpilogueInputToOutputIndexing``), and an epilogue that reads a hero at
two indices is refused (its function is given the hero's value at one).

The operands of a variadic reduce are combined element by logical element: jax's
argmax over a transposed array reduces values in one layout beside an iota in
another, and each operand was read at the logical index of the position in its own
layout (the last test).
"""

from __future__ import annotations

import pytest
from heron_test_support.hlo_modules import JAX_ARGMAX_REDUCER

from heron.harness.check import check_file
from heron.hlo.errors import UnsupportedError
from heron.hlo.parser import parse_module
from heron.plugins.iteration import epilogue_map

_ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"


def _fusion(operand: str, body: str, result: str) -> str:
    return (
        f"HloModule m\n\n{_ADD}\nfused {{\n  p = {operand} parameter(0)\n"
        f"  c = f32[] constant(0)\n{body}\n}}\n\nENTRY e {{\n  p0 = {operand} parameter(0)\n"
        f"  ROOT f = {result} fusion(p0), kind=kInput, calls=fused\n}}\n"
    )


#: name -> (fusion HLO, the emitter that must take it). Each epilogue root has its
#: reduce's dimensions and another layout: logical index (i, j) holds reduce (j, i).
EPILOGUES = {
    "row_layout_bitcast": (
        _fusion(
            "f32[4,4,2048]",
            "  r = f32[4,4] reduce(p, c), dimensions={2}, to_apply=add\n"
            "  ROOT t = f32[4,4]{0,1} bitcast(r)",
            "f32[4,4]{0,1}",
        ),
        "reduce_row",
    ),
    "row_bitcast_beside_the_reduce": (
        _fusion(
            "f32[4,4,2048]",
            "  r = f32[4,4] reduce(p, c), dimensions={2}, to_apply=add\n"
            "  t = f32[4,4]{0,1} bitcast(r)\n"
            "  ROOT s = (f32[4,4], f32[4,4]{0,1}) tuple(r, t)",
            "(f32[4,4], f32[4,4]{0,1})",
        ),
        "reduce_row",
    ),
    "row_epilogue_two_roots_two_indices": (
        _fusion(
            "f32[4,4,2048]",
            "  r = f32[4,4] reduce(p, c), dimensions={2}, to_apply=add\n"
            "  e = f32[4,4] exponential(r)\n"
            "  t = f32[4,4]{0,1} bitcast(e)\n"
            "  n = f32[4,4] negate(e)\n"
            "  ROOT s = (f32[4,4]{0,1}, f32[4,4]) tuple(t, n)",
            "(f32[4,4]{0,1}, f32[4,4])",
        ),
        "reduce_row",
    ),
    "column_layout_bitcast": (
        _fusion(
            "f32[2048,4,8]",
            "  r = f32[4,8] reduce(p, c), dimensions={0}, to_apply=add\n"
            "  ROOT t = f32[4,8]{0,1} bitcast(r)",
            "f32[4,8]{0,1}",
        ),
        "reduce_column_small",
    ),
}


@pytest.mark.parametrize("name", sorted(EPILOGUES))
def test_an_epilogue_root_is_written_where_its_epilogue_moves_it(name, tmp_path):
    text, emitter = EPILOGUES[name]
    path = tmp_path / f"{name}.hlo"
    path.write_text(text)
    report = check_file(path)
    (fusion,) = report.fusions
    assert fusion.emitter == emitter
    assert fusion.ok, fusion.lines(name)


def test_the_adaptive_max_pool_program_agrees(tmp_path, capsys):
    """The end of what equinox's ``AdaptiveMaxPool2d((3, 2))`` lowers to, as JAX prints it:
    the transpose becomes the bitcast above once layouts are assigned."""
    from heron.cli.main import main

    path = tmp_path / "adaptive_max_pool.hlo"
    path.write_text(
        "HloModule amp, entry_computation_layout={(f32[3,3,2,4]{3,2,1,0})->f32[3,3,2]{2,0,1}}\n\n"
        "mx {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  ROOT m = f32[] maximum(a, b)\n}\n\n"
        "ENTRY e {\n  p = f32[3,3,2,4]{3,2,1,0} parameter(0)\n  c = f32[] constant(-inf)\n"
        "  r = f32[3,3,2]{2,1,0} reduce(p, c), dimensions={3}, to_apply=mx\n"
        "  ROOT t = f32[3,3,2]{2,0,1} transpose(r), dimensions={1,0,2}\n}\n"
    )
    code = main(["run", str(path), "--backend", "interpreter", "--check"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "agree: every output within the tolerance" in out


def _instructions(text: str) -> dict[str, object]:
    module = parse_module(text)
    (fused,) = [c for c in module.computations if c.name == "fused"]
    return {inst.name: inst for inst in fused.instructions}


def test_the_epilogue_map_follows_a_layout_changing_bitcast():
    insts = _instructions(EPILOGUES["row_layout_bitcast"][0])
    mapped = epilogue_map(insts["r"], insts["t"])
    assert [str(e) for e in mapped.results] == ["d1", "d0"]


def test_an_epilogue_reading_its_hero_at_two_indices_is_refused():
    text = _fusion(
        "f32[4,4,2048]",
        "  r = f32[4,4] reduce(p, c), dimensions={2}, to_apply=add\n"
        "  t = f32[4,4] transpose(r), dimensions={1,0}\n"
        "  ROOT s = f32[4,4] add(r, t)",
        "f32[4,4]",
    )
    insts = _instructions(text)
    with pytest.raises(UnsupportedError, match="at two indices"):
        epilogue_map(insts["r"], insts["s"])
    same = _instructions(text.replace("add(r, t)", "multiply(t, t)"))
    assert [str(e) for e in epilogue_map(same["r"], same["s"]).results] == ["d1", "d0"]


#: jnp.argmax(jnp.transpose(x, (2, 1, 0)), axis=1) as JAX prints it: the transpose is a
#: bitcast to the layout {0,1,2}, the iota beside it has the default one.
ARGMAX_OF_A_TRANSPOSE = f"""HloModule jit_f

{JAX_ARGMAX_REDUCER}
ENTRY main {{
  x = f32[32,32,33]{{2,1,0}} parameter(0)
  transposed = f32[33,32,32]{{0,1,2}} transpose(x), dimensions={{2,1,0}}
  iota = s32[32]{{0}} iota(), iota_dimension=0
  positions = s32[33,32,32]{{2,1,0}} broadcast(iota), dimensions={{1}}
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  r = (f32[33,32]{{1,0}}, s32[33,32]{{1,0}}) reduce(transposed, positions, ninf, zero),
    dimensions={{1}}, to_apply=argmax_reducer
  ROOT argmax = s32[33,32]{{1,0}} get-tuple-element(r), index=1
}}
"""


def test_a_variadic_reduce_reads_its_operands_at_one_logical_index(tmp_path, capsys):
    """The operands of a variadic reduce in two layouts (jax's argmax over a transposed
    array) are combined element by logical element: the reduction emitters read each at
    the logical index of the position in its own layout, so 1,021 of 1,056 indices came
    out wrong."""
    from heron.cli.main import main

    path = tmp_path / "argmax_of_a_transpose.hlo"
    path.write_text(ARGMAX_OF_A_TRANSPOSE)
    code = main(["run", str(path), "--backend", "interpreter", "--check"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "out0  identical" in out


#: A softmax over rows whose root is a bitcast to the transposed layout: the row
#: normalisation emitter evaluated the bitcast at its operand's index, writing 3,707
#: of 4,096 values to the wrong place; it now leaves the fusion to the loop emitter.
SOFTMAX_INTO_ANOTHER_LAYOUT = f"""HloModule m

{_ADD}
mx {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}}

fused {{
  p = f32[64,64] parameter(0)
  c = f32[] constant(-inf)
  z = f32[] constant(0)
  m = f32[64] reduce(p, c), dimensions={{1}}, to_apply=mx
  mb = f32[64,64] broadcast(m), dimensions={{0}}
  d = f32[64,64] subtract(p, mb)
  e = f32[64,64] exponential(d)
  s = f32[64] reduce(e, z), dimensions={{1}}, to_apply=add
  sb = f32[64,64] broadcast(s), dimensions={{0}}
  q = f32[64,64] divide(e, sb)
  ROOT t = f32[64,64]{{0,1}} bitcast(q)
}}

ENTRY e {{
  p0 = f32[64,64] parameter(0)
  ROOT f = f32[64,64]{{0,1}} fusion(p0), kind=kInput, calls=fused
}}
"""


def test_a_row_normalisation_into_another_layout_is_not_claimed(tmp_path):
    path = tmp_path / "softmax_into_another_layout.hlo"
    path.write_text(SOFTMAX_INTO_ANOTHER_LAYOUT)
    (fusion,) = check_file(path).fusions
    assert fusion.emitter == "loop"
    assert fusion.ok, fusion.lines("softmax")
    # the same softmax written in its own layout is still the row normalisation's
    path.write_text(
        SOFTMAX_INTO_ANOTHER_LAYOUT.replace("  ROOT t = f32[64,64]{0,1} bitcast(q)\n", "")
        .replace("  q = f32[64,64] divide", "  ROOT q = f32[64,64] divide")
        .replace("f32[64,64]{0,1} fusion", "f32[64,64] fusion")
    )
    (fusion,) = check_file(path).fusions
    assert fusion.emitter == "row_normalization"
    assert fusion.ok, fusion.lines("softmax")
