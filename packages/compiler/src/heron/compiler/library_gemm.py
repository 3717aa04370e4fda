"""Which GEMM fusions a library call can compute (issue 17), and with which contract.

XLA:GPU sends a dot to cuBLASLt with the epilogue cuBLASLt fuses (a bias, a
RELU). heron's thunk emission gives such a fusion a
:class:`~heron.runtime.core.thunks.LibraryCallThunk` of the GEMM contract
(:mod:`heron.runtime.core.gemm`) with heron's own kernel as its fallback; the
runtime picks one when it loads the executable. A fusion qualifies when its
computation is exactly, and nothing more than:

- a canonical dot (``heron.hlo.passes.dot_decomposer``: batch, m, k x batch,
  k, n) of two of the fusion's parameters, every shape row-major, with element
  types the contract takes (no prologue: an operand computed inside the
  fusion would need a kernel of its own);
- optionally ``add(dot, broadcast(bias))`` with ``bias`` a parameter of the
  dot's element type and shape ``[n]`` broadcast along the last dimension
  (either operand order);
- optionally ``maximum(that, broadcast(0))`` (RELU; either operand order).

Anything else (a convert, a residual add, a GELU, a dot whose operands are
computed) stays heron's kernel only.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import numpy as np

from heron.hlo.ir import Instruction
from heron.hlo.passes.dot_decomposer import is_canonical_dot
from heron.hlo.shapes import ArrayShape
from heron.runtime.core.gemm import ACCUMULATION, GEMM, GemmCall
from heron.runtime.core.thunks import BufferSlice, KernelThunk, LibraryCallThunk, ThunkError

__all__ = ["GemmFusion", "gemm_fusion", "library_call_thunk"]


@attrs.frozen
class GemmFusion:
    """A fusion a GEMM library call computes: the call and which parameters feed it."""

    call: GemmCall
    #: parameter numbers of the fusion: lhs, rhs, then bias where the call has one
    parameters: tuple[int, ...]


def _row_major(shape: object) -> bool:
    return isinstance(shape, ArrayShape) and shape.minor_to_major == tuple(
        range(shape.rank - 1, -1, -1)
    )


def _parameter(inst: Instruction) -> int | None:
    return inst.parameter_number if inst.opcode == "parameter" else None


def _zero_broadcast(inst: Instruction) -> bool:
    """A broadcast of the scalar constant +0 (``maximum(x, 0)`` is then a RELU)."""
    if inst.opcode != "broadcast" or inst.operands[0].opcode != "constant":
        return False
    literal = inst.operands[0].literal
    if not isinstance(literal, np.ndarray) or literal.size != 1:
        return False
    value = literal.reshape(-1)[0]
    return bool(value == 0) and not np.signbit(value)


def gemm_fusion(fusion: Instruction) -> GemmFusion | None:
    """The library GEMM ``fusion`` is (see the module docstring), or None."""
    if fusion.opcode != "fusion":
        return None
    root = fusion.called("calls").root
    activation = "none"
    if root.opcode == "maximum":
        a, b = root.operands
        inner = a if _zero_broadcast(b) else b if _zero_broadcast(a) else None
        if inner is None:
            return None
        root, activation = inner, "relu"
    bias_parameter = None
    if root.opcode == "add":
        a, b = root.operands
        dot, broadcast = (a, b) if a.opcode == "dot" else (b, a)
        if dot.opcode != "dot" or broadcast.opcode != "broadcast":
            return None
        bias = broadcast.operands[0]
        rank = dot.array_shape.rank
        if (
            tuple(broadcast.attributes.get("dimensions", ())) != (rank - 1,)
            or _parameter(bias) is None
            or bias.array_shape.element_type != dot.array_shape.element_type
        ):
            return None
        bias_parameter = _parameter(bias)
        root = dot
    if root.opcode != "dot" or not is_canonical_dot(root):
        return None
    dot = root
    lhs, rhs = dot.operands
    numbers = (_parameter(lhs), _parameter(rhs))
    if None in numbers or not all(_row_major(s) for s in (lhs.shape, rhs.shape, dot.shape)):
        return None
    if not _row_major(fusion.called("calls").root.shape):
        return None
    batch = len(dot.attributes.get("lhs_batch_dims", ()))
    has_k = bool(dot.attributes.get("lhs_contracting_dims", ()))
    lhs_dims, rhs_dims = lhs.array_shape.dims, rhs.array_shape.dims
    has_m = len(lhs_dims) - batch - has_k == 1
    has_n = len(rhs_dims) - batch - has_k == 1
    types = (lhs.array_shape.element_type.value, rhs.array_shape.element_type.value)
    if types not in ACCUMULATION:
        return None
    count = 1
    for size in lhs_dims[:batch]:
        count *= size
    try:
        call = GemmCall(
            batch=count,
            m=lhs_dims[batch] if has_m else 1,
            n=rhs_dims[-1] if has_n else 1,
            k=lhs_dims[-1] if has_k else 1,
            lhs_type=types[0],
            rhs_type=types[1],
            out_type=dot.array_shape.element_type.value,
            bias=bias_parameter is not None,
            activation=activation,
        )
    except ThunkError:  # a type pair or epilogue the contract does not take
        return None
    if min(call.batch, call.m, call.n, call.k) < 1:
        return None
    parameters = (*numbers, *(() if bias_parameter is None else (bias_parameter,)))
    return GemmFusion(call, tuple(int(p) for p in parameters))


def library_call_thunk(
    fusion: Instruction,
    inputs: Sequence[BufferSlice],
    outputs: Sequence[BufferSlice],
    launch: KernelThunk,
    emitter: str,
) -> LibraryCallThunk | None:
    """The GEMM library call computing ``fusion`` with ``launch`` (heron's kernel) as its
    fallback, or None when the fusion is no library GEMM or its slices do not fit the
    contract (an output over an operand: the library writes out of place)."""
    found = gemm_fusion(fusion)
    if found is None or len(outputs) != 1 or len(inputs) != len(fusion.operands):
        return None
    arguments = (*(inputs[p] for p in found.parameters), outputs[0])
    try:
        found.call.check_slices(arguments)
    except ThunkError:
        return None
    return LibraryCallThunk(
        library="blas",
        operation=GEMM,
        arguments=arguments,
        attributes=found.call.attributes(),
        fallback=(launch,),
        fallback_emitter=emitter,
    )
