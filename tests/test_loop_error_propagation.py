"""An approximation inside a loop: its error as every trip carries it on.

A helper's sweep of iterative algorithms (nested while loops, the gradient of a
rematerialised loop of tanh, an escape-time iteration of z^2 + c) found heron run
--check calling correct loop kernels wrong: an op's bound was counted once
however many trips ran it, and a loop that multiplies an error at each trip
(``x <- x + 7 cos(x)``: up to 8 times) took a kernel within its cos bound to
18,644 ulps after six trips, XLA:CPU's own values 10,610 ulps from a per-op
rounded f32 run. The check now measures the errors on the program unrolled at
the trip counts it takes (:mod:`heron.harness.unrolled`).
"""

from __future__ import annotations

import numpy as np

from heron.cli.main import main
from heron.harness.agreement import compare, output_tolerances
from heron.harness.unrolled import unrolled
from heron.hlo.evaluator import evaluate_computation
from heron.hlo.parser import parse_module

#: jax's ``lax.fori_loop(0, trips, lambda i, x: x + 7 * jnp.cos(x), x)`` (its body a call).
AMPLIFYING_LOOP = """\
HloModule amplifying_loop

step {
  i = s32[] parameter(0)
  one = s32[] constant(1)
  next_i = s32[] add(i, one)
  x = f32[64] parameter(1)
  cos = f32[64] cosine(x)
  seven = f32[] constant(7)
  sevens = f32[64] broadcast(seven), dimensions={}
  scaled = f32[64] multiply(cos, sevens)
  next_x = f32[64] add(x, scaled)
  ROOT out = (s32[], f32[64]) tuple(next_i, next_x)
}

body {
  state = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  x = f32[64] get-tuple-element(state), index=1
  ROOT stepped = (s32[], f32[64]) call(i, x), to_apply=step
}

condition {
  state = (s32[], f32[64]) parameter(0)
  i = s32[] get-tuple-element(state), index=0
  trips = s32[] constant(TRIPS)
  ROOT more = pred[] compare(i, trips), direction=LT
}

ENTRY main {
  zero = s32[] constant(0)
  x = f32[64] parameter(0)
  start = (s32[], f32[64]) tuple(zero, x)
  loop = (s32[], f32[64]) while(start), condition=condition, body=body
  ROOT result = f32[64] get-tuple-element(loop), index=1
}
"""


def _loop(trips: int) -> str:
    return AMPLIFYING_LOOP.replace("TRIPS", str(trips))


def _x() -> np.ndarray:
    return np.random.default_rng(0).standard_normal(64).astype(np.float32)


def _per_op_f32(x: np.ndarray, trips: int, cos_ulps: int = 0) -> np.ndarray:
    """The loop in f32, each op rounded, cos correctly rounded and then moved by
    ``cos_ulps`` ulps (a kernel whose cos is that far off, within its bound)."""
    for _ in range(trips):
        cos = np.cos(x.astype(np.float64)).astype(np.float32)
        cos = (cos.view(np.int32) + np.int32(cos_ulps) * np.sign(cos).astype(np.int32)).view(
            np.float32
        )
        x = x + np.float32(7) * cos
    return x


def test_a_loop_that_amplifies_its_cos_agrees_in_heron_run_check(tmp_path, capsys):
    path = tmp_path / "loop.hlo"
    path.write_text(_loop(6))
    inputs = tmp_path / "x.npz"
    np.savez(inputs, arg0=_x())
    code = main(["run", str(path), "--inputs", str(inputs), "--backend", "interpreter", "--check"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), out
    assert "as the ops after an approximation amplify its error" in out


def _tolerance_and_reference(trips: int):
    module = parse_module(_loop(trips))
    x = _x()
    (tolerance,) = output_tolerances(module, {}, [x], None, tf32=False, written=module)
    reference = evaluate_computation(module.entry, [x])
    return tolerance, reference, x


def test_every_trip_s_error_is_carried_and_a_wrong_loop_is_still_refused():
    tolerance, reference, x = _tolerance_and_reference(6)
    off_by_its_cos = _per_op_f32(x, 6, cos_ulps=1)  # 1 ulp of cos in every trip
    distance = np.abs(off_by_its_cos.view(np.int32) - reference.view(np.int32)).max()
    assert distance > 1000 and distance > tolerance.ulps
    assert compare(off_by_its_cos, reference, tolerance).agrees
    one_trip_short = _per_op_f32(x, 5)
    assert not compare(one_trip_short, reference, tolerance).agrees
    assert not compare(-reference, reference, tolerance).agrees


def test_the_unrolled_program_has_a_copy_of_the_body_per_trip_and_the_same_value():
    module = parse_module(_loop(4))
    x = _x()
    program = unrolled(module.entry, [x])
    assert program is not None
    opcodes = [inst.opcode for inst in program.computation.instructions]
    assert opcodes.count("cosine") == 4
    assert not {"while", "call", "conditional"} & set(opcodes)
    np.testing.assert_array_equal(
        evaluate_computation(program.computation, [x]), evaluate_computation(module.entry, [x])
    )


def test_nested_loops_and_conditionals_unroll_to_the_branches_they_take():
    text = """\
HloModule nested

inner_body {
  s = (s32[], f32[4]) parameter(0)
  j = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  next_j = s32[] add(j, one)
  v = f32[4] get-tuple-element(s), index=1
  grown = f32[4] exponential(v)
  ROOT t = (s32[], f32[4]) tuple(next_j, grown)
}

inner_condition {
  s = (s32[], f32[4]) parameter(0)
  j = s32[] get-tuple-element(s), index=0
  two = s32[] constant(2)
  ROOT more = pred[] compare(j, two), direction=LT
}

positive {
  v = f32[4] parameter(0)
  ROOT l = f32[4] log-plus-one(v)
}

negative {
  v = f32[4] parameter(0)
  ROOT s = f32[4] sine(v)
}

outer_body {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  next_i = s32[] add(i, one)
  v = f32[4] get-tuple-element(s), index=1
  zero = s32[] constant(0)
  start = (s32[], f32[4]) tuple(zero, v)
  inner = (s32[], f32[4]) while(start), condition=inner_condition, body=inner_body
  w = f32[4] get-tuple-element(inner), index=1
  head = f32[1] slice(w), slice={[0:1]}
  first = f32[] reshape(head)
  ten = f32[] constant(10)
  big = pred[] compare(first, ten), direction=GT
  picked = f32[4] conditional(big, w, w), true_computation=positive, false_computation=negative
  ROOT t = (s32[], f32[4]) tuple(next_i, picked)
}

outer_condition {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  three = s32[] constant(3)
  ROOT more = pred[] compare(i, three), direction=LT
}

ENTRY main {
  zero = s32[] constant(0)
  v = f32[4] parameter(0)
  start = (s32[], f32[4]) tuple(zero, v)
  loop = (s32[], f32[4]) while(start), condition=outer_condition, body=outer_body
  ROOT result = f32[4] get-tuple-element(loop), index=1
}
"""
    module = parse_module(text)
    v = np.array([0.5, 1.0, -0.25, 0.1], np.float32)
    program = unrolled(module.entry, [v])
    assert program is not None
    opcodes = [inst.opcode for inst in program.computation.instructions]
    assert opcodes.count("exponential") == 6  # 3 outer trips of 2 inner ones
    # e^(e^0.5) = 5.2: sine; e^(e^sin 5.2) = 1.5: sine; e^(e^sin 1.5) = 15: log1p
    assert (opcodes.count("log-plus-one"), opcodes.count("sine")) == (1, 2)
    np.testing.assert_array_equal(
        evaluate_computation(program.computation, [v]), evaluate_computation(module.entry, [v])
    )


def test_a_loop_too_long_to_unroll_keeps_its_bound_counted_once(monkeypatch):
    import heron.harness.unrolled as unrolled_module

    monkeypatch.setattr(unrolled_module, "MAX_INSTRUCTIONS", 20)
    module = parse_module(_loop(6))
    assert unrolled(module.entry, [_x()]) is None
    tolerance, reference, x = _tolerance_and_reference(6)
    off_by_its_cos = _per_op_f32(x, 6, cos_ulps=1)
    assert not compare(off_by_its_cos, reference, tolerance).agrees


def test_a_loop_that_never_ends_is_not_unrolled():
    text = """\
HloModule forever

body {
  ROOT s = f32[2] parameter(0)
}

condition {
  s = f32[2] parameter(0)
  ROOT yes = pred[] constant(true)
}

ENTRY main {
  x = f32[2] parameter(0)
  ROOT loop = f32[2] while(x), condition=condition, body=body
}
"""
    x = np.ones(2, np.float32)
    assert unrolled(parse_module(text).entry, [x]) is None


def test_the_loop_unrolling_of_the_check_takes_dead_code_reading_a_root() -> None:
    """JAX leaves dead code after a root constant (dynamax's parallel smoother: a call of
    ``_lu_solve`` on the zero-sized root, listed after it): the check's unrolling read
    the dead call's operand before it was made, an internal error of ``heron run
    --check`` (``Computation.post_order`` now puts such readers after the root)."""
    module = parse_module(
        """HloModule m

callee {
  a = f32[0,4]{1,0} parameter(0)
  ROOT n = f32[0,4]{1,0} negate(a)
}

solve {
  x = f32[0,4]{1,0} parameter(0)
  ROOT c = f32[0,4]{1,0} constant({  })
  dead = f32[0,4]{1,0} call(c), to_apply=callee
}

ENTRY main {
  p = f32[0,4]{1,0} parameter(0)
  ROOT r = f32[0,4]{1,0} call(p), to_apply=solve
}
"""
    )
    program = unrolled(module.entry, [np.zeros((0, 4), np.float32)])
    assert program is not None
    assert program.outputs[0].opcode == "constant"
