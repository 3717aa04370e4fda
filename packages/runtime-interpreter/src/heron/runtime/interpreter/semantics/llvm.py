"""LLVM intrinsics the pipeline leaves: ``llvm.call_intrinsic`` and ``llvm.intr.*`` ops.

``llvm.call_intrinsic`` names its intrinsic in the attribute ``intrin``
(``llvm.sqrt``, or with a type suffix such as ``llvm.sqrt.f32``); the typed
``llvm.intr.sqrt`` ... ops name it in the op. Both run the same handler, on
the same values as the arith/math ops (see :mod:`~.arith`). Poison cases are
given the value the PTX instruction computes: ``ctlz``/``cttz`` of 0 is the
width (whatever ``is_zero_poison`` says), ``abs`` of INT_MIN is INT_MIN;
``fmuladd`` is fused (a single rounding), as NVPTX contracts it.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from heron.runtime.interpreter.engine import Frame, semantics
from heron.runtime.interpreter.program import Op
from heron.runtime.interpreter.semantics import arith
from heron.runtime.interpreter.semantics import math as math_semantics
from heron.runtime.interpreter.semantics.arith import element_type, signed, unsigned, wrap

Intrinsic = Callable[[Op, list], np.ndarray]

#: Intrinsic name (without ``llvm.`` and type suffixes) -> its meaning on the operands.
INTRINSICS: dict[str, Intrinsic] = {}


def _t(op: Op, index: int = 0):
    return element_type(op.operand_types[index])


def _float_unary(name: str) -> Intrinsic:
    return lambda op, args: math_semantics.apply_unary(name, args[0])


for _name in ("sqrt", "floor", "ceil", "trunc", "round", "roundeven", "exp", "exp2"):
    INTRINSICS[_name] = _float_unary(_name)
for _name in ("log", "log2", "log10", "sin", "cos", "tan"):
    INTRINSICS[_name] = _float_unary(_name)
INTRINSICS["rint"] = INTRINSICS["nearbyint"] = _float_unary("roundeven")
INTRINSICS["fabs"] = lambda op, args: math_semantics.absolute(args[0])
INTRINSICS["copysign"] = lambda op, args: math_semantics.copy_sign(args[0], args[1])
INTRINSICS["fma"] = INTRINSICS["fmuladd"] = lambda op, args: math_semantics.fused_multiply_add(
    *args, _t(op).dtype
)
INTRINSICS["minnum"] = lambda op, args: arith.maximum_number(args[0], args[1], False)
INTRINSICS["maxnum"] = lambda op, args: arith.maximum_number(args[0], args[1], True)
INTRINSICS["minimum"] = lambda op, args: arith.maximum(args[0], args[1], False)
INTRINSICS["maximum"] = lambda op, args: arith.maximum(args[0], args[1], True)
INTRINSICS["pow"] = lambda op, args: arith.float_binary(
    args[0], args[1], _t(op).dtype, lambda a, b: np.power(a.astype(np.float64), b)
)
INTRINSICS["ctlz"] = lambda op, args: wrap(
    math_semantics.count_leading_zeros(args[0], _t(op)), _t(op)
)
INTRINSICS["cttz"] = lambda op, args: wrap(
    math_semantics.count_trailing_zeros(args[0], _t(op)), _t(op)
)
INTRINSICS["ctpop"] = lambda op, args: wrap(
    math_semantics.population_count(args[0], _t(op)), _t(op)
)
INTRINSICS["abs"] = lambda op, args: wrap(np.abs(signed(args[0], _t(op))), _t(op))
INTRINSICS["smin"] = lambda op, args: wrap(
    np.minimum(signed(args[0], _t(op)), signed(args[1], _t(op))), _t(op)
)
INTRINSICS["smax"] = lambda op, args: wrap(
    np.maximum(signed(args[0], _t(op)), signed(args[1], _t(op))), _t(op)
)
INTRINSICS["umin"] = lambda op, args: wrap(
    np.minimum(unsigned(args[0], _t(op)), unsigned(args[1], _t(op))), _t(op)
)
INTRINSICS["umax"] = lambda op, args: wrap(
    np.maximum(unsigned(args[0], _t(op)), unsigned(args[1], _t(op))), _t(op)
)


def funnel_shift(high, low, amount, t, left: bool) -> np.ndarray:
    """``fshl``/``fshr``: shift the ``2w``-bit concatenation ``high:low`` by ``amount % w``."""
    width = t.width
    mask = np.uint64((1 << width) - 1) if width < 64 else np.uint64(0xFFFFFFFFFFFFFFFF)
    a = unsigned(high, t).astype(np.uint64)
    b = unsigned(low, t).astype(np.uint64)
    s = unsigned(amount, t).astype(np.uint64) % np.uint64(width)
    zero = s == 0
    s_safe = np.where(zero, np.uint64(1), s)
    back = np.uint64(width) - s_safe
    if left:
        shifted = ((a << s_safe) | (b >> back)) & mask
        return wrap(np.where(zero, a, shifted), t)
    shifted = ((b >> s_safe) | (a << back)) & mask
    return wrap(np.where(zero, b, shifted), t)


INTRINSICS["fshl"] = lambda op, args: funnel_shift(*args[:3], _t(op), True)
INTRINSICS["fshr"] = lambda op, args: funnel_shift(*args[:3], _t(op), False)

_SUFFIX = re.compile(r"(\.(?:[if]\d+|bf16|v\d+[if]\d+|v\d+bf16|p\d+))+$")


def _intrinsic_key(name: str) -> str:
    name = name.removeprefix("llvm.")
    return _SUFFIX.sub("", name)


def _run(frame: Frame, op: Op, name: str) -> None:
    key = _intrinsic_key(name)
    function = INTRINSICS.get(key)
    if function is None:
        raise frame.unsupported(
            op,
            f"the interpreter does not implement the intrinsic '{name}' (it runs"
            f" {', '.join(sorted(INTRINSICS))})",
        )
    frame.set_result(op, function(op, frame.operands(op)))


@semantics("llvm.call_intrinsic")
def call_intrinsic(frame: Frame, op: Op) -> None:
    name = op.attributes.get("intrin")
    if not isinstance(name, str):
        raise frame.unsupported(op, "no 'intrin' attribute naming the intrinsic")
    if len(op.results) != 1:
        raise frame.unsupported(op, f"intrinsic '{name}' with {len(op.results)} results")
    _run(frame, op, name)


def _typed(frame: Frame, op: Op) -> None:
    _run(frame, op, op.name.removeprefix("llvm.intr."))


for _key in sorted(INTRINSICS):
    semantics(f"llvm.intr.{_key}")(_typed)


@semantics("llvm.mlir.constant")
def llvm_constant(frame: Frame, op: Op) -> None:
    frame.set_result(op, arith.constant_value(op.attributes["value"], op.result_types[0]))
