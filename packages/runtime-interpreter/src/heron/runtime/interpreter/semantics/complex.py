"""The ``complex`` dialect, on numpy complex64/complex128 values.

``create``/``re``/``im``/``constant``/``neg``/``conj`` move bits (NaN
payloads kept); ``add``/``sub`` are componentwise IEEE operations, exact.
``mul``, ``div`` and ``abs`` use the textbook formulas of upstream
``convert-complex-to-llvm`` (the ``basic`` complex range, no special
inf/NaN recovery): ``(a+bi)(c+di) = (ac - bd) + (ad + bc)i``,
``(a+bi)/(c+di) = ((ac + bd) + (bc - ad)i) / (c^2 + d^2)``,
``|a+bi| = sqrt(a^2 + b^2)``, each operation rounded in the element type.
The transcendental ops (``exp``, ``log``, ``sqrt``, ...) are numpy's
(libm accuracy, not bit-exact). heron's pipeline lowers complex arithmetic
with ``convert-complex-to-standard`` before the interpreter sees it, so
kernels it compiles only keep ``create``/``re``/``im``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from heron.runtime.interpreter.engine import Frame, semantics
from heron.runtime.interpreter.program import Op
from heron.runtime.interpreter.semantics.arith import (
    constant_value,
    element_type,
    sign_bit,
    with_sign,
)


def _parts(value) -> tuple[np.ndarray, np.ndarray]:
    value = np.asarray(value)
    return value.real.copy(), value.imag.copy()


def make_complex(real, imag, dtype) -> np.ndarray:
    """A complex array from its parts, their bits kept (no arithmetic on NaNs)."""
    real, imag = np.broadcast_arrays(np.asarray(real), np.asarray(imag))
    out = np.empty(real.shape, dtype)
    out.real = real
    out.imag = imag
    return out


def _dtype(op: Op) -> np.dtype:
    return element_type(op.result_types[0]).dtype


@semantics("complex.create")
def create(frame: Frame, op: Op) -> None:
    real, imag = frame.operands(op)
    frame.set_result(op, make_complex(real, imag, _dtype(op)))


@semantics("complex.re")
def re(frame: Frame, op: Op) -> None:
    frame.set_result(op, _parts(frame.operand(op, 0))[0])


@semantics("complex.im")
def im(frame: Frame, op: Op) -> None:
    frame.set_result(op, _parts(frame.operand(op, 0))[1])


@semantics("complex.constant")
def constant(frame: Frame, op: Op) -> None:
    frame.set_result(op, constant_value(op.attributes["value"], op.result_types[0]))


def _negate(x: np.ndarray) -> np.ndarray:
    return with_sign(x, ~sign_bit(x))


@semantics("complex.neg")
def neg(frame: Frame, op: Op) -> None:
    real, imag = _parts(frame.operand(op, 0))
    frame.set_result(op, make_complex(_negate(real), _negate(imag), _dtype(op)))


@semantics("complex.conj")
def conj(frame: Frame, op: Op) -> None:
    real, imag = _parts(frame.operand(op, 0))
    frame.set_result(op, make_complex(real, _negate(imag), _dtype(op)))


@semantics("complex.add", "complex.sub")
def add_sub(frame: Frame, op: Op) -> None:
    (a, b), (c, d) = (_parts(v) for v in frame.operands(op))
    combine = np.add if op.name == "complex.add" else np.subtract
    frame.set_result(op, make_complex(combine(a, c), combine(b, d), _dtype(op)))


@semantics("complex.mul")
def mul(frame: Frame, op: Op) -> None:
    (a, b), (c, d) = (_parts(v) for v in frame.operands(op))
    frame.set_result(op, make_complex(a * c - b * d, a * d + b * c, _dtype(op)))


@semantics("complex.div")
def div(frame: Frame, op: Op) -> None:
    (a, b), (c, d) = (_parts(v) for v in frame.operands(op))
    scale = c * c + d * d
    frame.set_result(op, make_complex((a * c + b * d) / scale, (b * c - a * d) / scale, _dtype(op)))


@semantics("complex.abs")
def absolute(frame: Frame, op: Op) -> None:
    real, imag = _parts(frame.operand(op, 0))
    frame.set_result(op, np.sqrt(real * real + imag * imag))


def _numpy_unary(function: Callable[[np.ndarray], np.ndarray]):
    def handler(frame: Frame, op: Op) -> None:
        frame.set_result(op, np.asarray(function(np.asarray(frame.operand(op, 0))), _dtype(op)))

    return handler


for _name, _function in {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "tanh": np.tanh,
    "expm1": np.expm1,
    "log1p": np.log1p,
}.items():
    semantics(f"complex.{_name}")(_numpy_unary(_function))


@semantics("complex.eq", "complex.neq")
def equal(frame: Frame, op: Op) -> None:
    (a, b), (c, d) = (_parts(v) for v in frame.operands(op))
    same = (a == c) & (b == d)
    frame.set_result(op, same if op.name == "complex.eq" else ~same)
