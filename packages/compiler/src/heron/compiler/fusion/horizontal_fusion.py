"""Horizontal fusion: small independent loop kernels become one kernel.

XLA's ``HorizontalLoopFusion``: kernels too small to fill the device (here:
fewer output elements than the Target has thread slots, ``core_count *
threads_per_core_limit``) cost mostly their launch. Independent ones (no path
between any two) whose outputs have one shape become one multi-output loop
kernel (heron's loop emitter writes several outputs of one shape, whatever
their element types). The others, with outputs of one element type, are
merged as XLA merges them: in the fused
computation each output is flattened (a bitcast reshape), the flat outputs are
concatenated and the root is a tuple of unit-stride slices of that
concatenation, the form the ``input_slices`` emitter takes (one thread per
element of the concatenation). Outside, each slice is bitcast back to the
output's shape. The fusion is ``kind=kInput``, as in XLA.
"""

from __future__ import annotations

from collections.abc import Callable

from heron.compiler.fusion.builder import Candidate, build_fusion, install_fusion
from heron.compiler.fusion.context import FusionContext
from heron.compiler.fusion.fusible import MAX_FUSION_PARAMETERS
from heron.compiler.fusion.reachability import Reachability
from heron.hlo.attributes import SliceRange
from heron.hlo.buffers.dataflow import in_place_operands
from heron.hlo.builder import NameUniquer
from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.manager import HloPass
from heron.hlo.shapes import ArrayShape, Layout, TupleShape, array_shape
from heron.target import Target

__all__ = ["MAX_HORIZONTAL_MEMBERS", "fuse_horizontally", "horizontal_fusion"]

#: Kernels merged into one horizontal fusion at most (XLA caps the group too,
#: to bound the fused kernel's size and compile time).
MAX_HORIZONTAL_MEMBERS = 32


def _small_loop_fusion(inst: Instruction, limit: int) -> bool:
    return (
        inst.opcode == "fusion"
        and inst.attr("kind") == "kLoop"
        and isinstance(inst.shape, ArrayShape)
        and 0 < inst.shape.num_elements <= limit
        # Flattening is a bitcast only for row-major outputs.
        and list(inst.shape.major_to_minor) == sorted(inst.shape.major_to_minor)
        # An in-place update writes its window only; merged, it would write all of
        # its operand to a buffer of its own (in a loop body, then copied back).
        and not in_place_operands(inst)
    )


def _flat(element_type: object, n: int) -> ArrayShape:
    shape = array_shape(element_type, (n,))
    return ArrayShape(shape.element_type, shape.dims, Layout.default_for_rank(1))


def _flatten_outputs(candidate: Candidate) -> None:
    """Turn the body's root tuple into slices of one concatenation of flat outputs."""
    body = candidate.body
    names = NameUniquer()
    for inst in body.instructions:
        names.reserve(inst.name)
    roots = list(body.root.operands)
    element_type = roots[0].array_shape.element_type
    flat = []
    for k, root in enumerate(roots):
        n = root.array_shape.num_elements
        flat.append(
            body.add(
                Instruction(
                    name=names.take(f"flat.{k}"),
                    opcode="reshape",
                    shape=_flat(element_type, n),
                    operands=[root],
                )
            )
        )
    total = sum(f.array_shape.num_elements for f in flat)
    concat = body.add(
        Instruction(
            name=names.take("concatenate"),
            opcode="concatenate",
            shape=_flat(element_type, total),
            operands=flat,
            attributes={"dimensions": (0,)},
        )
    )
    slices = []
    start = 0
    for k, f in enumerate(flat):
        n = f.array_shape.num_elements
        slices.append(
            body.add(
                Instruction(
                    name=names.take(f"slice.{k}"),
                    opcode="slice",
                    shape=f.shape,
                    operands=[concat],
                    attributes={"slice": (SliceRange(start, start + n, 1),)},
                )
            )
        )
        start += n
    old_root = body.root
    body.instructions.remove(old_root)
    body.root = body.add(
        Instruction(
            name=names.take("tuple"),
            opcode="tuple",
            shape=TupleShape(tuple(s.shape for s in slices)),
            operands=slices,
        )
    )
    candidate.fusion.shape = body.root.shape


def _groups(module: Module, limit: int, key: Callable[[Instruction], object]):
    """Small loop fusions of the entry grouped by ``key``, in order (each group's members
    independent in the graph as it is now: :func:`_independent` again before a merge)."""
    computation = module.entry
    groups: dict[object, list[Instruction]] = {}
    for inst in computation.post_order():
        if _small_loop_fusion(inst, limit):
            groups.setdefault(key(inst), []).append(inst)
    order = Reachability(computation)
    return [g for g in (_independent(g, order) for g in groups.values()) if len(g) > 1]


def _independent(candidates: list[Instruction], order: Reachability) -> list[Instruction]:
    """The members of ``candidates`` (in order) that go in one group: no path between any
    two, within the member and operand limits."""
    group: list[Instruction] = []
    for inst in candidates:
        operands = sum(len(m.operands) for m in group) + len(inst.operands) + len(group) + 1
        if (
            len(group) < MAX_HORIZONTAL_MEMBERS
            and operands <= MAX_FUSION_PARAMETERS
            and all(order.independent(inst, m) for m in group)
        ):
            group.append(inst)
    return group


def _merge_groups(context: FusionContext, groups: list[list[Instruction]], flatten: bool) -> bool:
    """Merge each group in turn. A merge makes its members one node, which may put a path
    between members of a later group (one reads a member, another is read by one): a
    later group is taken again from the graph as the merges before it left it."""
    changed = False
    for group in groups:
        if changed:
            group = _independent(group, Reachability(context.module.entry))
            if len(group) < 2:
                continue
        changed |= _merge(context, group, flatten)
    return changed


def _merge(context: FusionContext, group: list[Instruction], flatten: bool) -> bool:
    if flatten:
        candidate = build_fusion(group, group, root_name_hint="slice")
        _flatten_outputs(candidate)
    else:
        candidate = build_fusion(group, group)
    verdict = context.checker.check(candidate)
    # Unflattened roots that are all slices are an input-slices kernel too.
    wanted = ("input_slices",) if flatten else ("loop", "input_slices")
    if verdict is None or verdict.emitter_kind not in wanted:
        return False
    apart = sum(context.cost(m).seconds for m in group)
    if context.price(candidate, verdict).seconds >= apart or not context.emits(candidate):
        return False
    install_fusion(context.module, context.module.entry, candidate, verdict.fusion_kind)
    return True


def fuse_horizontally(module: Module, target: Target) -> bool:
    """Merge small independent loop fusions of ``module``'s entry.

    Kernels whose outputs have one shape first become one multi-output loop
    kernel (whatever their element types: one thread per element of all of
    them); what is left is grouped by element type into input-slices kernels.
    """
    context = FusionContext(module, target)
    limit = target.core_count * target.threads_per_core_limit
    changed = _merge_groups(context, _groups(module, limit, lambda inst: inst.shape.dims), False)
    by_type = _groups(module, limit, lambda inst: inst.shape.element_type)
    return _merge_groups(context, by_type, True) or changed


def horizontal_fusion(target: Target) -> HloPass:
    """The ``horizontal-fusion`` pass for ``target``."""
    return HloPass(
        "horizontal-fusion",
        lambda module: fuse_horizontally(module, target),
        "merge small independent loop fusions into one input-slices kernel",
        entry_only=True,
    )
