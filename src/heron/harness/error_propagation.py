"""How far an approximation's error may grow on its way to an output.

The check allows each transcendental op its bound in ulps (expand-math's table,
:data:`heron.harness.tolerance.ULP_BOUNDS`) and adds the bounds of a chain: an
error of ``b`` ulps in ``log1p(x)`` is taken to reach the output as ``b`` ulps.
Later ops can amplify it: ``expm1(25 * log1p(x))`` multiplies the relative error of
its argument by about ``|25 log1p(x)|`` (exp's condition number), so a kernel whose
log1p is 1 ulp off (within its bound) gives an output 10 ulps off, and the check
called a correct kernel wrong. (A helper's sweep of jax.scipy found it on
``boxcox1p``.)

:func:`error_propagation` measures that growth with the reference evaluator
itself, to first order: each approximated op of the fused computation (and each
parameter whose value an earlier kernel's approximations reach, with that
kernel's bound) is moved by its bound in ulps, up and down, and the computation
evaluated again from there; the output moves by the amplified error. A complex op
is moved part by part, by its bound in ulps of its value's magnitude: the real
part of ``expm1(1 + i)`` cancels (0.93 - 0.46), so a kernel within 2 ulps of
``|expm1(1 + i)|`` is 5 ulps off in it. A complex power's bound grows per element
with the factors its formula multiplies atan2's and log's errors by (:func:`_growth`),
and a complex output's move is the modulus of its change, both parts. The sum
over the ops of the larger move, doubled (the reference's own roundings of the
op go the same way, and the second-order terms), is the bound per element.
A move to a NaN or an infinity bounds nothing (edge inputs keep their exact
comparison). It is evaluated only for the elements the ulp bound refused
(:class:`ErrorPropagation` is lazy), so a check that passes pays nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import ml_dtypes
import numpy as np

from heron.harness.reference_values import value_of, value_with
from heron.hlo.errors import HloError
from heron.hlo.ir import Computation, Instruction
from heron.hlo.shapes import ArrayShape

__all__ = ["MAX_POINTS", "MAX_WORK", "ErrorPropagation", "error_propagation", "moved_by_ulps"]

#: The approximated ops (and parameters) moved for one output: each costs two
#: evaluations of the fused computation. Up to MAX_POINTS of them are always moved;
#: more while the evaluations stay within MAX_WORK element-operations (the elements of
#: every instruction the output depends on, per evaluation). Past both the ulp bound
#: alone applies. A lens Hessian in f32 (jaxtronomy's NFW, the nineteenth sweep) reads
#: 54 approximations, one of them a cancelling ``log(X/2) + arccosh(1/X)/sqrt(1-X^2)``:
#: held to the ulp bound, a kernel as close to the f64 value as XLA:CPU's was refused.
MAX_POINTS = 48
MAX_WORK = 200_000_000
#: The first-order bound is doubled: the reference's own rounding of each op goes the
#: same way as the kernel's error, and the terms of second order are not counted.
SAFETY = 2.0


@attrs.frozen(eq=False)
class ErrorPropagation:
    """The ops whose error may be amplified on the way to one output, and the values
    to measure it on: ``points`` are ``(instruction, ulps)`` of ``computation``
    (evaluated on ``arguments``); ``source`` (its ``leaf``-th result when a tuple) is
    the output."""

    source: Instruction
    computation: Computation
    arguments: tuple
    points: tuple[tuple[Instruction, int], ...]
    leaf: int = 0

    def bound(self) -> np.ndarray | None:
        """Per element of the output (flat): the amplified error allowed, or None where
        the output could not be evaluated (over the evaluator's memory budget)."""
        try:
            base = self._output(None, None)
            total = np.zeros(base.size, np.float64)
            for instruction, ulps in self.points:
                value = np.asarray(value_of(self.computation, instruction, self.arguments))
                growth = _growth(instruction, self.computation, self.arguments)
                for moves in _moves(value, ulps * growth):
                    largest = np.zeros(base.size, np.float64)
                    for moved_value in moves:
                        moved = self._output(instruction, moved_value)
                        with np.errstate(all="ignore"):
                            change = np.abs(moved - base)
                        largest = np.maximum(largest, np.where(np.isfinite(change), change, 0.0))
                    total += largest
        except HloError:
            return None
        return SAFETY * total

    def accepts(self, kernel: np.ndarray, reference: np.ndarray) -> np.ndarray:
        """Per element of the flat outputs: within the amplified bound."""
        kernel = np.asarray(kernel).reshape(-1)
        bound = self.bound()
        if bound is None or bound.size != kernel.size:
            return np.zeros(kernel.size, np.bool_)
        with np.errstate(all="ignore"):
            error = np.abs(_wide(kernel) - _wide(np.asarray(reference).reshape(-1)))
        return error <= bound

    def _output(self, instruction: Instruction | None, value) -> np.ndarray:
        if instruction is None:
            result = value_of(self.computation, self.source, self.arguments)
        else:
            result = value_with(self.computation, self.source, self.arguments, instruction, value)
        if isinstance(result, tuple):
            result = result[self.leaf]
        return _wide(np.asarray(result)).reshape(-1)


def _wide(values: np.ndarray) -> np.ndarray:
    """``values`` in float64, or complex128 for a complex type: a distance between two
    of them is then the modulus of the difference, both parts counted (float64 would
    keep the real parts alone)."""
    return values.astype(np.complex128 if np.iscomplexobj(values) else np.float64)


def _growth(instruction: Instruction, computation: Computation, arguments) -> np.ndarray | float:
    """How many times its bound in ulps an op's own error may be, per element (1 for
    most ops). A complex power ``x^y`` is computed as ``|x|^c e^(-d arg x) cis(c arg x +
    d ln|x|)`` (y = c + id): the angle's and the decay's arguments carry atan2's and
    log's relative errors multiplied by ``|c arg x|``, ``|d arg x|`` and ``|d ln|x||``,
    and an absolute error in the angle is a relative error of the result (one ulp of
    the angle up to two of ``|x^y|``'s). A c128 ``z ** 2.5`` at ``z = -6.75 - 1.15i``
    (``c arg z = -7.4``) was 14 ulps of ``|w|`` from the evaluator, both computing
    the formula correctly (each 5-7 ulps from the exact value), where powf's bound
    allows 3 (a helper's sweep)."""
    shape = instruction.shape
    if instruction.opcode != "power" or not (
        isinstance(shape, ArrayShape) and shape.element_type.is_complex
    ):
        return 1.0
    base, exponent = (
        np.asarray(value_of(computation, operand, arguments)).astype(np.complex128)
        for operand in instruction.operands
    )
    with np.errstate(all="ignore"):
        angle, log_magnitude = np.angle(base), np.log(np.abs(base))
        c, d = np.abs(exponent.real), np.abs(exponent.imag)
        terms = c * np.abs(angle) + d * np.abs(angle) + d * np.abs(log_magnitude)
        growth = 1.0 + 2.0 * terms
    return np.where(np.isfinite(growth), growth, 1.0)


def _moves(value: np.ndarray, ulps: int | np.ndarray) -> list[tuple[np.ndarray, ...]]:
    """The ways an approximation's result may be off, in groups of which only the
    larger effect counts: a real value up or down; a complex one's real part up or down,
    and its imaginary part up or down, each by ``ulps`` ulps of the value's magnitude
    (a complex op's error is bounded relative to ``|w|``: expm1(1 + i)'s real part
    0.47 is the sum of 0.93 and -0.46, each with its own rounding)."""
    if not np.iscomplexobj(value):
        return [(moved_by_ulps(value, ulps), moved_by_ulps(value, -ulps))]
    step = ulps * _ulp(np.abs(value.astype(np.complex128)), value.real.dtype)
    groups = []
    for axis in (1, 1j):
        with np.errstate(all="ignore"):
            up, down = value + axis * step, value - axis * step
        finite = np.isfinite(value)
        groups.append(
            tuple(np.where(finite, moved, value).astype(value.dtype) for moved in (up, down))
        )
    return groups


def _ulp(magnitude: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """One ulp of ``dtype`` at each of ``magnitude``'s values (float64), the smallest
    normal's at zero."""
    info = ml_dtypes.finfo(dtype)
    with np.errstate(all="ignore"):
        exponent = np.floor(np.log2(np.abs(magnitude)))
        exponent = np.maximum(np.where(np.isfinite(exponent), exponent, info.minexp), info.minexp)
        return np.exp2(exponent - int(info.nmant))


def moved_by_ulps(value: np.ndarray, ulps: int | np.ndarray) -> np.ndarray:
    """``value`` moved by ``ulps`` ulps of its own type (toward +inf when positive),
    each element by its own ulp; NaNs and infinities stay."""
    value = np.asarray(value)
    wide = value.astype(np.float64)
    with np.errstate(all="ignore"):
        moved = np.where(np.isfinite(wide), wide + ulps * _ulp(wide, value.dtype), wide)
    return moved.astype(value.dtype)


def error_propagation(
    source: Instruction,
    computation: Computation,
    arguments: Sequence | None,
    *,
    op_ulps: Callable[[Instruction], int],
    leaf: int = 0,
    parameter_ulps: Sequence[int] = (),
) -> ErrorPropagation | None:
    """The ops of ``computation`` that reach ``source`` with a bound of their own
    (``op_ulps``: the check's table, the op's approximation alone) and the parameters
    ``parameter_ulps`` gives a bound (by parameter number); None when there are none,
    more than :data:`MAX_POINTS`, the output is not a float array, or there are no
    values to measure on."""
    shape = _leaf_shape(source, leaf)
    if arguments is None or not isinstance(shape, ArrayShape):
        return None
    element = shape.element_type
    if not (element.is_floating or element.is_complex) or element.bit_width <= 8:
        return None

    def ulps_of(inst: Instruction) -> int:
        if not isinstance(inst.shape, ArrayShape):
            return 0
        element = inst.shape.element_type
        if element.is_complex and inst.opcode != "parameter":
            return op_ulps(inst)
        if not element.is_floating or element.bit_width <= 8:
            return 0
        if inst.opcode != "parameter":
            return op_ulps(inst)
        number = inst.parameter_number
        return parameter_ulps[number] if number is not None and number < len(parameter_ulps) else 0

    reached = _reaching(source)
    points = tuple(
        (inst, ulps)
        for inst in computation.post_order()
        if inst in reached and (ulps := ulps_of(inst))
    )
    if not points:
        return None
    if len(points) > MAX_POINTS and 2 * len(points) * _work(reached) > MAX_WORK:
        return None
    return ErrorPropagation(source, computation, tuple(arguments), points, leaf)


def _work(instructions: set[Instruction]) -> int:
    """Element-operations of one evaluation of ``instructions`` (each array's elements)."""
    return sum(
        inst.shape.num_elements for inst in instructions if isinstance(inst.shape, ArrayShape)
    )


def _reaching(source: Instruction) -> set[Instruction]:
    """``source`` and the instructions of its computation it depends on."""
    reached: set[Instruction] = set()
    stack = [source]
    while stack:
        inst = stack.pop()
        if inst not in reached:
            reached.add(inst)
            stack.extend(inst.operands)
    return reached


def _leaf_shape(source: Instruction, leaf: int):
    shape = source.shape
    if isinstance(shape, ArrayShape):
        return shape
    leaves = list(shape.leaves())
    return leaves[leaf] if leaf < len(leaves) else None
