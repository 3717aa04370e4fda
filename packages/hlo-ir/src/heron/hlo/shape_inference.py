"""Shape inference: the result shape each HLO op must have, given its operands.

The verifier compares every declared result shape with what this module
derives, so a hand-edited shape or a pass that rewires operands wrongly is
reported at the instruction that is wrong instead of stages later in codegen;
the builder uses the same rules to fill shapes in, so IR made in code is
consistent by construction.

The facts follow XLA (``xla/service/shape_inference.cc`` and the HLO verifier
in its default mode): no implicit broadcasting in HLO, no mixed floating-point
precision inside one elementwise op, layouts are not part of the comparison.

Some ops carry part of their result in the declared shape rather than in an
attribute, so inference takes that part as given and checks the rest:

==============================================  ================================
op                                              taken from the declared shape
==============================================  ================================
convert, bitcast-convert, stochastic-convert    the element type
dot, convolution                                the element type (XLA's
                                                "preferred element type"; it
                                                may widen, never narrow ints)
broadcast, reshape, dynamic-reshape             the dimensions
bitcast                                         everything (only the byte size
                                                is checked against the operand)
iota, rng, rng-bit-generator, constant,         everything (checked for
parameter                                       consistency)
==============================================  ================================

``infer_shape`` returns None for ops whose result cannot be derived from
operands and attributes (custom-call, collectives, async and I/O ops,
ragged-dot, scaled-dot); it raises ``ShapeInferenceError`` when the operands or
attributes are invalid for the op.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from heron.hlo.attributes import (
    ComputationRef,
    ConvDimensionNumbers,
    PaddingConfig,
    SliceRange,
    Window,
)
from heron.hlo.element_types import ElementType
from heron.hlo.errors import HloVerifyError
from heron.hlo.ir import Computation, Instruction
from heron.hlo.opcodes import OPCODES, VARIADIC
from heron.hlo.shapes import ArrayShape, Shape, TupleShape

__all__ = ["ShapeInferenceError", "describe_instruction", "infer_shape"]


class ShapeInferenceError(HloVerifyError):
    """Operands or attributes that are invalid for the op.

    ``where`` names the instruction (and its computation when it has one);
    ``detail`` says what is wrong. The message is ``"{where}: {detail}"``.
    """

    def __init__(self, where: str, detail: str, location=None):
        super().__init__(f"{where}: {detail}", location)
        self.where = where
        self.detail = detail


class _Failure(Exception):
    """Raised inside the rules; infer_shape adds the instruction's name and location."""


def describe_instruction(inst: Instruction) -> str:
    """``computation 'c', instruction 'n' (opcode)`` (without the computation when unparented)."""
    text = f"instruction '{inst.name}' ({inst.opcode})"
    if inst.parent is not None:
        text = f"computation '{inst.parent.name}', {text}"
    return text


def infer_shape(inst: Instruction) -> Shape | None:
    """The result shape ``inst`` must have, or None when it cannot be derived."""
    try:
        info = OPCODES.get(inst.opcode)
        if info is None:
            raise _Failure(f"unknown opcode '{inst.opcode}'")
        if info.arity != VARIADIC and len(inst.operands) != info.arity:
            raise _Failure(f"expects {_count(info.arity, 'operand')}, has {len(inst.operands)}")
        return _RULES[inst.opcode](_Ctx(inst))
    except _Failure as failure:
        location = inst.location
        if location is None and inst.parent is not None:
            location = inst.parent.location
        raise ShapeInferenceError(describe_instruction(inst), str(failure), location) from None


# -- helpers ------------------------------------------------------------------

_REQUIRED: Any = object()


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _fmt(shape: Shape) -> str:
    """A shape as text without its layout (layouts take no part in inference)."""
    return str(shape.without_layout())


def _dims_text(dims: Sequence[int]) -> str:
    return "{" + ",".join(str(d) for d in dims) + "}"


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Ctx:
    """One instruction under inference, with typed access to operands and attributes."""

    def __init__(self, inst: Instruction):
        self.inst = inst
        self.opcode = inst.opcode

    # operands ----------------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.inst.operands)

    def operand(self, i: int) -> Shape:
        if i >= len(self.inst.operands):
            # A rule reads the operands its opcode has; a variadic opcode's count is
            # only checked by the rule itself.
            raise _Failure(f"expects at least {_count(i + 1, 'operand')}, has {self.n}")
        return self.inst.operands[i].shape

    def array(self, i: int, what: str | None = None) -> ArrayShape:
        """Operand ``i``'s shape, which must be an array (not a tuple, not a token)."""
        shape = self.operand(i)
        if not isinstance(shape, ArrayShape) or shape.is_token:
            label = what or f"operand {i}"
            raise _Failure(
                f"{label} ('{self.inst.operands[i].name}') must be an array, got {_fmt(shape)}"
            )
        return shape

    def arrays(self) -> list[ArrayShape]:
        return [self.array(i) for i in range(self.n)]

    def need_operands(self, ok: bool, expectation: str) -> None:
        if not ok:
            raise _Failure(f"expects {expectation}, has {self.n}")

    def declared_array(self) -> ArrayShape:
        shape = self.inst.shape
        if not isinstance(shape, ArrayShape) or shape.is_token:
            raise _Failure(f"result must be an array, declared {_fmt(shape)}")
        return shape

    # attributes --------------------------------------------------------------
    def _get(self, name: str, default: Any) -> Any:
        if name in self.inst.attributes:
            return self.inst.attributes[name]
        if default is _REQUIRED:
            raise _Failure(f"needs attribute {name}=")
        return default

    def require(self, name: str) -> Any:
        """Attribute ``name`` whatever its syntax, refused by name when absent."""
        return self._get(name, _REQUIRED)

    def ints(self, name: str, default: Any = _REQUIRED) -> tuple[int, ...]:
        value = self._get(name, default)
        if isinstance(value, (tuple, list)) and all(_is_int(v) for v in value):
            return tuple(value)
        raise _Failure(f"attribute {name} must be a list of integers like {{0,1}}, got {value!r}")

    def int_(self, name: str, default: Any = _REQUIRED) -> int:
        value = self._get(name, default)
        if _is_int(value):
            return value
        raise _Failure(f"attribute {name} must be an integer, got {value!r}")

    def word(self, name: str, default: Any = _REQUIRED) -> str:
        value = self._get(name, default)
        if isinstance(value, str):
            return value
        raise _Failure(f"attribute {name} must be a word, got {value!r}")

    def flag(self, name: str, default: bool = False) -> bool:
        value = self._get(name, default)
        if isinstance(value, bool):
            return value
        raise _Failure(f"attribute {name} must be true or false, got {value!r}")

    def typed(self, name: str, cls: type, default: Any = _REQUIRED) -> Any:
        value = self._get(name, default)
        if isinstance(value, cls):
            return value
        raise _Failure(f"attribute {name} must be a {cls.__name__}, got {value!r}")

    def single_dim(self, name: str = "dimensions") -> int:
        dims = self.ints(name)
        if len(dims) != 1:
            raise _Failure(
                f"attribute {name} must name exactly one dimension, got {_dims_text(dims)}"
            )
        return dims[0]

    # called computations -----------------------------------------------------
    def called(self, name: str) -> Computation:
        ref = self._get(name, _REQUIRED)
        return self._resolve(name, ref)

    def called_list(self, name: str) -> list[Computation]:
        refs = self._get(name, _REQUIRED)
        if not isinstance(refs, tuple):
            refs = (refs,)
        return [self._resolve(name, ref) for ref in refs]

    def _resolve(self, name: str, ref: Any) -> Computation:
        if not isinstance(ref, ComputationRef):
            raise _Failure(f"attribute {name} must name a computation, got {ref!r}")
        if ref.computation is None:
            raise _Failure(f"{name}={ref.name} does not name a known computation")
        return ref.computation


def _check_dims(
    name: str,
    dims: Sequence[int],
    rank: int,
    *,
    what: str = "rank",
    sorted_: bool = False,
) -> None:
    """Dimension numbers must lie in [0, rank), be unique, and (optionally) ascend."""
    for d in dims:
        if not 0 <= d < rank:
            raise _Failure(
                f"{name}={_dims_text(dims)}: dimension {d} is out of range for {what} {rank}"
            )
    if len(set(dims)) != len(dims):
        raise _Failure(f"{name}={_dims_text(dims)} repeats a dimension")
    if sorted_ and list(dims) != sorted(dims):
        raise _Failure(f"{name}={_dims_text(dims)} must be in ascending order")


def _same_dims(ctx: _Ctx, shapes: Sequence[ArrayShape], what: str) -> None:
    first = shapes[0]
    for shape in shapes[1:]:
        if shape.dims != first.dims:
            raise _Failure(
                f"{what} must have the same dimensions, got "
                + " and ".join(_fmt(s) for s in (first, shape))
            )


def _same_element_type(ctx: _Ctx, shapes: Sequence[ArrayShape], what: str = "operands") -> None:
    if not shapes:  # a rank-0 dynamic slice or update has no start index
        return
    first = shapes[0]
    for shape in shapes[1:]:
        if shape.element_type is not first.element_type:
            raise _Failure(
                f"{what} must have the same element type, got "
                + " and ".join(_fmt(s) for s in (first, shape))
            )


def _signature(comp: Computation, attr: str) -> tuple[list[Shape], Shape]:
    """Parameter shapes (by number) and root shape of a called computation."""
    params = comp.parameters
    numbers = [p.parameter_number for p in params]
    if numbers != list(range(len(params))):
        raise _Failure(f"{attr}={comp.name} has parameters numbered {numbers}, not 0..n-1")
    if comp.root is None:
        raise _Failure(f"{attr}={comp.name} has no root instruction")
    return [p.shape for p in params], comp.root.shape


def _scalar(element_type: ElementType) -> ArrayShape:
    return ArrayShape(element_type, ())


def _check_reducer(
    comp: Computation,
    attr: str,
    input_types: Sequence[ElementType],
    init_shapes: Sequence[Shape],
) -> tuple[list[ElementType], bool]:
    """A reduction computation: 2N scalar parameters (N accumulators, N inputs) -> N scalars.

    Returns the accumulator element types and whether the root is a tuple.
    """
    n = len(input_types)
    params, result = _signature(comp, attr)
    if len(params) != 2 * n:
        raise _Failure(
            f"{attr}={comp.name} must take {2 * n} scalar parameters"
            f" ({n} accumulator(s), then {n} input(s)), takes {len(params)}"
        )
    if isinstance(result, TupleShape):
        accumulators = list(result.elements)
        if len(accumulators) != n:
            raise _Failure(
                f"{attr}={comp.name} must return {_count(n, 'scalar')}, returns {_fmt(result)}"
            )
    else:
        if n != 1:
            raise _Failure(
                f"{attr}={comp.name} must return a tuple of {n} scalars, returns {_fmt(result)}"
            )
        accumulators = [result]
    types: list[ElementType] = []
    for i, acc in enumerate(accumulators):
        if not isinstance(acc, ArrayShape) or acc.is_token or acc.dims:
            raise _Failure(f"{attr}={comp.name} must return scalars, returns {_fmt(result)}")
        et = acc.element_type
        for index in (i, n + i):
            if not params[index].same_type_and_dims(acc):
                raise _Failure(
                    f"{attr}={comp.name}: parameter {index} is {_fmt(params[index])}"
                    f" but the accumulator is {_fmt(acc)}"
                )
        init = init_shapes[i]
        if not (isinstance(init, ArrayShape) and init.same_type_and_dims(acc)):
            raise _Failure(
                f"init value {i} is {_fmt(init)} but {attr}={comp.name} accumulates {_fmt(acc)}"
            )
        if input_types[i] is not et:
            raise _Failure(
                f"input {i} has element type {input_types[i]} but {attr}={comp.name}"
                f" accumulates {et}"
            )
        types.append(et)
    return types, isinstance(result, TupleShape)


def _dilated(bound: int, dilation: int) -> int:
    return 0 if bound == 0 else (bound - 1) * dilation + 1


def _window_output(dims: Sequence[int], window: Window) -> tuple[int, ...]:
    """Output sizes of a windowed op over ``dims`` (reduce-window, convolution...)."""
    if len(window.dims) != len(dims):
        raise _Failure(
            f"window has {_count(len(window.dims), 'dimension')} but the input has rank {len(dims)}"
        )
    out = []
    for i, (size, w) in enumerate(zip(dims, window.dims)):
        if w.size <= 0 or w.stride <= 0 or w.base_dilation < 1 or w.window_dilation < 1:
            raise _Failure(
                f"window dimension {i} needs positive size and stride and dilations >= 1,"
                f" got size={w.size} stride={w.stride} lhs_dilate={w.base_dilation}"
                f" rhs_dilate={w.window_dilation}"
            )
        padded = w.pad_low + _dilated(size, w.base_dilation) + w.pad_high
        extent = _dilated(w.size, w.window_dilation)
        out.append(0 if extent > padded else (padded - extent) // w.stride + 1)
    return tuple(out)


# -- the rules ----------------------------------------------------------------

_Rule = Callable[[_Ctx], "Shape | None"]
_RULES: dict[str, _Rule] = {}


def _rule(*opcodes: str) -> Callable[[_Rule], _Rule]:
    def register(fn: _Rule) -> _Rule:
        for opcode in opcodes:
            _RULES[opcode] = fn
        return fn

    return register


# elementwise unary -----------------------------------------------------------

_FLOAT_ONLY = frozenset({"floor", "ceil", "round-nearest-afz", "round-nearest-even", "erf"})
_FLOAT_OR_COMPLEX = frozenset(
    {
        "cosine",
        "sine",
        "tan",
        "exponential",
        "exponential-minus-one",
        "log",
        "log-plus-one",
        "logistic",
        "rsqrt",
        "sqrt",
        "cbrt",
        "tanh",
        "acos",
        "acosh",
        "asin",
        "asinh",
        "atanh",
        "cosh",
        "sinh",
    }
)
_INTEGRAL_ONLY = frozenset({"count-leading-zeros", "popcnt"})


def _type_error(ctx: _Ctx, shape: ArrayShape, expected: str) -> _Failure:
    return _Failure(f"operand type {shape.element_type} is not allowed; expects {expected}")


@_rule(*_FLOAT_ONLY, *_FLOAT_OR_COMPLEX, *_INTEGRAL_ONLY, "negate", "sign", "not", "abs")
def _unary(ctx: _Ctx) -> Shape:
    x = ctx.array(0)
    et = x.element_type
    op = ctx.opcode
    if op in _FLOAT_ONLY and not et.is_floating:
        raise _type_error(ctx, x, "a floating-point type")
    if op in _FLOAT_OR_COMPLEX and not (et.is_floating or et.is_complex):
        raise _type_error(ctx, x, "a floating-point or complex type")
    if op in _INTEGRAL_ONLY and not et.is_integral:
        raise _type_error(ctx, x, "an integer type")
    if op == "negate" and et.is_pred:
        raise _type_error(ctx, x, "an integer, floating-point or complex type")
    if op == "sign" and not (et.is_signed_integral or et.is_floating or et.is_complex):
        raise _type_error(ctx, x, "a signed integer, floating-point or complex type")
    if op == "not" and not (et.is_pred or et.is_integral):
        raise _type_error(ctx, x, "pred or an integer type")
    if op == "abs":
        if et.is_complex:
            return ArrayShape(et.component_type, x.dims)
        if not (et.is_signed_integral or et.is_floating):
            raise _type_error(ctx, x, "a signed integer, floating-point or complex type")
    return x.without_layout()


@_rule("real", "imag")
def _real_imag(ctx: _Ctx) -> Shape:
    x = ctx.array(0)
    if not (x.element_type.is_floating or x.element_type.is_complex):
        raise _type_error(ctx, x, "a floating-point or complex type")
    return ArrayShape(x.element_type.component_type, x.dims)


@_rule("is-finite")
def _is_finite(ctx: _Ctx) -> Shape:
    x = ctx.array(0)
    if not x.element_type.is_floating:
        raise _type_error(ctx, x, "a floating-point type")
    return ArrayShape(ElementType.PRED, x.dims)


@_rule("reduce-precision")
def _reduce_precision(ctx: _Ctx) -> Shape:
    x = ctx.array(0)
    if not x.element_type.is_floating:
        raise _type_error(ctx, x, "a floating-point type")
    exponent_bits = ctx.int_("exponent_bits")
    mantissa_bits = ctx.int_("mantissa_bits")
    if exponent_bits < 1 or mantissa_bits < 0:
        raise _Failure(
            f"needs exponent_bits >= 1 and mantissa_bits >= 0, got {exponent_bits}"
            f" and {mantissa_bits}"
        )
    return x.without_layout()


@_rule("copy")
def _copy(ctx: _Ctx) -> Shape:
    return ctx.operand(0).without_layout()


@_rule("convert")
def _convert(ctx: _Ctx) -> Shape:
    x = ctx.array(0)
    target = ctx.declared_array().element_type
    return ArrayShape(target, x.dims)


@_rule("bitcast-convert")
def _bitcast_convert(ctx: _Ctx) -> Shape:
    x = ctx.array(0)
    source = x.element_type
    target = ctx.declared_array().element_type
    if source.is_complex != target.is_complex:
        raise _Failure(
            f"cannot bitcast-convert between complex and real types ({source} to {target})"
        )
    a, b = source.bit_width, target.bit_width
    if max(a, b) % min(a, b) != 0:
        raise _Failure(f"bit widths of {source} ({a}) and {target} ({b}) do not divide")
    if a == b:
        return ArrayShape(target, x.dims)
    if a > b:
        # One wide element becomes a new minor dimension of narrow ones.
        return ArrayShape(target, (*x.dims, a // b))
    ratio = b // a
    if not x.dims or x.dims[-1] != ratio:
        raise _Failure(
            f"bitcast-convert from {source} to {target} needs a minor dimension of size"
            f" {ratio}, operand is {_fmt(x)}"
        )
    return ArrayShape(target, x.dims[:-1])


@_rule("stochastic-convert")
def _stochastic_convert(ctx: _Ctx) -> Shape:
    x = ctx.array(0, "operand")
    random = ctx.array(1, "random bits")
    if not x.element_type.is_floating:
        raise _type_error(ctx, x, "a floating-point operand")
    if not random.element_type.is_unsigned_integral:
        raise _Failure(f"random bits must be unsigned integers, got {_fmt(random)}")
    if random.element_type.bit_width != x.element_type.bit_width:
        raise _Failure(f"random bits {_fmt(random)} must be as wide as the operand {_fmt(x)}")
    if random.dims != x.dims:
        raise _Failure(f"random bits {_fmt(random)} must have the operand's dimensions {_fmt(x)}")
    return ArrayShape(ctx.declared_array().element_type, x.dims)


# elementwise binary ------------------------------------------------------------

_NO_PRED = frozenset({"subtract", "divide", "power", "remainder"})
_SHIFTS = frozenset({"shift-left", "shift-right-arithmetic", "shift-right-logical"})
_LOGICAL = frozenset({"and", "or", "xor"})


@_rule(
    "add",
    "subtract",
    "multiply",
    "divide",
    "maximum",
    "minimum",
    "power",
    "remainder",
    "atan2",
    "and",
    "or",
    "xor",
    "mulhi",
    *_SHIFTS,
    "compare",
    "complex",
)
def _binary(ctx: _Ctx) -> Shape:
    lhs, rhs = ctx.array(0, "lhs"), ctx.array(1, "rhs")
    if lhs.dims != rhs.dims:
        raise _Failure(
            f"operands have different dimensions: {_fmt(lhs)} and {_fmt(rhs)}"
            " (HLO needs an explicit broadcast)"
        )
    _same_element_type(ctx, [lhs, rhs])
    et = lhs.element_type
    op = ctx.opcode
    if op in _NO_PRED and et.is_pred:
        raise _type_error(ctx, lhs, "an arithmetic type (not pred)")
    if (op in _SHIFTS or op == "mulhi") and not et.is_integral:
        raise _type_error(ctx, lhs, "an integer type")
    if op == "atan2" and not (et.is_floating or et.is_complex):
        raise _type_error(ctx, lhs, "a floating-point or complex type")
    if op in _LOGICAL and not (et.is_pred or et.is_integral):
        raise _type_error(ctx, lhs, "pred or an integer type")
    if op == "compare":
        ctx.word("direction")  # required in XLA's syntax; `type` is not (element type's)
        return ArrayShape(ElementType.PRED, lhs.dims)
    if op == "complex":
        if et is ElementType.F32:
            return ArrayShape(ElementType.C64, lhs.dims)
        if et is ElementType.F64:
            return ArrayShape(ElementType.C128, lhs.dims)
        raise _type_error(ctx, lhs, "f32 or f64 parts")
    return lhs.without_layout()


@_rule("select")
def _select(ctx: _Ctx) -> Shape:
    pred = ctx.array(0, "predicate")
    on_true, on_false = ctx.array(1, "on_true"), ctx.array(2, "on_false")
    if pred.element_type is not ElementType.PRED:
        raise _Failure(f"predicate must have element type pred, got {_fmt(pred)}")
    if on_true.dims != on_false.dims:
        raise _Failure(
            f"on_true {_fmt(on_true)} and on_false {_fmt(on_false)} differ in dimensions"
        )
    _same_element_type(ctx, [on_true, on_false], "on_true and on_false")
    if pred.dims and pred.dims != on_true.dims:
        raise _Failure(
            f"predicate {_fmt(pred)} must be a scalar or have the dimensions of {_fmt(on_true)}"
        )
    return on_true.without_layout()


@_rule("clamp")
def _clamp(ctx: _Ctx) -> Shape:
    low, x, high = ctx.array(0, "min"), ctx.array(1, "operand"), ctx.array(2, "max")
    for bound, label in ((low, "min"), (high, "max")):
        if bound.dims and bound.dims != x.dims:
            raise _Failure(
                f"{label} {_fmt(bound)} must be a scalar or have the dimensions of {_fmt(x)}"
            )
    _same_element_type(ctx, [x, low, high])
    return x.without_layout()


# data movement -------------------------------------------------------------------


@_rule("broadcast")
def _broadcast(ctx: _Ctx) -> Shape:
    x = ctx.array(0)
    out = ctx.declared_array()
    dims = ctx.ints("dimensions", ())
    if len(dims) != x.rank:
        raise _Failure(
            f"dimensions={_dims_text(dims)} must map each of the operand's {x.rank}"
            f" dimension(s) ({_fmt(x)}) to a result dimension"
        )
    _check_dims("dimensions", dims, out.rank, what="result rank")
    for i, d in enumerate(dims):
        if out.dims[d] != x.dims[i]:
            raise _Failure(
                f"operand dimension {i} (size {x.dims[i]}) maps to result dimension {d}"
                f" of size {out.dims[d]} ({_fmt(x)} -> {_fmt(out)})"
            )
    return ArrayShape(x.element_type, out.dims)


@_rule("reshape")
def _reshape(ctx: _Ctx) -> Shape:
    x = ctx.array(0)
    out = ctx.declared_array()
    if out.num_elements != x.num_elements:
        raise _Failure(
            f"cannot reshape {_fmt(x)} ({x.num_elements} elements) to {_fmt(out)}"
            f" ({out.num_elements} elements)"
        )
    return ArrayShape(x.element_type, out.dims)


@_rule("dynamic-reshape")
def _dynamic_reshape(ctx: _Ctx) -> Shape:
    out = ctx.declared_array()
    ctx.need_operands(ctx.n == out.rank + 1, f"the operand and {out.rank} s32 sizes")
    x = ctx.array(0)
    for i in range(1, ctx.n):
        size = ctx.array(i)
        if size.element_type is not ElementType.S32 or size.dims:
            raise _Failure(f"size operand {i} must be s32[], got {_fmt(size)}")
    if out.num_elements != x.num_elements:
        raise _Failure(f"cannot reshape {_fmt(x)} to {_fmt(out)}: element counts differ")
    return ArrayShape(x.element_type, out.dims)


def _bits(shape: ArrayShape) -> int:
    et = shape.element_type
    width = et.bit_width if et.is_sub_byte else et.byte_width * 8
    return shape.num_elements * width


@_rule("bitcast")
def _bitcast(ctx: _Ctx) -> Shape:
    x = ctx.array(0)
    out = ctx.declared_array()
    if _bits(x) != _bits(out):
        raise _Failure(
            f"bitcast changes the size in bytes: {_fmt(x)} is {_bits(x) / 8:g} bytes,"
            f" {_fmt(out)} is {_bits(out) / 8:g}"
        )
    return out


@_rule("transpose")
def _transpose(ctx: _Ctx) -> Shape:
    x = ctx.array(0)
    perm = ctx.ints("dimensions")
    if sorted(perm) != list(range(x.rank)):
        raise _Failure(
            f"dimensions={_dims_text(perm)} is not a permutation of the operand's"
            f" {x.rank} dimension(s) ({_fmt(x)})"
        )
    return ArrayShape(x.element_type, tuple(x.dims[p] for p in perm))


@_rule("reverse")
def _reverse(ctx: _Ctx) -> Shape:
    x = ctx.array(0)
    _check_dims("dimensions", ctx.ints("dimensions"), x.rank)
    return x.without_layout()


@_rule("slice")
def _slice(ctx: _Ctx) -> Shape:
    x = ctx.array(0)
    ranges = ctx._get("slice", _REQUIRED)
    if not isinstance(ranges, tuple) or not all(isinstance(r, SliceRange) for r in ranges):
        raise _Failure(f"attribute slice must be like {{[0:4], [2:8:2]}}, got {ranges!r}")
    if len(ranges) != x.rank:
        raise _Failure(f"slice has {len(ranges)} range(s) for operand {_fmt(x)}")
    sizes = []
    for i, r in enumerate(ranges):
        if r.stride <= 0:
            raise _Failure(f"slice dimension {i}: stride {r.stride} must be positive")
        if not 0 <= r.start <= r.limit <= x.dims[i]:
            raise _Failure(
                f"slice dimension {i}: [{r.start}:{r.limit}] is not within [0:{x.dims[i]}]"
                f" of {_fmt(x)}"
            )
        sizes.append(-(-(r.limit - r.start) // r.stride))
    return ArrayShape(x.element_type, tuple(sizes))


def _check_start_indices(ctx: _Ctx, first: int, rank: int) -> None:
    """Start indices: one integer scalar per dimension, all of one type (or one s32[rank])."""
    indices = [ctx.array(i, f"start index {i - first}") for i in range(first, ctx.n)]
    if len(indices) == 1 and indices[0].rank == 1:
        # The old form: one rank-1 array of all start indices.
        if indices[0].dims[0] != rank or not indices[0].element_type.is_integral:
            raise _Failure(f"start indices {_fmt(indices[0])} must be an integer vector of {rank}")
        return
    if len(indices) != rank:
        raise _Failure(
            f"needs {rank} start index operand(s), one per dimension, has {len(indices)}"
        )
    for idx in indices:
        if idx.dims or not idx.element_type.is_integral:
            raise _Failure(f"start indices must be integer scalars, got {_fmt(idx)}")
    _same_element_type(ctx, indices, "start indices")


@_rule("dynamic-slice")
def _dynamic_slice(ctx: _Ctx) -> Shape:
    ctx.need_operands(ctx.n >= 1, "the operand and its start indices")
    x = ctx.array(0)
    _check_start_indices(ctx, 1, x.rank)
    sizes = ctx.ints("dynamic_slice_sizes")
    if len(sizes) != x.rank:
        raise _Failure(f"dynamic_slice_sizes={_dims_text(sizes)} does not match {_fmt(x)}")
    for i, s in enumerate(sizes):
        if not 0 <= s <= x.dims[i]:
            raise _Failure(f"dynamic_slice_sizes[{i}]={s} is not within [0, {x.dims[i]}]")
    return ArrayShape(x.element_type, sizes)


@_rule("dynamic-update-slice")
def _dynamic_update_slice(ctx: _Ctx) -> Shape:
    ctx.need_operands(ctx.n >= 2, "the operand, the update and start indices")
    x, update = ctx.array(0, "operand"), ctx.array(1, "update")
    _check_start_indices(ctx, 2, x.rank)
    if update.rank != x.rank or any(u > d for u, d in zip(update.dims, x.dims)):
        raise _Failure(f"update {_fmt(update)} does not fit in operand {_fmt(x)}")
    _same_element_type(ctx, [x, update], "operand and update")
    return x.without_layout()


@_rule("pad")
def _pad(ctx: _Ctx) -> Shape:
    x, value = ctx.array(0, "operand"), ctx.array(1, "padding value")
    if value.dims:
        raise _Failure(f"padding value must be a scalar, got {_fmt(value)}")
    _same_element_type(ctx, [x, value], "operand and padding value")
    config = ctx.typed("padding", PaddingConfig)
    if len(config.dims) != x.rank:
        raise _Failure(f"padding has {len(config.dims)} dimension(s) for operand {_fmt(x)}")
    out = []
    for i, (d, p) in enumerate(zip(x.dims, config.dims)):
        if p.interior < 0:
            raise _Failure(f"padding dimension {i}: interior padding {p.interior} is negative")
        size = d + p.low + p.high + max(d - 1, 0) * p.interior
        if size < 0:
            raise _Failure(f"padding dimension {i} gives a negative size ({size})")
        out.append(size)
    return ArrayShape(x.element_type, tuple(out))


@_rule("concatenate")
def _concatenate(ctx: _Ctx) -> Shape:
    ctx.need_operands(ctx.n >= 1, "at least one operand")
    shapes = ctx.arrays()
    dim = ctx.single_dim()
    first = shapes[0]
    _check_dims("dimensions", (dim,), first.rank)
    _same_element_type(ctx, shapes)
    total = 0
    for s in shapes:
        if s.rank != first.rank or any(
            a != b for i, (a, b) in enumerate(zip(s.dims, first.dims)) if i != dim
        ):
            raise _Failure(f"operands {_fmt(first)} and {_fmt(s)} differ outside dimension {dim}")
        total += s.dims[dim]
    dims = list(first.dims)
    dims[dim] = total
    return ArrayShape(first.element_type, tuple(dims))


@_rule("iota")
def _iota(ctx: _Ctx) -> Shape:
    out = ctx.declared_array()
    if not out.dims:
        raise _Failure("iota needs a result of rank >= 1")
    et = out.element_type
    if not (et.is_integral or et.is_floating or et.is_complex):
        raise _Failure(f"iota cannot produce element type {et}")
    _check_dims("iota_dimension", (ctx.int_("iota_dimension"),), out.rank)
    return out


@_rule("tuple")
def _tuple(ctx: _Ctx) -> Shape:
    return TupleShape(tuple(ctx.operand(i) for i in range(ctx.n)))


@_rule("get-tuple-element")
def _get_tuple_element(ctx: _Ctx) -> Shape:
    shape = ctx.operand(0)
    index = ctx.int_("index")
    if not isinstance(shape, TupleShape):
        raise _Failure(f"operand must be a tuple, got {_fmt(shape)}")
    if not 0 <= index < len(shape.elements):
        raise _Failure(f"index={index} is out of range for {_fmt(shape)}")
    return shape.elements[index]


# gather / scatter ----------------------------------------------------------------


def _check_batching(
    operand: ArrayShape,
    indices: ArrayShape,
    index_vector_dim: int,
    operand_dims: tuple[int, ...],
    operand_attr: str,
    indices_dims: tuple[int, ...],
    indices_attr: str,
) -> None:
    """Operand and index batching dimensions pair up one to one with equal sizes."""
    _check_dims(indices_attr, indices_dims, indices.rank, what="index rank")
    if index_vector_dim in indices_dims:
        raise _Failure(f"{indices_attr} must not contain index_vector_dim={index_vector_dim}")
    if len(operand_dims) != len(indices_dims):
        raise _Failure(
            f"{operand_attr}={_dims_text(operand_dims)} and {indices_attr}="
            f"{_dims_text(indices_dims)} must have the same length"
        )
    for od, idim in zip(operand_dims, indices_dims):
        if operand.dims[od] != indices.dims[idim]:
            raise _Failure(
                f"batching dimension {od} of {_fmt(operand)} and {idim} of {_fmt(indices)}"
                " differ in size"
            )


def _index_vector(ctx: _Ctx, indices: ArrayShape, ivd: int) -> tuple[list[int], int]:
    """Index batch dimensions (all but index_vector_dim) and the index vector length."""
    if not indices.element_type.is_integral:
        raise _Failure(f"indices must be integers, got {_fmt(indices)}")
    if not 0 <= ivd <= indices.rank:
        raise _Failure(f"index_vector_dim={ivd} is out of range for indices {_fmt(indices)}")
    expanded = list(indices.dims) + ([1] if ivd == indices.rank else [])
    return [d for i, d in enumerate(expanded) if i != ivd], expanded[ivd]


def _check_index_map(
    name: str, index_map: tuple[int, ...], length: int, rank: int, batching: tuple[int, ...]
) -> None:
    if len(index_map) != length:
        raise _Failure(
            f"{name}={_dims_text(index_map)} needs one entry per index vector element ({length})"
        )
    _check_dims(name, index_map, rank, what="operand rank")
    if set(index_map) & set(batching):
        raise _Failure(f"{name}={_dims_text(index_map)} must not name batching dimensions")


@_rule("gather")
def _gather(ctx: _Ctx) -> Shape:
    operand, indices = ctx.array(0, "operand"), ctx.array(1, "start indices")
    offset_dims = ctx.ints("offset_dims")
    collapsed = ctx.ints("collapsed_slice_dims", ())
    start_index_map = ctx.ints("start_index_map")
    ivd = ctx.int_("index_vector_dim")
    slice_sizes = ctx.ints("slice_sizes")
    operand_batching = ctx.ints("operand_batching_dims", ())
    indices_batching = ctx.ints("start_indices_batching_dims", ())

    batch_sizes, index_length = _index_vector(ctx, indices, ivd)
    result_rank = len(offset_dims) + len(batch_sizes)
    _check_dims("offset_dims", offset_dims, result_rank, what="result rank", sorted_=True)
    _check_dims("collapsed_slice_dims", collapsed, operand.rank, sorted_=True)
    _check_dims("operand_batching_dims", operand_batching, operand.rank, sorted_=True)
    if set(collapsed) & set(operand_batching):
        raise _Failure("collapsed_slice_dims and operand_batching_dims overlap")
    if len(offset_dims) + len(collapsed) + len(operand_batching) != operand.rank:
        raise _Failure(
            f"offset_dims, collapsed_slice_dims and operand_batching_dims must together"
            f" account for the operand's {operand.rank} dimension(s) ({_fmt(operand)})"
        )
    if len(slice_sizes) != operand.rank:
        raise _Failure(f"slice_sizes={_dims_text(slice_sizes)} does not match {_fmt(operand)}")
    for i, s in enumerate(slice_sizes):
        if not 0 <= s <= operand.dims[i]:
            raise _Failure(f"slice_sizes[{i}]={s} is not within [0, {operand.dims[i]}]")
        if (i in collapsed or i in operand_batching) and s > 1:
            raise _Failure(
                f"slice_sizes[{i}]={s}: a collapsed or batching dimension needs size <= 1"
            )
    _check_index_map(
        "start_index_map", start_index_map, index_length, operand.rank, operand_batching
    )
    _check_batching(
        operand,
        indices,
        ivd,
        operand_batching,
        "operand_batching_dims",
        indices_batching,
        "start_indices_batching_dims",
    )
    offsets = iter(
        slice_sizes[i]
        for i in range(operand.rank)
        if i not in collapsed and i not in operand_batching
    )
    batches = iter(batch_sizes)
    offset_set = set(offset_dims)
    dims = tuple(next(offsets) if i in offset_set else next(batches) for i in range(result_rank))
    return ArrayShape(operand.element_type, dims)


@_rule("scatter")
def _scatter(ctx: _Ctx) -> Shape:
    ctx.need_operands(
        ctx.n >= 3 and ctx.n % 2 == 1, "N operands, the indices and N updates (an odd count >= 3)"
    )
    count = ctx.n // 2
    operands = [ctx.array(i, f"operand {i}") for i in range(count)]
    indices = ctx.array(count, "scatter indices")
    updates = [ctx.array(count + 1 + i, f"update {i}") for i in range(count)]
    window_dims = ctx.ints("update_window_dims")
    inserted = ctx.ints("inserted_window_dims", ())
    to_operand = ctx.ints("scatter_dims_to_operand_dims")
    ivd = ctx.int_("index_vector_dim")
    input_batching = ctx.ints("input_batching_dims", ())
    indices_batching = ctx.ints("scatter_indices_batching_dims", ())

    _same_dims(ctx, operands, "scatter operands")
    _same_dims(ctx, updates, "scatter updates")
    operand, update = operands[0], updates[0]
    batch_sizes, index_length = _index_vector(ctx, indices, ivd)
    if update.rank != len(batch_sizes) + len(window_dims):
        raise _Failure(
            f"updates {_fmt(update)} must have rank {len(batch_sizes) + len(window_dims)}"
            f" ({len(batch_sizes)} scatter dimension(s) + {len(window_dims)} window dimension(s))"
        )
    _check_dims("update_window_dims", window_dims, update.rank, what="update rank", sorted_=True)
    _check_dims("inserted_window_dims", inserted, operand.rank, sorted_=True)
    _check_dims("input_batching_dims", input_batching, operand.rank, sorted_=True)
    if set(inserted) & set(input_batching):
        raise _Failure("inserted_window_dims and input_batching_dims overlap")
    if len(window_dims) + len(inserted) + len(input_batching) != operand.rank:
        raise _Failure(
            "update_window_dims, inserted_window_dims and input_batching_dims must together"
            f" account for the operand's {operand.rank} dimension(s) ({_fmt(operand)})"
        )
    _check_index_map(
        "scatter_dims_to_operand_dims", to_operand, index_length, operand.rank, input_batching
    )
    _check_batching(
        operand,
        indices,
        ivd,
        input_batching,
        "input_batching_dims",
        indices_batching,
        "scatter_indices_batching_dims",
    )
    window_bounds = [
        d for i, d in enumerate(operand.dims) if i not in inserted and i not in input_batching
    ]
    for i, wd in enumerate(window_dims):
        if update.dims[wd] > window_bounds[i]:
            raise _Failure(
                f"update window dimension {wd} of {_fmt(update)} is larger than the operand's"
                f" {window_bounds[i]}"
            )
    scatter_dims = [d for i, d in enumerate(update.dims) if i not in window_dims]
    if scatter_dims != batch_sizes:
        raise _Failure(
            f"update scatter dimensions {scatter_dims} of {_fmt(update)} must match the"
            f" indices' {batch_sizes} ({_fmt(indices)})"
        )
    for i, (op, up) in enumerate(zip(operands, updates)):
        if op.element_type is not up.element_type:
            raise _Failure(f"operand {i} {_fmt(op)} and update {i} {_fmt(up)} differ in type")
    _check_reducer(
        ctx.called("to_apply"),
        "to_apply",
        [u.element_type for u in updates],
        [_scalar(op.element_type) for op in operands],
    )
    if count == 1:
        return operand.without_layout()
    return TupleShape(tuple(op.without_layout() for op in operands))


# reductions ----------------------------------------------------------------------


def _split_inputs_inits(ctx: _Ctx) -> tuple[list[ArrayShape], list[Shape]]:
    ctx.need_operands(
        ctx.n >= 2 and ctx.n % 2 == 0, "N inputs followed by N init values (an even count >= 2)"
    )
    count = ctx.n // 2
    inputs = [ctx.array(i, f"input {i}") for i in range(count)]
    inits = [ctx.operand(count + i) for i in range(count)]
    for i, init in enumerate(inits):
        if not isinstance(init, ArrayShape) or init.dims or init.is_token:
            raise _Failure(f"init value {i} must be a scalar, got {_fmt(init)}")
    _same_dims(ctx, inputs, "inputs")
    return inputs, inits


@_rule("reduce")
def _reduce(ctx: _Ctx) -> Shape:
    inputs, inits = _split_inputs_inits(ctx)
    dims = ctx.ints("dimensions")
    _check_dims("dimensions", dims, inputs[0].rank)
    types, is_tuple = _check_reducer(
        ctx.called("to_apply"), "to_apply", [s.element_type for s in inputs], inits
    )
    kept = tuple(d for i, d in enumerate(inputs[0].dims) if i not in dims)
    results = [ArrayShape(t, kept) for t in types]
    return TupleShape(tuple(results)) if is_tuple else results[0]


@_rule("reduce-window")
def _reduce_window(ctx: _Ctx) -> Shape:
    inputs, inits = _split_inputs_inits(ctx)
    window = ctx.typed("window", Window, Window(()))
    out_dims = _window_output(inputs[0].dims, window)
    types, is_tuple = _check_reducer(
        ctx.called("to_apply"), "to_apply", [s.element_type for s in inputs], inits
    )
    results = [ArrayShape(t, out_dims) for t in types]
    return TupleShape(tuple(results)) if is_tuple else results[0]


@_rule("select-and-scatter")
def _select_and_scatter(ctx: _Ctx) -> Shape:
    operand, source = ctx.array(0, "operand"), ctx.array(1, "source")
    init = ctx.operand(2)
    select = ctx.called("select")
    params, result = _signature(select, "select")
    element = _scalar(operand.element_type)
    if len(params) != 2 or not all(p.same_type_and_dims(element) for p in params):
        raise _Failure(
            f"select={select.name} must take two {element} parameters, takes"
            f" ({', '.join(_fmt(p) for p in params)})"
        )
    if not result.same_type_and_dims(_scalar(ElementType.PRED)):
        raise _Failure(f"select={select.name} must return pred[], returns {_fmt(result)}")
    if not isinstance(init, ArrayShape) or init.dims or init.is_token:
        raise _Failure(f"init value must be a scalar, got {_fmt(init)}")
    _check_reducer(ctx.called("scatter"), "scatter", [source.element_type], [init])
    window = ctx.typed("window", Window, Window(()))
    out_dims = _window_output(operand.dims, window)
    if out_dims != source.dims:
        raise _Failure(
            f"source {_fmt(source)} must have the windowed operand's dimensions"
            f" {_dims_text(out_dims)}"
        )
    return operand.without_layout()


@_rule("sort")
def _sort(ctx: _Ctx) -> Shape:
    ctx.need_operands(ctx.n >= 1, "at least one operand")
    shapes = ctx.arrays()
    _same_dims(ctx, shapes, "sort operands")
    _check_dims("dimensions", (ctx.single_dim(),), shapes[0].rank)
    comparator = ctx.called("to_apply")
    params, result = _signature(comparator, "to_apply")
    if len(params) != 2 * len(shapes):
        raise _Failure(
            f"to_apply={comparator.name} must take {2 * len(shapes)} scalar parameters"
            f" (two per operand), takes {len(params)}"
        )
    for i, p in enumerate(params):
        expected = _scalar(shapes[i // 2].element_type)
        if not p.same_type_and_dims(expected):
            raise _Failure(
                f"to_apply={comparator.name}: parameter {i} is {_fmt(p)}, expected {expected}"
            )
    if not result.same_type_and_dims(_scalar(ElementType.PRED)):
        raise _Failure(f"to_apply={comparator.name} must return pred[], returns {_fmt(result)}")
    if len(shapes) == 1:
        return shapes[0].without_layout()
    return TupleShape(tuple(s.without_layout() for s in shapes))


@_rule("map")
def _map(ctx: _Ctx) -> Shape:
    ctx.need_operands(ctx.n >= 1, "at least one operand")
    shapes = ctx.arrays()
    _same_dims(ctx, shapes, "map operands")
    rank = shapes[0].rank
    dims = ctx.ints("dimensions", tuple(range(rank)))
    if dims != tuple(range(rank)):
        raise _Failure(f"dimensions={_dims_text(dims)} must list all dimensions in order")
    fn = ctx.called("to_apply")
    params, result = _signature(fn, "to_apply")
    if len(params) != len(shapes):
        raise _Failure(
            f"to_apply={fn.name} must take {len(shapes)} scalar parameter(s), takes {len(params)}"
        )
    for i, (p, s) in enumerate(zip(params, shapes)):
        if not p.same_type_and_dims(_scalar(s.element_type)):
            raise _Failure(f"to_apply={fn.name}: parameter {i} is {_fmt(p)}, operand is {_fmt(s)}")
    if not isinstance(result, ArrayShape) or result.dims or result.is_token:
        raise _Failure(f"to_apply={fn.name} must return a scalar, returns {_fmt(result)}")
    return ArrayShape(result.element_type, shapes[0].dims)


@_rule("topk")
def _topk(ctx: _Ctx) -> Shape:
    ctx.need_operands(ctx.n == 1, "1 operand")
    x = ctx.array(0)
    k = ctx.int_("k")
    if not x.dims:
        raise _Failure("topk needs an operand of rank >= 1")
    if not 0 <= k <= x.dims[-1]:
        raise _Failure(f"k={k} is not within [0, {x.dims[-1]}] for {_fmt(x)}")
    dims = (*x.dims[:-1], k)
    return TupleShape((ArrayShape(x.element_type, dims), ArrayShape(ElementType.S32, dims)))


# linear algebra ------------------------------------------------------------------


def _contraction_type(ctx: _Ctx, lhs: ArrayShape, rhs: ArrayShape) -> ElementType:
    """Result type of dot/convolution: the declared one, which may widen but not narrow ints."""
    preferred = ctx.declared_array().element_type
    if lhs.element_type.is_complex != rhs.element_type.is_complex:
        raise _Failure(f"cannot mix complex and real operands ({_fmt(lhs)}, {_fmt(rhs)})")
    wider = lhs.element_type
    if rhs.element_type.bit_width > wider.bit_width:
        wider = rhs.element_type
    if preferred is not wider and not wider.is_floating and preferred.bit_width < wider.bit_width:
        raise _Failure(f"result type {preferred} is narrower than the operand type {wider}")
    return preferred


@_rule("dot")
def _dot(ctx: _Ctx) -> Shape:
    lhs, rhs = ctx.array(0, "lhs"), ctx.array(1, "rhs")
    lhs_batch = ctx.ints("lhs_batch_dims", ())
    rhs_batch = ctx.ints("rhs_batch_dims", ())
    lhs_contracting = ctx.ints("lhs_contracting_dims", ())
    rhs_contracting = ctx.ints("rhs_contracting_dims", ())
    _check_dims("lhs_batch_dims+lhs_contracting_dims", lhs_batch + lhs_contracting, lhs.rank)
    _check_dims("rhs_batch_dims+rhs_contracting_dims", rhs_batch + rhs_contracting, rhs.rank)
    if len(lhs_batch) != len(rhs_batch) or len(lhs_contracting) != len(rhs_contracting):
        raise _Failure("lhs and rhs need as many batch and contracting dimensions as each other")
    for kind, ls, rs in (
        ("batch", lhs_batch, rhs_batch),
        ("contracting", lhs_contracting, rhs_contracting),
    ):
        for a, b in zip(ls, rs):
            if lhs.dims[a] != rhs.dims[b]:
                raise _Failure(
                    f"{kind} dimension {a} of lhs {_fmt(lhs)} and {b} of rhs {_fmt(rhs)}"
                    " differ in size"
                )
    dims = [lhs.dims[d] for d in lhs_batch]
    dims += [d for i, d in enumerate(lhs.dims) if i not in lhs_batch and i not in lhs_contracting]
    dims += [d for i, d in enumerate(rhs.dims) if i not in rhs_batch and i not in rhs_contracting]
    return ArrayShape(_contraction_type(ctx, lhs, rhs), tuple(dims))


def _check_permutation(name: str, dims: Sequence[int], rank: int) -> None:
    if sorted(dims) != list(range(rank)):
        raise _Failure(f"dim_labels: the {name} dimensions {list(dims)} do not cover 0..{rank - 1}")


@_rule("convolution")
def _convolution(ctx: _Ctx) -> Shape:
    lhs, rhs = ctx.array(0, "input"), ctx.array(1, "kernel")
    dn = ctx.typed("dim_labels", ConvDimensionNumbers)
    window = ctx.typed("window", Window, Window(()))
    feature_groups = ctx.int_("feature_group_count", 1)
    batch_groups = ctx.int_("batch_group_count", 1)
    spatial = len(dn.input_spatial)
    if len(dn.kernel_spatial) != spatial or len(dn.output_spatial) != spatial:
        raise _Failure("dim_labels: input, kernel and output need the same spatial dimensions")
    rank = spatial + 2
    if lhs.rank != rank or rhs.rank != rank:
        raise _Failure(
            f"input {_fmt(lhs)} and kernel {_fmt(rhs)} must have rank {rank} for these dim_labels"
        )
    _check_permutation("input", (dn.input_batch, dn.input_feature, *dn.input_spatial), rank)
    _check_permutation(
        "kernel",
        (dn.kernel_input_feature, dn.kernel_output_feature, *dn.kernel_spatial),
        rank,
    )
    _check_permutation("output", (dn.output_batch, dn.output_feature, *dn.output_spatial), rank)
    if feature_groups < 1 or batch_groups < 1:
        raise _Failure("feature_group_count and batch_group_count must be positive")
    if feature_groups > 1 and batch_groups > 1:
        raise _Failure("feature_group_count and batch_group_count cannot both exceed 1")
    batch = lhs.dims[dn.input_batch]
    in_features = lhs.dims[dn.input_feature]
    kernel_in = rhs.dims[dn.kernel_input_feature]
    kernel_out = rhs.dims[dn.kernel_output_feature]
    if in_features % feature_groups or in_features // feature_groups != kernel_in:
        raise _Failure(
            f"input features ({in_features}) / feature_group_count ({feature_groups}) must"
            f" equal the kernel input features ({kernel_in})"
        )
    if kernel_out % feature_groups:
        raise _Failure(
            f"kernel output features ({kernel_out}) must be a multiple of"
            f" feature_group_count ({feature_groups})"
        )
    if kernel_out % batch_groups or batch % batch_groups:
        raise _Failure(
            f"kernel output features ({kernel_out}) and input batch ({batch}) must be"
            f" multiples of batch_group_count ({batch_groups})"
        )
    kernel_sizes = tuple(rhs.dims[d] for d in dn.kernel_spatial)
    if len(window.dims) != spatial or tuple(w.size for w in window.dims) != kernel_sizes:
        raise _Failure(
            f"window sizes {[w.size for w in window.dims]} must match the kernel's spatial"
            f" sizes {list(kernel_sizes)}"
        )
    spatial_out = _window_output(tuple(lhs.dims[d] for d in dn.input_spatial), window)
    dims = [0] * rank
    dims[dn.output_batch] = batch // batch_groups
    dims[dn.output_feature] = kernel_out
    for d, size in zip(dn.output_spatial, spatial_out):
        dims[d] = size
    return ArrayShape(_contraction_type(ctx, lhs, rhs), tuple(dims))


def _float_or_complex(ctx: _Ctx, x: ArrayShape, what: str) -> None:
    if not (x.element_type.is_floating or x.element_type.is_complex):
        raise _Failure(f"{what} {_fmt(x)} must be floating-point or complex")


@_rule("cholesky")
def _cholesky(ctx: _Ctx) -> Shape:
    a = ctx.array(0)
    _float_or_complex(ctx, a, "operand")
    if a.rank < 2 or a.dims[-1] != a.dims[-2]:
        raise _Failure(f"operand {_fmt(a)} must be a (batch of) square matrices")
    return a.without_layout()


@_rule("triangular-solve")
def _triangular_solve(ctx: _Ctx) -> Shape:
    a, b = ctx.array(0, "a"), ctx.array(1, "b")
    _float_or_complex(ctx, a, "a")
    _same_element_type(ctx, [a, b])
    if a.rank < 2 or a.dims[-1] != a.dims[-2]:
        raise _Failure(f"a {_fmt(a)} must be a (batch of) square matrices")
    if b.rank != a.rank or b.dims[:-2] != a.dims[:-2]:
        raise _Failure(f"a {_fmt(a)} and b {_fmt(b)} need equal rank and batch dimensions")
    # XLA's parser leaves transpose_a at TRANSPOSE_INVALID when the text does not give
    # it, and its shape inference refuses that: no default to assume.
    transpose = ctx.word("transpose_a")
    if transpose not in ("NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"):
        raise _Failure(f"transpose_a={transpose} is not NO_TRANSPOSE, TRANSPOSE or ADJOINT")
    shared = b.dims[-2] if ctx.flag("left_side") else b.dims[-1]
    if shared != a.dims[-1]:
        raise _Failure(f"a {_fmt(a)} and b {_fmt(b)} do not share the solved dimension")
    return b.without_layout()


@_rule("fft")
def _fft(ctx: _Ctx) -> Shape:
    x = ctx.array(0)
    kind = ctx.word("fft_type")
    length = ctx.ints("fft_length")
    if not 1 <= len(length) <= 3 or x.rank < len(length):
        raise _Failure(f"fft_length={_dims_text(length)} needs 1 to 3 entries and rank >= that")
    et = x.element_type
    inner = x.dims[x.rank - len(length) :]
    if kind in ("FFT", "IFFT"):
        if not et.is_complex:
            raise _type_error(ctx, x, "a complex type")
        return x.without_layout()
    if kind == "RFFT":
        if et not in (ElementType.F32, ElementType.F64):
            raise _type_error(ctx, x, "f32 or f64")
        if tuple(inner) != length:
            raise _Failure(f"RFFT: the minor dimensions of {_fmt(x)} must equal fft_length")
        out = ElementType.C64 if et is ElementType.F32 else ElementType.C128
        last = length[-1] // 2 + 1 if length[-1] else 0
        return ArrayShape(out, (*x.dims[:-1], last))
    if kind == "IRFFT":
        if not et.is_complex:
            raise _type_error(ctx, x, "a complex type")
        expected_last = length[-1] // 2 + 1 if length[-1] else 0
        if tuple(inner[:-1]) != length[:-1] or inner[-1] != expected_last:
            raise _Failure(f"IRFFT: the minor dimensions of {_fmt(x)} do not fit fft_length")
        return ArrayShape(et.component_type, (*x.dims[:-1], length[-1]))
    raise _Failure(f"fft_type={kind} is not one of FFT, IFFT, RFFT, IRFFT")


def _batch_norm_operand(ctx: _Ctx) -> tuple[ArrayShape, int]:
    x = ctx.array(0, "operand")
    if not x.element_type.is_floating:
        raise _type_error(ctx, x, "a floating-point type")
    feature = ctx.int_("feature_index")
    _check_dims("feature_index", (feature,), x.rank)
    ctx.typed("epsilon", float)
    count = x.dims[feature]
    for i in range(1, ctx.n):
        if i == 4 and ctx.opcode == "batch-norm-grad":
            grad = ctx.array(4, "grad_output")
            if grad.dims != x.dims or grad.element_type is not x.element_type:
                raise _Failure(f"grad_output {_fmt(grad)} must match the operand {_fmt(x)}")
            continue
        v = ctx.array(i)
        if v.dims != (count,) or v.element_type is not x.element_type:
            raise _Failure(
                f"operand {i} {_fmt(v)} must be {x.element_type}[{count}] (one per feature)"
            )
    return x, count


@_rule("batch-norm-training", "batch-norm-grad")
def _batch_norm_stats(ctx: _Ctx) -> Shape:
    ctx.need_operands(ctx.n == (3 if ctx.opcode == "batch-norm-training" else 5), "its operands")
    x, count = _batch_norm_operand(ctx)
    per_feature = ArrayShape(x.element_type, (count,))
    return TupleShape((x.without_layout(), per_feature, per_feature))


@_rule("batch-norm-inference")
def _batch_norm_inference(ctx: _Ctx) -> Shape:
    ctx.need_operands(ctx.n == 5, "5 operands")
    x, _ = _batch_norm_operand(ctx)
    return x.without_layout()


# calls and control flow ----------------------------------------------------------


def _check_arguments(
    ctx: _Ctx, comp: Computation, attr: str, operands: Sequence[Shape], exact: bool = True
) -> Shape:
    params, result = _signature(comp, attr)
    if (len(params) != len(operands)) if exact else (len(params) > len(operands)):
        raise _Failure(
            f"{attr}={comp.name} takes {_count(len(params), 'parameter')}"
            f" but is given {_count(len(operands), 'operand')}"
        )
    for i, p in enumerate(params):
        if not p.same_type_and_dims(operands[i]):
            raise _Failure(
                f"{attr}={comp.name}: parameter {i} is {_fmt(p)} but operand {i} is"
                f" {_fmt(operands[i])}"
            )
    return result


@_rule("call")
def _call(ctx: _Ctx) -> Shape:
    operands = [ctx.operand(i) for i in range(ctx.n)]
    return _check_arguments(ctx, ctx.called("to_apply"), "to_apply", operands)


@_rule("fusion")
def _fusion(ctx: _Ctx) -> Shape:
    ctx.word("kind")
    operands = [ctx.operand(i) for i in range(ctx.n)]
    # XLA lets a fusion pass more operands than its computation uses.
    return _check_arguments(ctx, ctx.called("calls"), "calls", operands, exact=False)


@_rule("while")
def _while(ctx: _Ctx) -> Shape:
    ctx.need_operands(ctx.n == 1, "1 operand")
    state = ctx.operand(0)
    _check_arguments(ctx, ctx.called("condition"), "condition", [state])
    body_result = _check_arguments(ctx, ctx.called("body"), "body", [state])
    cond_result = _signature(ctx.called("condition"), "condition")[1]
    if not cond_result.same_type_and_dims(_scalar(ElementType.PRED)):
        raise _Failure(f"condition must return pred[], returns {_fmt(cond_result)}")
    if not body_result.same_type_and_dims(state):
        raise _Failure(f"body returns {_fmt(body_result)} but the loop state is {_fmt(state)}")
    return state.without_layout()


@_rule("conditional")
def _conditional(ctx: _Ctx) -> Shape:
    if "branch_computations" in ctx.inst.attributes:
        branches = ctx.called_list("branch_computations")
        names = ["branch_computations"] * len(branches)
    else:
        branches = [ctx.called("true_computation"), ctx.called("false_computation")]
        names = ["true_computation", "false_computation"]
    ctx.need_operands(ctx.n >= 1, "a branch index and one operand per branch")
    index = ctx.array(0, "branch index")
    if index.dims or index.element_type not in (ElementType.PRED, ElementType.S32):
        raise _Failure(f"branch index must be pred[] or s32[], got {_fmt(index)}")
    if index.element_type is ElementType.PRED and len(branches) != 2:
        raise _Failure(f"a pred branch index needs 2 branches, has {len(branches)}")
    if not branches:
        raise _Failure("needs at least one branch computation")
    ctx.need_operands(ctx.n == len(branches) + 1, f"a branch index and {len(branches)} operands")
    result: Shape | None = None
    for j, (branch, attr) in enumerate(zip(branches, names)):
        out = _check_arguments(ctx, branch, attr, [ctx.operand(j + 1)])
        if result is None:
            result = out
        elif not out.same_type_and_dims(result):
            raise _Failure(
                f"branch {j} ({branch.name}) returns {_fmt(out)}"
                f" but branch 0 returns {_fmt(result)}"
            )
    assert result is not None
    return result


# leaves and odds and ends --------------------------------------------------------


@_rule("parameter")
def _parameter(ctx: _Ctx) -> Shape:
    number = ctx.inst.parameter_number
    if not _is_int(number) or number < 0:
        raise _Failure(f"needs a parameter number >= 0, has {number!r}")
    return ctx.inst.shape


def _literal_matches(shape: Shape, literal: Any) -> bool:
    if isinstance(shape, TupleShape):
        return (
            isinstance(literal, tuple)
            and len(literal) == len(shape.elements)
            and all(_literal_matches(s, v) for s, v in zip(shape.elements, literal))
        )
    if shape.is_token:
        return literal is None or literal == ()
    return (
        hasattr(literal, "shape")
        and tuple(literal.shape) == shape.dims
        and literal.dtype == shape.element_type.numpy_dtype
    )


@_rule("constant")
def _constant(ctx: _Ctx) -> Shape:
    literal = ctx.inst.literal
    if literal is None:
        raise _Failure(
            "constant has no value: the text elides it ({...}); print the module with its"
            " large constants (jax: compiler_ir('hlo').as_hlo_text(print_large_constants=True);"
            " XLA: --xla_dump_large_constants)"
        )
    if not _literal_matches(ctx.inst.shape, literal):
        raise _Failure(f"the value does not have the declared shape {_fmt(ctx.inst.shape)}")
    return ctx.inst.shape


@_rule("after-all")
def _after_all(ctx: _Ctx) -> Shape:
    for i in range(ctx.n):
        if not ctx.operand(i).is_token:
            raise _Failure(f"operand {i} must be a token, got {_fmt(ctx.operand(i))}")
    return ArrayShape(ElementType.TOKEN, ())


@_rule("add-dependency")
def _add_dependency(ctx: _Ctx) -> Shape:
    ctx.need_operands(ctx.n == 2, "a value and a token")
    if not ctx.operand(1).is_token:
        raise _Failure(f"operand 1 must be a token, got {_fmt(ctx.operand(1))}")
    return ctx.operand(0)


@_rule("opt-barrier", "optimization-barrier", "domain")
def _pass_through(ctx: _Ctx) -> Shape:
    ctx.need_operands(ctx.n == 1, "1 operand")
    return ctx.operand(0)


@_rule("get-dimension-size")
def _get_dimension_size(ctx: _Ctx) -> Shape:
    x = ctx.array(0)
    _check_dims("dimensions", (ctx.single_dim(),), x.rank)
    return ArrayShape(ElementType.S32, ())


@_rule("set-dimension-size")
def _set_dimension_size(ctx: _Ctx) -> Shape:
    x, size = ctx.array(0, "operand"), ctx.array(1, "size")
    _check_dims("dimensions", (ctx.single_dim(),), x.rank)
    if size.dims or size.element_type is not ElementType.S32:
        raise _Failure(f"size must be s32[], got {_fmt(size)}")
    return x.without_layout()


@_rule("partition-id", "replica-id")
def _device_id(ctx: _Ctx) -> Shape:
    return ArrayShape(ElementType.U32, ())


@_rule("rng-get-and-update-state")
def _rng_state(ctx: _Ctx) -> Shape:
    ctx.int_("delta")
    return ArrayShape(ElementType.U64, (2,))


@_rule("rng")
def _rng(ctx: _Ctx) -> Shape:
    ctx.need_operands(ctx.n == 2, "2 operands (the distribution's parameters)")
    a, b = ctx.array(0), ctx.array(1)
    out = ctx.declared_array()
    if a.dims or b.dims:
        raise _Failure(f"distribution parameters must be scalars, got {_fmt(a)} and {_fmt(b)}")
    _same_element_type(ctx, [a, b, out], "operands and result")
    distribution = ctx.word("distribution")
    et = a.element_type
    if distribution == "rng_uniform":
        if not (et.is_floating or et.is_integral or et.is_pred):
            raise _type_error(ctx, a, "a floating-point, integer or pred type")
    elif distribution == "rng_normal":
        if not et.is_floating:
            raise _type_error(ctx, a, "a floating-point type")
    else:
        raise _Failure(f"distribution={distribution} is not rng_uniform or rng_normal")
    return out


@_rule("rng-bit-generator")
def _rng_bit_generator(ctx: _Ctx) -> Shape:
    ctx.need_operands(ctx.n == 1, "1 operand (the generator state)")
    ctx.word("algorithm")
    state = ctx.array(0, "state")
    out = ctx.inst.shape
    if not isinstance(out, TupleShape) or len(out.elements) != 2:
        raise _Failure(f"result must be (new state, bits), declared {_fmt(out)}")
    if not out.elements[0].same_type_and_dims(state):
        raise _Failure(
            f"new state {_fmt(out.elements[0])} must have the state's shape {_fmt(state)}"
        )
    return out


@_rule(
    "all-gather",
    "all-gather-start",
    "all-reduce",
    "all-reduce-start",
    "reduce-scatter",
    "collective-permute",
    "collective-permute-start",
)
def _collective(ctx: _Ctx) -> None:
    """The attributes XLA's parser requires of a collective (its ``replica_groups``,
    ``channel_id``, ``constrain_layout`` and ``use_global_device_ids`` are optional: {},
    none, false, false); the declared shape is all there is (heron does not model the
    devices it depends on)."""
    if ctx.opcode in ("all-gather", "all-gather-start", "reduce-scatter"):
        ctx.single_dim()
    if ctx.opcode in ("all-reduce", "all-reduce-start", "reduce-scatter"):
        ctx.called("to_apply")
    if ctx.opcode.startswith("collective-permute"):
        ctx.require("source_target_pairs")
    return None


def _cannot_infer(ctx: _Ctx) -> None:
    return None


for _opcode, _info in OPCODES.items():
    if _opcode not in _RULES:
        # custom-call, collectives, async, I/O, ragged-dot, scaled-dot: the declared shape
        # is all there is (XLA checks these ops against configuration heron does not model).
        _RULES[_opcode] = _cannot_infer
