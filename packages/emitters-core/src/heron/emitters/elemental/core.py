"""The elemental emitter's core: one lowering per HLO opcode, found by table.

Elemental emission computes *one element* of an instruction's result at given
indices, as scalar MLIR values (arith, math, complex, tensor, scf). It never
decides iteration order or where results go: that is the hero emitter's job
(see :mod:`heron.emitters.emitter_base`). What it needs from its caller is in
:class:`ElementalContext`: how to get an operand's element (which may be a
``tensor.extract`` of a fusion parameter, a ``pure_call`` of another subgraph,
or a recursive emission in the same function) and how to apply a scalar
computation (a reducer or a map's ``to_apply``).

Lowerings register themselves per opcode with :func:`lowering`; the modules
that hold them are imported by :mod:`heron.emitters.elemental`, so the table
is complete once that package is imported. A lowering emits at the current
MLIR insertion point and location and returns one value per array leaf of the
instruction's shape (one for an array, several for a tuple-shaped reduce).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
from mlir import ir

from heron.hlo.errors import UnsupportedError
from heron.hlo.ir import Computation, Instruction

Values = list[ir.Value]

#: ``resolve(operand, indices)``: the operand's element at ``indices`` (one value per leaf).
Resolver = Callable[[Instruction, Sequence[ir.Value]], Values]
#: ``call(computation, scalars)``: apply a scalar computation (reducer, map body).
Caller = Callable[[Computation, Sequence[ir.Value]], Values]


@attrs.frozen
class ElementalContext:
    """What a lowering may ask of the emitter that drives it.

    ``fusion_name`` is only for error messages: an unsupported op must be
    reported with the fusion it was found in.
    """

    resolve: Resolver
    call: Caller
    fusion_name: str = "?"

    def operand(self, inst: Instruction, number: int, indices: Sequence[ir.Value]) -> ir.Value:
        """Operand ``number`` of ``inst`` at ``indices``, for array-shaped operands."""
        values = self.resolve(inst.operands[number], indices)
        if len(values) != 1:
            raise unsupported(self, inst, f"operand {number} is a tuple where an array is needed")
        return values[0]


Lowering = Callable[[Instruction, Sequence[ir.Value], ElementalContext], Values]

_LOWERINGS: dict[str, Lowering] = {}


def lowering(*opcodes: str) -> Callable[[Lowering], Lowering]:
    """Register the decorated function as the lowering of ``opcodes``.

    Registering an opcode twice is a programming error and raises at import
    time, so two modules cannot silently shadow each other.
    """

    def register(function: Lowering) -> Lowering:
        for opcode in opcodes:
            if opcode in _LOWERINGS:
                raise RuntimeError(
                    f"elemental lowering for '{opcode}' registered twice"
                    f" ({_LOWERINGS[opcode].__module__} and {function.__module__})"
                )
            _LOWERINGS[opcode] = function
        return function

    return register


def supported_opcodes() -> frozenset[str]:
    """Opcodes with an elemental lowering."""
    return frozenset(_LOWERINGS)


def unsupported(ctx: ElementalContext | str, inst: Instruction, why: str) -> UnsupportedError:
    """The error for an op (or a type of it) that elemental emission cannot handle."""
    fusion = ctx if isinstance(ctx, str) else ctx.fusion_name
    return UnsupportedError(
        f"fusion '{fusion}': cannot emit {inst.opcode} '{inst.name}' ({inst.shape}): {why}",
        inst.location,
    )


def emit_instruction(
    inst: Instruction, indices: Sequence[ir.Value], ctx: ElementalContext
) -> Values:
    """The element of ``inst`` at ``indices`` (index values, one per output dimension)."""
    function = _LOWERINGS.get(inst.opcode)
    if function is None:
        raise unsupported(ctx, inst, "no elemental lowering for this op")
    values = function(inst, indices, ctx)
    return list(values)
