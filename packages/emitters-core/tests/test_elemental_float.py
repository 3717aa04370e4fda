"""Float arithmetic, math functions, compare/select/clamp of the elemental emitter vs the evaluator.

Every lowering in ``heron.emitters.elemental.float_ops`` is run on the host
(``elemental_jit.run_hlo``) and compared with ``heron.hlo.evaluate_module``:
bit for bit (any NaN matching any NaN) for the correctly rounded ops, within a
few ulps (plus one epsilon for bounded results) for the libm-backed
transcendental functions. Inputs are edge values (signed zeros, infinities,
NaNs, subnormals, the type's extremes) plus random values; the fp8 formats and
f4 are tested exhaustively.
"""

from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
from heron_test_support.elemental_cases import NARROW_FLOATS, WIDE_FLOATS, rng_for, run_both
from heron_test_support.elemental_jit import run_hlo

from heron.hlo import UnsupportedError, parse_module
from heron.hlo.element_types import ElementType as E
from heron.hlo.evaluator.float_semantics import total_order_keys

WIDE, NARROW = WIDE_FLOATS, NARROW_FLOATS
FLOATS = WIDE + NARROW

EXACT_UNARY = [
    "abs",
    "negate",
    "sign",
    "floor",
    "ceil",
    "round-nearest-afz",
    "round-nearest-even",
    "sqrt",
]
EXACT_BINARY = ["add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum"]

#: ulps allowed for f32/f64 (host libm vs float64-then-rounded); the narrow types get 1.
MATH_UNARY = {
    "exponential": 2,
    "exponential-minus-one": 2,
    "log": 2,
    "log-plus-one": 2,
    "logistic": 4,
    "rsqrt": 2,
    "cbrt": 4,
    "tanh": 2,
    "sine": 2,
    "cosine": 2,
    "tan": 2,
    "erf": 2,
    "acos": 2,
    "acosh": 2,
    "asin": 2,
    "asinh": 2,
    "atanh": 2,
    "cosh": 4,
    "sinh": 4,
}
MATH_BINARY = {"power": 2, "atan2": 2}
#: Bounded results: one epsilon of absolute error is accepted too (as the evaluator documents).
BOUNDED = {"logistic", "sine", "cosine", "tanh", "erf", "atan2", "acos", "asin"}

DIRECTIONS = ["EQ", "NE", "LT", "LE", "GT", "GE"]


# -- helpers ----------------------------------------------------------------------------


def fp8_arithmetic_available() -> bool:
    from heron.emitters.elemental import conversions

    return hasattr(conversions, "to_f32") and hasattr(conversions, "from_f32")


def needs_conversions(et: E) -> bool:
    return et in NARROW and not fp8_arithmetic_available()


def hlo(root: str, params: list[tuple[E, tuple[int, ...]]], result: str) -> str:
    """A corpus-form computation whose root is ``root`` (operands %p0, %p1, ...)."""
    lines = []
    for k, (et, dims) in enumerate(params):
        shape = f"{et.value}[{','.join(map(str, dims))}]"
        lines.append(f"  %p{k} = {shape} parameter({k})")
    signature = ", ".join(
        f"p{k}: {et.value}[{','.join(map(str, dims))}]" for k, (et, dims) in enumerate(params)
    )
    body = "\n".join(lines)
    return f"%f ({signature}) -> {result} {{\n{body}\n  ROOT %r = {result} {root}\n}}\n"


def all_codes(et: E) -> np.ndarray:
    """Every value of an 8-bit-or-narrower float type."""
    return np.arange(1 << et.bit_width, dtype=np.uint8).view(et.numpy_dtype)


def nan_with_bits(et: E, sign: bool, payload: int) -> np.ndarray:
    exponent_bits = {E.F16: 5, E.BF16: 8, E.F32: 8, E.F64: 11}[et]
    width = et.bit_width
    mantissa = width - 1 - exponent_bits
    bits = (int(sign) << (width - 1)) | (((1 << exponent_bits) - 1) << mantissa) | payload
    return np.array([bits], dtype=f"uint{width}").view(et.numpy_dtype)


def edge_values(et: E, signaling: bool = False) -> np.ndarray:
    """Signed zeros, ones, halves, extremes, subnormals, infinities and NaNs of ``et``."""
    if et in NARROW:
        return all_codes(et)
    info = ml_dtypes.finfo(et.numpy_dtype)
    values = [0.0, -0.0, 1.0, -1.0, 0.5, -1.5, 2.5, 3.0, -3.75, 1e-3, 100.0, -100.0]
    values += [float(info.max), -float(info.max), float(info.tiny), -float(info.tiny)]
    values += [float(info.smallest_subnormal), -float(info.smallest_subnormal)]
    values += [np.inf, -np.inf, np.nan]
    array = np.array(values, dtype=np.float64).astype(et.numpy_dtype)
    nans = [nan_with_bits(et, True, 1 << (ml_dtypes.finfo(et.numpy_dtype).nmant - 1))]
    if signaling:
        nans += [nan_with_bits(et, False, 1), nan_with_bits(et, True, 3)]
    return np.concatenate([array, *nans])


def random_values(et: E, n: int, rng: np.random.Generator) -> np.ndarray:
    """Random values spread over many magnitudes, both signs."""
    magnitude = np.exp(rng.uniform(-12.0, 12.0, n))
    sign = rng.choice([-1.0, 1.0], n)
    mixed = np.where(rng.random(n) < 0.5, rng.normal(0.0, 3.0, n), sign * magnitude)
    with np.errstate(over="ignore"):  # large magnitudes overflow f16 to inf, on purpose
        return mixed.astype(et.numpy_dtype)


def unary_inputs(et: E, rng: np.random.Generator) -> np.ndarray:
    if et in NARROW:
        return all_codes(et)
    return np.concatenate([edge_values(et), random_values(et, 400, rng)])


def narrow_specials(et: E) -> np.ndarray:
    """The codes of a narrow type that are zero, +-1, extreme, smallest, infinite or NaN."""
    codes = all_codes(et)
    wide = codes.astype(np.float64)
    finite = np.abs(wide[np.isfinite(wide)])
    extremes = [finite.max(), finite[finite > 0].min(), 0.0, 1.0]
    with np.errstate(invalid="ignore"):
        keep = ~np.isfinite(wide) | np.isin(np.abs(wide), extremes)
    return codes[keep]


def binary_inputs(et: E, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edge values plus random pairs (narrow types: every code 24 times)."""
    edges = narrow_specials(et) if et in NARROW else edge_values(et)
    a, b = (np.array(v) for v in zip(*itertools.product(edges, edges), strict=True))
    if et in NARROW:
        codes = all_codes(et)
        lhs = np.concatenate([a, np.repeat(codes, 12), rng.choice(codes, 12 * codes.size)])
        rhs = np.concatenate([b, rng.choice(codes, 12 * codes.size), np.repeat(codes, 12)])
        return lhs.astype(et.numpy_dtype), rhs.astype(et.numpy_dtype)
    n = 300
    return (
        np.concatenate([a, random_values(et, n, rng)]).astype(et.numpy_dtype),
        np.concatenate([b, random_values(et, n, rng)]).astype(et.numpy_dtype),
    )


def ulp_distance(got: np.ndarray, want: np.ndarray, et: E) -> np.ndarray:
    """|got - want| in steps of ``et`` (total order), exact for every width."""
    keys_got = total_order_keys(got, et)
    keys_want = total_order_keys(want, et)
    distance = np.zeros(got.shape, dtype=np.float64)
    for i in np.flatnonzero(keys_got != keys_want):
        distance.flat[i] = abs(int(keys_got.flat[i]) - int(keys_want.flat[i]))
    return distance


def assert_float_match(got, want, et: E, inputs, ulps: int = 0, atol: bool = False, what=""):
    """got == want bit for bit (any NaN matches any NaN), or within ``ulps``/one epsilon."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype == et.numpy_dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape
    g64, w64 = got.astype(np.float64), want.astype(np.float64)
    nan_got, nan_want = np.isnan(g64), np.isnan(w64)
    ok = (nan_got & nan_want) | (~nan_got & ~nan_want & (ulp_distance(got, want, et) <= ulps))
    if atol:
        epsilon = float(ml_dtypes.finfo(et.numpy_dtype).eps)
        with np.errstate(invalid="ignore"):
            ok |= np.isfinite(g64) & np.isfinite(w64) & (np.abs(g64 - w64) <= epsilon)
    bad = np.flatnonzero(~ok)
    if bad.size:
        shown = [(tuple(x.flat[i] for x in inputs), got.flat[i], want.flat[i]) for i in bad[:8]]
        pytest.fail(f"{what} {et.value}: {bad.size} mismatches (inputs, got, want): {shown}")


def expect_unsupported_or(et: E, text: str, inputs: list[np.ndarray]):
    """The run results, or None after checking that fp8 arithmetic is refused clearly."""
    if needs_conversions(et):
        with pytest.raises(UnsupportedError, match="to_f32"):
            run_hlo(text, inputs)
        return None
    return run_both(text, inputs)


# -- arithmetic ---------------------------------------------------------------------------


@pytest.mark.parametrize("et", FLOATS, ids=lambda e: e.value)
@pytest.mark.parametrize("op", EXACT_UNARY + list(MATH_UNARY))
def test_unary(op: str, et: E):
    x = unary_inputs(et, rng_for(op, et))
    text = hlo(f"{op}(%p0)", [(et, x.shape)], f"{et.value}[{x.size}]")
    result = expect_unsupported_or(et, text, [x])
    if result is None:
        return
    (got,), (want,) = result
    ulps = 0 if op in EXACT_UNARY else (MATH_UNARY[op] if et in (E.F32, E.F64) else 1)
    atol = op in BOUNDED
    assert_float_match(got, want, et, [x], ulps=ulps, atol=atol, what=op)


@pytest.mark.parametrize("et", FLOATS, ids=lambda e: e.value)
@pytest.mark.parametrize("op", EXACT_BINARY + list(MATH_BINARY))
def test_binary(op: str, et: E):
    a, b = binary_inputs(et, rng_for(op, et))
    text = hlo(f"{op}(%p0, %p1)", [(et, a.shape), (et, b.shape)], f"{et.value}[{a.size}]")
    result = expect_unsupported_or(et, text, [a, b])
    if result is None:
        return
    (got,), (want,) = result
    ulps = 0 if op in EXACT_BINARY else (MATH_BINARY[op] if et in (E.F32, E.F64) else 1)
    assert_float_match(got, want, et, [a, b], ulps=ulps, atol=op in BOUNDED, what=op)


def test_sign_and_negate_keep_signed_zero_and_nan():
    x = np.array([-0.0, 0.0, np.nan, -np.inf, 1e-45, -1e-45], np.float32)
    for op, expected in (
        ("sign", [-0.0, 0.0, np.nan, -1.0, 1.0, -1.0]),
        ("negate", [0.0, -0.0, np.nan, np.inf, -1e-45, 1e-45]),
    ):
        text = hlo(f"{op}(%p0)", [(E.F32, (6,))], "f32[6]")
        (got,) = run_hlo(text, [x])
        want = np.array(expected, np.float32)
        assert np.array_equal(np.signbit(got[:2]), np.signbit(want[:2])), op
        np.testing.assert_array_equal(got, want)


def test_maximum_minimum_propagate_nan_and_order_zeros():
    a = np.array([np.nan, 1.0, -0.0, 0.0, -np.inf], np.float32)
    b = np.array([1.0, np.nan, 0.0, -0.0, np.inf], np.float32)
    shape = [(E.F32, (5,)), (E.F32, (5,))]
    (high,) = run_hlo(hlo("maximum(%p0, %p1)", shape, "f32[5]"), [a, b])
    (low,) = run_hlo(hlo("minimum(%p0, %p1)", shape, "f32[5]"), [a, b])
    assert np.isnan(high[:2]).all() and np.isnan(low[:2]).all()
    assert not np.signbit(high[2]) and not np.signbit(high[3])
    assert np.signbit(low[2]) and np.signbit(low[3])
    assert high[4] == np.inf and low[4] == -np.inf


def test_round_nearest_afz_ties_away_from_zero():
    x = np.array([0.5, -0.5, 1.5, 2.5, -2.5, 0.49999997, -0.0], np.float32)
    text = hlo("round-nearest-afz(%p0)", [(E.F32, (7,))], "f32[7]")
    (got,) = run_hlo(text, [x])
    np.testing.assert_array_equal(got, np.array([1, -1, 2, 3, -3, 0, -0.0], np.float32))
    assert np.signbit(got[6])


def test_logistic_of_large_negative_is_tiny_not_zero():
    x = np.array([-100.0, -30.0, 0.0, 30.0, np.nan], np.float32)
    (got,) = run_hlo(hlo("logistic(%p0)", [(E.F32, (5,))], "f32[5]"), [x])
    assert 0 < got[0] < 1e-40 and got[2] == 0.5 and got[3] == 1.0 and np.isnan(got[4])


def test_f64_math_in_f64():
    """f64 ops must not detour through f32: exp(700) is finite, log(1 + 1e-12) is not 0."""
    x = np.array([700.0, 1.0 + 1e-12], np.float64)
    (got,) = run_hlo(hlo("exponential(%p0)", [(E.F64, (2,))], "f64[2]"), [x[:1].repeat(2)])
    assert np.isfinite(got[0]) and got[0] > 1e300
    (got,) = run_hlo(hlo("log(%p0)", [(E.F64, (2,))], "f64[2]"), [x[1:].repeat(2)])
    assert abs(got[0] - 1e-12) < 1e-15


def emitted(text: str) -> str:
    """The MLIR the elemental emitter produces for the root (parameters as scalar arguments)."""
    from mlir import ir
    from mlir.dialects import func

    from heron.emitters.dialect import make_context
    from heron.emitters.elemental import ElementalContext, emit_instruction
    from heron.emitters.mlir_types import scalar_type

    module = parse_module(text)
    computation = module.computation(module.fusion_under_test)
    root = computation.root_instruction
    with make_context(), ir.Location.unknown():
        holder = ir.Module.create()
        arguments = [scalar_type(p.array_shape.element_type) for p in computation.parameters]
        results = [scalar_type(leaf.element_type) for leaf in root.shape.leaves()]
        with ir.InsertionPoint(holder.body):
            function = func.FuncOp("f", ir.FunctionType.get(arguments, results))
            block = function.add_entry_block()
        with ir.InsertionPoint(block):
            scalars = list(block.arguments)

            def resolve(inst, indices):
                if inst.opcode == "parameter":
                    return [scalars[inst.parameter_number]]
                return emit_instruction(inst, indices, ctx)

            ctx = ElementalContext(resolve=resolve, call=None, fusion_name="test")
            func.ReturnOp(emit_instruction(root, [], ctx))
        holder.operation.verify()
        return str(holder)


@pytest.mark.parametrize(
    ("op", "math_op"),
    [("exponential-minus-one", "math.expm1"), ("log-plus-one", "math.log1p")],
)
def test_expm1_and_log1p_are_their_math_ops(op: str, math_op: str):
    """The host harness lowers these two as exp(x) - 1 and log(1 + x) (see the numeric test's
    tolerance), so check that the emitter asks for the accurate op itself."""
    text = emitted(hlo(f"{op}(%p0)", [(E.F32, (4,))], "f32[4]"))
    assert f"{math_op} %arg0 : f32" in text


def test_bf16_arithmetic_runs_in_f32():
    text = emitted(hlo("tanh(%p0)", [(E.BF16, (4,))], "bf16[4]"))
    assert "arith.extf %arg0 : bf16 to f32" in text
    assert "math.tanh" in text and ": f32 to bf16" in text


@pytest.mark.parametrize("et", FLOATS, ids=lambda e: e.value)
def test_is_finite(et: E):
    x = unary_inputs(et, rng_for("is-finite", et))
    text = hlo("is-finite(%p0)", [(et, x.shape)], f"pred[{x.size}]")
    result = expect_unsupported_or(et, text, [x])
    if result is None:
        return
    (got,), (want,) = result
    np.testing.assert_array_equal(got, want)


def test_integer_only_opcode_on_float_is_unsupported():
    text = hlo("atan2(%p0, %p1)", [(E.S32, (2,)), (E.S32, (2,))], "s32[2]")
    with pytest.raises(UnsupportedError, match="atan2"):
        run_hlo(text, [np.array([1, 2], np.int32)] * 2)


def test_rounding_on_integers_is_unsupported():
    text = hlo("floor(%p0)", [(E.S32, (2,))], "s32[2]")
    with pytest.raises(UnsupportedError, match="floor"):
        run_hlo(text, [np.array([1, 2], np.int32)])


# -- compare ----------------------------------------------------------------------------


def compare_text(et: E, n: int, kind: str) -> str:
    params = [(et, (n,)), (et, (n,))]
    signature = ", ".join(f"p{k}: {et.value}[{n}]" for k in range(2))
    lines = [f"  %p{k} = {et.value}[{n}] parameter({k})" for k in range(2)]
    names = []
    for direction in DIRECTIONS:
        name = f"%c{direction}"
        names.append(name)
        lines.append(f"  {name} = pred[{n}] compare(%p0, %p1), direction={direction}, type={kind}")
    tuple_shape = "(" + ", ".join([f"pred[{n}]"] * len(DIRECTIONS)) + ")"
    lines.append(f"  ROOT %t = {tuple_shape} tuple({', '.join(names)})")
    del params
    body = "\n".join(lines)
    return f"%f ({signature}) -> {tuple_shape} {{\n{body}\n}}\n"


@pytest.mark.parametrize("kind", ["FLOAT", "TOTALORDER"])
@pytest.mark.parametrize("et", FLOATS, ids=lambda e: e.value)
def test_compare(et: E, kind: str):
    edges = edge_values(et, signaling=True)
    a, b = (np.array(v) for v in zip(*itertools.product(edges, edges), strict=True))
    a, b = a.astype(et.numpy_dtype), b.astype(et.numpy_dtype)
    text = compare_text(et, a.size, kind)
    if kind == "FLOAT":
        result = expect_unsupported_or(et, text, [a, b])
        if result is None:
            return
    else:  # TOTALORDER works on the bits and needs no conversion
        result = run_both(text, [a, b])
    got, want = result
    assert len(got) == len(want) == len(DIRECTIONS)
    for direction, g, w in zip(DIRECTIONS, got, want, strict=True):
        mismatch = np.flatnonzero(g != w)
        assert mismatch.size == 0, (
            direction,
            [(a[i], b[i], g[i], w[i]) for i in mismatch[:6]],
        )


def test_totalorder_orders_nans_and_zeros():
    """-NaN < -inf < -0 < +0 < inf < NaN under TOTALORDER; FLOAT sees -0 == +0."""
    ordered = np.concatenate(
        [
            nan_with_bits(E.F32, True, 1 << 22),
            np.array([-np.inf, -1.0, -0.0, 0.0, 1e-45, np.inf], np.float32),
            nan_with_bits(E.F32, False, 1 << 22),
        ]
    )
    n = ordered.size
    a = np.repeat(ordered, n)
    b = np.tile(ordered, n)
    got = run_hlo(compare_text(E.F32, n * n, "TOTALORDER"), [a, b])
    index_a, index_b = np.repeat(np.arange(n), n), np.tile(np.arange(n), n)
    np.testing.assert_array_equal(got[DIRECTIONS.index("LT")], index_a < index_b)
    np.testing.assert_array_equal(got[DIRECTIONS.index("EQ")], index_a == index_b)
    floats = run_hlo(compare_text(E.F32, n * n, "FLOAT"), [a, b])
    zeros = (a == 0) & (b == 0)
    assert floats[DIRECTIONS.index("EQ")][zeros].all()
    assert floats[DIRECTIONS.index("NE")][np.isnan(a)].all()


# -- select and clamp -------------------------------------------------------------------

SELECT_TYPES = [
    E.PRED,
    E.S2,
    E.S4,
    E.U4,
    E.S8,
    E.U8,
    E.S32,
    E.S64,
    E.U64,
    E.F16,
    E.BF16,
    E.F32,
    E.F64,
    E.F8E4M3FN,
    E.F8E5M2FNUZ,
    E.F4E2M1FN,
    E.C64,
    E.C128,
]
CLAMP_TYPES = [t for t in SELECT_TYPES if not t.is_complex]


def sample(et: E, n: int, rng: np.random.Generator) -> np.ndarray:
    """Random values of any type: bit patterns for narrow types, edges and randoms otherwise."""
    if et is E.PRED:
        return rng.random(n) < 0.5
    if et.is_integral:
        info = np.iinfo(np.int64 if et.is_signed_integral else np.uint64)
        width = et.bit_width
        if et.is_signed_integral:
            low, high = -(1 << (width - 1)), (1 << (width - 1)) - 1
        else:
            low, high = 0, (1 << width) - 1
        edges = [low, high, 0, 1, min(high, 5), max(low, -1)]
        dtype = np.int64 if et.is_signed_integral else np.uint64
        values = rng.integers(
            max(low, info.min), min(high, info.max), n, endpoint=True, dtype=dtype
        )
        codes = [v & ((1 << width) - 1) for v in [*edges, *(int(v) for v in values)][:n]]
        wide = np.array(codes, np.uint64)
        if et.is_signed_integral:
            wide = np.array([c - (1 << width) if c >> (width - 1) else c for c in codes])
        return wide.astype(et.numpy_dtype)
    if et.is_complex:
        part = et.component_type
        return (random_values(part, n, rng) + 1j * random_values(part, n, rng)).astype(
            et.numpy_dtype
        )
    if et in NARROW:
        return rng.choice(all_codes(et), n)
    values = np.concatenate([edge_values(et), random_values(et, n, rng)])
    return rng.permutation(values)[:n]


def test_sample_covers_extremes():
    """The integer samples must include the type's extremes for clamp/select to mean much."""
    s4 = sample(E.S4, 40, rng_for("s4"))
    assert s4.min() == -8 and s4.max() == 7


@pytest.mark.parametrize("scalar_pred", [False, True], ids=["array", "scalar"])
@pytest.mark.parametrize("et", SELECT_TYPES, ids=lambda e: e.value)
def test_select(et: E, scalar_pred: bool):
    n = 64
    rng = rng_for("select", et, scalar_pred)
    on_true, on_false = sample(et, n, rng), sample(et, n, rng)
    pred = np.array(True) if scalar_pred else rng.random(n) < 0.5
    params = [(E.PRED, pred.shape), (et, (n,)), (et, (n,))]
    text = hlo("select(%p0, %p1, %p2)", params, f"{et.value}[{n}]")
    (got,), (want,) = run_both(text, [pred, on_true, on_false])
    assert got.dtype == want.dtype
    if et.is_floating or et.is_complex:  # bit for bit, NaN payloads included
        width = got.dtype.itemsize
        view = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.complex128}
        np.testing.assert_array_equal(got.view(view[width]), want.view(view[width]))
    else:
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("scalar_bounds", [False, True], ids=["array", "scalar"])
@pytest.mark.parametrize("et", CLAMP_TYPES, ids=lambda e: e.value)
def test_clamp(et: E, scalar_bounds: bool):
    n = 64
    rng = rng_for("clamp", et, scalar_bounds)
    x = sample(et, n, rng)
    if scalar_bounds:
        low, high = np.sort(sample(et, 2, rng)) if not et.is_pred else (np.False_, np.True_)
        low, high = np.array(low, et.numpy_dtype), np.array(high, et.numpy_dtype)
    else:
        low, high = sample(et, n, rng), sample(et, n, rng)
    params = [(et, low.shape), (et, (n,)), (et, high.shape)]
    text = hlo("clamp(%p0, %p1, %p2)", params, f"{et.value}[{n}]")
    result = expect_unsupported_or(et, text, [low, x, high])
    if result is None:
        return
    (got,), (want,) = result
    if et.is_floating:
        assert_float_match(got, want, et, [low, x, high], what="clamp")
    else:
        np.testing.assert_array_equal(got, want)


def test_clamp_of_complex_is_unsupported():
    n = 2
    params = [(E.C64, (n,))] * 3
    text = hlo("clamp(%p0, %p1, %p2)", params, f"c64[{n}]")
    z = np.zeros(n, np.complex64)
    with pytest.raises(UnsupportedError, match="clamp"):
        run_hlo(text, [z, z, z])
