"""A fusion's roots and the outputs each fills (heron.hlo.fusion_outputs)."""

from __future__ import annotations

from heron.hlo import parse_module
from heron.hlo.buffers.dataflow import in_place_operands
from heron.hlo.fusion_outputs import fusion_roots, output_positions, output_roots

ARGMAX = """
argmax {
  a = f32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] parameter(2)
  d = s32[] parameter(3)
  m = f32[] maximum(a, c)
  i = s32[] minimum(b, d)
  ROOT t = (f32[], s32[]) tuple(m, i)
}
"""


def _fused(body: str):
    module = parse_module(f"HloModule m\n{ARGMAX}\nfused {{\n{body}\n}}\n")
    return module.computation("fused")


def test_a_lone_root_is_the_one_root():
    comp = _fused("  p = f32[4] parameter(0)\n  ROOT e = f32[4] exponential(p)")
    (root,) = fusion_roots(comp)
    assert root is comp.root_instruction
    assert output_positions((root,)) == ((0,),)
    assert output_roots(comp) == (root,)


def test_a_root_tuple_lists_the_roots_and_a_repeat_is_two():
    comp = _fused(
        "  p = f32[4] parameter(0)\n"
        "  e = f32[4] exponential(p)\n"
        "  n = f32[4] negate(p)\n"
        "  ROOT t = (f32[4], f32[4], f32[4]) tuple(e, n, e)"
    )
    e, n = comp.instruction("e"), comp.instruction("n")
    assert fusion_roots(comp) == (e, n, e)
    assert output_positions(fusion_roots(comp)) == ((0,), (1,), (2,))
    assert output_roots(comp) == (e, n, e)


def test_a_variadic_reduce_is_one_root_filling_one_output_per_leaf():
    reduce = "r = (f32[2], s32[2]) reduce(p, q, z, y), dimensions={1}, to_apply=argmax"
    operands = (
        "  p = f32[2,5] parameter(0)\n"
        "  q = s32[2,5] parameter(1)\n"
        "  z = f32[] constant(0)\n"
        "  y = s32[] constant(0)\n"
    )
    alone = _fused(operands + f"  ROOT {reduce}")
    (r,) = fusion_roots(alone)
    assert output_positions((r,)) == ((0, 1),)
    assert output_roots(alone) == (r, r)

    with_another = _fused(
        operands
        + f"  {reduce}\n"
        + "  n = f32[2,5] negate(p)\n"
        + "  ROOT t = (f32[2,5], (f32[2], s32[2])) tuple(n, r)"
    )
    n, r = with_another.instruction("n"), with_another.instruction("r")
    assert fusion_roots(with_another) == (n, r)
    assert output_positions((n, r)) == ((0,), (1, 2))
    assert output_roots(with_another) == (n, r, r)


def test_buffer_assignment_reads_a_fusions_roots_from_the_owner():
    """A dynamic-update-slice root updates its parameter in place, the owner's root
    numbering giving the result leaf."""
    module = parse_module(
        """HloModule m
fused {
  p0 = f32[8] parameter(0)
  p1 = f32[2] parameter(1)
  i = s32[] parameter(2)
  n = f32[2] negate(p1)
  d = f32[8] dynamic-update-slice(p0, n, i)
  ROOT t = (f32[2], f32[8]) tuple(n, d)
}
ENTRY e {
  a = f32[8] parameter(0)
  b = f32[2] parameter(1)
  c = s32[] parameter(2)
  ROOT f = (f32[2], f32[8]) fusion(a, b, c), kind=kLoop, calls=fused
}
"""
    )
    fusion = module.entry.root_instruction
    assert in_place_operands(fusion) == [(1, 0)]


def test_an_update_another_root_reads_is_not_in_place():
    """A multi-output fusion whose other root reads the updated array (flax's decoding
    step: the key cache updated and the attention's scores summed over it) is no
    in-place update: its other threads would read the bytes it writes (the
    interpreter's sanitizer saw the race), so the result gets a buffer of its own."""
    module = parse_module(
        """HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
fused {
  p0 = f32[8] parameter(0)
  p1 = f32[2] parameter(1)
  i = s32[] parameter(2)
  d = f32[8] dynamic-update-slice(p0, p1, i)
  z = f32[] constant(0)
  r = f32[] reduce(d, z), dimensions={0}, to_apply=add
  ROOT t = (f32[8], f32[]) tuple(d, r)
}
ENTRY e {
  a = f32[8] parameter(0)
  b = f32[2] parameter(1)
  c = s32[] parameter(2)
  ROOT f = (f32[8], f32[]) fusion(a, b, c), kind=kInput, calls=fused
}
"""
    )
    assert in_place_operands(module.entry.root_instruction) == []
