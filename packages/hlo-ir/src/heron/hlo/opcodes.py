"""Every opcode heron knows, spelled as in HLO text, with its operand count.

The parser refuses an opcode not listed here (with the closest known name as a
hint); the verifier checks operand counts from ``arity``. Categories are what
later stages ask: is it elementwise, does it only move data, does it call a
computation.
"""

from __future__ import annotations

import enum

import attrs


class Category(enum.Enum):
    ELEMENTWISE_UNARY = "elementwise unary"
    ELEMENTWISE_BINARY = "elementwise binary"
    ELEMENTWISE_TERNARY = "elementwise ternary"
    DATA_MOVEMENT = "data movement"
    REDUCTION = "reduction"
    CONTROL = "control flow / calls"
    LEAF = "leaf (no operands)"
    LINALG = "linear algebra"
    COLLECTIVE = "collective"
    ASYNC = "async"
    IO = "io / side effects"
    OTHER = "other"


VARIADIC = -1


@attrs.frozen
class OpcodeInfo:
    name: str
    category: Category
    #: Exact number of operands, or VARIADIC.
    arity: int


def _ops(category: Category, arity: int, names: str) -> list[OpcodeInfo]:
    return [OpcodeInfo(n, category, arity) for n in names.split()]


_TABLE: list[OpcodeInfo] = [
    *_ops(
        Category.ELEMENTWISE_UNARY,
        1,
        "abs acos acosh asin asinh atanh cbrt ceil count-leading-zeros convert bitcast-convert cosh"
        " cosine erf exponential exponential-minus-one floor imag is-finite log"
        " log-plus-one logistic negate not popcnt real reduce-precision"
        " round-nearest-afz round-nearest-even rsqrt sign sinh sine sqrt tan tanh",
    ),
    *_ops(
        Category.ELEMENTWISE_BINARY,
        2,
        "add and atan2 compare complex divide maximum minimum multiply mulhi or power"
        " remainder shift-left shift-right-arithmetic shift-right-logical subtract xor"
        # stochastic-convert(operand, random_bits): elementwise with two operands.
        " stochastic-convert",
    ),
    *_ops(Category.ELEMENTWISE_TERNARY, 3, "clamp select"),
    *_ops(
        Category.DATA_MOVEMENT,
        1,
        "bitcast broadcast copy reshape reverse slice transpose get-tuple-element"
        " get-dimension-size",
    ),
    *_ops(Category.DATA_MOVEMENT, 2, "gather pad set-dimension-size"),
    *_ops(
        Category.DATA_MOVEMENT,
        VARIADIC,
        "concatenate dynamic-reshape dynamic-slice dynamic-update-slice scatter tuple",
    ),
    *_ops(Category.REDUCTION, VARIADIC, "reduce reduce-window sort map topk"),
    *_ops(Category.REDUCTION, 3, "select-and-scatter"),
    *_ops(Category.LINALG, 2, "dot convolution triangular-solve"),
    # ragged-dot(lhs, rhs, group_sizes)
    *_ops(Category.LINALG, 3, "ragged-dot"),
    *_ops(Category.LINALG, 1, "cholesky fft"),
    *_ops(
        Category.LINALG,
        VARIADIC,
        "batch-norm-grad batch-norm-inference batch-norm-training scaled-dot",
    ),
    *_ops(Category.CONTROL, VARIADIC, "call conditional fusion while custom-call"),
    *_ops(
        Category.CONTROL,
        VARIADIC,
        "opt-barrier optimization-barrier add-dependency after-all domain",
    ),
    *_ops(
        Category.LEAF, 0, "constant iota parameter partition-id replica-id rng-get-and-update-state"
    ),
    *_ops(Category.OTHER, VARIADIC, "rng rng-bit-generator"),
    *_ops(
        Category.COLLECTIVE,
        VARIADIC,
        "all-gather all-gather-start all-gather-done all-reduce all-reduce-start"
        " all-reduce-done all-to-all ragged-all-to-all collective-broadcast"
        " collective-permute collective-permute-start collective-permute-done"
        " reduce-scatter",
    ),
    *_ops(Category.ASYNC, VARIADIC, "async-start async-update async-done copy-start copy-done"),
    *_ops(Category.IO, VARIADIC, "infeed outfeed send send-done recv recv-done"),
]

OPCODES: dict[str, OpcodeInfo] = {info.name: info for info in _TABLE}


def opcode_info(name: str) -> OpcodeInfo | None:
    return OPCODES.get(name)


def is_elementwise(opcode: str) -> bool:
    info = OPCODES.get(opcode)
    return info is not None and info.category in (
        Category.ELEMENTWISE_UNARY,
        Category.ELEMENTWISE_BINARY,
        Category.ELEMENTWISE_TERNARY,
    )


def closest_opcode(name: str) -> str | None:
    """The known opcode nearest to a misspelt one, for error hints."""
    from heron.hlo.spelling import closest

    return closest(name, OPCODES)
