"""jax's Python callbacks through heron.jax: ``jax.debug.print`` and ``jax.pure_callback`` run
the process's Python functions on the host (heron.jax.host_callbacks)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from heron_test_support.jax_config import jax_x64

import heron.jax as heron_jax
from heron.hlo.custom_calls.call import CustomCall, CustomCallError
from heron.hlo.shapes import array_shape
from heron.jax.host_callbacks import TARGETS, python_callback


@pytest.fixture(autouse=True)
def jax_32_bit():
    with jax_x64(False):
        yield


def _jit(function, tmp_path: Path):
    return heron_jax.jit(function, backend="interpreter", cache_dir=tmp_path)


def test_debug_print_prints_what_jax_prints(capsys, tmp_path):
    def f(x):
        jax.debug.print("x = {}", x)
        return x * 2

    x = np.array([1.0, 2.5, -3.0], np.float32)
    jax.jit(f)(x)
    jax.effects_barrier()
    expected = capsys.readouterr().out
    got = _jit(f, tmp_path)(x)
    np.testing.assert_array_equal(got, x * 2)
    assert capsys.readouterr().out == expected == "x = [ 1.   2.5 -3. ]\n"


def test_a_print_in_a_loop_prints_every_iteration_in_order(capsys, tmp_path):
    def f(x):
        def body(i, y):
            jax.debug.print("step {i}: {s}", i=i, s=y.sum())
            return y + 1

        return jax.lax.fori_loop(0, 3, body, x)

    x = np.zeros(2, np.float32)
    np.testing.assert_array_equal(_jit(f, tmp_path)(x), x + 3)
    assert capsys.readouterr().out == "step 0: 0.0\nstep 1: 2.0\nstep 2: 4.0\n"


def test_callbacks_run_in_program_order_around_a_loop(tmp_path):
    """An operand-less callback before a while loop runs before the loop's own callbacks,
    as under jax.jit: the schedule walked from the root put it after them."""
    log: list[str] = []

    def f(x):
        jax.debug.callback(lambda: log.append("start"))

        def body(carry):
            i, v = carry
            jax.debug.callback(lambda i: log.append(f"step {int(i)}"), i)
            return i + 1, v * 0.5

        trips, v = jax.lax.while_loop(lambda c: c[1] > 0.1, body, (0, x))
        jax.debug.callback(lambda k: log.append(f"end {int(k)}"), trips)
        return v

    x = np.float32(1.0)
    jax.jit(f)(x).block_until_ready()
    jax.effects_barrier()
    expected, log[:] = list(log), []
    _jit(f, tmp_path)(x)
    assert log == expected == ["start", "step 0", "step 1", "step 2", "step 3", "end 4"]


def test_pure_callback_results_feed_the_program(tmp_path):
    def host(v):
        return np.sort(np.asarray(v))[::-1].copy(), np.asarray(v).max()

    shapes = (jax.ShapeDtypeStruct((4,), jnp.float32), jax.ShapeDtypeStruct((), jnp.float32))

    def f(x):
        ordered, top = jax.pure_callback(host, shapes, x * 2)
        return ordered + top, jnp.sin(top)

    x = np.array([0.5, -1.0, 3.0, 2.0], np.float32)
    got = _jit(f, tmp_path)(x)
    expected = jax.jit(f)(x)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(e))


def test_a_program_with_callbacks_is_not_cached_on_disk(tmp_path):
    def f(x):
        return jax.pure_callback(np.negative, jax.ShapeDtypeStruct((3,), jnp.float32), x)

    jitted = _jit(f, tmp_path)
    np.testing.assert_array_equal(jitted(np.ones(3, np.float32)), -np.ones(3, np.float32))
    assert jitted.compiles == 1
    assert not list(tmp_path.glob("*.heron"))  # the callback is this process's function


def test_a_callback_number_this_process_never_gave_is_refused_by_name():
    call = CustomCall(
        target=TARGETS[0],
        instruction="pure_callback.1",
        computation="main",
        operand_shapes=(array_shape("f32", (3,)),),
        result_shape=array_shape("f32", (3,)),
        backend_config="{index = 987654321 : ui64}",
    )
    with pytest.raises(CustomCallError, match="no Python callback 987654321 in this process"):
        python_callback((np.zeros(3, np.float32),), call)


def test_a_dropped_program_forgets_its_callbacks(tmp_path):
    import gc

    from heron.jax import host_callbacks

    def f(x):
        return jax.pure_callback(np.negative, jax.ShapeDtypeStruct((3,), jnp.float32), x)

    before = set(host_callbacks._CALLBACKS)
    jitted = _jit(f, tmp_path)
    jitted(np.ones(3, np.float32))
    mine = set(host_callbacks._CALLBACKS) - before
    assert len(mine) == 1  # this program's one callback
    del jitted
    gc.collect()
    assert not mine & set(host_callbacks._CALLBACKS)
