"""Buffer donation end to end: ``jax.jit(f, donate_argnums=...)``'s ``input_output_alias``.

Each program is lowered by jax (CPU) with its arguments donated, compiled by heron for
the interpreter, and run through the thunk executor. The results are the reference
evaluator's, bit for bit, and the same bytes as the module compiled without the alias;
the donated outputs have no allocation of their own (the parameter's allocation holds
them, ``output`` set), so the executable holds fewer bytes; an in-place update of a
donated buffer runs with no copy, and where the parameter's old value is still read a
copy keeps the result right.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from heron_test_support.programs import kernel_compiler

from heron.compiler import Target
from heron.compiler.executable import CompiledExecutable, compile_program, thunk_counts
from heron.hlo.evaluator import evaluate_module, flatten_literal
from heron.hlo.ir import Module
from heron.hlo.memory_layout import to_memory
from heron.hlo.parser import parse_module
from heron.runtime.core.executor import load_executable
from heron.runtime.interpreter import InterpreterDevice

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

TARGET = Target.preset("h100")
_COMPILER = kernel_compiler()


def _lower(f, args, donate: tuple[int, ...]) -> str:
    traced = jax.jit(f, donate_argnums=donate, keep_unused=True).trace(*args)
    return traced.lower(lowering_platforms=("cpu",)).compiler_ir("hlo").as_hlo_text()


def _without_alias(text: str) -> str:
    return re.sub(r"input_output_alias=\{ .*? \}, ", "", text, count=1)


def _compile(text: str) -> CompiledExecutable:
    return compile_program(parse_module(text), TARGET, ("interpreter",), compiler=_COMPILER)


def _bytes(values) -> list[bytes]:
    return [np.ascontiguousarray(v).tobytes() for v in values]


def _run(compiled: CompiledExecutable, args: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    executable = load_executable(compiled.artefact, InterpreterDevice(), "interpreter")
    return executable.run(args)


def _expected(text: str, args: list[np.ndarray]) -> list[np.ndarray]:
    module: Module = parse_module(text)
    return list(flatten_literal(evaluate_module(module, args)))


def _check(
    f, args, donate: tuple[int, ...], inexact: tuple[int, ...] = ()
) -> tuple[CompiledExecutable, CompiledExecutable]:
    """Compile ``f`` with and without donation: both give the same bytes, the evaluator's
    (``inexact``: results that are sums, whose order the kernels choose: within 1e-6)."""
    args = [np.asarray(a) for a in args]
    text = _lower(f, args, donate)
    assert "input_output_alias" in text
    donated, plain = _compile(text), _compile(_without_alias(text))
    got = _run(donated, args)
    assert _bytes(got) == _bytes(_run(plain, args))
    for k, (a, b) in enumerate(zip(got, _expected(text, args), strict=True)):
        if k in inexact:
            np.testing.assert_allclose(a, b, rtol=1e-6)
        else:
            assert a.tobytes() == np.ascontiguousarray(b).tobytes(), f"result {k}"
    return donated, plain


def _donated_allocations(compiled: CompiledExecutable) -> dict[int, int]:
    """Result leaf -> the parameter whose allocation holds it."""
    return {
        a.output: a.parameter
        for a in compiled.artefact.allocations
        if a.kind == "parameter" and a.output is not None
    }


def _copies(compiled: CompiledExecutable) -> int:
    return thunk_counts(compiled).get("copy", 0)


def _peak(compiled: CompiledExecutable) -> int:
    executable = load_executable(compiled.artefact, InterpreterDevice(), "interpreter")
    return executable.peak_device_bytes


# -- in-place updates ---------------------------------------------------------------------


def _kv_update(cache, update, i):
    # The column index in i's own type: other suites turn jax_enable_x64 on (a global), and
    # then a literal 0 is s64 beside the s32 row.
    return lax.dynamic_update_slice(cache, update, (i, jnp.zeros((), jnp.asarray(i).dtype)))


def test_an_update_of_a_donated_cache_runs_in_place_with_no_copy() -> None:
    cache = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    update = np.full((1, 16), -1.0, np.float32)
    donated, plain = _check(_kv_update, [cache, update, np.int32(5)], (0,))
    assert _donated_allocations(donated) == {0: 0}
    assert not any(a.kind == "output" for a in donated.artefact.allocations)
    # No copy of the cache: the kernel writes one row into the caller's buffer.
    assert _copies(donated) == 0
    assert _copies(plain) == 1  # without donation the cache is copied into the output first
    assert _peak(donated) == _peak(plain) - cache.nbytes


def test_execute_writes_the_result_into_the_callers_buffer() -> None:
    cache = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    update = np.full((1, 4), 7.0, np.float32)
    args = [cache, update, np.int32(3)]
    compiled = _compile(_lower(_kv_update, args, (0,)))
    device = InterpreterDevice()
    executable = load_executable(compiled.artefact, device, "interpreter")
    buffers = []
    for array, shape in zip(args, executable.parameter_shapes, strict=True):
        raw = to_memory(np.asarray(array), shape)
        buffer = device.allocate(raw.nbytes, "caller")
        device.copy_to_device(buffer, raw)
        buffers.append(buffer)
    executable.execute(buffers)
    expected = np.asarray(_kv_update(cache, update, 3))
    written = device.copy_from_device(buffers[0]).view(np.float32).reshape(8, 4)
    assert written.tobytes() == expected.tobytes()
    (result,) = executable.results()
    assert result.tobytes() == expected.tobytes()


def test_a_donated_parameter_read_after_the_update_is_copied_first() -> None:
    def f(cache, update, i):
        new = lax.dynamic_update_slice(cache, update, (i, jnp.zeros((), jnp.asarray(i).dtype)))
        return new, (new - cache).sum()  # the old cache is read after the update

    cache = np.arange(8 * 4, dtype=np.float32).reshape(8, 4)
    donated, _ = _check(f, [cache, np.ones((1, 4), np.float32), np.int32(2)], (0,), (1,))
    assert _donated_allocations(donated) == {0: 0}
    assert _copies(donated) >= 1


def test_outputs_that_are_parameters_or_constants_are_copied_into_the_donated_bytes() -> None:
    def f(a, b, c):
        return b, a, jnp.ones_like(c), c

    args = [np.arange(4, dtype=np.float32) + k for k in range(3)]
    donated, _ = _check(f, args, (0, 1, 2))
    # Result 0 is parameter 1 (donated to it? no: jax pairs by shape), and so on: every
    # donated parameter holds one result, and the one left is an output of its own.
    held = _donated_allocations(donated)
    assert len(held) == 3 and sorted(held.values()) == [0, 1, 2]


def test_an_unchanged_donated_parameter_needs_no_copy() -> None:
    def f(a, b):
        return a, b * 2

    donated, _ = _check(f, [np.arange(4, dtype=np.float32), np.ones(4, np.float32)], (0,))
    assert _donated_allocations(donated) == {0: 0}
    assert _copies(donated) == 0


# -- training steps -------------------------------------------------------------------------


def _adam(params, m, v, grads):
    b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-8
    m = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, m, grads)
    v = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, v, grads)
    params = jax.tree.map(lambda p, m, v: p - lr * m / (jnp.sqrt(v) + eps), params, m, v)
    return params, m, v


def test_an_adam_step_with_donated_parameters_and_state() -> None:
    rng = np.random.default_rng(0)
    shapes = [(16, 8), (8,)]

    def tree():
        return [rng.standard_normal(s).astype(np.float32) for s in shapes]

    params, grads = tree(), tree()
    m, v = tree(), [np.abs(x) for x in tree()]

    def step(p0, p1, m0, m1, v0, v1, g0, g1):
        p, m, v = _adam([p0, p1], [m0, m1], [v0, v1], [g0, g1])
        return (*p, *m, *v)

    args = [*params, *m, *v, *grads]
    donated, plain = _check(step, args, (0, 1, 2, 3, 4, 5))
    assert sorted(_donated_allocations(donated).items()) == [(k, k) for k in range(6)]
    assert not any(a.kind == "output" for a in donated.artefact.allocations)
    # Every result is written in place by its fusion: m and v are read by two roots of
    # theirs (their own and the parameter's), and the loop emitter computes every root of
    # an element before storing any (OUTPUTS_WRITTEN_TOGETHER), so no copy either.
    # Without donation every result is an output allocation.
    assert _copies(donated) == 0 and _copies(plain) == 0
    assert _peak(donated) <= _peak(plain) - params[0].nbytes - params[1].nbytes


def test_a_momentum_jax_lays_out_by_columns_is_donated_in_the_parameter_s_layout() -> None:
    # jax declares the moment column-major (it follows the gradient's dot) over a row-major
    # parameter, as in optax's adam: the output is relaid into the parameter's bytes.
    def step(w, m, x, y):
        g = jax.grad(lambda w: jnp.mean((jnp.tanh(x @ w) - y) ** 2))(w)
        m = 0.1 * g + 0.9 * m
        return w - 0.1 * m, m

    rng = np.random.default_rng(3)
    args = [
        rng.standard_normal(s).astype(np.float32) for s in ((8, 32), (8, 32), (16, 8), (16, 32))
    ]
    text = _lower(step, args, (0, 1))
    assert "->(f32[8,32]{1,0}, f32[8,32]{0,1})" in text  # what jax declares
    donated, _ = _check(step, args, (0, 1), inexact=(0, 1))
    assert sorted(_donated_allocations(donated).items()) == [(0, 0), (1, 1)]
    assert donated.artefact.signature.results[1] == "f32[8,32]{1,0}"


def test_an_sgd_step_updates_the_parameters_in_place() -> None:
    def sgd(w, gw):
        return w - 0.1 * gw

    rng = np.random.default_rng(1)
    args = [rng.standard_normal((32, 8)).astype(np.float32) for _ in range(2)]
    donated, plain = _check(sgd, args, (0,))
    assert _donated_allocations(donated) == {0: 0}
    assert _copies(donated) == 0
    assert _peak(donated) == _peak(plain) - args[0].nbytes


def test_a_horizontally_fused_sgd_step_is_copied_into_its_parameters() -> None:
    """Two updates in one horizontal fusion (a concatenate sliced apart) read their
    inputs at other elements than they write: the results go through a copy."""

    def sgd(w, b, gw, gb):
        return w - 0.1 * gw, b - 0.1 * gb

    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(32, 8), (8,), (32, 8), (8,)]]
    donated, plain = _check(sgd, args, (0, 1))
    assert _donated_allocations(donated) == {0: 0, 1: 1}
    assert _copies(donated) == 2


# -- loops ----------------------------------------------------------------------------------


def test_a_loop_whose_carry_is_donated_runs_in_the_parameters_bytes() -> None:
    def f(x):
        return lax.fori_loop(0, 5, lambda i, x: x * 1.5 + 1.0, x)

    x = np.arange(32, dtype=np.float32)
    donated, plain = _check(f, [x], (0,))
    assert _donated_allocations(donated) == {0: 0}
    # The loop's state is the caller's buffer: no copy of it (the counter's constant init
    # is still copied into the state, as without donation).
    assert _copies(donated) == _copies(plain) - 1 == 1
    assert _peak(donated) == _peak(plain) - x.nbytes


def test_a_loop_carry_donated_and_read_after_the_loop() -> None:
    def f(x, cache, u):
        def body(i, c):
            return lax.dynamic_update_slice(
                c, u * i.astype(jnp.float32), (i, jnp.zeros((), i.dtype))
            )

        new = lax.fori_loop(0, 4, body, cache)
        return new, (new * cache).sum() + x.sum()

    rng = np.random.default_rng(2)
    args = [
        rng.standard_normal(4).astype(np.float32),
        rng.standard_normal((8, 4)).astype(np.float32),
        rng.standard_normal((1, 4)).astype(np.float32),
    ]
    donated, _ = _check(f, args, (1,), inexact=(1,))
    assert _donated_allocations(donated) == {0: 1}


def test_a_conjugate_gradient_update_donated_is_not_written_over_what_a_reduction_reads() -> None:
    # x + (1 / p.w) p, x donated: the dot becomes a reduction fusion with the update as
    # its epilogue output. Every thread of the reduction's row computes the epilogue and
    # one stores it, so writing it over x would race with the others' reads of x (the
    # interpreter's sanitizer refuses the launch; a library sweep's 2- and 4-unknown
    # conjugate gradients met it). It is written elsewhere and copied into x.
    def f(x, p, w):
        d = jnp.dot(p, w)
        return x + (1.0 / d) * p, d

    rng = np.random.default_rng(3)
    args = [rng.standard_normal(n).astype(np.float32) for n in (2, 2, 2)]
    donated, _ = _check(f, args, (0,), inexact=(0, 1))
    assert _donated_allocations(donated) == {0: 0}
