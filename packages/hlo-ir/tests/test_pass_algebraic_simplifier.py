"""The algebraic simplifier: each rule fires where it should, never where it would change bits.

Every rewrite is checked with the reference evaluator, bit for bit, on fixed
inputs that include the values the exactness argument turns on (-0.0, NaN,
infinities), and on random modules built from the patterns the rules match.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from heron.hlo.builder import ModuleBuilder
from heron.hlo.evaluator import evaluate_module, random_arguments
from heron.hlo.ir import Module
from heron.hlo.parser import parse_module
from heron.hlo.passes import HloPass, run_pipeline, simplification_pipeline
from heron.hlo.passes.algebraic_simplifier import FOLD_LIMIT, simplify_algebra
from heron.hlo.printer import print_module
from heron.hlo.shapes import array_shape

EDGES = np.array([-0.0, 0.0, np.nan, np.inf, -np.inf, 1.5, -2.0, 3e38], dtype=np.float32)


def _same_bits(a: object, b: object) -> bool:
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(map(_same_bits, a, b))
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _simplified(text: str, arguments: list | None = None) -> Module:
    """The module after the simplifier and DCE; its results must equal the original's."""
    module = parse_module(text)
    if arguments is None:
        arguments = [EDGES.copy() for _ in module.entry.parameters]
    before = evaluate_module(module, arguments)
    run_pipeline(module, simplification_pipeline())
    assert _same_bits(before, evaluate_module(module, arguments)), print_module(module)
    return module


def _root_opcode(module: Module) -> str:
    return module.entry.root_instruction.opcode


def _entry(body: str, params: str = "p = f32[8] parameter(0)", computations: str = "") -> str:
    return f"HloModule m\n{computations}ENTRY main {{\n  {params}\n{body}\n}}\n"


@pytest.mark.parametrize(
    ("body", "simplified"),
    [
        (
            "  z = f32[] constant(-0)\n  b = f32[8] broadcast(z), dimensions={}\n"
            "  ROOT r = f32[8] add(p, b)",
            True,
        ),
        (
            "  z = f32[] constant(0)\n  b = f32[8] broadcast(z), dimensions={}\n"
            "  ROOT r = f32[8] add(b, p)",
            False,
        ),  # -0.0 + 0.0 is 0.0: not an identity
        (
            "  z = f32[] constant(0)\n  b = f32[8] broadcast(z), dimensions={}\n"
            "  ROOT r = f32[8] subtract(p, b)",
            True,
        ),
        (
            "  z = f32[] constant(-0)\n  b = f32[8] broadcast(z), dimensions={}\n"
            "  ROOT r = f32[8] subtract(p, b)",
            False,
        ),
        (
            "  one = f32[] constant(1)\n  b = f32[8] broadcast(one), dimensions={}\n"
            "  ROOT r = f32[8] multiply(b, p)",
            True,
        ),
        ("  one = f32[8] constant({1,1,1,1,1,1,1,1})\n  ROOT r = f32[8] divide(p, one)", True),
        (
            "  zero = f32[] constant(0)\n  b = f32[8] broadcast(zero), dimensions={}\n"
            "  ROOT r = f32[8] multiply(p, b)",
            False,
        ),  # NaN * 0 and inf * 0 are NaN
        ("  n = f32[8] negate(p)\n  ROOT r = f32[8] negate(n)", True),
        ("  ROOT r = f32[8] maximum(p, p)", True),
        (
            "  i = f32[] constant(-inf)\n  b = f32[8] broadcast(i), dimensions={}\n"
            "  ROOT r = f32[8] maximum(b, p)",
            True,
        ),
        (
            "  i = f32[] constant(inf)\n  b = f32[8] broadcast(i), dimensions={}\n"
            "  ROOT r = f32[8] minimum(p, b)",
            True,
        ),
        (
            "  i = f32[] constant(inf)\n  b = f32[8] broadcast(i), dimensions={}\n"
            "  ROOT r = f32[8] maximum(p, b)",
            False,
        ),
        (
            "  i = f32[] constant(-3e38)\n  b = f32[8] broadcast(i), dimensions={}\n"
            "  ROOT r = f32[8] maximum(p, b)",
            False,
        ),  # the lowest finite float is not below -inf
        ("  c = pred[8] compare(p, p), direction=EQ\n  ROOT r = f32[8] select(c, p, p)", True),
        (
            "  t = pred[] constant(true)\n  b = pred[8] broadcast(t), dimensions={}\n"
            "  n = f32[8] negate(p)\n  ROOT r = f32[8] select(b, p, n)",
            True,
        ),
        ("  r1 = f32[2,4] reshape(p)\n  ROOT r = f32[8] reshape(r1)", True),
        ("  ROOT r = f32[8] copy(p)", True),
        ("  ROOT r = f32[8] convert(p)", True),
        ("  ROOT r = f32[8] slice(p), slice={[0:8]}", True),
        ("  ROOT r = f32[8] reverse(p), dimensions={}", True),
        ("  z = f32[] constant(0)\n  ROOT r = f32[8] pad(p, z), padding=0_0", True),
        ("  ROOT r = f32[8] concatenate(p), dimensions={0}", True),
    ],
)
def test_identities_fire_only_when_exact(body: str, simplified: bool) -> None:
    module = _simplified(_entry(body))
    assert (_root_opcode(module) == "parameter") == simplified, print_module(module)


def test_integer_and_logical_identities() -> None:
    params = "p = s32[6] parameter(0)\n  q = pred[6] parameter(1)"
    body = (
        "  z = s32[] constant(0)\n  bz = s32[6] broadcast(z), dimensions={}\n"
        "  a = s32[6] add(bz, p)\n"
        "  m1 = s32[] constant(-1)\n  b1 = s32[6] broadcast(m1), dimensions={}\n"
        "  x = s32[6] and(a, b1)\n"
        "  t = pred[] constant(true)\n  bt = pred[6] broadcast(t), dimensions={}\n"
        "  y = pred[6] and(q, bt)\n"
        "  f = pred[] constant(false)\n  bf = pred[6] broadcast(f), dimensions={}\n"
        "  w = pred[6] or(bf, y)\n"
        "  ROOT r = (s32[6], pred[6]) tuple(x, w)"
    )
    arguments = [
        np.array([0, -1, 7, 2**31 - 1, -(2**31), 5], dtype=np.int32),
        np.array([True, False, True, False, True, True]),
    ]
    module = _simplified(_entry(body, params), arguments)
    root = module.entry.root_instruction
    assert [op.opcode for op in root.operands] == ["parameter", "parameter"]


#: reducer opcode -> (identity for floats, for signed integers, for pred), None: none.
REDUCERS = {
    "add": ("-0", "0", None),
    "multiply": ("1", "1", None),
    "maximum": ("-inf", "-2147483648", "false"),
    "minimum": ("inf", "2147483647", "true"),
    "and": (None, "-1", "true"),
    "or": (None, "0", "false"),
}


def _reduce_text(element: str, opcode: str, init: str, dims: str = "{1}", shape="6,1,2") -> str:
    out = {"{1}": "6,2", "{1,3}": "6,2", "{}": shape}.get(dims, "6,2")
    in_shape = "6,1,2,1" if dims == "{1,3}" else shape
    return (
        "HloModule m\n"
        f"reducer {{\n  a = {element}[] parameter(0)\n  b = {element}[] parameter(1)\n"
        f"  ROOT c = {element}[] {opcode}(a, b)\n}}\n"
        f"ENTRY main {{\n  p = {element}[{in_shape}] parameter(0)\n"
        f"  i = {element}[] constant({init})\n"
        f"  ROOT r = {element}[{out}] reduce(p, i), dimensions={dims}, to_apply=reducer\n}}\n"
    )


def _reduce_arguments(element: str, dims: str = "{1}") -> list[np.ndarray]:
    shape = (6, 1, 2, 1) if dims == "{1,3}" else (6, 1, 2)
    if element == "f32":
        values = np.resize(EDGES, 12)
    elif element == "bf16":
        values = np.resize(EDGES, 12).astype(ml_dtypes.bfloat16)
    elif element == "pred":
        values = np.resize(np.array([True, False, False]), 12)
    else:
        values = np.resize(np.array([0, -1, 7, 2**31 - 1, -(2**31), 5], np.int32), 12)
    return [values.reshape(shape)]


@pytest.mark.parametrize(
    ("element", "opcode"),
    [
        *((e, op) for e in ("f32", "bf16") for op in ("add", "multiply", "maximum", "minimum")),
        *(("s32", op) for op in REDUCERS),
        *(("pred", op) for op in ("maximum", "minimum", "and", "or")),
    ],
)
@pytest.mark.parametrize("identity", [True, False])
def test_a_reduce_over_size_1_dimensions_is_a_reshape(element, opcode, identity) -> None:
    """XLA's rewrite where the init is an exact identity; ``f(init, x)`` elementwise else."""
    floats, ints, preds = REDUCERS[opcode]
    exact = {"f32": floats, "bf16": floats, "s32": ints, "pred": preds}[element]
    if not identity:  # an init that changes the element: heron keeps it
        exact = {"f32": "0", "bf16": "0", "s32": "3", "pred": "true"}[element]
        if element == "pred" and opcode in ("minimum", "and"):
            exact = "false"
        if element in ("f32", "bf16") and opcode == "multiply":
            exact = "-1"
        if element in ("f32", "bf16") and opcode in ("maximum", "minimum"):
            exact = "0.5"
    for dims in ("{1}", "{1,3}"):
        text = _reduce_text(element, opcode, exact, dims)
        module = _simplified(text, _reduce_arguments(element, dims))
        opcodes = [i.opcode for i in module.entry.instructions]
        assert "reduce" not in opcodes, print_module(module)
        assert (opcode not in opcodes) == identity, print_module(module)
        assert len(module.computations) == 1  # the reducer went with the reduce


def test_a_sum_from_plus_zero_keeps_the_add_where_xla_drops_it() -> None:
    # XLA replaces it with reshape(x), giving -0.0 for a -0.0 element; the reduce
    # computes -0.0 + 0.0 = +0.0, and so does heron's add.
    module = _simplified(_reduce_text("f32", "add", "0"), _reduce_arguments("f32"))
    assert _root_opcode(module) == "add"
    result = np.asarray(evaluate_module(module, _reduce_arguments("f32")))
    assert not np.signbit(result[0, 0])  # the input's -0.0 came out +0.0


def test_reduces_that_reduce_something_or_are_variadic_stay() -> None:
    shape_two = _reduce_text("f32", "add", "-0").replace(
        "f32[6,1,2] parameter", "f32[6,2,2] parameter"
    )
    module = _simplified(shape_two, [np.resize(EDGES, 24).reshape(6, 2, 2)])
    assert _root_opcode(module) == "reduce"
    variadic = """\
HloModule m
argmax {
  a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  g = pred[] compare(a, b), direction=GE
  v = f32[] select(g, a, b)
  i = s32[] select(g, ai, bi)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY main {
  p = f32[6,1] parameter(0)
  q = s32[6,1] parameter(1)
  lo = f32[] constant(-inf)
  z = s32[] constant(0)
  ROOT r = (f32[6], s32[6]) reduce(p, q, lo, z), dimensions={1}, to_apply=argmax
}
"""
    arguments = [np.resize(EDGES, 6).reshape(6, 1), np.arange(6, dtype=np.int32).reshape(6, 1)]
    assert _root_opcode(_simplified(variadic, arguments)) == "reduce"
    two_steps = _reduce_text("f32", "add", "-0").replace(
        "  ROOT c = f32[] add(a, b)", "  s = f32[] add(a, b)\n  ROOT c = f32[] negate(s)"
    )
    assert _root_opcode(_simplified(two_steps, _reduce_arguments("f32"))) == "reduce"


def test_chains_fold_into_one_instruction() -> None:
    params = "p = f32[2,3,4] parameter(0)"
    body = (
        "  t1 = f32[3,4,2] transpose(p), dimensions={1,2,0}\n"
        "  t2 = f32[4,2,3] transpose(t1), dimensions={1,2,0}\n"
        "  s1 = f32[4,2,2] slice(t2), slice={[0:4], [0:2], [1:3]}\n"
        "  s2 = f32[2,1,1] slice(s1), slice={[1:4:2], [1:2], [0:2:2]}\n"
        "  ROOT r = f32[2] reshape(s2)"
    )
    arguments = [np.arange(24, dtype=np.float32).reshape(2, 3, 4)]
    module = _simplified(_entry(body, params), arguments)
    opcodes = sorted(i.opcode for i in module.entry.instructions)
    # (the final reshape moves no byte: the layout stage makes it a bitcast)
    assert opcodes == ["bitcast", "parameter", "slice", "transpose"], print_module(module)
    transpose = next(i for i in module.entry.instructions if i.opcode == "transpose")
    assert tuple(transpose.attr("dimensions")) == (2, 0, 1)


def test_broadcast_of_broadcast_and_constant_dynamic_slice() -> None:
    params = "p = f32[5] parameter(0)"
    body = (
        "  b1 = f32[5,3] broadcast(p), dimensions={0}\n"
        "  b2 = f32[2,5,3] broadcast(b1), dimensions={1,2}\n"
        "  i = s32[] constant(9)\n  z = s32[] constant(0)\n"
        "  d = f32[1,3,2] dynamic-slice(b2, z, i, z), dynamic_slice_sizes={1,3,2}\n"
        "  ROOT r = (f32[2,5,3], f32[1,3,2]) tuple(b2, d)"
    )
    arguments = [np.arange(5, dtype=np.float32)]
    module = _simplified(_entry(body, params), arguments)
    opcodes = sorted(i.opcode for i in module.entry.instructions)
    assert opcodes == ["broadcast", "parameter", "slice", "tuple"], print_module(module)
    sliced = next(i for i in module.entry.instructions if i.opcode == "slice")
    assert sliced.attr("slice")[1].start == 2  # 9 clamped to 5 - 3, as dynamic-slice does


def test_compare_puts_the_constant_on_the_right() -> None:
    body = (
        "  c = f32[8] constant({0,1,2,3,4,5,6,7})\n  ROOT r = pred[8] compare(c, p), direction=GE"
    )
    module = _simplified(_entry(body))
    root = module.entry.root_instruction
    assert root.operands[1].opcode == "constant" and root.attr("direction") == "LE"


def test_constants_fold_up_to_the_limit_but_broadcasts_and_iotas_stay() -> None:
    body = (
        "  a = f32[4] constant({1, 2, 3, 4})\n  e = f32[4] exponential(a)\n"
        "  s = f32[] constant(0)\n"
        "  r0 = f32[] reduce(e, s), dimensions={0}, to_apply=add\n"
        "  b = f32[8] broadcast(r0), dimensions={}\n"
        "  i = f32[8] iota(), iota_dimension=0\n"
        "  ROOT r = f32[8] add(b, i)"
    )
    add = (
        "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
    )
    text = _entry(body, computations=add)
    module = _simplified(text)
    opcodes = sorted(i.opcode for i in module.entry.instructions)
    assert opcodes == ["add", "broadcast", "constant", "iota", "parameter"], print_module(module)
    big = _entry(
        f"  c = f32[{FOLD_LIMIT + 1}] iota(), iota_dimension=0\n"
        f"  ROOT e = f32[{FOLD_LIMIT + 1}] exponential(c)",
        "p = f32[] parameter(0)",
    )
    module = parse_module(big)
    assert not simplify_algebra(module)


def test_a_layout_change_is_not_a_no_op() -> None:
    text = (
        "HloModule m\nENTRY main {\n  p = f32[2,3]{1,0} parameter(0)\n"
        "  ROOT c = f32[2,3]{0,1} copy(p)\n}\n"
    )
    module = parse_module(text)
    assert not simplify_algebra(module)


# -- random modules built from the patterns the rules match --------------------------


@st.composite
def _patterns(draw) -> Module:
    dims = (draw(st.integers(1, 3)), draw(st.integers(1, 4)))
    shape = array_shape("f32", dims)
    mb = ModuleBuilder("patterns")
    main = mb.computation("main")
    values = [main.parameter(shape), main.parameter(shape)]
    splats = [-0.0, 0.0, 1.0, 2.0]
    for _ in range(draw(st.integers(1, 12))):
        x = draw(st.sampled_from(values))
        kind = draw(st.integers(0, 9))
        if kind == 0:
            c = main.broadcast(main.constant(np.float32(draw(st.sampled_from(splats)))), dims, ())
            op = draw(st.sampled_from(["add", "subtract", "multiply", "divide"]))
            pair = [x, c] if draw(st.booleans()) else [c, x]
            values.append(main.binary(op, *pair))
        elif kind == 1:
            values.append(main.unary("negate", main.unary("negate", x)))
        elif kind == 2:
            values.append(main.reshape(main.reshape(x, (dims[0] * dims[1],)), dims))
        elif kind == 3:
            t = main.transpose(main.transpose(x, (1, 0)), (1, 0))
            values.append(t)
        elif kind == 4:
            values.append(main.slice(x, (0, 0), dims))
        elif kind == 5:
            p = main.compare(x, draw(st.sampled_from(values)), draw(st.sampled_from(["LT", "EQ"])))
            values.append(main.select(p, x, x if draw(st.booleans()) else values[0]))
        elif kind == 6:
            c = main.constant(np.arange(dims[0] * dims[1], dtype=np.float32).reshape(dims))
            values.append(main.binary("add", main.unary("exponential", c), x))
        elif kind == 7:
            start = main.constant(np.int32(draw(st.integers(-2, 5))))
            zero = main.constant(np.int32(0))
            sliced = main.dynamic_slice(x, [start, zero], (1, dims[1]))
            values.append(main.broadcast(main.reshape(sliced, (dims[1],)), dims, (1,)))
        elif kind == 8:
            c = main.constant(np.float32(draw(st.sampled_from(splats))))
            values.append(main.compare(main.broadcast(c, dims, ()), x, "GT"))
            values.pop()  # a pred; keep the f32 values only
            values.append(main.maximum(x, x))
        else:
            values.append(main.binary("maximum", x, draw(st.sampled_from(values))))
    roots = draw(st.lists(st.sampled_from(values), min_size=1, max_size=3))
    main.build(main.tuple(roots) if len(roots) > 1 else roots[0])
    return mb.build(entry=main)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(module=_patterns(), seed=st.integers(0, 5), edges=st.booleans())
def test_the_simplifier_preserves_results_bit_for_bit(module: Module, seed: int, edges) -> None:
    arguments = random_arguments(module, np.random.default_rng(seed))
    if edges:  # -0.0, NaN and infinities where the identities could go wrong
        arguments = [np.resize(EDGES, a.shape).astype(np.float32) for a in arguments]
    before = evaluate_module(module, arguments)
    rewritten = parse_module(print_module(module))
    run_pipeline(rewritten, HloPass("under-test", simplify_algebra))
    assert _same_bits(before, evaluate_module(rewritten, arguments)), print_module(rewritten)


@pytest.mark.parametrize(
    ("element", "dtype"),
    [
        ("s2", ml_dtypes.int2),
        ("u2", ml_dtypes.uint2),
        ("s4", ml_dtypes.int4),
        ("u4", ml_dtypes.uint4),
        ("s8", np.int8),
        ("u32", np.uint32),
        ("s64", np.int64),
    ],
)
def test_max_of_the_lowest_and_min_of_the_highest_integer_are_the_operand(element, dtype) -> None:
    """numpy's iinfo knows no s4/u4/s2/u2: the rule raised on ``jnp.maximum`` of int4s."""
    info = ml_dtypes.iinfo(dtype)
    values = np.resize(np.array([info.min, info.max, 0, 1], dtype=np.int64), 8)
    arguments = [values.astype(dtype)]
    for opcode, extreme, simplified in (
        ("maximum", info.min, True),
        ("minimum", info.max, True),
        ("maximum", info.min + 1, False),
        ("minimum", info.max - 1, False),
    ):
        text = _entry(
            f"  c = {element}[] constant({extreme})\n"
            f"  b = {element}[8] broadcast(c), dimensions={{}}\n"
            f"  ROOT r = {element}[8] {opcode}(p, b)",
            params=f"p = {element}[8] parameter(0)",
        )
        module = _simplified(text, arguments)
        assert (_root_opcode(module) == "parameter") == simplified, print_module(module)
