"""fp8 and s8 GEMMs for cuBLASLt: their dequantized operands and the "TN" layout (issue 28).

XLA:GPU's GEMM rewriter makes an fp8 dot a ``__cublas$lt$matmul$f8`` call
on a device with fp8 tensor cores (compute capability 8.9: Ada, Hopper):
the dot of two fp8 arrays as jax prints it (``dot(a_f8, b_f8)`` with
``preferred_element_type=f32``), and the scaled form jax users write,
``(convert(a) * a_scale) @ (convert(b) * b_scale)``, whose converts and
scalar multiplies (the dequantization) become the call's fp8 operands and
its ``a_scale`` / ``b_scale`` arguments. cuBLASLt's fp8 (and integer)
kernels read both operands with the contracting dimension minor, "TN" in
its column-major terms: heron's ``lhs [m, k]`` and ``rhs [n, k]``. XLA puts a
transpose before the call where the program's layout is another; so does
this module's pass, ``library-gemm-operand-layout``:

- :func:`fp8_gemms`: whether a Target's GEMM library computes fp8 (cuBLASLt,
  on a device with fp8 tensor cores: ``Target.fp8``, sm_89 and later);
- :func:`fp8_operand`: a dot operand as an fp8 value read through its
  dequantization (perhaps through one transpose of its last two dimensions
  and bitcasts), or None where it is none;
- :func:`operand_layout`: the pass. For each canonical fp8 (or s8) dot
  whose ``rhs`` is stored ``[k, n]``, the fp8 value gets a transpose to
  ``[n, k]`` (a kernel of its own: the library's fusion never takes it, the
  fusion checker refuses it) and a transpose back that the library reads as a
  transposed operand. A transposed ``lhs`` stays a transpose the library does
  not read (:data:`TN_TYPES`: :func:`heron.compiler.library_gemm.match_gemm`
  then leaves it outside, a kernel).
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from heron.hlo.ir import Instruction, Module
from heron.hlo.passes.dce import eliminate_dead_code
from heron.hlo.passes.dot_decomposer import is_canonical_dot
from heron.hlo.passes.manager import HloPass
from heron.hlo.passes.rewrite import Inserter, rewrite_each
from heron.hlo.shapes import ArrayShape
from heron.runtime.core.gemm import FP8_TYPES
from heron.target import Target

__all__ = [
    "TN_TYPES",
    "Fp8Operand",
    "fp8_gemms",
    "fp8_operand",
    "operand_layout",
]

#: Operand types whose cuBLASLt kernels read lhs [m, k] and rhs [n, k] only ("TN").
TN_TYPES = (*FP8_TYPES, "s8")


def fp8_gemms(target: Target) -> bool:
    """Whether ``target``'s GEMM library computes fp8 GEMMs (cuBLASLt from sm_89)."""
    return target.gemm_library == "cublasLt" and target.fp8


@attrs.frozen
class Fp8Operand:
    """A dot operand read as fp8: the fp8 value (``source``), whether the dot reads it
    transposed, its scale (a scalar instruction, or a constant folded into alpha) and
    the instructions between the dot and ``source`` (``source`` excluded)."""

    source: Instruction
    transposed: bool
    scale: Instruction | None
    constant_scale: float
    members: tuple[Instruction, ...]


def _swaps_last_two(inst: Instruction, batch: int) -> bool:
    rank = inst.array_shape.rank
    return (
        inst.opcode == "transpose"
        and rank == batch + 2
        and tuple(inst.attributes.get("dimensions", ())) == (*range(batch), batch + 1, batch)
        and inst.array_shape.is_row_major
    )


def _is_fp8(inst: Instruction) -> bool:
    return isinstance(inst.shape, ArrayShape) and inst.array_shape.element_type.value in FP8_TYPES


def _scalar(inst: Instruction) -> bool:
    return isinstance(inst.shape, ArrayShape) and inst.array_shape.rank == 0


def fp8_operand(
    side: Instruction,
    batch: int,
    transposable: bool,
    constant: Callable[[Instruction], float | None],
) -> Fp8Operand | None:
    """``side`` (a canonical dot's operand) as an fp8 value, or None: the value itself,
    ``convert(x)``, or ``convert(x) * broadcast(s)`` with ``s`` an f32 scalar
    (``constant(s)``: its value where it is a constant, else None), one transpose of
    the last two dimensions above or below that when ``transposable``, bitcasts."""
    members: list[Instruction] = []
    transposed = False
    inst = side
    if transposable and _swaps_last_two(inst, batch):
        transposed, inst = True, inst.operands[0]
        members.append(side)
    scale: Instruction | None = None
    constant_scale = 1.0
    if inst.opcode == "multiply" and len(inst.operands) == 2:
        found = None
        for converted, broadcast in (inst.operands, reversed(inst.operands)):
            if (
                converted.opcode == "convert"
                and _is_fp8(converted.operands[0])
                and broadcast.opcode == "broadcast"
                and _scalar(broadcast.operands[0])
                and broadcast.operands[0].array_shape.element_type.value == "f32"
            ):
                found = (converted, broadcast)
                break
        if found is None:
            return None
        converted, broadcast = found
        value = constant(broadcast.operands[0])
        if value is None:
            scale = broadcast.operands[0]
        else:
            constant_scale = value
            members.append(broadcast.operands[0])
        members += [inst, broadcast, converted]
        inst = converted.operands[0]
    elif inst.opcode == "convert" and _is_fp8(inst.operands[0]):
        members.append(inst)
        inst = inst.operands[0]
    elif not _is_fp8(inst):
        return None
    if transposable and not transposed and _swaps_last_two(inst, batch):
        transposed = True
        members.append(inst)
        inst = inst.operands[0]
    while inst.opcode == "bitcast" and inst.operands[0].array_shape.is_row_major:
        members.append(inst)
        inst = inst.operands[0]
    return Fp8Operand(inst, transposed, scale, constant_scale, tuple(members))


def _tn_operands(dot: Instruction) -> bool:
    """Whether ``dot`` multiplies fp8 (perhaps dequantized) or s8 operands."""
    batch = len(dot.attributes.get("lhs_batch_dims", ()))
    if all(o.array_shape.element_type.value == "s8" for o in dot.operands):
        return True
    return all(fp8_operand(o, batch, True, lambda _: None) is not None for o in dot.operands)


def _dequantized(inserter: Inserter, dot: Instruction, target: Target) -> Instruction | None:
    """A dot of two raw fp8 values read through converts to its output type (exact: every
    fp8 value is one of f32, bf16 and f16), the form the library matcher and heron's GEMM
    kernel (its fallback) take; None where ``dot`` is no such dot on ``target``."""
    lhs, rhs = dot.operands
    out = dot.array_shape.element_type
    if (
        not fp8_gemms(target)
        or not all(_is_fp8(side) for side in (lhs, rhs))
        or out.value not in ("f32", "bf16", "f16")
    ):
        return None
    sides = [
        inserter.add(
            "convert", ArrayShape(out, side.array_shape.dims), [side], like=dot, suffix="fp8"
        )
        for side in (lhs, rhs)
    ]
    return inserter.add("dot", dot.shape, sides, dict(dot.attributes), like=dot, suffix="f8")


def _stored_nk(inserter: Inserter, dot: Instruction, target: Target) -> Instruction | None:
    """A canonical fp8/s8 ``dot`` whose rhs the library reads as stored ``[n, k]``: the
    value transposed to ``[n, k]`` and back (read transposed); None when it already is,
    or ``target``'s library takes no such dot. A dot of raw fp8 values is read through
    converts first (:func:`_dequantized`)."""
    if not is_canonical_dot(dot) or len(dot.attributes.get("rhs_contracting_dims", ())) != 1:
        return None
    dequantized = _dequantized(inserter, dot, target)
    if dequantized is not None:
        return dequantized  # rewrite_each gives the new dot this treatment too
    batch = len(dot.attributes.get("lhs_batch_dims", ()))
    lhs, rhs = dot.operands
    if rhs.array_shape.rank != batch + 2 or not _tn_operands(dot):
        return None
    if rhs.array_shape.element_type.value != "s8" and not fp8_gemms(target):
        return None
    found = fp8_operand(rhs, batch, True, lambda _: None)
    if found is None:  # s8: the value itself, perhaps read transposed
        transposed = _swaps_last_two(rhs, batch)
        value = rhs
    else:
        transposed, value = found.transposed, found.source
    if transposed:
        return None
    # the fp8 (or s8) value as the dot reads it: below its dequantization, above bitcasts
    read = value if found is None else _below_dequantization(rhs)
    swap = (*range(batch), batch + 1, batch)
    dims = read.array_shape.dims
    stored = ArrayShape(read.array_shape.element_type, tuple(dims[d] for d in swap))
    moved = inserter.add(
        "transpose", stored, [read], {"dimensions": swap}, like=dot, suffix="rhs_nk"
    )
    back = inserter.add(
        "transpose", read.shape, [moved], {"dimensions": swap}, like=dot, suffix="rhs_kn"
    )
    new_rhs = _rebuilt(inserter, dot, rhs, read, back)
    return inserter.add(
        "dot", dot.shape, [lhs, new_rhs], dict(dot.attributes), like=dot, suffix="tn"
    )


def _below_dequantization(side: Instruction) -> Instruction:
    """The fp8 value a dequantized operand converts (the convert's operand)."""
    inst = side
    if inst.opcode == "multiply":
        inst = next(o for o in inst.operands if o.opcode == "convert")
    if inst.opcode == "convert":
        inst = inst.operands[0]
    return inst


def _rebuilt(
    inserter: Inserter, dot: Instruction, side: Instruction, old: Instruction, new: Instruction
) -> Instruction:
    """``side`` computed again with ``new`` in place of ``old`` (its dequantization
    copied: the old one may have other users)."""
    if side is old:
        return new
    operands = [
        _rebuilt(inserter, dot, o, old, new) if o is not old else new for o in side.operands
    ]
    if all(a is b for a, b in zip(operands, side.operands, strict=True)):
        return side
    return inserter.add(
        side.opcode, side.shape, operands, dict(side.attributes), like=side, literal=side.literal
    )


def layout_for_library(module: Module, target: Target) -> bool:
    """Give each fp8 and s8 dot of ``module`` the operand layout cuBLASLt reads (see the
    module docstring); True when anything changed."""
    if target.gemm_library != "cublasLt":
        return False
    changed = rewrite_each(module, "dot", lambda inserter, dot: _stored_nk(inserter, dot, target))
    if changed:
        eliminate_dead_code(module)
    return changed


def operand_layout(target: Target) -> HloPass:
    """The ``library-gemm-operand-layout`` pass for ``target``."""
    return HloPass(
        "library-gemm-operand-layout",
        lambda module: layout_for_library(module, target),
        "fp8 and s8 dots' rhs transposed to [n, k] for cuBLASLt (XLA's TN layout)",
    )
