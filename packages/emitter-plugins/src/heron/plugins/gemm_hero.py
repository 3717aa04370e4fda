"""Which fusions the GEMM emitter computes: its hero, a canonical dot.

heron's HLO passes put every dot into XLA's canonical form
``[batch..., M, K] x [batch..., K, N] -> [batch..., M, N]`` (at most one free
dimension a side, at most one contracting dimension;
``heron.hlo.passes.dot_decomposer``, whose dimension numbers this reads). The
emitter claims a fusion whose one root is such a dot, elementwise ops of the
dot's shape after it (an epilogue: bias, activation, convert), or a transpose
of it (a weight gradient), for the element types whose accumulation XLA
defines (:func:`accumulates_in_floats`). Planning the tiles is
:mod:`heron.plugins.gemm_plan`'s, emitting them :mod:`heron.plugins.gemm`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

from heron.hlo.element_types import ElementType
from heron.hlo.ir import Instruction
from heron.hlo.opcodes import is_elementwise
from heron.hlo.passes.dot_decomposer import is_canonical_dot

__all__ = [
    "FLOAT_INPUTS",
    "INTEGER_INPUTS",
    "accumulates_in_floats",
    "gemm_hero",
    "gemm_roots_hero",
    "is_canonical_gemm",
]

#: Input types the emitter takes, by the accumulation type XLA uses for them.
FLOAT_INPUTS = frozenset({ElementType.F16, ElementType.BF16, ElementType.F32, ElementType.F64})
INTEGER_INPUTS = frozenset({ElementType.S8, ElementType.S32})


def is_canonical_gemm(dot: Instruction) -> bool:
    """Whether ``dot`` has the canonical form (batch first, free then contracting on the
    left, contracting then free on the right), the only form the emitter indexes: the
    dot decomposer's own definition (:func:`heron.hlo.passes.dot_decomposer.is_canonical_dot`)."""
    return dot.opcode == "dot" and len(dot.operands) == 2 and is_canonical_dot(dot)


def gemm_hero(root: Instruction) -> Instruction | None:
    """The canonical dot ``root`` computes through an elementwise epilogue, or None.

    ``root`` is the dot itself, a transpose of it (stored at the transposed
    index, no other epilogue), or elementwise ops of the dot's shape on every
    path from the dot up to it (a bias ``add``, an activation, a ``convert``);
    their other operands may be anything elemental (a broadcast bias). So each
    element of C gives exactly the root's element at the same index, which the
    thread that summed it computes (``FusionEmitter`` injects the dot's value).
    """
    if root.opcode == "transpose" and root.operands[0].opcode == "dot":
        dot = root.operands[0]
        return dot if is_canonical_gemm(dot) else None
    dots: list[Instruction] = []

    def reaches(inst: Instruction, memo: dict[Instruction, bool]) -> bool:
        if inst in memo:  # instructions hash by identity
            return memo[inst]
        if inst.opcode == "dot":
            dots.append(inst)
            memo[inst] = True
            return True
        found = [reaches(op, memo) for op in inst.operands]
        memo[inst] = any(found)
        if any(found) and not is_elementwise(inst.opcode):
            dots.append(inst)  # a non-elementwise op between a dot and the root
        return memo[inst]

    if not reaches(root, {}) or len(set(dots)) != 1:
        return None
    (dot,) = set(dots)
    if dot.opcode != "dot" or not is_canonical_gemm(dot):
        return None
    if root.array_shape.dims != dot.array_shape.dims:
        return None
    return dot


def gemm_roots_hero(roots: Sequence[Instruction]) -> Instruction | None:
    """The canonical dot a fusion's ``roots`` compute, or None: one root
    (:func:`gemm_hero`), or several elementwise epilogues of the same dot (the dot
    itself among them perhaps, no transpose), each element of C giving each root's
    element at its index: a GELU and its argument, which a GEMM library writes as its
    output and its auxiliary output."""
    if len(roots) == 1:
        return gemm_hero(roots[0])
    heroes = {id(hero): hero for hero in map(gemm_hero, roots)}
    if None in heroes.values() or len(heroes) != 1 or any(r.opcode == "transpose" for r in roots):
        return None
    return next(iter(heroes.values()))


def accumulates_in_floats(dot: Instruction) -> bool | None:
    """Whether ``dot`` accumulates in floats (True) or in s32 (False), as XLA does for its
    element types; None for types the emitter does not take (fp8, u8, complex, ...)."""
    inputs = {op.array_shape.element_type for op in dot.operands}
    output = dot.array_shape.element_type
    if inputs <= FLOAT_INPUTS and output in FLOAT_INPUTS:
        return True
    if inputs <= INTEGER_INPUTS and output in INTEGER_INPUTS:
        return False
    return None
