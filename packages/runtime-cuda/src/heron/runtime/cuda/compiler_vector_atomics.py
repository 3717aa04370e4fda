"""sm_90's vector atomic adds: a marked run of scalar atomic adds -> one ``red.global``.

Hopper adds 2 or 4 consecutive f32 (2, 4 or 8 f16/bf16) to global memory in
one instruction (PTX 8.1 ``red.global.add.v4.f32``, ``red.global.add.noftz.v8.bf16``);
XLA's scatter kernels use it (``atom.global.v4.f32.add``), and on the H200 heron's
scatter-add of 1M rows of 128 f32, the same launch with one scalar atomic per
element, took 2.5x XLA's time (issue 29).

``vectorize-loads-stores`` makes a vector ``heron_gpu.atomic_rmw`` where the
Target says the device has the instruction and the index is aligned;
``lower-tensors`` writes it as one marked scalar ``memref.atomic_rmw`` per lane
(:mod:`heron.emitters.atomics`), which is what the interpreter runs. This step,
before ``convert-gpu-to-nvvm`` (``compiler_mlir.nvvm_steps``), replaces each
complete run of marked lanes (lane ``k`` at the first lane's index + ``k``, on
one buffer, results unused) by one inline-PTX reduction on the address of the
first lane. LLVM 22's NVPTX backend would expand a vector ``atomicrmw fadd``
into a 128-bit compare-and-swap loop, hence the inline PTX, as XLA writes it.

The element's address is computed as the pointer the memref holds plus the
index times the element's size, in 64-bit integers: with 32-bit indices
(``index_bitwidth=32``) this step changes nothing, and the scalar atomics
stay, which compute the same. ``red`` returns nothing: the lanes' results are
unused (an ``atomic_rmw`` whose old value is read is no scatter's). Like the
scalar ``atom.global.add.f32`` it replaces, the f32 form flushes subnormals
(PTX: an f32 ``red``/``atom`` add on global memory is ``.ftz``); the half forms
are ``.noftz``, as heron's scalar ones.
"""

from __future__ import annotations

from typing import Any

__all__ = ["lower_vector_atomics"]

#: MLIR element type name -> (PTX type, inline-asm constraint, bytes, register type name).
_ELEMENTS = {
    "f32": ("add.v{n}.f32", "f", 4, "f32"),
    "f16": ("add.noftz.v{n}.f16", "h", 2, "i16"),
    "bf16": ("add.noftz.v{n}.bf16", "h", 2, "i16"),
}


def _marked_run(op: Any, ir: Any) -> list[Any] | None:
    """The lanes of the vector add that lane-0 atomic ``op`` starts, when all are there."""
    from heron.emitters.atomics import lane_of

    marked = lane_of(op)
    if marked is None or marked[0] != 0:
        return None
    lanes = marked[1]
    run = [op]
    _, buffer, index = op.operands
    following = [o.operation for o in op.block.operations]
    for current in following[following.index(op) + 1 :]:
        if len(run) == lanes:
            break
        if current.name != "memref.atomic_rmw":
            continue  # the lane's value and index are computed between two lanes
        if lane_of(current) != (len(run), lanes) or current.operands[1] != buffer:
            return None
        if not _is_index_plus(current.operands[2], index, len(run), ir):
            return None
        run.append(current)
    if len(run) != lanes or any(len(list(lane.results[0].uses)) for lane in run):
        return None
    return run


def _is_index_plus(value: Any, base: Any, offset: int, ir: Any) -> bool:
    """Whether ``value`` is ``base + offset`` (``arith.addi`` of an index constant)."""
    if not isinstance(value, ir.OpResult) or value.owner.name != "arith.addi":
        return False
    lhs, rhs = value.owner.operands
    if lhs != base or not isinstance(rhs, ir.OpResult) or rhs.owner.name != "arith.constant":
        return False
    return ir.IntegerAttr(rhs.owner.attributes["value"]).value == offset


def _reduce(run: list[Any], ir: Any, arith: Any, llvm: Any, memref: Any) -> None:
    """One inline ``red.global`` for ``run``, at its last lane; the lanes erased."""
    first = run[0]
    _, buffer, index = first.operands
    element = ir.MemRefType(buffer.type).element_type
    ptx_op, constraint, size, register = _ELEMENTS[str(element)]
    i64 = ir.IntegerType.get_signless(64)
    with ir.InsertionPoint(run[-1]), run[-1].location:
        pointer = memref.ExtractAlignedPointerAsIndexOp(buffer).result
        offset = arith.muli(arith.index_cast(i64, index), arith.ConstantOp(i64, size).result)
        address = arith.addi(arith.index_cast(i64, pointer), offset)
        values = [lane.operands[0] for lane in run]
        if register != str(element):
            bits = ir.IntegerType.get_signless(16)
            values = [arith.bitcast(bits, v) for v in values]
        n = len(run)
        registers = ", ".join(f"${k + 1}" for k in range(n))
        asm = (
            "{ .reg .u64 %heron_global; cvta.to.global.u64 %heron_global, $0; "
            f"red.global.{ptx_op.format(n=n)} [%heron_global], {{{registers}}}; }}"
        )
        llvm.inline_asm(
            None,
            [address, *values],
            asm,
            ",".join(["l", *[constraint] * n]),
            has_side_effects=True,
        )
    for lane in run:
        lane.erase()


def lower_vector_atomics(module: Any, *, index_bitwidth: int = 64) -> None:
    """Join every complete marked run of atomic adds of ``module`` (in place)."""
    if index_bitwidth < 64:
        return
    from mlir import ir
    from mlir.dialects import arith, llvm, memref

    from heron.emitters.ir_utils import walk_ops

    runs = []
    for op in walk_ops(module.operation, frozenset({"memref.atomic_rmw"})):
        run = _marked_run(op, ir)
        if run is not None and str(ir.MemRefType(op.operands[1].type).element_type) in (_ELEMENTS):
            runs.append(run)
    for run in runs:
        _reduce(run, ir, arith, llvm, memref)
