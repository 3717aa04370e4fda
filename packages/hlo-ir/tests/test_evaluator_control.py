"""Evaluator: fusion, call, while, conditional, tokens, barriers, and refused ops."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from heron.hlo.errors import HloEvaluationError, UnsupportedError
from heron.hlo.evaluator import TOKEN, EvaluatorOptions, evaluate_module
from heron.hlo.parser import parse_module


def run(text: str, *args, options: EvaluatorOptions | None = None):
    return evaluate_module(parse_module(text), list(args), options=options)


def s32(v) -> np.ndarray:
    return np.asarray(v, np.int32)


def test_fusion_and_call_evaluate_the_called_computation():
    text = """
    fused {
      a = f32[3] parameter(0)
      b = f32[3] parameter(1)
      ROOT m = f32[3] multiply(a, b)
    }
    helper {
      x = f32[3] parameter(0)
      ROOT n = f32[3] negate(x)
    }
    ENTRY e {
      p = f32[3] parameter(0)
      q = f32[3] parameter(1)
      f = f32[3] fusion(p, q), kind=kLoop, calls=fused
      ROOT c = f32[3] call(f), to_apply=helper
    }"""
    a = np.asarray([1, 2, 3], np.float32)
    b = np.asarray([4, 5, 6], np.float32)
    np.testing.assert_array_equal(run(text, a, b), -(a * b))


WHILE = """
cond {
  s = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = f32[2] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[2] add(x, x)
  ROOT t = (s32[], f32[2]) tuple(j, y)
}
ENTRY e {
  i0 = s32[] parameter(0)
  x0 = f32[2] parameter(1)
  s0 = (s32[], f32[2]) tuple(i0, x0)
  ROOT w = (s32[], f32[2]) while(s0), condition=cond, body=body
}"""


def test_while_loop_runs_until_condition_is_false():
    i, x = run(WHILE, s32(0), np.asarray([1, -3], np.float32))
    assert i == 5
    np.testing.assert_array_equal(x, [32, -96])


def test_while_loop_with_false_condition_runs_no_iteration():
    i, x = run(WHILE, s32(9), np.asarray([1, -3], np.float32))
    assert i == 9
    np.testing.assert_array_equal(x, [1, -3])


def test_while_loop_iteration_cap_names_the_instruction():
    with pytest.raises(HloEvaluationError, match=r"while 'w'.*after 3 iterations"):
        run(
            WHILE,
            s32(0),
            np.asarray([1, 1], np.float32),
            options=EvaluatorOptions(max_while_iterations=3),
        )


def test_while_loop_cap_from_environment(monkeypatch):
    monkeypatch.setenv("HERON_EVALUATOR_MAX_WHILE_ITERATIONS", "4")
    with pytest.raises(HloEvaluationError, match="after 4 iterations"):
        run(WHILE, s32(0), np.asarray([1, 1], np.float32))
    i, _ = run(WHILE, s32(1), np.asarray([1, 1], np.float32))
    assert i == 5


def test_while_matches_jax_fori_loop():
    def fn(x):
        return lax.fori_loop(0, 7, lambda k, v: v * 0.5 + jnp.float32(k), x)

    x = np.linspace(-1, 1, 6, dtype=np.float32)
    module = parse_module(jax.jit(fn).lower(x).as_text("hlo"))
    np.testing.assert_allclose(evaluate_module(module, [x]), np.asarray(jax.jit(fn)(x)))


BRANCHES = """
b0 {
  x = f32[2] parameter(0)
  ROOT r = f32[2] negate(x)
}
b1 {
  x = f32[2] parameter(0)
  ROOT r = f32[2] add(x, x)
}
b2 {
  x = f32[2] parameter(0)
  ROOT r = f32[2] multiply(x, x)
}
ENTRY e {
  k = s32[] parameter(0)
  x = f32[2] parameter(1)
  ROOT c = f32[2] conditional(k, x, x, x), branch_computations={b0, b1, b2}
}"""


@pytest.mark.parametrize(
    ("index", "expected"),
    [(0, [-3, 1]), (1, [6, -2]), (2, [9, 1]), (3, [9, 1]), (-1, [9, 1]), (2**31 - 1, [9, 1])],
)
def test_conditional_index_out_of_range_takes_last_branch(index, expected):
    out = run(BRANCHES, s32(index), np.asarray([3, -1], np.float32))
    np.testing.assert_array_equal(out, expected)


def test_conditional_on_pred():
    text = """
    t {
      x = s32[] parameter(0)
      ROOT r = s32[] negate(x)
    }
    f {
      y = f32[] parameter(0)
      ROOT r = s32[] convert(y)
    }
    ENTRY e {
      p = pred[] parameter(0)
      a = s32[] parameter(1)
      b = f32[] parameter(2)
      ROOT c = s32[] conditional(p, a, b), true_computation=t, false_computation=f
    }"""
    assert run(text, np.asarray(True), s32(4), np.asarray(2.5, np.float32)) == -4
    assert run(text, np.asarray(False), s32(4), np.asarray(2.5, np.float32)) == 2


def test_tokens_and_barriers_pass_values_through():
    text = """
    ENTRY e {
      t = token[] parameter(0)
      x = f32[2] parameter(1)
      a = token[] after-all(t)
      tp = (f32[2], token[]) tuple(x, a)
      b = (f32[2], token[]) opt-barrier(tp)
      g = f32[2] get-tuple-element(b), index=0
      ROOT r = (f32[2], token[]) tuple(g, a)
    }"""
    x = np.asarray([1, 2], np.float32)
    out = run(text, TOKEN, x)
    assert out[1] is TOKEN
    np.testing.assert_array_equal(out[0], x)


@pytest.mark.parametrize(
    ("line", "opcode"),
    [
        ("ROOT r = f32[4] all-reduce(p), replica_groups={{0,1}}, to_apply=add", "all-reduce"),
        ("ROOT r = f32[8] all-gather(p), dimensions={0}, replica_groups={}", "all-gather"),
        ("ROOT r = f32[4] rng(z, o), distribution=rng_uniform", "rng"),
        (
            "ROOT r = (u64[2], c64[4]) rng-bit-generator(s), algorithm=rng_default",
            "rng-bit-generator",
        ),
    ],
)
def test_unsupported_ops_are_refused_naming_op_and_location(line, opcode):
    text = f"""
    add {{
      a = f32[] parameter(0)
      b = f32[] parameter(1)
      ROOT c = f32[] add(a, b)
    }}
    ENTRY e {{
      p = f32[4] parameter(0)
      s = u64[2] parameter(1)
      z = f32[] constant(0)
      o = f32[] constant(1)
      {line}
    }}"""
    with pytest.raises(UnsupportedError) as info:
        run(text, np.zeros(4, np.float32), np.zeros(2, np.uint64))
    message = str(info.value)
    assert f"'{opcode}'" in message and "'r'" in message
    assert ":12:" in message  # file:line:col of the instruction


def test_async_wrappers_and_copy_start_done_run_synchronously():
    text = """
    comp {
      x = f32[4] parameter(0)
      ROOT y = f32[4] negate(x)
    }
    ENTRY e {
      p = f32[4] parameter(0)
      cs = (f32[4], f32[4], u32[]) copy-start(p)
      cd = f32[4] copy-done(cs)
      st = ((f32[4]), f32[4], s32[]) async-start(cd), calls=comp
      up = ((f32[4]), f32[4], s32[]) async-update(st), calls=comp
      ROOT dn = f32[4] async-done(up), calls=comp
    }"""
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(run(text, x), -x)


def test_replica_and_partition_id_are_zero_on_one_device():
    text = """
    ENTRY e {
      r = u32[] replica-id()
      p = u32[] partition-id()
      ROOT t = (u32[], u32[]) tuple(r, p)
    }"""
    r, p = run(text)
    assert r.dtype == np.uint32 and r == 0 and p == 0
