"""heron's compiled kernels against XLA:CPU on the oracle's edge inputs.

The other oracle tests check heron's reference evaluator; these compile the
same jax programs with heron (``compile_program`` for the h100 preset,
interpreter kernel images), run the executable on the interpreter device and
compare with XLA:CPU (``oracle_harness.run_compiled_oracle``).

Every elementwise case of test_oracle_elementwise.py runs for every dtype it
lists, in one program per case and dtype: random operands of shapes (7,) and
(3, 5) drawn as that file draws them (with subnormals mixed in), on two fixed
seeds, and every edge value (every pair of them for binary ops: NaN,
infinities, signed zeros, subnormals, the largest finite values, values where
exp overflows, large trigonometric arguments, integer extremes, shift amounts
past the bit width). Comparisons, select and clamp, converts (every type to
every type, with the conversions' boundary values), bitcasts and
reduce_precision follow the same pattern; then a handful of cheap structural
programs: reductions (short, and long enough for the reduction emitters' trees),
argmax and argmin with NaN, sort in jax's total order, cumulative ops,
iota/where/concatenate, gather and dynamic slices with out-of-range indices
(XLA clamps), and a dot.

Exact ops must give XLA:CPU's bits, NaN-ness and the sign of zero included;
approximated ones get the case's bound plus heron's documented one
(``oracle_harness.compiled_tolerance``). The bugs found are :data:`KNOWN_BUGS`.
"""

from __future__ import annotations

import math

import attrs
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from jax import lax
from oracle_harness import EXACT, Tolerance, random_array, run_compiled_oracle
from test_oracle_elementwise import (
    APPROX,
    BITCAST_PAIRS,
    CASES,
    CONVERT_TYPES,
    FLOATS,
    INTS,
    _instance,
)

SHAPES = [(7,), (3, 5)]
SEEDS = (0, 1)

#: Bugs of the compiled path this file found, by (test's case, dtype): the test is
#: marked xfail(strict=True), so that it fails as long as the bug is there and must lose
#: its row when it is fixed. Each: the op, the dtype, what differs (the reference
#: evaluator gives XLA:CPU's value).
KNOWN_BUGS: dict[tuple, str] = {
    **{
        ("long-argmax", dtype): (
            f"argmax/argmin {dtype} along a row of 8 or more with two NaNs give the later"
            " NaN's index (the evaluator and XLA:CPU the first, numpy's rule):"
            " argmax([[0, nan, nan, 0, 0, 0, 0, 0]], axis=1) = 2, XLA:CPU 1. jax's reducer"
            " keeps its first operand when both are NaN, so the answer is the reduction"
            " order's; XLA:GPU's row kernel combines lanes as heron's does (shfl.down 16..1,"
            " so even lanes come first: its PTX, deviceless, for this program), so it is"
            " expected to give 2 as well; not changed: an index-ordered tree would cost"
            " coalescing, and XLA leaves the order unspecified"
        )
        for dtype in ("float32", "bfloat16", "float16", "float64")
    },
}


def _dtype(name: str) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def _with_subnormals(rng: np.random.Generator, array: np.ndarray) -> np.ndarray:
    """``array`` with about one float element in eight replaced by a subnormal of its
    type (random_array draws none): the smallest, the largest and one between, either
    sign. Other types unchanged."""
    dtype = array.dtype
    if not (dtype.kind == "f" or dtype.name.startswith(("bfloat16", "float"))):
        return array
    info = ml_dtypes.finfo(dtype)
    tiny, normal = float(info.smallest_subnormal), float(info.smallest_normal)
    pool = np.array([tiny, normal - tiny, normal / 2, -tiny, tiny - normal, -normal / 2])
    mask = rng.random(array.shape) < 0.125
    return np.where(mask, rng.choice(pool, size=array.shape).astype(dtype), array)


def _param(*values, key: tuple, id: str):
    reason = KNOWN_BUGS.get(key)
    marks = [pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason)] if reason else []
    return pytest.param(*values, id=id, marks=marks)


# -- elementwise -------------------------------------------------------------------------


def _elementwise_tolerance(name: str, dtype: str) -> Tolerance:
    """The case's tolerance (XLA:CPU against the exact result), as the evaluator's
    oracle uses it, except where the op is exact whatever the dtype: abs of a real
    number, and complex results of ops with no rounding (test_oracle_elementwise gives
    every complex result the few-ulp bound for XLA:CPU's fused complex products).

    An approximate case's absolute allowance (APPROX's 1e-6, for results near zero
    such as sin(pi), where ulps are tiny) is scaled to the type: its ulps at 1.0 (of the
    component type for complex), so that it does not hide an f64 error of 1e-9.
    """
    case = CASES[name]
    tol = case.tol
    if dtype.startswith("complex"):
        tol = APPROX if name in ("multiply", "abs") else case.tol
    elif name == "abs":
        tol = EXACT
    if tol == EXACT:
        return tol
    part = {"complex64": "float32", "complex128": "float64"}.get(dtype, dtype)
    return attrs.evolve(tol, atol=tol.ulps * float(ml_dtypes.finfo(_dtype(part)).eps))


def edge_values(dtype: str, name: str = "") -> np.ndarray:
    """Every edge value of ``dtype`` worth pairing with every other: for floats signed
    zeros, ones and halves, values whose exponential over- or underflows, large
    arguments (trigonometric range reduction, huge powers), the largest finite
    values, the smallest normals and subnormals, epsilon, infinities and NaN; for
    integers the extremes, their neighbours, zero, +-1 and small values (shift
    amounts around the bit width for shifts); for complex numbers parts whose
    products are exact (XLA:CPU's fused complex products round once where heron
    rounds twice: with exact products both give the exact result)."""
    dt = _dtype(dtype)
    if dt == np.bool_:
        return np.array([False, True])
    if dt.kind in "iu":
        info = ml_dtypes.iinfo(dt)
        values = {info.min, info.min + 1, 0, 1, 2, 3, 7, info.max // 2, info.max // 2 + 1}
        values |= {info.max - 1, info.max} | ({-1, -2, -7} if info.min < 0 else {100})
        if name.startswith("shift"):
            bits = dt.itemsize * 8
            values |= {bits - 1, bits, bits + 1, 2 * bits}
        return np.array(sorted(values), dtype=dt)
    if dt.kind == "c":
        parts = [0.0, -0.0, 1.0, -2.5, 2.0**60, 2.0**-60]
        return np.array([complex(a, b) for a in parts for b in parts]).astype(dt)
    info = ml_dtypes.finfo(dt)
    top, normal = float(info.max), float(info.smallest_normal)
    overflow = math.log(top)  # exp's argument where it overflows
    values = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -3.0, 2.5, -2.5, 0.7, 1.5, 10.0, -10.0]
    values += [100.0, -700.0, 89.0, 3.1415927, 1e5, 1e8, 1e20]
    values += [overflow * 0.999, overflow * 1.001, -overflow * 1.001, -overflow * 1.05]
    values += [top, -top, normal, -normal, float(info.smallest_subnormal)]
    values += [-float(info.smallest_subnormal), normal / 2, float(info.eps), 1 + float(info.eps)]
    values += [math.inf, -math.inf, math.nan]
    with np.errstate(over="ignore"):
        return np.array(values).astype(dt)


def _edge_grid(case, dtype: str) -> list[np.ndarray]:
    """Every edge value (:func:`edge_values`), and for binary ops every pair of them."""
    values = edge_values(dtype, case.name)
    if case.arity == 1:
        return [values]
    return [v.reshape(-1) for v in np.meshgrid(values, values, indexing="ij")]


ELEMENTWISE = [
    _param(name, dtype, key=(name, dtype), id=f"{name}-{dtype}")
    for name in sorted(CASES)
    for dtype in CASES[name].dtypes
]


@pytest.mark.parametrize("name,dtype", ELEMENTWISE)
def test_elementwise_compiled_matches_xla(name: str, dtype: str) -> None:
    """One program of three instances of the op (one compile): random operands of
    shapes (7,) and (3, 5) as test_oracle_elementwise draws them, with subnormals
    mixed in, on each seed; and the edge grid (:func:`_edge_grid`)."""
    case = CASES[name]
    tol = _elementwise_tolerance(name, dtype)
    grid = _edge_grid(case, dtype)

    def f(*args):
        groups = [args[i : i + case.arity] for i in range(0, len(args), case.arity)]
        return {key: case.fn(*group) for key, group in zip(("7", "3x5", "edges"), groups)}

    for seed in SEEDS:
        rng = np.random.default_rng(1000 + seed)
        args = [
            _with_subnormals(rng, a)
            for shape in SHAPES
            for a in _instance(case, dtype, shape, seed)
        ]
        run_compiled_oracle(f, [jnp.asarray(a) for a in (*args, *grid)], tol)


COMPARE_TYPES = [*FLOATS, *INTS, "bool"]
DIRECTIONS = ("eq", "ne", "lt", "le", "gt", "ge")


def _pairs(dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of edge values (:func:`edge_values`), flattened."""
    values = edge_values(dtype)
    lhs, rhs = np.meshgrid(values, values, indexing="ij")
    return lhs.reshape(-1), rhs.reshape(-1)


@pytest.mark.parametrize("dtype", [_param(d, key=("compare", d), id=d) for d in COMPARE_TYPES])
def test_compare_compiled_matches_xla(dtype: str) -> None:
    """The six directions (one output each) in one program, on random operands of
    both shapes (some of a's values in b, so that equality is exercised) and on every
    pair of edge values."""
    dt = _dtype(dtype)

    def f(a7, b7, a35, b35, lhs, rhs):
        return {
            f"{key}-{d}": getattr(lax, d)(a, b)
            for key, a, b in (("7", a7, b7), ("3x5", a35, b35), ("edges", lhs, rhs))
            for d in DIRECTIONS
        }

    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        args = []
        for shape in SHAPES:
            a = _with_subnormals(rng, random_array(rng, shape, dt))
            args += [a, np.where(rng.random(shape) < 0.3, a, random_array(rng, shape, dt))]
        run_compiled_oracle(f, [jnp.asarray(a) for a in (*args, *_pairs(dtype))])


@pytest.mark.parametrize(
    "dtype", [_param(d, key=("select-clamp", d), id=d) for d in [*FLOATS, *INTS]]
)
def test_select_and_clamp_compiled_match_xla(dtype: str) -> None:
    """select and clamp in one program: on random operands of both shapes with the
    edge values (clamped between two scalars), and on every pair of edge values: select
    between them, clamp of every edge value between every other as the lower bound and
    a third as the upper one (NaN bounds and crossed bounds included), and between
    scalar bounds."""
    dt = _dtype(dtype)
    values = edge_values(dtype)
    lhs, rhs = _pairs(dtype)
    pred = np.arange(lhs.size) % 3 == 0
    upper = np.roll(values, 5)[np.arange(lhs.size) % values.size]
    edges = [pred, lhs, rhs, upper, values, values[1], values[-1], values[2]]

    def f(p7, a7, b7, p35, a35, b35, lo, hi, p, x, y, top, v, v1, vn, v2):
        return {
            "select-7": lax.select(p7, a7, b7),
            "select-3x5": lax.select(p35, a35, b35),
            "clamp-7": lax.clamp(lo, a7, hi),
            "clamp-3x5": lax.clamp(lo, a35, hi),
            "select-edges": lax.select(p, x, y),
            "clamp-edges": lax.clamp(x, y, top),
            "clamp-edges-scalars": lax.clamp(v1, v, vn),
            "clamp-edges-equal": lax.clamp(v2, v, v2),
        }

    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        args = []
        for shape in SHAPES:
            pred_r = rng.random(shape) < 0.5
            a = _with_subnormals(rng, random_array(rng, shape, dt))
            args += [pred_r, a, _with_subnormals(rng, random_array(rng, shape, dt))]
        lo = random_array(rng, (), dt, specials=False, low=-2, high=0)
        hi = random_array(rng, (), dt, specials=False, low=0, high=2)
        run_compiled_oracle(f, [jnp.asarray(a) for a in (*args, lo, hi, *edges)])


#: Values at the boundaries of the conversions' ranges and roundings: integer limits
#: and halfway points, f16's largest finite value and its overflow threshold, the fp8
#: and f4 types' largest values, the powers of two where narrower types go subnormal.
CONVERT_BOUNDARIES = [
    127.5, 128.0, -128.5, -129.0, 255.5, 256.0, -0.7, 0.99, -0.99, 32767.5, 32768.0,
    -32768.5, 65504.0, 65519.0, 65520.0, 65535.5, 65536.0, 2.0**31, -(2.0**31),
    2.0**31 + 2**8, 2.0**32, 2.0**63, -(2.0**63), 2.0**64, 1e19, -1e19, 1e30, 448.0, 464.0,
    57344.0, 61440.0, 6.0, 6.5, 7.0, 0.25, 0.125, 3.3895e38, 3.4e38, 1.0000001, 2.0**-126,
    2.0**-14, 2.0**-15, 2.0**-24, 2.0**-25, 2.0**-7, 2.0**-10, 2.0**-17, 3 * 2.0**-26, 0.1,
    1 / 3,
]  # fmt: skip


def _convert_edge_values(src: str) -> np.ndarray:
    """Every value of a type of at most 4 bits; else :func:`edge_values` and, for
    floats, :data:`CONVERT_BOUNDARIES` either sign (rounded to the type)."""
    dt = _dtype(src)
    if dt == np.bool_ or dt.kind == "c":
        return edge_values(src)
    if src in ("int4", "uint4", "int2", "uint2"):
        info = ml_dtypes.iinfo(dt)
        return np.arange(info.min, info.max + 1).astype(dt)
    if dt.kind in "iu":
        return edge_values(src)
    boundaries = np.array(CONVERT_BOUNDARIES)
    wide = np.concatenate([boundaries, -boundaries, edge_values("float64")])
    with np.errstate(all="ignore"):
        return wide.astype(dt)


@pytest.mark.parametrize("src", [_param(s, key=("convert", s), id=s) for s in CONVERT_TYPES])
def test_convert_compiled_matches_xla(src: str) -> None:
    """``src`` converted to every type in one program (one output per destination): a
    random (3, 5) instance on each seed, values from -300 to 300 besides the edge ones
    so that narrow destinations overflow, and the conversion edge values."""
    # jax refuses complex -> real conversion without an explicit real()
    dsts = ["complex64"] if src == "complex64" else CONVERT_TYPES

    def f(x, e):
        return {d: tuple(lax.convert_element_type(v, _dtype(d)) for v in (x, e)) for d in dsts}

    edges = _convert_edge_values(src)
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        x = random_array(rng, (3, 5), _dtype(src), low=-300, high=300)
        run_compiled_oracle(f, [jnp.asarray(_with_subnormals(rng, x)), jnp.asarray(edges)])


@pytest.mark.parametrize(
    "src,dst",
    [_param(s, d, key=("bitcast", s, d), id=f"{s}-to-{d}") for s, d in BITCAST_PAIRS],
)
def test_bitcast_convert_compiled_matches_xla(src: str, dst: str) -> None:
    s, d = _dtype(src), _dtype(dst)
    shape = (3, 5) if s.itemsize >= d.itemsize else (3, 5, d.itemsize // s.itemsize)
    for seed in SEEDS:
        a = random_array(np.random.default_rng(seed), shape, s)
        run_compiled_oracle(lambda x: lax.bitcast_convert_type(x, d), [jnp.asarray(a)])


@pytest.mark.parametrize("exponent_bits,mantissa_bits", [(8, 7), (5, 10), (4, 3), (2, 0), (1, 23)])
def test_reduce_precision_compiled_matches_xla(exponent_bits: int, mantissa_bits: int) -> None:
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        a = _with_subnormals(rng, random_array(rng, (3, 5), np.float32, low=-1e5, high=1e5))
        run_compiled_oracle(
            lambda x: lax.reduce_precision(x, exponent_bits, mantissa_bits), [jnp.asarray(a)]
        )


# -- structural --------------------------------------------------------------------------

STRUCTURAL_FLOATS = ["float32", "bfloat16", "float16", "float64"]
NUMERIC = [*STRUCTURAL_FLOATS, "int32", "int8", "uint32", "int64"]


def _summation_tolerance(dtype: np.dtype, terms: int, magnitude: float) -> Tolerance:
    """Two summation orders of ``terms`` values of at most ``magnitude`` (XLA:CPU's,
    heron's kernel's): each within ``(terms - 1) u sum|x_i|`` of the exact sum
    (``heron.harness.tolerance.summation_bound``'s first-order bound, ``u`` the unit
    roundoff of the sum's type), so within twice that of each other; exact for
    integers (wrapping sums are exact in any order)."""
    if not (dtype.kind == "f" or dtype.name.startswith("bfloat")):
        return EXACT
    unit = float(ml_dtypes.finfo(dtype).eps) / 2
    return Tolerance(ulps=1, atol=2 * max(terms - 1, 1) * unit * terms * magnitude)


@pytest.mark.parametrize("dtype", [_param(d, key=("reduce", d), id=d) for d in [*NUMERIC, "bool"]])
def test_reduce_compiled_matches_xla(dtype: str) -> None:
    """Sums over each axis and all axes of moderate values (their order is free), and
    max and min of the edge values (NaN propagates; exact in any order)."""
    dt = _dtype(dtype)
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        x = random_array(rng, (4, 6), dt)
        if dt == np.bool_:
            run_compiled_oracle(
                lambda a: (jnp.all(a, axis=0), jnp.any(a, axis=1), jnp.all(a), jnp.any(a)),
                [jnp.asarray(x)],
            )
            continue
        run_compiled_oracle(
            lambda a: (
                jnp.max(a, axis=0),
                jnp.min(a, axis=1),
                jnp.max(a),
                jnp.min(a),
            ),
            [jnp.asarray(x)],
        )
        moderate = random_array(rng, (4, 6), dt, specials=False)
        magnitude = float(np.max(np.abs(moderate.astype(np.float64))))
        run_compiled_oracle(
            lambda a: (
                jnp.sum(a, axis=0, dtype=a.dtype),
                jnp.sum(a, axis=1, dtype=a.dtype),
                jnp.sum(a, dtype=a.dtype),
            ),
            [jnp.asarray(moderate)],
            _summation_tolerance(dt, 24, magnitude),
        )


@pytest.mark.parametrize(
    "dtype", [_param(d, key=("reduce-nan", d), id=d) for d in STRUCTURAL_FLOATS]
)
def test_sum_of_nan_and_inf_compiled_matches_xla(dtype: str) -> None:
    """Sums of small values with NaN and infinities among them: NaN where a NaN or
    both infinities are summed, else the infinity, in any order (no finite value
    is large enough to overflow)."""
    dt = _dtype(dtype)
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        x = rng.uniform(-4, 4, size=(5, 6))
        special = rng.choice(np.array([math.nan, math.inf, -math.inf]), size=x.shape)
        x = np.where(rng.random(x.shape) < 0.15, special, x).astype(dt)
        run_compiled_oracle(
            lambda a: (jnp.sum(a, axis=0, dtype=a.dtype), jnp.sum(a, axis=1, dtype=a.dtype)),
            [jnp.asarray(x)],
            _summation_tolerance(dt, 6, 4.0),
        )


@pytest.mark.parametrize(
    "dtype",
    [_param(d, key=("argmax", d), id=d) for d in [*STRUCTURAL_FLOATS, "int32", "uint8"]],
)
def test_argmax_with_nan_compiled_matches_xla(dtype: str) -> None:
    """jax's argmax and argmin: a NaN wins, the first index of equal values wins."""
    dt = _dtype(dtype)
    for seed in SEEDS:
        x = random_array(np.random.default_rng(seed), (4, 6), dt)
        run_compiled_oracle(
            lambda a: (
                jnp.argmax(a, axis=0),
                jnp.argmax(a, axis=1),
                jnp.argmin(a, axis=1),
                jnp.argmax(a),
            ),
            [jnp.asarray(x)],
        )


#: Shapes long enough along the reduced dimension for heron's reduction emitters
#: (a row reduction and a column reduction; their trees, not one thread's loop).
LONG_SHAPES = [(3, 700), (700, 3)]


def _folded(op, a, axis: int | None):
    """``op`` (an elementwise max or min) folded pairwise over ``axis`` (all axes when
    None): XLA:CPU's elementwise ops, which propagate NaN and order -0 below +0."""
    if axis is None:
        a, axis = a.reshape(-1), 0
    while a.shape[axis] > 1:
        n = a.shape[axis]
        half = n // 2
        lo = lax.slice_in_dim(a, 0, half, axis=axis)
        hi = lax.slice_in_dim(a, half, 2 * half, axis=axis)
        a = lax.concatenate([op(lo, hi), lax.slice_in_dim(a, 2 * half, n, axis=axis)], axis)
    return lax.squeeze(a, (axis,))


@pytest.mark.parametrize("dtype", [_param(d, key=("long-max-min", d), id=d) for d in NUMERIC])
def test_long_max_min_compiled_match_xla(dtype: str) -> None:
    """max and min reductions of the edge values along long rows and columns, and of
    everything. The expected values are XLA:CPU's elementwise max and min folded
    pairwise (exact in any order), because XLA:CPU's own reduce loops are not its
    elementwise ops: its vectorized f32/f16/f64 max reduction of a (700, 3) array over
    its rows gives -0.0 for a row [0.0, -0.0, -3.79] (its max(0.0, -0.0) gives 0.0), and
    its bf16 min and max reductions of such an array drop NaNs (min of a row [nan,
    -2.56, -1.48] is -2.56); heron's reference evaluator gives 0.0 and NaN."""
    dt = _dtype(dtype)

    def reductions(a, maximum, minimum):
        return maximum(a, 1), minimum(a, 0), maximum(a, None), minimum(a, None)

    def f(a):
        return reductions(
            a,
            lambda v, axis: jnp.max(v, axis=axis),
            lambda v, axis: jnp.min(v, axis=axis),
        )

    def expected(a):
        return reductions(
            a,
            lambda v, axis: _folded(lax.max, v, axis),
            lambda v, axis: _folded(lax.min, v, axis),
        )

    for shape in LONG_SHAPES:
        x = random_array(np.random.default_rng(0), shape, dt)
        run_compiled_oracle(f, [jnp.asarray(x)], expected_fn=expected)


@pytest.mark.parametrize(
    "dtype", [_param(d, key=("long-argmax", d), id=d) for d in [*STRUCTURAL_FLOATS, "int32"]]
)
def test_long_argmax_with_nan_compiled_matches_xla(dtype: str) -> None:
    """jax's argmax and argmin along long rows and columns with NaN among the values:
    the first NaN's index, as numpy gives it."""
    dt = _dtype(dtype)
    for shape in LONG_SHAPES:
        x = random_array(np.random.default_rng(0), shape, dt)
        run_compiled_oracle(
            lambda a: (jnp.argmax(a, axis=1), jnp.argmin(a, axis=0), jnp.argmax(a, axis=0)),
            [jnp.asarray(x)],
        )


@pytest.mark.parametrize("dtype", [_param(d, key=("long-sum", d), id=d) for d in NUMERIC])
def test_long_sums_compiled_match_xla(dtype: str) -> None:
    """Sums and cumulative sums of moderate values along long rows and columns (in
    heron's order: the summation bound), and of values with NaN and infinities among
    them (NaN or the infinity in any order)."""
    dt = _dtype(dtype)
    for shape in LONG_SHAPES:
        rng = np.random.default_rng(0)
        x = random_array(rng, shape, dt, specials=False)
        magnitude = float(np.max(np.abs(x.astype(np.float64))))
        run_compiled_oracle(
            lambda a: (
                jnp.sum(a, axis=1, dtype=a.dtype),
                jnp.sum(a, axis=0, dtype=a.dtype),
                jnp.cumsum(a, axis=0, dtype=a.dtype),
            ),
            [jnp.asarray(x)],
            _summation_tolerance(dt, max(shape), magnitude),
        )
        if dt.kind in "iu":
            continue
        special = rng.choice(np.array([math.nan, math.inf, -math.inf]), size=shape)
        y = np.where(rng.random(shape) < 0.01, special, x.astype(np.float64)).astype(dt)
        run_compiled_oracle(
            lambda a: (jnp.sum(a, axis=1, dtype=a.dtype), jnp.sum(a, axis=0, dtype=a.dtype)),
            [jnp.asarray(y)],
            _summation_tolerance(dt, max(shape), magnitude),
        )


@pytest.mark.parametrize(
    "dtype", [_param(d, key=("sort", d), id=d) for d in [*STRUCTURAL_FLOATS, "int32", "uint16"]]
)
def test_sort_compiled_matches_xla(dtype: str) -> None:
    """jax's total order (NaNs last, -0 before +0), one key and a payload, stable; and
    two keys."""
    dt = _dtype(dtype)
    for seed in SEEDS:
        x = random_array(np.random.default_rng(seed), (3, 7), dt)
        payload = np.arange(x.size, dtype=np.int32).reshape(x.shape)
        keys2 = (payload % 3).astype(np.int32)

        def f(a, p, k2):
            return (
                *lax.sort((a, p), dimension=1, is_stable=True, num_keys=1),
                *lax.sort((a, k2, p), dimension=0, is_stable=True, num_keys=2),
                jnp.sort(a, axis=None),
            )

        run_compiled_oracle(f, [jnp.asarray(x), jnp.asarray(payload), jnp.asarray(keys2)])


@pytest.mark.parametrize("dtype", [_param(d, key=("cumulative", d), id=d) for d in NUMERIC])
def test_cumulative_compiled_matches_xla(dtype: str) -> None:
    """cumsum of moderate values along each axis; cummax and cummin of the edge
    values (NaN propagates)."""
    dt = _dtype(dtype)
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        x = random_array(rng, (4, 9), dt)
        run_compiled_oracle(
            lambda a: (lax.cummax(a, axis=1), lax.cummin(a, axis=0), lax.cummax(a, axis=0)),
            [jnp.asarray(x)],
        )
        moderate = random_array(rng, (4, 9), dt, specials=False)
        magnitude = float(np.max(np.abs(moderate.astype(np.float64))))
        run_compiled_oracle(
            lambda a: (jnp.cumsum(a, axis=1, dtype=a.dtype), jnp.cumsum(a, axis=0, dtype=a.dtype)),
            [jnp.asarray(moderate)],
            _summation_tolerance(dt, 9, magnitude),
        )


@pytest.mark.parametrize("dtype", [_param(d, key=("iota-where", d), id=d) for d in NUMERIC])
def test_iota_where_concatenate_compiled_matches_xla(dtype: str) -> None:
    dt = _dtype(dtype)
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        x = random_array(rng, (3, 5), dt)
        y = random_array(rng, (3, 2), dt)
        z = random_array(rng, (1, 7), dt)

        def f(a, b, c):
            iota = lax.broadcasted_iota(a.dtype, a.shape, 1)
            chosen = jnp.where(a > iota, a, iota)
            joined = lax.concatenate([a, b], 1)
            stacked = lax.concatenate([joined, c, joined[:1]], 0)
            return (
                chosen,
                stacked,
                jnp.where(jnp.isnan(a) if jnp.issubdtype(a.dtype, jnp.floating) else a > 0, 1, a),
            )

        run_compiled_oracle(f, [jnp.asarray(x), jnp.asarray(y), jnp.asarray(z)])


@pytest.mark.parametrize(
    "dtype",
    [_param(d, key=("indexing", d), id=d) for d in ["float32", "bfloat16", "int8", "uint64"]],
)
def test_gather_and_dynamic_slice_out_of_range_compiled_match_xla(dtype: str) -> None:
    """Out-of-range indices on both sides: XLA clamps gather's start indices (``take``
    with mode="clip" is a bare gather) and dynamic slices' offsets; mode="fill" gives
    the fill value out of range."""
    dt = _dtype(dtype)
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        x = random_array(rng, (5, 4), dt)
        update = random_array(rng, (2, 3), dt)
        idx = rng.integers(-3, 8, size=6).astype(np.int32)
        offsets = [np.int32(o) for o in rng.integers(-4, 8, size=2)]

        def f(a, i, u, r, c):
            return (
                jnp.take(a, i, axis=0, mode="clip"),
                jnp.take(a, i, axis=1, mode="clip"),
                jnp.take(a, i, axis=0, mode="fill", fill_value=7),
                lax.dynamic_slice(a, (r, c), (2, 3)),
                lax.dynamic_update_slice(a, u, (r, c)),
            )

        run_compiled_oracle(f, [jnp.asarray(v) for v in (x, idx, update, *offsets)])


@pytest.mark.parametrize(
    "dtype", [_param(d, key=("dot", d), id=d) for d in ["float32", "float64", "bfloat16", "int32"]]
)
def test_dot_compiled_matches_xla(dtype: str) -> None:
    """A batched matmul of moderate values: heron's documented bounds for what a dot
    reaches (reassociation, TF32 for f32 on the h100) come from compiled_tolerance;
    integer dots are exact."""
    dt = _dtype(dtype)
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        lhs = random_array(rng, (2, 3, 5), dt, specials=False)
        rhs = random_array(rng, (2, 5, 4), dt, specials=False)
        magnitude = float(np.max(np.abs(lhs.astype(np.float64)))) * float(
            np.max(np.abs(rhs.astype(np.float64)))
        )
        run_compiled_oracle(
            lambda a, b: lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,)))),
            [jnp.asarray(lhs), jnp.asarray(rhs)],
            _summation_tolerance(dt, 5, magnitude),
        )
