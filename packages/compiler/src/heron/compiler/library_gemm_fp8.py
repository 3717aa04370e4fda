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
  and bitcasts), or None where it is none; each operand on its own: one
  dequantized with a scale and the other a plain convert is a call with one
  scale (XLA passes a constant 1 for the other);
- :func:`fp8_output`: the fp8 result XLA's rewriter makes the call's own
  output, ``convert(clamp(-max, dot * s (or dot / s), max))`` to an fp8 type
  whose largest finite value is ``max`` (jax's ``jnp.clip`` spells the clamp
  ``minimum(maximum(...))``, which XLA's simplifier makes a clamp first);
- :func:`operand_layout`: the pass. For each canonical fp8 (or s8) dot
  whose ``rhs`` is stored ``[k, n]``, the fp8 value gets a transpose to
  ``[n, k]`` (a kernel of its own: the library's fusion never takes it, the
  fusion checker refuses it) and a transpose back that the library reads as a
  transposed operand. An fp8 ``lhs`` read transposed gets its fp8 value
  transposed to ``[m, k]`` by a kernel, below its dequantization, as XLA's
  ``wrapped_transpose`` (an s8 one stays a transpose the library does not
  read: :func:`heron.compiler.library_gemm.match_gemm` leaves it outside, a
  kernel). An fp8 output divided by ``s`` becomes one multiplied by
  ``1 / s``, a scalar computed by a kernel of its own, the call's
  ``d_scale``: what XLA passes.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import ml_dtypes
import numpy as np

from heron.compiler.library_gemm_layout import TN_TYPES, readable_operands
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
    "Fp8Output",
    "fp8_gemms",
    "fp8_operand",
    "fp8_output",
    "operand_layout",
]


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
    #: the scalar the converted value is multiplied by (a constant or not), or None
    scalar: Instruction | None = None


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
    scalar: Instruction | None = None
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
        scalar = broadcast.operands[0]
        value = constant(scalar)
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
    return Fp8Operand(inst, transposed, scale, constant_scale, tuple(members), scalar)


@attrs.frozen
class Fp8Output:
    """An fp8 dot's result saturated and rounded to fp8 (:func:`fp8_output`): the convert
    computing it, the scalar it is multiplied or divided by first (None: 1), whether it
    divides, and the instructions from the dot's result (excluded) to the convert (the
    scalar excluded, the clamp's constant bounds included)."""

    convert: Instruction
    scale: Instruction | None
    divides: bool
    members: tuple[Instruction, ...]


def _constant_value(inst: Instruction) -> tuple[float | None, list[Instruction]]:
    """The value of a real scalar constant or a broadcast of one, and its instructions."""
    chain = [inst]
    if inst.opcode == "broadcast":
        inst = inst.operands[0]
        chain.append(inst)
    literal = inst.literal if inst.opcode == "constant" else None
    if not isinstance(literal, np.ndarray) or literal.size != 1 or literal.dtype.kind != "f":
        return None, []
    return float(literal.reshape(-1)[0]), chain


def _only_user(
    inst: Instruction, users: Callable[[Instruction], list[Instruction]]
) -> Instruction | None:
    """The one instruction reading ``inst``, or None (none, or several)."""
    found = users(inst)
    return found[0] if len(found) == 1 else None


def _clamp(
    inst: Instruction, users: Callable[[Instruction], list[Instruction]]
) -> tuple[Instruction, float, float, list[Instruction]] | None:
    """The clamp of ``inst`` (its only reader): ``clamp(lo, inst, hi)``, or
    ``minimum(maximum(inst, lo), hi)`` / ``maximum(minimum(inst, hi), lo)`` in either
    operand order, the bounds scalar constants or broadcasts of them; (its last op, lo,
    hi, its instructions) or None."""
    user = _only_user(inst, users)
    if user is None:
        return None
    if user.opcode == "clamp" and len(user.operands) == 3 and user.operands[1] is inst:
        (lo, lo_chain), (hi, hi_chain) = (_constant_value(user.operands[i]) for i in (0, 2))
        if lo is None or hi is None:
            return None
        return user, lo, hi, [user, *lo_chain, *hi_chain]
    members: list[Instruction] = []
    bounds: dict[str, float] = {}
    top = inst
    for _ in range(2):
        if user is None or user.opcode not in ("maximum", "minimum") or user.opcode in bounds:
            return None
        others = [o for o in user.operands if o is not top]
        if len(user.operands) != 2 or len(others) != 1:
            return None
        value, chain = _constant_value(others[0])
        if value is None:
            return None
        bounds[user.opcode] = value
        members += [user, *chain]
        top = user
        user = _only_user(top, users) if len(bounds) < 2 else None
    return top, bounds["maximum"], bounds["minimum"], members


def fp8_output(
    top: Instruction, users: Callable[[Instruction], list[Instruction]]
) -> Fp8Output | None:
    """The fp8 output computed from ``top`` (an fp8 dot's result, after its alpha), as
    XLA's GEMM rewriter takes it into the call: ``top``, perhaps multiplied by (or divided
    by) a broadcast f32 scalar, clamped to exactly ``[-max, max]`` of the fp8 type it is
    then converted to, each value read by the next alone; None where it is not that
    (other bounds, no clamp, another reader: XLA then keeps the f32 call and a kernel).
    ``users(inst)``: the instructions reading ``inst``."""
    members: list[Instruction] = []
    scale: Instruction | None = None
    divides = False
    inst = top
    user = _only_user(inst, users)
    if user is not None and user.opcode in ("multiply", "divide") and len(user.operands) == 2:
        if user.operands[0] is user.operands[1]:
            return None
        other = user.operands[1] if user.operands[0] is inst else user.operands[0]
        if user.opcode == "divide" and user.operands[0] is not inst:
            return None
        if other.opcode != "broadcast" or not _scalar(other.operands[0]):
            return None
        if other.operands[0].array_shape.element_type.value != "f32":
            return None
        scale, divides = other.operands[0], user.opcode == "divide"
        members += [user, other]
        inst = user
    clamp = _clamp(inst, users)
    if clamp is None:
        return None
    last, lo, hi, chain = clamp
    convert = _only_user(last, users)
    if convert is None or convert.opcode != "convert" or not _is_fp8(convert):
        return None
    largest = float(ml_dtypes.finfo(convert.array_shape.element_type.numpy_dtype).max)
    if (lo, hi) != (-largest, largest):
        return None
    return Fp8Output(convert, scale, divides, (*members, *chain, convert))


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
    if rhs.array_shape.rank != batch + 2:
        return None
    moved = _lhs_stored_mk(inserter, dot, batch) if fp8_gemms(target) else None
    if moved is not None:
        return moved  # rewrite_each gives the new dot its rhs treatment next
    if not _tn_operands(dot):
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


@attrs.frozen
class _Dequantized:
    """A dot operand as its fp8 value (``value``), read through ``swaps`` transposes of
    its last two dimensions (above the dequantization in any layout; below it only one
    that moves no byte, which layout assignment leaves), a convert (``converted``) and
    a multiply by a broadcast ``scalar``."""

    value: Instruction
    swaps: int
    converted: bool
    scalar: Instruction | None


def _swap_of(inst: Instruction, batch: int) -> bool:
    return (
        inst.opcode == "transpose"
        and inst.array_shape.rank == batch + 2
        and tuple(inst.attributes.get("dimensions", ())) == (*range(batch), batch + 1, batch)
    )


def _dequantized_chain(side: Instruction, batch: int) -> _Dequantized | None:
    """``side`` as :class:`_Dequantized`, or None where it is no fp8 value so read."""
    inst, swaps, scalar, converted = side, 0, None, False
    if _swap_of(inst, batch):
        swaps, inst = 1, inst.operands[0]
    if inst.opcode == "multiply" and len(inst.operands) == 2:
        for product, broadcast in (inst.operands, reversed(inst.operands)):
            if (
                product.opcode == "convert"
                and broadcast.opcode == "broadcast"
                and _scalar(broadcast.operands[0])
                and broadcast.operands[0].array_shape.element_type.value == "f32"
            ):
                scalar, inst = broadcast.operands[0], product
                break
        else:
            return None
    if inst.opcode == "convert":
        converted, inst = True, inst.operands[0]
    if not _is_fp8(inst) or (scalar is not None and not converted):
        return None
    if _swap_of(inst, batch) and not inst.array_shape.is_row_major:
        # a transpose that moves no byte: the value is stored as its operand is (a
        # row-major one is a value of its own, stored as the dot reads it)
        swaps, inst = swaps + 1, inst.operands[0]
    return _Dequantized(inst, swaps, converted, scalar)


def _lhs_stored_mk(inserter: Inserter, dot: Instruction, batch: int) -> Instruction | None:
    """A canonical fp8 ``dot`` whose lhs it reads transposed (its fp8 value stored
    ``[k, m]``, row-major): that value transposed to ``[m, k]`` (a kernel, XLA's
    ``wrapped_transpose``) and dequantized as before, row-major, the dot reading it;
    None where the lhs is no such operand or the rhs is not fp8."""
    lhs, rhs = dot.operands
    found = _dequantized_chain(lhs, batch)
    if (
        found is None
        or found.swaps != 1
        or _dequantized_chain(rhs, batch) is None
        or lhs.array_shape.rank != batch + 2
        or not found.value.array_shape.is_row_major
    ):
        return None
    swap = (*range(batch), batch + 1, batch)
    dims = lhs.array_shape.dims
    if tuple(found.value.array_shape.dims) != tuple(dims[d] for d in swap):
        return None
    fp8 = ArrayShape(found.value.array_shape.element_type, tuple(dims))
    new_lhs = inserter.add(
        "transpose", fp8, [found.value], {"dimensions": swap}, like=dot, suffix="lhs_mk"
    )
    shape = ArrayShape(lhs.array_shape.element_type, tuple(dims))
    if found.converted:
        new_lhs = inserter.add("convert", shape, [new_lhs], like=dot, suffix="lhs_fp8")
    if found.scalar is not None:
        scale = inserter.add(
            "broadcast", shape, [found.scalar], {"dimensions": ()}, like=dot, suffix="lhs_scale"
        )
        new_lhs = inserter.add(
            "multiply", shape, [new_lhs, scale], like=dot, suffix="lhs_dequantized"
        )
    return inserter.add(
        "dot", dot.shape, [new_lhs, rhs], dict(dot.attributes), like=dot, suffix="mk"
    )


def _reciprocal_scale(
    inserter: Inserter, divide: Instruction, target: Target
) -> Instruction | None:
    """``divide(x, broadcast(s))`` of an fp8 dot's result ``x`` saturated and rounded to
    fp8 after it (:func:`fp8_output`) as ``multiply(x, broadcast(1 / s))``, the
    reciprocal a scalar computed on its own: the ``d_scale`` XLA passes the call for a
    program's ``dot / s``. None where ``divide`` is none such."""
    if not fp8_gemms(target) or len(divide.operands) != 2:
        return None
    top, broadcast = divide.operands
    dot: Instruction | None = top
    while (
        dot is not None
        and dot.opcode in ("multiply", "divide")
        and any(_constant_value(o)[0] is not None for o in dot.operands)
    ):
        # a product of constants alone (jax.random.wald's) leads to no dot
        dot = next((o for o in dot.operands if _constant_value(o)[0] is None), None)
    if dot is None or dot.opcode != "dot" or not is_canonical_dot(dot):
        return None
    batch = len(dot.attributes.get("lhs_batch_dims", ()))
    if not all(fp8_operand(o, batch, True, lambda _: None) for o in dot.operands):
        return None
    found = fp8_output(top, inserter.uses.users)
    if found is None or not found.divides or found.members[0] is not divide:
        return None
    scalar = broadcast.operands[0]
    one = inserter.add(
        "constant", scalar.shape, [], like=divide, suffix="one", literal=np.array(1, np.float32)
    )
    reciprocal = inserter.add("divide", scalar.shape, [one, scalar], like=divide, suffix="d_scale")
    spread = inserter.add(
        "broadcast", broadcast.shape, [reciprocal], dict(broadcast.attributes), like=broadcast
    )
    return inserter.add("multiply", divide.shape, [top, spread], like=divide, suffix="d_scale")


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
    module docstring), and every other library dot operands its library reads
    (:func:`.library_gemm_layout.readable_operands`); True when anything changed."""
    changed = False
    if target.gemm_library == "cublasLt":
        changed |= rewrite_each(
            module, "dot", lambda inserter, dot: _stored_nk(inserter, dot, target)
        )
        changed |= rewrite_each(
            module, "divide", lambda inserter, divide: _reciprocal_scale(inserter, divide, target)
        )
    # every library dot's operands in a layout the library reads (XLA's layout constraints)
    changed |= readable_operands(module, target)
    if changed:
        eliminate_dead_code(module)
    return changed


def operand_layout(target: Target) -> HloPass:
    """The ``library-gemm-operand-layout`` pass for ``target``."""
    return HloPass(
        "library-gemm-operand-layout",
        lambda module: layout_for_library(module, target),
        "fp8 and s8 dots' rhs transposed to [n, k], an fp8 lhs to [m, k], for cuBLASLt"
        " (XLA's TN layout), an fp8 output's divisor made its reciprocal (XLA's d_scale);"
        " an operand no library reads copied into row-major order",
    )
