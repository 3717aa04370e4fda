"""The hero of a fusion root: the instruction that decides how the fusion is emitted.

XLA's ``FindNonTrivialHero`` with its ``IsIntermediate`` rule, the one hero
search of heron: hero selection calls it once per root while analysing a
fusion (``heron.emitters.fusion_analysis``), and every emitter reads the
result from the analysis (``FusionAnalysis.heroes``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from heron.emitters.fusion_graph import FusionGraph
from heron.emitters.transposes import normalise_transpose, tiled_transpose
from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Instruction
from heron.hlo.opcodes import is_elementwise
from heron.hlo.shapes import ArrayShape

__all__ = ["find_hero", "is_intermediate", "reshape_is_bitcast"]

#: Operands an intermediate may have on the way from a root to a transpose or
#: concatenate hero (XLA's ``FindNonTrivialHero`` allows 3).
MAX_HERO_SEARCH_OPERANDS = 3


def reshape_is_bitcast(src: ArrayShape, dst: ArrayShape) -> bool:
    """``ShapeUtil::ReshapeIsBitcast`` for the layouts heron sees: both in row-major order.

    A reshape moves no data when both shapes list their non-degenerate
    dimensions major to minor in logical order (size-1 dimensions are free).
    """

    def row_major(shape: ArrayShape) -> bool:
        order = [d for d in shape.major_to_minor if shape.dims[d] != 1]
        return order == sorted(order)

    return src.num_elements == dst.num_elements and row_major(src) and row_major(dst)


def is_intermediate(inst: Instruction, allowed_operand_count: int) -> bool:
    """XLA's ``IsIntermediate``: elementwise or bitcast-like, with 1..N operands."""
    count = len(inst.operands)
    if count == 0 or count > allowed_operand_count:
        return False
    if inst.opcode == "copy":
        return inst.shape == inst.operands[0].shape
    if is_elementwise(inst.opcode) or inst.opcode == "bitcast":
        return True
    if inst.opcode == "reshape":
        return reshape_is_bitcast(inst.operands[0].array_shape, inst.array_shape)
    if inst.opcode == "transpose":
        return normalise_transpose(inst) is None  # a transpose that moves no data
    return False


def _find_unique(
    start: Instruction, graph: FusionGraph, predicate: Callable[[Instruction], bool]
) -> Instruction | None:
    """The static ``FindNonTrivialHero(root, predicate)`` of XLA.

    Breadth-first over operands from ``start`` through intermediates (up to 3
    operands); exactly one match, and nothing but intermediates (or the root
    tuple) may consume the match, directly or transitively.
    """
    found: Instruction | None = None
    seen = {id(start)}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if predicate(node):
            if found is not None:
                return None
            found = node
            continue
        if not is_intermediate(node, MAX_HERO_SEARCH_OPERANDS):
            continue
        for op in node.operands:
            if graph.inside(op) and id(op) not in seen:
                seen.add(id(op))
                queue.append(op)
    if found is None:
        return None
    seen = set()
    queue = deque(graph.users(found))
    while queue:
        user = queue.popleft()
        if id(user) in seen:
            continue
        seen.add(id(user))
        if user.opcode not in ("tuple", "parameter") and not is_intermediate(
            user, MAX_HERO_SEARCH_OPERANDS
        ):
            return None
        queue.extend(graph.users(user))
    return found


def find_hero(root: Instruction, graph: FusionGraph) -> Instruction:
    """XLA's ``FindNonTrivialHero``: the instruction that decides the emitter of ``root``.

    Walk up single-operand intermediates (elementwise, bitcasts, layout-
    preserving copies) while the operand is inside the fusion; then look for a
    unique tiled transpose, else a unique concatenate, among intermediates of up
    to 3 operands. A reduce found by the walk is the hero; anything else gives
    the root itself.
    """
    if root.parent is not graph.computation:
        raise UnsupportedError(
            f"find_hero: '{root.name}' ({root.opcode}) is not in the fused computation"
            f" '{graph.computation.name}'"
        )
    hero = root
    while is_intermediate(hero, 1) and graph.inside(hero.operands[0]):
        hero = hero.operands[0]
    if "transpose" in graph.opcodes:
        transpose = _find_unique(hero, graph, lambda n: tiled_transpose(n) is not None)
        if transpose is not None:
            return transpose
    if "concatenate" in graph.opcodes:
        concatenate = _find_unique(hero, graph, lambda n: n.opcode == "concatenate")
        if concatenate is not None:
            return concatenate
    return hero if hero.opcode == "reduce" else root
