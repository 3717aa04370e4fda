"""heron.jax.jit under jax's transformations (heron.jax.transforms): grad, vjp, jvp,
linearize, vmap, jax.jit, checkpoint and scan take a heron-jitted function as they take
a jax-jitted one, heron compiles and runs the transformed programs, and every result
equals jax's own (XLA:CPU) within rounding.

Before, a heron-jitted function called with jax's tracers failed inside numpy's
conversion (``TracerArrayConversionError``), and one closing over another
transformation's tracers ran a program with a parameter missing.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64

import heron.jax as heron_jax

INTERPRETER = dict(backend="interpreter", cache_dir=False)


@pytest.fixture(autouse=True)
def jax_32_bit():
    with jax_x64(False):
        yield


def _close(got, expected, tolerance: float = 2e-5, *, jax_arrays: bool = True) -> None:
    """``got`` equals ``expected`` within ``tolerance``; a transformation's results are
    jax arrays, as jax.jit's under it (``jax_arrays``; a direct call on the interpreter
    returns numpy arrays)."""
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(expected)
    for g, e in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)):
        assert not jax_arrays or isinstance(g, jax.Array), type(g)
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=tolerance, atol=tolerance)


def _loss(params, x, y):
    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    out = hidden @ params["w2"]
    return jnp.mean((out - y) ** 2)


def _data():
    keys = jax.random.split(jax.random.key(3), 4)
    params = {
        "w1": jax.random.normal(keys[0], (5, 8)) / 2,
        "b1": jnp.linspace(-0.5, 0.5, 8),
        "w2": jax.random.normal(keys[1], (8, 3)) / 3,
    }
    return params, jax.random.normal(keys[2], (4, 5)), jax.random.normal(keys[3], (4, 3))


def test_grad_runs_the_function_and_the_transpose_of_its_derivative_on_heron() -> None:
    params, x, y = _data()
    loss = heron_jax.jit(_loss, **INTERPRETER)
    value, grads = jax.value_and_grad(loss)(params, x, y)
    _close((value, grads), jax.value_and_grad(_loss)(params, x, y))
    assert loss.compiles == 2  # the loss, and the transpose of its derivative
    # the same signature again: traced, derived and compiled once
    _close(jax.grad(loss)(params, x, y), jax.grad(_loss)(params, x, y))
    assert loss.compiles == 2


def test_grad_after_a_direct_call_takes_its_trace_and_compiles_the_split_once() -> None:
    params, x, y = _data()
    loss = heron_jax.jit(_loss, **INTERPRETER)
    loss(params, x, y)
    assert loss.compiles == 1
    # the primal with the residuals its derivative needs, and the transposed tangents
    jax.grad(loss)(params, x, y)
    assert loss.compiles == 3
    jax.grad(loss)(params, x, y)
    assert loss.compiles == 3


def test_the_backward_program_does_not_compute_the_forward_again() -> None:
    """Reverse mode runs the forward once: the tangent program takes the primal
    program's residuals (``jax.linearize``'s split), so a callback in the forward runs
    once a gradient, as under ``jax.grad(jax.jit(f))`` (it ran twice while the transposed
    program recomputed the forward)."""
    calls = []

    def f(x):
        jax.debug.callback(lambda: calls.append(1))
        return jnp.sum(jnp.sin(x) * jnp.exp(x))

    x = jnp.linspace(-1.0, 1.0, 16)
    ones = jnp.ones_like(x)
    expected_gradient, expected_jvp = jax.grad(f)(x), jax.jvp(f, (x,), (ones,))
    calls.clear()
    jitted = heron_jax.jit(f, **INTERPRETER)
    _close(jax.grad(jitted)(x), expected_gradient)
    assert len(calls) == 1
    _close(jax.jvp(jitted, (x,), (ones,)), expected_jvp)
    assert len(calls) == 2


class _TableOnFirstUse:
    """An array computed on first use and kept (netket's operators set their tables up so,
    inside whatever trace calls them first): the cache then holds that trace's tracer,
    which jax never reads again since it traces a jitted function once per signature."""

    def __init__(self) -> None:
        self.table = None

    def get(self):
        if self.table is None:
            self.table = jnp.arange(6.0) * 2.0
        return self.table


@pytest.mark.parametrize("first", ["grad", "direct", "jvp", "vmap"])
def test_a_function_caching_a_value_at_its_first_trace(first: str) -> None:
    # The thirteenth sweep's netket local energy: jax.grad of the heron-jitted function
    # traced it again to evaluate its jaxpr, read the cached tracer, and recursed until
    # RecursionError (or, after a direct call, raised UnexpectedTracerError).
    def make(jit):
        table = _TableOnFirstUse()
        return jit(lambda w: jnp.sum(table.get() * w * w))

    w = jnp.linspace(0.1, 0.6, 6)
    ours = make(lambda f: heron_jax.jit(f, **INTERPRETER))
    theirs = make(jax.jit)
    if first == "direct":
        _close(ours(w), theirs(w), jax_arrays=False)
        first = "grad"
    if first == "grad":
        _close(jax.grad(ours)(w), jax.grad(theirs)(w))
    elif first == "jvp":
        _close(jax.jvp(ours, (w,), (w,)), jax.jvp(theirs, (w,), (w,)))
    else:
        _close(jax.vmap(ours)(jnp.stack([w, 2 * w])), jax.vmap(theirs)(jnp.stack([w, 2 * w])))


def test_forward_mode_and_second_derivatives() -> None:
    def f(x):
        return jnp.sin(x) * jnp.exp(-x[::-1]) + x**3

    jitted = heron_jax.jit(f, **INTERPRETER)
    x = jnp.linspace(-1.0, 1.0, 5)
    tangent = jnp.arange(5.0)
    _close(jax.jvp(jitted, (x,), (tangent,)), jax.jvp(f, (x,), (tangent,)))
    _close(jax.jacfwd(jitted)(x), jax.jacfwd(f)(x))
    _close(jax.jacrev(jitted)(x), jax.jacrev(f)(x))
    scalar = heron_jax.jit(lambda x: f(x).sum(), **INTERPRETER)
    _close(jax.hessian(scalar)(x), jax.hessian(lambda x: f(x).sum())(x), 1e-4)
    primal, linear = jax.linearize(jitted, x)
    _close((primal, linear(tangent)), (f(x), jax.jvp(f, (x,), (tangent,))[1]))


def test_vmap_over_any_axis_with_unbatched_arguments() -> None:
    def f(a, b):
        return jnp.tanh(a @ b), a.sum()

    jitted = heron_jax.jit(f, **INTERPRETER)
    a = jnp.arange(24.0).reshape(2, 3, 4) / 10
    b = jnp.ones((4, 2))
    for in_axes, args in (((0, None), (a, b)), ((2, None), (jnp.moveaxis(a, 0, 2), b))):
        _close(jax.vmap(jitted, in_axes=in_axes)(*args), jax.vmap(f, in_axes=in_axes)(*args))
    scalar = heron_jax.jit(lambda a: jnp.sin(a).sum(), **INTERPRETER)
    _close(jax.vmap(jax.grad(scalar))(a), jax.vmap(jax.grad(lambda a: jnp.sin(a).sum()))(a))


def test_static_arguments_keywords_aux_outputs_and_integers_under_grad() -> None:
    def f(x, power, indices, *, scale, mode="plain"):
        value = (jnp.sin(x[indices]) ** power).sum() * scale
        return (2 * value if mode == "double" else value), indices * 2

    jitted = heron_jax.jit(f, static_argnums=1, static_argnames="mode", **INTERPRETER)
    x = jnp.linspace(0.1, 1.0, 6)
    indices = jnp.array([0, 2, 5])
    for mode in ("plain", "double"):
        got = jax.grad(jitted, has_aux=True)(x, 3, indices, scale=1.5, mode=mode)
        _close(got, jax.grad(f, has_aux=True)(x, 3, indices, scale=1.5, mode=mode))


def test_a_function_closing_over_another_transformations_tracer() -> None:
    def outer(y):
        inner = heron_jax.jit(lambda x: jnp.sum(jnp.sin(x * y)), **INTERPRETER)
        return inner(jnp.linspace(0.0, 1.0, 3))

    def reference(y):
        return jnp.sum(jnp.sin(jnp.linspace(0.0, 1.0, 3) * y))

    y = jnp.array([0.5, -1.0, 2.0])
    _close(jax.grad(outer)(y), jax.grad(reference)(y))


def test_prng_keys_under_vmap() -> None:
    def f(key, shift):
        return jax.random.normal(key, (3,)) + shift

    keys = jax.random.split(jax.random.key(0), 4)
    got = jax.vmap(heron_jax.jit(f, **INTERPRETER), in_axes=(0, None))(keys, 1.0)
    _close(got, jax.vmap(f, in_axes=(0, None))(keys, 1.0))


def test_inside_jax_jit_and_another_heron_jit_it_is_inlined() -> None:
    params, x, y = _data()
    loss = heron_jax.jit(_loss, **INTERPRETER)
    _close(jax.jit(jax.grad(loss))(params, x, y), jax.grad(_loss)(params, x, y))
    assert "heron_call" in str(jax.make_jaxpr(loss)(params, x, y))
    outer = heron_jax.jit(lambda p: 2 * loss(p, x, y), **INTERPRETER)
    _close(outer(params), 2 * _loss(params, x, y), jax_arrays=False)
    assert loss.compiles == 0 and outer.compiles == 1  # one program, the inner call inlined
    # the gradient as one program (jax.grad wraps loss with functools.wraps, copying its
    # attributes: the heron-jitted gradient must still be the gradient)
    step = heron_jax.jit(jax.grad(loss), **INTERPRETER)
    _close(step(params, x, y), jax.grad(_loss)(params, x, y), jax_arrays=False)
    assert loss.compiles == 0 and step.compiles == 1


def test_checkpoint_scan_and_vjp_of_pytrees() -> None:
    params, x, y = _data()
    loss = heron_jax.jit(_loss, **INTERPRETER)
    _close(jax.grad(jax.checkpoint(loss))(params, x, y), jax.grad(_loss)(params, x, y))

    def step(carry, row):
        return carry + jnp.sin(row).sum(), carry

    scanned = jax.lax.scan(heron_jax.jit(step, **INTERPRETER), 0.0, x)
    _close(scanned, jax.lax.scan(step, 0.0, x))

    def layer(p, x):
        return jnp.tanh(x @ p["w1"] + p["b1"])

    out, pullback = jax.vjp(heron_jax.jit(layer, **INTERPRETER), params, x)
    expected_out, expected_pullback = jax.vjp(layer, params, x)
    cotangent = jnp.ones_like(expected_out)
    # the weights' cotangent leaves heron in a transposed layout: handed to jax as a copy
    _close((out, pullback(cotangent)), (expected_out, expected_pullback(cotangent)))


def test_bf16_and_complex_gradients() -> None:
    def f(x):
        return (jnp.tanh(x.astype(jnp.bfloat16)) * 3).astype(jnp.float32).sum()

    x = jnp.linspace(-1.0, 1.0, 8)
    _close(jax.grad(heron_jax.jit(f, **INTERPRETER))(x), jax.grad(f)(x), 2e-2)

    def g(z):
        return jnp.abs(jnp.exp(z) * z).sum()

    z = jnp.array([1 + 1j, 0.5j, -0.3 + 0.2j], dtype=jnp.complex64)
    _close(jax.grad(heron_jax.jit(g, **INTERPRETER))(z), jax.grad(g)(z), 1e-5)


def test_a_derived_program_is_named_after_its_transformation() -> None:
    def square_sum(x):
        return (x**2).sum()

    jitted = heron_jax.jit(square_sum, **INTERPRETER)
    jax.grad(jitted)(jnp.ones(3))
    names = sorted(
        program.function.__name__
        for program in jitted.derived_programs.programs.values()
        if isinstance(program, heron_jax.HeronJitted)
    )
    # the function's own jaxpr (no direct call compiled it first), and its gradient's
    assert names == ["square_sum", "transpose_jvp_square_sum__"]


@partial(jax.custom_jvp, nondiff_argnums=())
def _clipped(x):
    return jnp.clip(x, -1.0, 1.0)


@_clipped.defjvp
def _clipped_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _clipped(x), t  # a straight-through estimator


def test_custom_jvp_rules_inside_are_kept() -> None:
    def f(x):
        return (_clipped(x) * x).sum()

    x = jnp.array([-2.0, 0.5, 3.0])
    _close(jax.grad(heron_jax.jit(f, **INTERPRETER))(x), jax.grad(f)(x))
