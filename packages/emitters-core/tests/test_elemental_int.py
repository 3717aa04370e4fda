"""Integer and pred elemental lowerings against the reference evaluator, bit for bit.

Every op runs on every integer type and pred, on edge values (0, +-1, min,
max, shift amounts around the width) and random ones; types of at most 8 bits
run on every pair of values. Two routes are checked:

* the integer-only opcodes (and, or, xor, not, shifts, popcnt, clz) and,
  once float_ops.py registers them, the shared ones (add, divide, compare,
  ...) through ``run_hlo``, the whole elemental emitter on the host;
* ``integer_binary``/``integer_unary``/``integer_compare`` called directly in
  a scalar body (``run_elementwise``), with the instruction taken from a tiny
  parsed module, so they are tested whether or not float_ops.py has landed.

Ops the evaluator refuses (subtract on pred, shifts on pred, ...) must raise
UnsupportedError here too.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from heron_test_support.elemental_jit import run_hlo
from heron_test_support.host_jit import run_elementwise

from heron.emitters.elemental import (
    ElementalContext,
    emit_instruction,
    int_ops,
)
from heron.hlo import (
    ElementType,
    HloEvaluationError,
    UnsupportedError,
    evaluate_module,
    parse_module,
)
from heron.hlo.evaluator.integer_semantics import from_codes

INTEGERS = [
    ElementType.parse(name)
    for name in ("s2", "s4", "s8", "s16", "s32", "s64", "u2", "u4", "u8", "u16", "u32", "u64")
]
TYPES = [*INTEGERS, ElementType.PRED]

SHARED_BINARY = (
    "add",
    "subtract",
    "multiply",
    "divide",
    "remainder",
    "maximum",
    "minimum",
    "power",
)
SHARED_UNARY = ("abs", "negate", "sign")
DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")
OWN_BINARY = ("and", "or", "xor", "shift-left", "shift-right-arithmetic", "shift-right-logical")
OWN_UNARY = ("not", "popcnt", "count-leading-zeros")

#: What the evaluator allows on pred (elementwise.py: bitwise ops, not, _PRED_BINARY, compare).
PRED_ALLOWED = {"add", "maximum", "multiply", "minimum", "and", "or", "xor", "not", "compare"}


def _width(et: ElementType) -> int:
    return 1 if et.is_pred else et.bit_width


def _array(codes: list[int], et: ElementType) -> np.ndarray:
    """Values of ``et`` with the given bit patterns (wrapped to the width)."""
    mask = (1 << _width(et)) - 1
    return from_codes(np.array([c & mask for c in codes], dtype=np.uint64), et)


def _edge_codes(et: ElementType, rng: np.random.Generator) -> list[int]:
    """Bit patterns of the interesting values of ``et``, plus a few random ones."""
    width = _width(et)
    if width <= 8:
        return list(range(1 << width))
    top = 1 << (width - 1)
    special = [0, 1, 2, 3, -1, -2, -3, top, top - 1, top + 1, top - 2]
    special += [width - 1, width, width + 1, 2 * width, 63, 64, 65, -width]
    special += [int(v) for v in rng.integers(0, 1 << min(width, 62), size=6)]
    special += [int(v) for v in rng.integers(-200, 200, size=4)]
    mask = (1 << width) - 1
    return sorted({c & mask for c in special})


def _pairs(et: ElementType, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edge values (every pair of values up to 8 bits), plus random pairs."""
    rng = np.random.default_rng(seed)
    codes = _edge_codes(et, rng)
    lhs = [a for a in codes for _ in codes]
    rhs = [b for _ in codes for b in codes]
    width = _width(et)
    if width > 8:
        lhs += [int(v) for v in rng.integers(0, 1 << min(width, 63), size=64, dtype=np.uint64)]
        rhs += [int(v) for v in rng.integers(0, 1 << min(width, 63), size=64, dtype=np.uint64)]
    return _array(lhs, et), _array(rhs, et)


def _unary_inputs(et: ElementType, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    codes = _edge_codes(et, rng)
    width = _width(et)
    if width > 8:
        codes += [int(v) for v in rng.integers(0, 1 << min(width, 63), size=64, dtype=np.uint64)]
        codes += [1 << k for k in range(width)] + [(1 << k) - 1 for k in range(width)]
    return _array(codes, et)


def _binary_text(opcode: str, et: ElementType, n: int, attrs: str = "") -> str:
    result = "pred" if opcode == "compare" else str(et)
    return f"""
fused {{
  p0 = {et}[{n}] parameter(0)
  p1 = {et}[{n}] parameter(1)
  ROOT r = {result}[{n}] {opcode}(p0, p1){attrs}
}}
"""


def _unary_text(opcode: str, et: ElementType, n: int) -> str:
    return f"""
fused {{
  p0 = {et}[{n}] parameter(0)
  ROOT r = {et}[{n}] {opcode}(p0)
}}
"""


def _root(text: str):
    module = parse_module(text)
    return module.computation(module.fusion_under_test).root_instruction


def _refused(opcode: str, et: ElementType) -> bool:
    return et.is_pred and opcode not in PRED_ALLOWED


def _expect_unsupported(run) -> str:
    """``run()`` must raise UnsupportedError; returns its message for further checks."""
    try:
        run()
    except UnsupportedError as error:
        message = str(error)
    else:
        pytest.fail("expected UnsupportedError")
    return message


def _check(text: str, inputs: list[np.ndarray], run, refused: bool) -> None:
    """``run()`` must equal the evaluator exactly, or both must refuse the op."""
    if refused:
        with pytest.raises(HloEvaluationError):
            evaluate_module(parse_module(text), inputs)
        _expect_unsupported(run)
        return
    expected = np.asarray(evaluate_module(parse_module(text), inputs))
    got = run()
    assert got.dtype == expected.dtype
    mismatch = np.flatnonzero(got != expected)
    assert mismatch.size == 0, (
        f"{mismatch.size} mismatches, first at inputs "
        f"{[x[mismatch[0]] for x in inputs]}: got {got[mismatch[0]]}, "
        f"expected {expected[mismatch[0]]}"
    )


def _emit_root(text: str, inputs: list[np.ndarray], out: ElementType) -> np.ndarray:
    """The root of ``text`` through ``emit_instruction``, its parameters bound to scalars.

    Used where emission must fail: ``run_hlo`` leaves its loop insertion points
    entered when a lowering raises, which aborts the process at exit.
    """
    inst = _root(text)
    elements = [p.array_shape.element_type for p in inst.parent.parameters]

    def body(scalars):
        ctx = ElementalContext(
            resolve=lambda operand, _indices: [scalars[operand.parameter_number]],
            call=None,
            fusion_name="fused",
        )
        return emit_instruction(inst, [], ctx)

    return run_elementwise(body, elements, [out], inputs)[0]


def _emitter(text: str, inputs: list[np.ndarray], out: ElementType, refused: bool):
    """How to run ``text`` through the elemental emitter (see :func:`_emit_root`)."""
    if refused:
        return lambda: _emit_root(text, inputs, out)
    return lambda: run_hlo(text, inputs)[0]


# -- the three shared functions, called directly -------------------------------------------


@pytest.mark.parametrize("et", TYPES, ids=str)
@pytest.mark.parametrize("opcode", SHARED_BINARY)
def test_integer_binary_direct(opcode: str, et: ElementType) -> None:
    lhs, rhs = _pairs(et, seed=zlib.crc32(f"{opcode}{et}".encode()))
    text = _binary_text(opcode, et, lhs.size)
    inst = _root(text)

    def run() -> np.ndarray:
        def body(s):
            return [int_ops.integer_binary(opcode, inst, None, s[0], s[1])]

        return run_elementwise(body, [et, et], [et], [lhs, rhs])[0]

    _check(text, [lhs, rhs], run, _refused(opcode, et))


@pytest.mark.parametrize("et", TYPES, ids=str)
@pytest.mark.parametrize("opcode", SHARED_UNARY)
def test_integer_unary_direct(opcode: str, et: ElementType) -> None:
    x = _unary_inputs(et, seed=7)
    text = _unary_text(opcode, et, x.size)
    inst = _root(text)

    def run() -> np.ndarray:
        def body(s):
            return [int_ops.integer_unary(opcode, inst, None, s[0])]

        return run_elementwise(body, [et], [et], [x])[0]

    _check(text, [x], run, _refused(opcode, et))


@pytest.mark.parametrize("et", TYPES, ids=str)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_integer_compare_direct(direction: str, et: ElementType) -> None:
    lhs, rhs = _pairs(et, seed=11)
    text = _binary_text("compare", et, lhs.size, f", direction={direction}")
    inst = _root(text)

    def run() -> np.ndarray:
        def body(s):
            return [int_ops.integer_compare(direction, inst, None, s[0], s[1])]

        return run_elementwise(body, [et, et], [ElementType.PRED], [lhs, rhs])[0]

    _check(text, [lhs, rhs], run, refused=False)


@pytest.mark.parametrize("name", ["s8", "u32", "pred"])
def test_integer_compare_explicit_type(name: str) -> None:
    """``type=`` must name the operands' own signedness (UNSIGNED for pred)."""
    et = ElementType.parse(name)
    own = "SIGNED" if et.is_signed_integral else "UNSIGNED"
    other = "UNSIGNED" if own == "SIGNED" else "SIGNED"
    lhs, rhs = _pairs(et, seed=3)
    for kind, refused in ((own, False), (other, True)):
        text = _binary_text("compare", et, lhs.size, f", direction=LT, type={kind}")
        inst = _root(text)

        def run(inst=inst) -> np.ndarray:
            def body(s):
                return [int_ops.integer_compare("LT", inst, None, s[0], s[1])]

            return run_elementwise(body, [et, et], [ElementType.PRED], [lhs, rhs])[0]

        _check(text, [lhs, rhs], run, refused)


def test_non_integer_operands_are_refused_with_a_clear_message() -> None:
    inst = _root(_binary_text("add", ElementType.F32, 4))

    def body(s):
        return [int_ops.integer_binary("add", inst, None, s[0], s[1])]

    message = _expect_unsupported(
        lambda: run_elementwise(body, [ElementType.F32] * 2, [ElementType.F32], [np.zeros(4)] * 2)
    )
    assert "add 'r'" in message and "f32" in message


# -- everything through the elemental emitter ----------------------------------------------


@pytest.mark.parametrize("et", TYPES, ids=str)
@pytest.mark.parametrize("opcode", OWN_BINARY)
def test_integer_only_binary(opcode: str, et: ElementType) -> None:
    lhs, rhs = _pairs(et, seed=zlib.crc32(f"{opcode}{et}".encode()))
    text = _binary_text(opcode, et, lhs.size)
    refused = _refused(opcode, et)
    _check(text, [lhs, rhs], _emitter(text, [lhs, rhs], et, refused), refused)


@pytest.mark.parametrize("et", TYPES, ids=str)
@pytest.mark.parametrize("opcode", OWN_UNARY)
def test_integer_only_unary(opcode: str, et: ElementType) -> None:
    x = _unary_inputs(et, seed=5)
    text = _unary_text(opcode, et, x.size)
    refused = _refused(opcode, et)
    _check(text, [x], _emitter(text, [x], et, refused), refused)


def test_clz_spelling_shares_the_lowering() -> None:
    """``clz`` does not parse as an opcode, but is registered to the same function."""
    from heron.emitters.elemental.core import _LOWERINGS

    assert _LOWERINGS["clz"] is _LOWERINGS["count-leading-zeros"]


@pytest.mark.parametrize("et", TYPES, ids=str)
@pytest.mark.parametrize("opcode", SHARED_BINARY)
def test_shared_binary_through_emitter(opcode: str, et: ElementType) -> None:
    lhs, rhs = _pairs(et, seed=17)
    text = _binary_text(opcode, et, lhs.size)
    refused = _refused(opcode, et)
    _check(text, [lhs, rhs], _emitter(text, [lhs, rhs], et, refused), refused)


@pytest.mark.parametrize("et", TYPES, ids=str)
@pytest.mark.parametrize("opcode", SHARED_UNARY)
def test_shared_unary_through_emitter(opcode: str, et: ElementType) -> None:
    x = _unary_inputs(et, seed=19)
    text = _unary_text(opcode, et, x.size)
    refused = _refused(opcode, et)
    _check(text, [x], _emitter(text, [x], et, refused), refused)


@pytest.mark.parametrize("et", TYPES, ids=str)
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_compare_through_emitter(direction: str, et: ElementType) -> None:
    lhs, rhs = _pairs(et, seed=23)
    text = _binary_text("compare", et, lhs.size, f", direction={direction}")
    run = _emitter(text, [lhs, rhs], ElementType.PRED, refused=False)
    _check(text, [lhs, rhs], run, refused=False)


@pytest.mark.parametrize("et", TYPES, ids=str)
def test_clamp_through_emitter(et: ElementType) -> None:
    """float_ops.py's clamp uses integer_binary's maximum and minimum for integers and pred."""
    rng = np.random.default_rng(29)
    codes = _edge_codes(et, rng)
    pick = [int(rng.integers(0, len(codes))) for _ in range(3 * 256)]
    low, x, high = (_array([codes[i] for i in pick[k::3]], et) for k in range(3))
    text = f"""
fused {{
  p0 = {et}[256] parameter(0)
  p1 = {et}[256] parameter(1)
  p2 = {et}[256] parameter(2)
  ROOT r = {et}[256] clamp(p0, p1, p2)
}}
"""
    _check(text, [low, x, high], lambda: run_hlo(text, [low, x, high])[0], refused=False)
